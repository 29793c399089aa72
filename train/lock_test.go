//go:build unix

package train_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// TestCheckpointLock: a second trainer writing the checkpoint of a live
// one, by the same path or through a symbolic link, fails at New with
// ErrCheckpointInUse; once the first is closed the file is free. Before,
// both ran and the last to save won.
func TestCheckpointLock(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	dir := t.TempDir()
	path, link := filepath.Join(dir, "run.safetensors"), filepath.Join(dir, "link.safetensors")
	check(t, os.Symlink("run.safetensors", link))
	first, err := train.New(d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 1, Checkpoint: path})
	check(t, err)
	for _, p := range []string{path, link} {
		second, err := train.New(d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 1, Checkpoint: p})
		if !errors.Is(err, train.ErrCheckpointInUse) {
			t.Errorf("a second trainer on %s: %v, want ErrCheckpointInUse", filepath.Base(p), err)
		}
		if second != nil {
			check(t, second.Close())
		}
	}
	check(t, first.Close())
	third, err := train.New(d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 1, Checkpoint: path})
	if err != nil {
		t.Fatalf("a trainer after the first closed: %v", err)
	}
	check(t, third.Close())
}

// TestCheckpointLockRemoved: a trainer's lock file, ".NAME.lock" beside
// the checkpoint, is there while it runs and gone once it is closed, after
// a run as after none, so the checkpoint's directory holds what the run
// wrote and nothing else (before, every run left its lock file, which git
// status showed).
func TestCheckpointLockRemoved(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	dir := t.TempDir()
	path, lock := filepath.Join(dir, "run.safetensors"), filepath.Join(dir, ".run.safetensors.lock")
	names := func() []string {
		entries, err := os.ReadDir(dir)
		check(t, err)
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	for _, run := range []bool{false, true} {
		tr, err := train.New(d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 2, Checkpoint: path})
		check(t, err)
		if _, err := os.Stat(lock); err != nil {
			t.Errorf("the lock file while a trainer holds it: %v, want it there", err)
		}
		var want []string // New writes nothing
		if run {
			_, err := tr.Run(t.Context())
			check(t, err)
			want = []string{"run.safetensors"}
		}
		check(t, tr.Close())
		if got := names(); !slices.Equal(got, want) {
			t.Errorf("run %v, then Close: the directory holds %q, want %q", run, got, want)
		}
	}
}
