package train_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/closedtest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// handLoop trains m on l's batches for steps steps with a loop of its own
// over u (issue 48: a loop written by hand with a public optimizer), as
// the Trainer's windows do: a state carried per stream, reset at an
// epoch's start and detached after each window, the mean cross-entropy
// over a window's tokens, the step decided by Updater.Step. It returns
// the steps' results.
func handLoop(t *testing.T, d device.Device, m *lm, l *loader.Loader, u *train.Updater, from loader.Position, steps int, c train.StepConfig) []train.StepResult {
	t.Helper()
	ce, err := rnn.NewCrossEntropy(d, m.Classes(), device.Float32)
	check(t, err)
	defer ce.Close()
	st, err := m.NewState(l.Config().Batch)
	check(t, err)
	var results []train.StepResult
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for b, err := range l.Batches(ctx, from) {
		check(t, err)
		if b.Reset {
			check(t, st.Reset())
		}
		check(t, u.ZeroGrad())
		check(t, ce.ResetLoss())
		logits, err := m.Forward(rnn.Train, b.Inputs, b.Seq, b.Rows, st)
		check(t, err)
		check(t, ce.Forward(rnn.Train, logits, b.Targets, b.Seq*b.Rows, 1))
		dl, err := ce.Backward()
		check(t, err)
		check(t, m.Backward(dl))
		st.Detach()
		c.Loss = ce.Total()
		r, err := u.Step(c)
		check(t, err)
		results = append(results, r)
		if len(results) == steps {
			break
		}
	}
	return results
}

// TestUpdaterMatchesTrainer: a loop written with an Updater (Adam,
// clipping at norm 0.3, which binds at some steps) takes the Trainer's steps to the bit:
// the same weights after 6 steps, and the same losses.
func TestUpdaterMatchesTrainer(t *testing.T) {
	d := testdevice.Open(t)
	cfg := lmConfig{vocab: 12, embed: 6, hidden: 10, layers: 2, dtype: device.Float32, seed: 5}
	txt := text(t, 4000, 12, 7)
	opt := adam(t, 0.01)
	const steps = 6

	byTrainer := newLM(t, d, cfg)
	var losses []float64
	tr := newTrainer(t, d, byTrainer, newLoader(t, d, txt, loader.Config{Batch: 4, Seq: 8}),
		train.Config{Optimizer: opt, Steps: steps, ClipNorm: 0.3, OnStep: func(p train.Progress) { losses = append(losses, p.Loss) }})
	_, err := tr.Run(context.Background())
	check(t, err)

	byHand := newLM(t, d, cfg)
	u, err := train.NewUpdater(d, opt, byHand.Groups())
	check(t, err)
	defer u.Close()
	res := handLoop(t, d, byHand, newLoader(t, d, txt, loader.Config{Batch: 4, Seq: 8}), u, loader.Position{}, steps, train.StepConfig{ClipNorm: 0.3})
	clipped := false
	for i, r := range res {
		if r.Loss != losses[i] || r.Skipped || r.Step != int64(i+1) {
			t.Errorf("step %d: loss %v (skipped %v, step %d), the Trainer's %v", i+1, r.Loss, r.Skipped, r.Step, losses[i])
		}
		clipped = clipped || r.GradNorm > 0.3
	}
	if !clipped {
		t.Errorf("no step's gradient norm passed the clip of 0.3 (%v): the test does not test clipping", res)
	}
	sameValues(t, values(t, byTrainer.Groups()), values(t, byHand.Groups()))
}

// sameValues fails t unless got and want hold the same parameters, bit
// for bit.
func sameValues(t *testing.T, want, got map[string][]float64) {
	t.Helper()
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("%s differs", name)
		}
	}
}

// TestUpdaterResumes: a hand-written loop saved after 3 steps and resumed
// from the checkpoint, into a new model and Updater, takes the steps of
// one that never stopped, bit for bit, for every optimizer and its slots.
func TestUpdaterResumes(t *testing.T) {
	d := testdevice.Open(t)
	cfg := lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 3}
	// 60 tokens in 3 streams of 20: an epoch of 3 windows of 6.
	txt := text(t, 60, 10, 9)
	for _, opt := range []train.Optimizer{
		adam(t, 0.01),
		{Algorithm: train.SGD, LR: 0.1, Momentum: 0.9, Nesterov: true},
		{Algorithm: train.RMSprop, LR: 0.01, Alpha: 0.9, Eps: 1e-8, Momentum: 0.5, Centered: true},
		{Algorithm: train.AdamW, LR: 0.01, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.1},
	} {
		t.Run(string(opt.Algorithm), func(t *testing.T) {
			lcfg := loader.Config{Batch: 3, Seq: 6}
			whole := newLM(t, d, cfg)
			uw, err := train.NewUpdater(d, opt, whole.Groups())
			check(t, err)
			defer uw.Close()
			handLoop(t, d, whole, newLoader(t, d, txt, lcfg), uw, loader.Position{}, 6, train.StepConfig{ClipNorm: 5})

			first := newLM(t, d, cfg)
			u1, err := train.NewUpdater(d, opt, first.Groups())
			check(t, err)
			handLoop(t, d, first, newLoader(t, d, txt, lcfg), u1, loader.Position{}, 3, train.StepConfig{ClipNorm: 5})
			path := filepath.Join(t.TempDir(), "loop.safetensors")
			check(t, u1.Save(path, map[string]string{"note": "a loop of one's own"}))
			check(t, u1.Close())

			second := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 99})
			u2, err := train.NewUpdater(d, opt, second.Groups())
			check(t, err)
			defer u2.Close()
			ck, err := train.ReadCheckpoint(path)
			check(t, err)
			check(t, u2.Load(ck))
			if u2.Steps() != 3 || ck.Metadata()["note"] != "a loop of one's own" {
				t.Fatalf("loaded %d steps, metadata %v; want 3 and the note", u2.Steps(), ck.Metadata())
			}
			// The loop's carried state and position are its own: this
			// one starts the fourth window with a zero state, as the
			// whole loop's did not, so it resumes at the next epoch's
			// start, where both reset: 3 steps into a 3-window epoch.
			l := newLoader(t, d, txt, lcfg)
			if l.PerEpoch() != 3 {
				t.Fatalf("an epoch of %d windows, want 3 for the resume to start one", l.PerEpoch())
			}
			handLoop(t, d, second, l, u2, loader.Position{Epoch: 1}, 3, train.StepConfig{ClipNorm: 5})
			sameValues(t, values(t, whole.Groups()), values(t, second.Groups()))
		})
	}
}

// TestUpdaterSkipsNonFinite: a NaN loss skips the step (nothing changes,
// the count stays), the next finite step is taken; a checkpoint of another
// optimizer is ErrMismatch; after Close every method that touches the
// device is ErrClosed (the walk of every exported method), the getters
// answer, a second Close is nil.
func TestUpdaterSkipsNonFinite(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 8, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 1})
	u, err := train.NewUpdater(d, adam(t, 0.01), m.Groups())
	check(t, err)
	before := values(t, m.Groups())
	loss, err := d.Alloc(4, device.Workspace)
	check(t, err)
	defer d.Free(loss)
	check(t, device.UploadSlice(d, loss, []float32{float32(math.NaN())}))
	r, err := u.Step(train.StepConfig{Loss: loss})
	check(t, err)
	if !r.Skipped || r.Step != 0 || !math.IsNaN(r.Loss) {
		t.Errorf("a NaN loss: %+v, want skipped at step 0", r)
	}
	sameValues(t, before, values(t, m.Groups()))
	check(t, device.UploadSlice(d, loss, []float32{2}))
	if r, err = u.Step(train.StepConfig{Loss: loss}); err != nil || r.Skipped || r.Step != 1 || r.Loss != 2 {
		t.Errorf("a finite step after it: %+v, %v; want taken, step 1, loss 2", r, err)
	}
	path := filepath.Join(t.TempDir(), "sgd.safetensors")
	sgd, err := train.NewUpdater(d, train.Optimizer{Algorithm: train.SGD, LR: 0.1}, m.Groups())
	check(t, err)
	check(t, sgd.Save(path, nil))
	check(t, sgd.Close())
	ck, err := train.ReadCheckpoint(path)
	check(t, err)
	if err := u.Load(ck); !errors.Is(err, train.ErrMismatch) {
		t.Errorf("Adam loading SGD's checkpoint: %v, want ErrMismatch", err)
	}
	check(t, u.Close())
	closedtest.Check(t, "Updater", u, rnn.ErrClosed, map[string]closedtest.Call{
		"ZeroGrad": {Closed: true, F: u.ZeroGrad},
		"Step":     {Closed: true, F: func() error { _, err := u.Step(train.StepConfig{}); return err }},
		"Save":     {Closed: true, F: func() error { return u.Save(path, nil) }},
		"Load":     {Closed: true, F: func() error { return u.Load(ck) }},
		"Steps": {F: func() error {
			if u.Steps() != 1 {
				return fmt.Errorf("Steps = %d, want 1 as before Close", u.Steps())
			}
			return nil
		}},
		"Optimizer": {F: func() error {
			if u.Optimizer().Algorithm != train.Adam {
				return fmt.Errorf("Optimizer = %v, want Adam's", u.Optimizer())
			}
			return nil
		}},
		"Close": {F: u.Close},
	})
}
