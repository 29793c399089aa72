//go:build unix

package train_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// TestSaveErrorAfterCancel: a run cancelled (as a signal cancels it)
// whose last checkpoint cannot be written returns a *train.SaveError
// saying which step was lost and which checkpoint is on disk, beside the
// cancellation, so a command can exit 1 instead of 128 + the signal
// (issue 46: a full disk after SIGTERM exited 143 with 430 steps lost).
// The directory is replaced by a file under the running trainer, so that
// every write there fails (ENOTDIR), as a full or vanished disk's would.
func TestSaveErrorAfterCancel(t *testing.T) {
	d := testdevice.Open(t)
	for _, c := range []struct {
		name  string
		every int64
		saved int64
	}{
		{"after a scheduled checkpoint", 2, 4},
		{"with none", 0, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
			l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
			dir := filepath.Join(t.TempDir(), "run")
			check(t, os.Mkdir(dir, 0o777))
			path := filepath.Join(dir, "run.safetensors")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 100, Checkpoint: path, CheckpointEvery: c.every,
				OnStep: func(p train.Progress) {
					if p.Step == 5 {
						check(t, os.Rename(dir, dir+".gone"))
						check(t, os.WriteFile(dir, nil, 0o666))
						cancel()
					}
				}})
			_, err := tr.Run(ctx)
			var se *train.SaveError
			if !errors.As(err, &se) || !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want a *train.SaveError beside context.Canceled", err)
			}
			if se.Step != 5 || se.Saved != c.saved || se.Path != path {
				t.Errorf("SaveError{Step %d, Saved %d, Path %s}, want step 5, saved %d, %s", se.Step, se.Saved, se.Path, c.saved, path)
			}
			want := "no checkpoint of this run is on disk"
			if c.saved >= 0 {
				want = "the checkpoint on disk is step 4's"
			}
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "step 5 was not saved") {
				t.Errorf("message %q does not say %q and which step was lost", err, want)
			}
		})
	}
}

// TestSaveErrorResumed: the checkpoint a run resumed from is the one on
// disk until it writes another.
func TestSaveErrorResumed(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	dir := filepath.Join(t.TempDir(), "run")
	check(t, os.Mkdir(dir, 0o777))
	path := filepath.Join(dir, "run.safetensors")
	first := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 3, Checkpoint: path})
	_, err := first.Run(context.Background())
	check(t, err)
	check(t, first.Close())
	ck, err := train.ReadCheckpoint(path)
	check(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	second := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 100, Checkpoint: path,
		OnStep: func(p train.Progress) {
			if p.Step == 6 {
				check(t, os.Rename(dir, dir+".gone"))
				check(t, os.WriteFile(dir, nil, 0o666))
				cancel()
			}
		}})
	check(t, second.Resume(ck))
	_, err = second.Run(ctx)
	var se *train.SaveError
	if !errors.As(err, &se) || se.Saved != 3 || se.Step != 6 {
		t.Fatalf("got %v, want a SaveError of step 6 with step 3's checkpoint on disk", err)
	}
}
