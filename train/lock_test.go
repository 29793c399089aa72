//go:build unix

package train_test

import (
	"errors"
	"os"
	"path/filepath"
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
