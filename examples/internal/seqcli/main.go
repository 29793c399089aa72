package seqcli

import (
	"context"
	"os"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
)

// Main runs task's command line from the process's arguments and exits:
// status 0 when the command finished, 2 for a usage error, 1 for any
// other failure, and 128 plus the signal's number when SIGINT, SIGTERM or
// SIGHUP ended training early after it saved the checkpoint.
func Main(task Task) {
	ctx, got := cli.OnSignal(context.Background())
	env := Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, GOROOT: os.Getenv("GOROOT"),
		CUDA:   cuda.Config{BLASLibrary: os.Getenv("GOCURRENT_CUBLAS"), DriverLibrary: os.Getenv("GOCURRENT_CUDA_DRIVER")},
		Getenv: os.Getenv,
		Dist:   dist.Config{MPILibrary: os.Getenv("GOCURRENT_MPI"), NCCLLibrary: os.Getenv("GOCURRENT_NCCL")}}
	err := Run(ctx, task, os.Args[1:], env)
	status := cli.ExitStatus(err, got())
	if err != nil {
		Report(task, env, os.Args[1:], err, status)
	}
	os.Exit(status)
}
