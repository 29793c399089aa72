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
	"os"

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
	err := charrnn.Run(ctx, os.Args[1:], env)
	status := cli.ExitStatus(err, got())
	if err != nil {
		charrnn.Report(env, os.Args[1:], err, status)
	}
	os.Exit(status)
}
