package charrnn_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/mpitest"
)

// TestTrainRank is one rank of TestTrainDataParallel's job, under
// mpirun: the command line, with the launcher's variables, as main runs it.
func TestTrainRank(t *testing.T) {
	mpitest.CommandRank(t, func(args []string, stdout, stderr io.Writer) error {
		env := testEnv(t, stdout, stderr)
		env.Getenv = os.Getenv
		return charrnn.Run(context.Background(), args, env)
	})
}

// TestTrainDataParallel checks `charrnn train -dist auto` under mpirun:
// 2 ranks with -batch 32 (16 streams each) take the steps one process
// with -batch 32 takes, within the bounds of
// TestTrainAccumulationEquivalence (only the grouping of the float32 sums
// differs: each rank sums its 256 positions a step, then MPI adds the two),
// and rank 0 alone reports and writes the checkpoint.
func TestTrainDataParallel(t *testing.T) {
	mpitest.Require(t)
	dir := t.TempDir()
	one := filepath.Join(dir, "one.safetensors")
	out, _, err := run(t, context.Background(), equivArgs(t, one, "-batch", "32", "-dist", "none")...)
	if err != nil {
		t.Fatal(err)
	}
	want := readEquivRun(t, out, one)

	two := filepath.Join(dir, "two.safetensors")
	got := mpitest.RunCommand(t, 2, "TestTrainRank", equivArgs(t, two, "-batch", "32", "-device", "cpu"))
	checkEquivalent(t, readEquivRun(t, got, two), want, "2 ranks of 16", "one process of 32")
	done := ofEvent(events(t, got), "done")
	if len(done) != 1 {
		t.Fatalf("%d done events from rank 0, want 1", len(done))
	}
	// 5 steps of 6 all-reduces (the gradients of the output layer, of each
	// of the 2 recurrent layers as its backward is queued, of the
	// embedding; the loss; the stop votes), after the
	// first Run's broadcast of the 3 groups' weights (SGD has no state)
	// and the step mark (4), and the gather of the carried state, h and c
	// from each of the 2 ranks, for the checkpoint (4).
	d := done[0]
	if d["ranks"] != 2.0 || d["collectives"] != float64(5*6+4+4) || !(d["collective_s"].(float64) > 0) || !(d["collective_bytes"].(float64) > 0) {
		t.Errorf("done event %v: want ranks 2, 38 collectives, their bytes and time", d)
	}
}

// TestTrainDistErrors checks what -dist refuses, without a launcher: a
// batch the ranks cannot share, -batch auto, a torchrun job on the CPU
// (whose collectives are MPI's, which torchrun does not start), and
// malformed launcher variables.
func TestTrainDistErrors(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "x.safetensors")
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		says string
	}{
		{"odd batch", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, []string{"-batch", "5"}, "-batch 5 over 2 ranks"},
		{"batch auto", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, []string{"-batch", "auto"}, "-batch auto with -dist"},
		{"torchrun on the cpu", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, []string{"-batch", "4", "-device", "cpu"}, "launch the job with mpirun"},
		{"bad rank", map[string]string{"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, nil, "rank 2 of 2"},
		{"no master", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, nil, "MASTER_ADDR"},
		{"bad -dist", nil, []string{"-dist", "yes"}, `-dist "yes"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			env := testEnv(t, &out, &errs)
			env.Getenv = func(k string) string { return c.env[k] }
			err := charrnn.Run(context.Background(), append(smallTrain(t, ckpt, "-steps", "1"), c.args...), env)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %v, want an error saying %q", err, c.says)
			}
			if _, serr := os.Stat(ckpt); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("a checkpoint was written: %v", serr)
			}
		})
	}
	// -dist none ignores the launcher's variables.
	var out, errs bytes.Buffer
	env := testEnv(t, &out, &errs)
	env.Getenv = func(k string) string { return map[string]string{"RANK": "0", "WORLD_SIZE": "2"}[k] }
	if err := charrnn.Run(context.Background(), append(smallTrain(t, ckpt, "-steps", "1", "-batch", "4"), "-dist", "none"), env); err != nil {
		t.Errorf("-dist none under torchrun's variables: %v", err)
	}
}
