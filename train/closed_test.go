package train_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/closedtest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// TestClosedTrainer closes a trainer that took two steps and calls every
// exported method (the table must name them all): Run, Save and Resume
// return an error matching rnn.ErrClosed naming the method, the getters
// report where the trainer stood, nothing panics, and a second Close
// returns nil.
func TestClosedTrainer(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 1})
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	path := filepath.Join(t.TempDir(), "run.safetensors")
	tr, err := train.New(d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 2})
	check(t, err)
	_, err = tr.Run(context.Background())
	check(t, err)
	check(t, tr.Save(path))
	ck, err := train.ReadCheckpoint(path)
	check(t, err)
	pos := tr.Position()
	check(t, tr.Close())
	closedtest.Check(t, "Trainer", tr, rnn.ErrClosed, map[string]closedtest.Call{
		"Run":    {Closed: true, F: func() error { _, err := tr.Run(context.Background()); return err }},
		"Save":   {Closed: true, F: func() error { return tr.Save(filepath.Join(t.TempDir(), "after.safetensors")) }},
		"Resume": {Closed: true, F: func() error { return tr.Resume(ck) }},
		"Step": {F: func() error {
			if tr.Step() != 2 {
				return fmt.Errorf("Step = %d, want 2", tr.Step())
			}
			return nil
		}},
		"Position": {F: func() error {
			if tr.Position() != pos {
				return fmt.Errorf("Position = %+v, want %+v as before Close", tr.Position(), pos)
			}
			return nil
		}},
		"Skipped": {F: func() error {
			if tr.Skipped() != 0 {
				return fmt.Errorf("Skipped = %d, want 0", tr.Skipped())
			}
			return nil
		}},
		"Close": {F: tr.Close},
	})
}

// TestTrainerBusy: while Run is inside OnStep, another goroutine's Run,
// and the callback's own Run, Resume and Close, are refused with
// rnn.ErrBusy (the Close closing nothing: the run goes on to its last
// step), while the callback's Save, which a run's OnStep may make, works.
func TestTrainerBusy(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 1})
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	path := filepath.Join(t.TempDir(), "run.safetensors")
	var tr *train.Trainer
	inside := map[string]error{}
	tr = newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 4,
		OnStep: func(p train.Progress) {
			if p.Step != 2 {
				return
			}
			other := make(chan error)
			go func() { _, err := tr.Run(context.Background()); other <- err }()
			inside["another goroutine's Run"] = <-other
			inside["Run"] = second(tr.Run(context.Background()))
			inside["Close"] = tr.Close()
			ck, err := train.ReadCheckpoint(path)
			if err == nil {
				err = tr.Resume(ck)
			}
			inside["Resume"] = err
			inside["Save"] = tr.Save(path) // after the Resume: the file it reads exists once this ran once
		}})
	check(t, tr.Save(path))
	sum, err := tr.Run(context.Background())
	check(t, err)
	for what, err := range inside {
		switch {
		case what == "Save" && err != nil:
			t.Errorf("Save from OnStep: %v, want nil", err)
		case what != "Save" && !errors.Is(err, rnn.ErrBusy):
			t.Errorf("%s while Run is in OnStep = %v, want an error matching rnn.ErrBusy", what, err)
		}
	}
	if sum.Steps != 4 {
		t.Errorf("the run took %d steps after the refused Close, want 4", sum.Steps)
	}
	check(t, tr.Save(path)) // open, idle again
}

func second[T any](_ T, err error) error { return err }
