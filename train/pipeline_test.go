package train_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// report is what a Progress says of a step, timing aside, with the
// floats as bits (NaN equals NaN).
type report struct {
	Step, Steps          int64
	Position             loader.Position
	Loss, GradNorm, LR   uint64
	Skipped, InARow      int64
	NonFinite            string
	Tokens               int64
	NonFiniteStep        int64
	NonFiniteLoss, NNorm uint64
}

func reportOf(p train.Progress) report {
	r := report{Step: p.Step, Steps: p.Steps, Position: p.Position, Loss: math.Float64bits(p.Loss),
		GradNorm: math.Float64bits(p.GradNorm), LR: math.Float64bits(p.LR), Skipped: p.Skipped,
		InARow: p.SkippedInARow, Tokens: p.Tokens}
	if p.NonFinite != nil {
		r.NonFinite = p.NonFinite.Error()
		r.NonFiniteStep = p.NonFinite.Step
		r.NonFiniteLoss, r.NNorm = math.Float64bits(p.NonFinite.Loss), math.Float64bits(p.NonFinite.GradNorm)
	}
	return r
}

// trace is what one run did: every report and evaluation, its error, and
// the state it left (weights, step, position, the checkpoint's bytes).
type trace struct {
	reports []report
	evals   []train.Evaluation
	err     string
	sum     train.Summary
	weights map[string][]float64
	step    int64
	pos     loader.Position
	skipped int64
	ckpt    []byte
	graphs  int64 // graph launches (device.Counts.Graphs)
}

// pipelineCase builds a model, its loaders and a configuration on d.
type pipelineCase struct {
	name  string
	build func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config)
}

func runTrace(t *testing.T, c pipelineCase, pipeline int) trace {
	t.Helper()
	return runTraceWith(t, c, func(cfg *train.Config) { cfg.Pipeline = pipeline })
}

// runTraceWith is runTrace with the configuration set by set.
func runTraceWith(t *testing.T, c pipelineCase, set func(*train.Config)) trace {
	t.Helper()
	d := testdevice.Open(t)
	dir := t.TempDir()
	m, l, cfg := c.build(t, d, dir)
	var tr trace
	set(&cfg)
	counter, counts := d.(device.Counter)
	var c0 device.Counts
	if counts {
		c0 = counter.Counts()
	}
	cfg.OnStep = func(p train.Progress) { tr.reports = append(tr.reports, reportOf(p)) }
	cfg.OnEval = func(e train.Evaluation) { tr.evals = append(tr.evals, e) }
	trainer := newTrainer(t, d, m, l, cfg)
	sum, err := trainer.Run(context.Background())
	if err != nil {
		// The checkpoint's path differs between runs; the rest of the
		// message must not.
		tr.err = strings.ReplaceAll(err.Error(), dir, "DIR")
	}
	sum.Elapsed = 0
	tr.sum = sum
	tr.weights = values(t, m.Groups())
	tr.step, tr.pos, tr.skipped = trainer.Step(), trainer.Position(), trainer.Skipped()
	if cfg.Checkpoint != "" {
		b, err := os.ReadFile(cfg.Checkpoint)
		if err == nil {
			tr.ckpt = b
		}
	}
	if counts {
		tr.graphs = counter.Counts().Sub(c0).Graphs
	}
	return tr
}

// rareText is 2,000 characters of a, b, c, d with an e at each of at:
// with Batch 4 and Seq 10, four streams of 500 characters, character i is
// an input of window (i mod 500)/10 (the last window of a stream excepted).
func rareText(t *testing.T, at ...int) *loader.Text {
	t.Helper()
	raw := make([]byte, 2000)
	for i := range raw {
		raw[i] = "abcd"[i*7%4]
	}
	for _, i := range at {
		raw[i] = 'e'
	}
	vocab, err := loader.NewVocab([]string{"a", "b", "c", "d", "e"})
	check(t, err)
	txt, err := loader.Tokenize(context.Background(), loader.NewCorpus(bytes.NewReader(raw), int64(len(raw)), "t"), loader.TokenizeConfig{Vocab: vocab})
	check(t, err)
	return txt
}

// TestPipelineSameRun: a run that queues up to Config.Pipeline steps
// before reading them back takes the same steps as one that reads each
// step back at its end, to the bit: the same reports in the same order
// (skipped steps included, with the same tokens), evaluations, weights,
// errors and checkpoints. The cases cover what the device decides
// (clipping by norm and value, non-finite steps, skipped and refused, an
// id out of range) and what the host must put back when a step queued
// ahead is voided (the carried state, the dropout masks' random state, the
// position in the data), with accumulation, a schedule, validation and
// checkpoints due in the middle of a pipeline. Pipelines of 3 and 8 do
// not divide the steps, the evaluation or the checkpoint periods.
func TestPipelineSameRun(t *testing.T) {
	cases := []pipelineCase{
		{"LSTM/Dropout/Clipped/Accum/Eval/Checkpoints", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 10, embed: 6, hidden: 8, layers: 2, dropout: 0.25, dtype: device.Float32, seed: 3})
			l := newLoader(t, d, text(t, 6000, 10, 5), loader.Config{Batch: 4, Seq: 8, Accum: 2})
			val := newLoader(t, d, text(t, 800, 10, 6), loader.Config{Batch: 4, Seq: 8, Epochs: 1})
			// A norm of 0.3 is below the gradient's (≈ 1 at the start:
			// clipping is active) and a value clip of 0.02 cuts some
			// elements.
			return m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 14, ClipNorm: 0.3, ClipValue: 0.02,
				Schedule: train.Schedule{Decay: "cosine", Warmup: 3}, Validation: val, EvalEvery: 4,
				Checkpoint: filepath.Join(dir, "run.safetensors"), CheckpointEvery: 5}
		}},
		// e at 100, 777, 787 and 1450: windows 10, 27, 28 (two in a row)
		// and 45 of 49 are non-finite.
		{"GRU/SGD/Skips", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 5, embed: 4, hidden: 6, layers: 2, gru: true, dropout: 0.3, dtype: device.Float32, seed: 1})
			poison(t, m, 4)
			l := newLoader(t, d, rareText(t, 100, 777, 787, 1450), loader.Config{Batch: 4, Seq: 10, Epochs: 1})
			opt, err := train.NewOptimizer(train.SGD, 0.1)
			check(t, err)
			opt.Momentum = 0.9
			return m, l, train.Config{Optimizer: opt, SkipNonFinite: true, ClipNorm: 1}
		}},
		{"Refused", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 5, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 2})
			poison(t, m, 4)
			l := newLoader(t, d, rareText(t, 1450), loader.Config{Batch: 4, Seq: 10, Epochs: 1})
			return m, l, train.Config{Optimizer: adam(t, 0.01), Checkpoint: filepath.Join(dir, "run.safetensors")}
		}},
		// The same text read by a model of 4 classes: the e (id 4) is a
		// target out of range, found by the device at window 44 (whose
		// targets are characters 441 to 450 of stream 2).
		{"IndexError", func(t *testing.T, d device.Device, dir string) (*lm, *loader.Loader, train.Config) {
			m := newLM(t, d, lmConfig{vocab: 4, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 1})
			l := newLoader(t, d, rareText(t, 1450), loader.Config{Batch: 4, Seq: 10, Epochs: 1})
			return m, l, train.Config{Optimizer: adam(t, 0.01)}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := runTrace(t, c, 0)
			if len(want.reports) == 0 {
				t.Fatal("the reference run reported no step")
			}
			for _, p := range []int{3, 8} {
				got := runTrace(t, c, p)
				sameTrace(t, fmt.Sprintf("Pipeline %d", p), c.name, got, want)
			}
			switch c.name {
			case "GRU/SGD/Skips":
				if want.skipped != 4 || want.step != 45 {
					t.Errorf("the reference run took %d steps and skipped %d, want 45 and 4", want.step, want.skipped)
				}
			case "Refused":
				if !strings.Contains(want.err, "step 46") || want.step != 45 || want.ckpt == nil {
					t.Errorf("the reference run: error %q at step %d, checkpoint of %d bytes; want step 46 refused after 45, saved", want.err, want.step, len(want.ckpt))
				}
			case "IndexError":
				if !strings.Contains(want.err, "out of range") || want.step != 44 {
					t.Errorf("the reference run: error %q at step %d; want an id out of range after step 44", want.err, want.step)
				}
			}
		})
	}
}

// sameTrace fails t unless got (a run described by what) is want: the
// same error, reports, evaluations, weights, position, summary and
// checkpoint.
func sameTrace(t *testing.T, what, name string, got, want trace) {
	t.Helper()
	if !sameError(name, got.err, want.err) {
		t.Errorf("%s: error %q, want %q", what, got.err, want.err)
	}
	if !reflect.DeepEqual(got.reports, want.reports) {
		t.Errorf("%s: %d reports differ from the %d of the reference run", what, len(got.reports), len(want.reports))
		for i := range min(len(got.reports), len(want.reports)) {
			if got.reports[i] != want.reports[i] {
				t.Errorf("first difference, report %d:\n got %+v\nwant %+v", i, got.reports[i], want.reports[i])
				break
			}
		}
	}
	if !reflect.DeepEqual(got.evals, want.evals) {
		t.Errorf("%s: evaluations %+v, want %+v", what, got.evals, want.evals)
	}
	if !sameOrBothNaN(got.weights, want.weights) {
		t.Errorf("%s: the weights differ", what)
	}
	if got.step != want.step || got.pos != want.pos || got.skipped != want.skipped {
		t.Errorf("%s: step %d at %+v, %d skipped; want %d at %+v, %d", what, got.step, got.pos, got.skipped, want.step, want.pos, want.skipped)
	}
	if got.sum.Steps != want.sum.Steps || got.sum.Skipped != want.sum.Skipped || got.sum.Tokens != want.sum.Tokens ||
		math.Float64bits(got.sum.Loss) != math.Float64bits(want.sum.Loss) {
		t.Errorf("%s: summary %+v, want %+v", what, got.sum, want.sum)
	}
	if !bytes.Equal(got.ckpt, want.ckpt) {
		t.Errorf("%s: the checkpoint differs (%d bytes, want %d)", what, len(got.ckpt), len(want.ckpt))
	}
}

// sameError compares two runs' errors. An index error's message names the
// kernels that found ids out of range before the device was asked; on a
// GPU (its status word) that includes those of the steps queued after the
// refused one, which changed nothing else: there the message must agree up
// to the device's part, and both be index errors.
func sameError(name, got, want string) bool {
	if name != "IndexError" || got == want {
		return got == want
	}
	prefix := func(s string) string { return s[:strings.Index(s+":", ":")] }
	return strings.HasSuffix(got, device.ErrIndex.Error()) && strings.HasSuffix(want, device.ErrIndex.Error()) &&
		prefix(strings.TrimPrefix(got, "train: ")) == prefix(strings.TrimPrefix(want, "train: "))
}

// TestPipelineIndexErrorKeepsState: the step whose data holds an id out of
// range is refused on the device, so the weights after the failed run are
// those after the steps before it, exactly: a run of those 44 steps alone
// ends with the same weights.
func TestPipelineIndexErrorKeepsState(t *testing.T) {
	d := testdevice.Open(t)
	run := func(steps int64, pipeline int) (map[string][]float64, error) {
		m := newLM(t, d, lmConfig{vocab: 4, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 1})
		l := newLoader(t, d, rareText(t, 1450), loader.Config{Batch: 4, Seq: 10, Epochs: 1})
		tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: steps, Pipeline: pipeline})
		_, err := tr.Run(context.Background())
		return values(t, m.Groups()), err
	}
	want, err := run(44, 0)
	check(t, err)
	for _, p := range []int{0, 8} {
		got, err := run(0, p)
		if !errors.Is(err, device.ErrIndex) {
			t.Fatalf("Pipeline %d: Run: %v, want device.ErrIndex", p, err)
		}
		if !sameOrBothNaN(got, want) {
			t.Errorf("Pipeline %d: the weights after the refused step are not those of the 44 steps before it", p)
		}
	}
}

// TestPipelineDoesNotWait: with Config.Pipeline 8, the steps between two
// readbacks make no host synchronisation on the CPU device, whose streams
// hold 64 commands: a readback queued 8 steps (hundreds of commands)
// before has completed when the next one is due, so the trainer and the
// loader see their events done and never wait. Pipeline 0 waits once a
// step (its readback). On another device (a GPU can be further behind)
// the bound is a wait per readback, 1 per 8 steps.
func TestPipelineDoesNotWait(t *testing.T) {
	d := testdevice.Open(t)
	counter, ok := d.(device.Counter)
	if !ok {
		t.Fatalf("%s counts nothing (device.Counter)", d.Name())
	}
	const from, to = 8, 40 // steps reported at readbacks of Pipeline 8
	syncs := func(pipeline int) int64 {
		m := newLM(t, d, lmConfig{vocab: 10, embed: 6, hidden: 8, layers: 2, dtype: device.Float32, seed: 3})
		l := newLoader(t, d, text(t, 20000, 10, 5), loader.Config{Batch: 4, Seq: 8})
		var c0, c1 device.Counts
		tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 48, ClipNorm: 1, Pipeline: pipeline,
			OnStep: func(p train.Progress) {
				switch p.Step {
				case from:
					c0 = counter.Counts()
				case to:
					c1 = counter.Counts()
				}
			}})
		_, err := tr.Run(context.Background())
		check(t, err)
		return c1.Sub(c0).Syncs
	}
	if got := syncs(0); got < to-from {
		t.Errorf("Pipeline 0: %d synchronisations over steps %d to %d, want at least one a step", got, from, to)
	}
	got, limit := syncs(8), int64(0)
	if !strings.HasPrefix(d.Name(), "cpu") {
		limit = (to - from) / 8
	}
	if got > limit {
		t.Errorf("Pipeline 8 on %s: %d synchronisations over steps %d to %d, want at most %d", d.Name(), got, from, to, limit)
	}
}

// TestPipelineSaveFromOnStep: a Save from OnStep while steps are queued
// after the reported one is refused (the device is ahead of the step it
// would record); with Pipeline 0 the same Save succeeds and resumes.
func TestPipelineSaveFromOnStep(t *testing.T) {
	d := testdevice.Open(t)
	for _, p := range []int{0, 4} {
		m := newLM(t, d, lmConfig{vocab: 10, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 1})
		l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
		path := filepath.Join(t.TempDir(), "run.safetensors")
		var tr *train.Trainer
		var saveErr error
		tr = newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 10, Pipeline: p,
			OnStep: func(pr train.Progress) {
				if pr.Step == 2 {
					saveErr = tr.Save(path)
				}
			}})
		_, err := tr.Run(context.Background())
		check(t, err)
		switch {
		case p == 0 && saveErr != nil:
			t.Errorf("Pipeline 0: Save from OnStep: %v", saveErr)
		case p > 0 && (saveErr == nil || !strings.Contains(saveErr.Error(), "CheckpointEvery")):
			t.Errorf("Pipeline %d: Save from OnStep with steps queued: %v, want an error pointing to CheckpointEvery", p, saveErr)
		}
	}
}
