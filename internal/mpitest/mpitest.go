// Package mpitest runs a test binary's ranks under Open MPI's mpirun, for
// the tests of data-parallel training: a parent test starts
// `mpirun -np N <the test binary> -test.run ^RankTest$` and the rank test,
// which runs only under mpirun (Rank), does one rank's part.
//
// Without mpirun on PATH (or in a build without cgo, which cannot load
// Open MPI) the parent tests skip, saying so, unless
// GOCURRENT_REQUIRE_MPI=1 (set by .ci/run, which installs Open MPI), where
// they fail: CI never passes by not running them.
package mpitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Require skips t (or fails it under GOCURRENT_REQUIRE_MPI=1) when mpirun
// is not installed, and returns its path.
func Require(t testing.TB) string {
	t.Helper()
	if !cgo {
		t.Skip("built with CGO_ENABLED=0: Open MPI is loaded with dlopen, which needs cgo")
	}
	if dev := os.Getenv("GOCURRENT_TEST_DEVICE"); dev != "" && dev != "cpu" {
		// Their ranks train on the CPU device, whose collectives are
		// MPI's: a run of the tests on a GPU has nothing to add.
		t.Skipf("the mpirun tests train on the CPU device; GOCURRENT_TEST_DEVICE=%s", dev)
	}
	path, err := exec.LookPath("mpirun")
	if err == nil {
		return path
	}
	msg := "mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin) to run the data-parallel tests"
	if os.Getenv("GOCURRENT_REQUIRE_MPI") == "1" {
		t.Fatal(msg + " (GOCURRENT_REQUIRE_MPI=1)")
	}
	t.Skip(msg)
	return ""
}

// Rank is the rank a test runs as under mpirun, and false outside it.
func Rank() (int, bool) {
	s := os.Getenv("OMPI_COMM_WORLD_RANK")
	if s == "" {
		return 0, false
	}
	r, err := strconv.Atoi(s)
	return r, err == nil
}

// Result is what an mpirun of a rank test did.
type Result struct {
	Output  []byte        // every rank's stdout and stderr, and mpirun's
	Elapsed time.Duration // from start to exit
	Err     error         // nil: every rank exited 0
}

// Run runs test (a test function's name) of the running test binary on np
// ranks under mpirun, with env added to the environment, and waits for it
// at most limit (then kills it and fails t).
func Run(t testing.TB, np int, test string, limit time.Duration, env ...string) Result {
	t.Helper()
	mpirun := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	args := []string{"-np", strconv.Itoa(np), "--oversubscribe", "--bind-to", "none", os.Args[0], "-test.run", "^" + test + "$", "-test.count", "1"}
	cmd := exec.CommandContext(ctx, mpirun, args...)
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_btl_vader_single_copy_mechanism=none")
	cmd.Env = append(cmd.Env, env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := Result{Output: out, Elapsed: time.Since(start), Err: err}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("mpirun -np %d %s ran past %v:\n%s", np, test, limit, out)
	}
	return r
}

// Check fails t unless every rank of r passed.
func (r Result) Check(t testing.TB, what string) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: mpirun: %v\n%s", what, r.Err, r.Output)
	}
}

// String is the output, for messages.
func (r Result) String() string {
	return fmt.Sprintf("%s (after %v)", r.Output, r.Elapsed.Round(time.Millisecond))
}

// CommandRank is the rank test of RunCommand's job: under mpirun it runs
// the command line RunCommand was given through run, with the
// process's environment (the launcher's variables); rank 0 writes what it
// printed on stdout where RunCommand reads it, and any other rank must
// print nothing there (rank 0 alone reports). Outside mpirun it skips.
func CommandRank(t *testing.T, run func(args []string, stdout, stderr io.Writer) error) {
	t.Helper()
	rank, ok := Rank()
	if !ok {
		t.Skip("a rank of a job RunCommand starts: runs under mpirun only")
	}
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv("GOCURRENT_RANK_ARGS")), &args); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if err := run(args, &out, &errs); err != nil {
		t.Fatalf("rank %d: %v\n%s", rank, err, errs.String())
	}
	if rank == 0 {
		if err := os.WriteFile(os.Getenv("GOCURRENT_RANK_OUT"), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if out.Len() > 0 {
		t.Errorf("rank %d printed to stdout, which is rank 0's:\n%s", rank, out.String())
	}
}

// RunCommand runs a command line on np ranks under mpirun, through test
// (a test function that calls CommandRank), and returns what rank 0
// printed on stdout. It fails t if a rank fails.
func RunCommand(t *testing.T, np int, test string, args []string) string {
	t.Helper()
	js, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "rank0.out")
	Run(t, np, test, 2*time.Minute, "GOCURRENT_RANK_ARGS="+string(js), "GOCURRENT_RANK_OUT="+out).Check(t, fmt.Sprintf("%v on %d ranks", args, np))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
