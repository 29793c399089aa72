// Command charrnn trains a character-level LSTM or GRU, samples from it,
// evaluates it and measures it: go run ./examples/charrnn train. See the
// charrnn package (examples/charrnn/charrnn) for the commands and flags.
//
// Exit statuses: 0 when the command finished (or printed help); 2 for a
// usage error (a bad flag); 1 for any other failure; and 128 plus the
// signal's number when SIGINT (Ctrl-C, 130), SIGTERM (143, what
// containers, Kubernetes, systemd and timeout send) or SIGHUP (129) ended
// the run early after training finished its step and saved the
// checkpoint: a script tells an interrupted run from a finished one.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/dist"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/examples/charrnn/internal/progress"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
)

func main() {
	ctx, got := cli.OnSignal(context.Background())
	env := charrnn.Env{
		Stdout: os.Stdout, Stderr: os.Stderr, Live: progress.IsTerminal(os.Stderr), GOROOT: os.Getenv("GOROOT"),
		CUDA:   cuda.Config{BLASLibrary: os.Getenv("GOCURRENT_CUBLAS"), DriverLibrary: os.Getenv("GOCURRENT_CUDA_DRIVER")},
		Getenv: os.Getenv,
		Dist:   dist.Config{MPILibrary: os.Getenv("GOCURRENT_MPI"), NCCLLibrary: os.Getenv("GOCURRENT_NCCL")},
	}
	// GOCURRENT_FUSE_CELLS_UP_TO sets cuda.Config.FuseCellsUpTo, so that a
	// GPU run can compare the fused cell kernels with cuBLAS and the plain
	// cells (-1: never fuse).
	if v := os.Getenv("GOCURRENT_FUSE_CELLS_UP_TO"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "charrnn: GOCURRENT_FUSE_CELLS_UP_TO=%q is not a whole number\n", v)
			os.Exit(2)
		}
		env.CUDA.FuseCellsUpTo = n
	}
	// GOCURRENT_WALK_CELLS_UP_TO sets cuda.Config.WalkCellsUpTo, so that a
	// GPU run can compare the persistent walks with the per-step launches.
	if v := os.Getenv("GOCURRENT_WALK_CELLS_UP_TO"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "charrnn: GOCURRENT_WALK_CELLS_UP_TO=%q is not a whole number\n", v)
			os.Exit(2)
		}
		env.CUDA.WalkCellsUpTo = n
	}
	// GOCURRENT_BRANCHES=off keeps the bench's recurrent weight gradients
	// on the compute stream (charrnn.Env.NoBranches), so that a GPU run can
	// compare them with the branch they run on by default.
	switch v := os.Getenv("GOCURRENT_BRANCHES"); v {
	case "", "on":
	case "off":
		env.NoBranches = true
	default:
		fmt.Fprintf(os.Stderr, "charrnn: GOCURRENT_BRANCHES=%q, want on or off\n", v)
		os.Exit(2)
	}
	// GOCURRENT_WAVE_WINDOWS sets the windows of the bench's forward
	// wavefront (charrnn.Env.WaveWindows; 1 runs the layers one after the
	// other), so that a GPU run can compare them.
	if v := os.Getenv("GOCURRENT_WAVE_WINDOWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "charrnn: GOCURRENT_WAVE_WINDOWS=%q, want a whole number of windows, 1 or more\n", v)
			os.Exit(2)
		}
		env.WaveWindows = n
	}
	err := charrnn.Run(ctx, os.Args[1:], env)
	status := cli.ExitStatus(err, got())
	if err != nil {
		charrnn.Report(env, os.Args[1:], err, status)
	}
	os.Exit(status)
}
