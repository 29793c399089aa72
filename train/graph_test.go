package train_test

import (
	"path/filepath"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// TestGraphsSameRun: a run that replays its steps as device graphs
// (Config.Graphs) takes the same steps as an eager one, to the bit, with
// and without a pipeline: the same reports, evaluations, weights, errors
// and checkpoints. The cases: accumulation (a graph per micro-batch, the
// norm in the last) with clipping by norm and value, a schedule,
// validation and checkpoints in the middle; non-finite steps skipped and
// the steps queued after them voided, over epochs whose first steps reset
// the carried state (run eagerly); a refused step saved; an id out of
// range in a replayed step; and models with dropout, whose replays draw
// new masks on the device: the first case's, and the skips' (the voided
// steps put the masks' offset back), and one whose capture is refused
// (the model then runs eagerly, its masks' offset where it was). On a
// device that counts, the graph launches are checked too (both devices
// count).
func TestGraphsSameRun(t *testing.T) {
	cases := []struct {
		pipelineCase
		// graphs is the graph launches the run with graphs makes: every
		// micro-batch of every step after the first, but those starting
		// an epoch (their state is reset).
		graphs int64
	}{
		{pipelineCase{"LSTM/Clipped/Accum/Eval/Checkpoints", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 10, embed: 6, hidden: 8, layers: 2, dtype: device.Float32, seed: 3})
			l := newLoader(t, d, text(t, 6000, 10, 5), loader.Config{Batch: 4, Seq: 8, Accum: 2})
			val := newLoader(t, d, text(t, 800, 10, 6), loader.Config{Batch: 4, Seq: 8, Epochs: 1})
			return m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 14, ClipNorm: 0.3, ClipValue: 0.02,
				Schedule: train.Schedule{Decay: "cosine", Warmup: 3}, Validation: val, EvalEvery: 4,
				Checkpoint: filepath.Join(dir, "run.safetensors"), CheckpointEvery: 5}
		}}, 2 * 13},
		// e at 100, 777, 787 and 1450: windows 10, 27, 28 and 45 of 49
		// are non-finite; two epochs, the second's first step eager.
		{pipelineCase{"GRU/SGD/Skips/Epochs", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 5, embed: 4, hidden: 6, layers: 2, gru: true, dtype: device.Float32, seed: 1})
			poison(t, m, 4)
			l := newLoader(t, d, rareText(t, 100, 777, 787, 1450), loader.Config{Batch: 4, Seq: 10, Epochs: 2})
			opt, err := train.NewOptimizer(train.SGD, 0.1)
			check(t, err)
			opt.Momentum = 0.9
			return m, l, train.Config{Optimizer: opt, SkipNonFinite: true, ClipNorm: 1}
		}}, -1},
		{pipelineCase{"Refused", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 5, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 2})
			poison(t, m, 4)
			l := newLoader(t, d, rareText(t, 1450), loader.Config{Batch: 4, Seq: 10, Epochs: 1})
			return m, l, train.Config{Optimizer: adam(t, 0.01), Checkpoint: filepath.Join(dir, "run.safetensors")}
		}}, -1},
		{pipelineCase{"IndexError", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 4, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 1})
			l := newLoader(t, d, rareText(t, 1450), loader.Config{Batch: 4, Seq: 10, Epochs: 1})
			return m, l, train.Config{Optimizer: adam(t, 0.01)}
		}}, -1},
		{pipelineCase{"LSTM/Dropout/Clipped/Accum/Eval/Checkpoints", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 10, embed: 6, hidden: 8, layers: 3, dropout: 0.25, dtype: device.Float32, seed: 3})
			l := newLoader(t, d, text(t, 6000, 10, 5), loader.Config{Batch: 4, Seq: 8, Accum: 2})
			val := newLoader(t, d, text(t, 800, 10, 6), loader.Config{Batch: 4, Seq: 8, Epochs: 1})
			return m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 14, ClipNorm: 0.3, ClipValue: 0.02,
				Schedule: train.Schedule{Decay: "cosine", Warmup: 3}, Validation: val, EvalEvery: 4,
				Checkpoint: filepath.Join(dir, "run.safetensors"), CheckpointEvery: 5}
		}}, 2 * 13},
		// A forward that a capture refuses: the steps run eagerly, and
		// the forward run while recording draws no masks.
		{pipelineCase{"Dropout/CaptureRefused", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 10, embed: 6, hidden: 8, layers: 2, dropout: 0.25, dtype: device.Float32, seed: 3})
			m.syncs = d
			l := newLoader(t, d, text(t, 3000, 10, 5), loader.Config{Batch: 4, Seq: 8})
			return m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 6, Checkpoint: filepath.Join(dir, "run.safetensors")}
		}}, 0},
		// As GRU/SGD/Skips/Epochs, with dropout.
		{pipelineCase{"GRU/Dropout/SGD/Skips/Epochs", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 5, embed: 4, hidden: 6, layers: 2, gru: true, dropout: 0.3, dtype: device.Float32, seed: 1})
			poison(t, m, 4)
			l := newLoader(t, d, rareText(t, 100, 777, 787, 1450), loader.Config{Batch: 4, Seq: 10, Epochs: 2})
			opt, err := train.NewOptimizer(train.SGD, 0.1)
			check(t, err)
			opt.Momentum = 0.9
			return m, l, train.Config{Optimizer: opt, SkipNonFinite: true, ClipNorm: 1, Checkpoint: filepath.Join(dir, "run.safetensors")}
		}}, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := runTraceWith(t, c.pipelineCase, func(*train.Config) {})
			if len(want.reports) == 0 {
				t.Fatal("the reference run reported no step")
			}
			if want.graphs != 0 {
				t.Errorf("the eager run launched %d graphs", want.graphs)
			}
			for _, p := range []int{0, 8} {
				got := runTraceWith(t, c.pipelineCase, func(cfg *train.Config) { cfg.Graphs, cfg.Pipeline = true, p })
				what := map[int]string{0: "Graphs", 8: "Graphs, Pipeline 8"}[p]
				sameTrace(t, what, c.name, got, want)
				t.Logf("%s: %d graphs over %d steps", what, got.graphs, got.sum.Steps)
				switch {
				case c.graphs >= 0 && got.graphs != c.graphs:
					t.Errorf("%s: %d graph launches, want %d", what, got.graphs, c.graphs)
				case c.graphs < 0 && got.graphs < want.sum.Steps/2:
					t.Errorf("%s: %d graph launches over %d steps, want most steps replayed", what, got.graphs, want.sum.Steps)
				}
			}
		})
	}
}
