package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/dist"
)

// jobTimeout bounds every process a test starts, so a bug never hangs the
// test run.
const jobTimeout = 60 * time.Second

// needMPI skips the test when Open MPI's mpirun is not on PATH or its
// library cannot be loaded, unless GOCURRENT_REQUIRE_MPI=1 (set by CI,
// which installs it), where that fails the test. A build without cgo,
// which cannot load MPI by design, always skips.
func needMPI(t *testing.T) string {
	t.Helper()
	if !cgoBuild {
		t.Skip("built with CGO_ENABLED=0: Open MPI is loaded with dlopen, which needs cgo")
	}
	path, err := exec.LookPath("mpirun")
	if err == nil {
		_, err = loadAPI(DefaultLibrary)
	}
	if err != nil {
		if os.Getenv("GOCURRENT_REQUIRE_MPI") == "1" {
			t.Fatalf("GOCURRENT_REQUIRE_MPI=1, but Open MPI is missing: %v", err)
		}
		t.Skipf("Open MPI is missing (install openmpi-bin to run the MPI tests): %v", err)
	}
	return path
}

// job runs this test binary's TestRank as case name: under mpirun with np
// ranks, or alone when np is 0. It returns the combined output, the wall
// time and the exit error.
func job(t *testing.T, np int, name string) (string, time.Duration, error) {
	t.Helper()
	mpirun := needMPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	args := []string{"-test.run", "^TestRank$", "-test.v", "-test.timeout", jobTimeout.String()}
	var cmd *exec.Cmd
	if np > 0 {
		// --oversubscribe: more ranks than this machine's cores.
		cmd = exec.CommandContext(ctx, mpirun, append([]string{"-np", fmt.Sprint(np), "--oversubscribe", os.Args[0]}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, os.Args[0], args...)
	}
	cmd.Env = append(os.Environ(), caseVar+"="+name, "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("%s on %d ranks still ran after %v; output:\n%s", name, np, jobTimeout, out)
	}
	return string(out), elapsed, err
}

// TestCollectives runs AllReduce (float32 and float64, up to 8 MiB, and
// split into several MPI calls), Broadcast from rank 1, World.Broadcast
// and Barrier on 2 and 3 ranks: each rank checks the exact sums, and that
// its bits are rank 0's. On 2 ranks it logs all-reduce timings.
func TestCollectives(t *testing.T) {
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("%dranks", np), func(t *testing.T) {
			out, elapsed, err := job(t, np, "collectives")
			if err != nil {
				t.Fatalf("mpirun -np %d: %v after %v; output:\n%s", np, err, elapsed, out)
			}
			if n := strings.Count(out, "--- PASS: TestRank"); n != np {
				t.Fatalf("mpirun -np %d: %d ranks passed, want %d; output:\n%s", np, n, np, out)
			}
			for line := range strings.Lines(out) {
				if strings.Contains(line, "bench: ") {
					t.Log(strings.TrimSpace(line[strings.Index(line, "bench: "):]))
				}
			}
		})
	}
}

// TestHang: rank 1 never joins an all-reduce; rank 0's watchdog (2 s)
// must end the job, with the timeout in the output, well before the
// test's deadline.
func TestHang(t *testing.T) {
	out, elapsed, err := job(t, 2, "hang")
	if err == nil {
		t.Fatalf("mpirun exited 0, want an error; output:\n%s", out)
	}
	if elapsed > 15*time.Second {
		t.Errorf("the job ended after %v, want under 15s", elapsed)
	}
	for _, want := range []string{"gocurrent: rank 0 aborts the job", "rank 0 of 2: all-reduce of 4096 bytes of float32 not done after 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("the job ended %v after it started", elapsed.Round(time.Millisecond))
}

// TestRankExits: rank 1 exits with status 3 before an all-reduce; mpirun
// must end the job, and rank 0 in the collective, quickly (rank 0's own
// watchdog would take a minute).
func TestRankExits(t *testing.T) {
	out, elapsed, err := job(t, 2, "exit")
	if err == nil {
		t.Fatalf("mpirun exited 0, want an error; output:\n%s", out)
	}
	if elapsed > 15*time.Second {
		t.Errorf("the job ended after %v, want under 15s", elapsed)
	}
	if !strings.Contains(out, "non-zero status") {
		t.Errorf("output lacks mpirun's report of a rank's non-zero status:\n%s", out)
	}
	t.Logf("the job ended %v after it started", elapsed.Round(time.Millisecond))
}

// TestSingleton: outside mpirun a process is a world of one rank, whose
// all-reduce leaves the values; a second Join shares the World, and none
// after the last Close.
func TestSingleton(t *testing.T) {
	out, elapsed, err := job(t, 0, "singleton")
	if err != nil || !strings.Contains(out, "--- PASS: TestRank") {
		t.Fatalf("singleton: %v after %v; output:\n%s", err, elapsed, out)
	}
}

// TestMissingLibrary: a library that is not there is dist.ErrUnavailable,
// named in the message.
func TestMissingLibrary(t *testing.T) {
	const path = "/nonexistent/libmpi.so.40"
	w, err := Join(dist.Config{MPILibrary: path})
	if err == nil {
		w.Close()
		t.Fatal("Join: nil error, want one")
	}
	if !errors.Is(err, dist.ErrUnavailable) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Join: %v; want an error wrapping dist.ErrUnavailable that names %s", err, path)
	}
}
