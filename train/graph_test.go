package train_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
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

// TestGraphStepEndsOnDevice: a replayed step is ended inside its last
// graph, reading what changes from step to step (its record's slot, its
// rate and number) from device memory, so that the host's calls for a
// steady step (device.Counts.Calls, the loader's batches left out) are, a
// micro-batch, a graph launch and the two copies of its batch into the
// graph's buffers, and, a step, one copy of its values and the read-back
// of its record: 3·accum + 2, and no more waits than an eager step, the
// trainer's Close included (the loader's waits left out as well: whether
// a producer finds a slot's last copy in flight is timing). An eager step
// calls every kernel. That the replayed steps are the eager ones' bits is
// TestGraphsSameRun's; here a cosine schedule changes the rate at every
// step all the same.
func TestGraphStepEndsOnDevice(t *testing.T) {
	d := testdevice.Open(t)
	counter, ok := d.(device.Counter)
	if !ok {
		t.Fatalf("%s counts nothing (device.Counter)", d.Name())
	}
	const steps, accum = 8, 2
	calls := func(graphs bool) (per float64, launched, syncs int64) {
		m := newLM(t, d, lmConfig{vocab: 10, embed: 6, hidden: 8, layers: 2, dtype: device.Float32, seed: 3})
		ld := &testdevice.LoaderCopies{Device: d}
		l := newLoader(t, ld, text(t, 6000, 10, 5), loader.Config{Batch: 4, Seq: 8, Accum: accum})
		var at [steps + 1]device.Counts
		tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: steps, ClipNorm: 0.3, Graphs: graphs,
			Schedule: train.Schedule{Decay: "cosine", Warmup: 3},
			OnStep:   func(p train.Progress) { at[p.Step] = ld.CountsWithout(counter) }})
		c0 := ld.CountsWithout(counter)
		sum, err := tr.Run(context.Background())
		check(t, err)
		if sum.Steps != steps {
			t.Fatalf("%d steps, want %d", sum.Steps, steps)
		}
		check(t, tr.Close())
		syncs = ld.CountsWithout(counter).Sub(c0).Syncs
		// From the end of step 2 (the graphs recorded at step 2) to the
		// last.
		c := at[steps].Sub(at[2])
		return float64(c.Calls) / (steps - 2), c.Graphs, syncs
	}
	eager, _, eagerSyncs := calls(false)
	replayed, graphs, replayedSyncs := calls(true)
	// A run waits once a step (Pipeline 0) either way; closing the
	// trainer waits for nothing more (the values' copies are done).
	if replayedSyncs != eagerSyncs {
		t.Errorf("a replayed run and its Close waited %d times, the eager one %d", replayedSyncs, eagerSyncs)
	}
	if graphs != accum*(steps-2) {
		t.Errorf("%d graph launches over %d steps, want %d a step", graphs, steps-2, accum)
	}
	if replayed != 3*accum+2 {
		t.Errorf("a replayed step: %v calls, want %d (the eager step: %v)", replayed, 3*accum+2, eager)
	}
	t.Logf("host calls a step: %v eager, %v replayed; syncs %d %d", eager, replayed, eagerSyncs, replayedSyncs)
}

// TestGraphsRecordedAgain: when a replay finds its graphs recorded for
// another batch shape (train.ForgetGraphShape stands in for a source
// whose shapes change), the trainer closes them and records them again
// at once: the run takes the eager run's steps to the bit (reports,
// weights, checkpoint), every step after the first is still replayed,
// the graphs are recorded twice, and the first graphs' memory goes back:
// the run ends holding what a run that recorded once holds.
func TestGraphsRecordedAgain(t *testing.T) {
	d := testdevice.Open(t)
	counter, ok := d.(device.Counter)
	if !ok {
		t.Fatalf("%s counts nothing (device.Counter)", d.Name())
	}
	type result struct {
		reports  []report
		weights  map[string][]float64
		ckpt     []byte
		graphs   int64
		recorded int
		inUse    int64
	}
	allocated := func() int64 { return d.MemStats().AllocatedBytes[alloc.AllPools].Current }
	run := func(graphs, forget bool) result {
		var r result
		a0 := allocated()
		m := newLM(t, d, lmConfig{vocab: 10, embed: 6, hidden: 8, layers: 2, dtype: device.Float32, seed: 3})
		l := newLoader(t, d, text(t, 6000, 10, 5), loader.Config{Batch: 4, Seq: 8, Accum: 2})
		path := filepath.Join(t.TempDir(), "run.safetensors")
		var tr *train.Trainer
		tr = newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 9, ClipNorm: 0.3,
			Schedule: train.Schedule{Decay: "cosine"}, Checkpoint: path, Graphs: graphs,
			OnStep: func(p train.Progress) {
				r.reports = append(r.reports, reportOf(p))
				if forget && p.Step == 5 {
					train.ForgetGraphShape(tr)
				}
			}})
		c0 := counter.Counts()
		_, err := tr.Run(context.Background())
		check(t, err)
		r.graphs, r.recorded = counter.Counts().Sub(c0).Graphs, train.GraphsRecorded(tr)
		r.weights = values(t, m.Groups())
		r.ckpt, err = os.ReadFile(path)
		check(t, err)
		r.inUse = allocated() - a0
		return r
	}
	want := run(false, false)
	once := run(true, false)
	again := run(true, true)
	for _, c := range []struct {
		name     string
		got      result
		recorded int
	}{{"recorded once", once, 2}, {"recorded again", again, 4}} {
		if !reflect.DeepEqual(c.got.reports, want.reports) || !reflect.DeepEqual(c.got.weights, want.weights) || !bytes.Equal(c.got.ckpt, want.ckpt) {
			t.Errorf("%s: the reports, weights or checkpoint differ from the eager run's", c.name)
		}
		if c.got.graphs != 2*8 {
			t.Errorf("%s: %d graph launches, want 16 (2 a step after the first)", c.name, c.got.graphs)
		}
		if c.got.recorded != c.recorded {
			t.Errorf("%s: %d graphs recorded, want %d", c.name, c.got.recorded, c.recorded)
		}
	}
	if again.inUse != once.inUse {
		t.Errorf("memory in use at the end: %d bytes after recording again, want %d as after recording once", again.inUse, once.inUse)
	}
}
