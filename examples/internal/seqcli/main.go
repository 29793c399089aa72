package seqcli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/gocurrent/gocurrent/cuda"
)

// Main runs task's command line from the process's arguments and exits:
// status 0 when the command finished, 2 for a usage error, 1 for any
// other failure, and 128 plus the signal's number when SIGINT, SIGTERM or
// SIGHUP ended training early after it saved the checkpoint.
func Main(task Task) {
	ctx, got := onSignal(context.Background())
	env := Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, GOROOT: os.Getenv("GOROOT"),
		CUDA: cuda.Config{BLASLibrary: os.Getenv("GOCURRENT_CUBLAS"), DriverLibrary: os.Getenv("GOCURRENT_CUDA_DRIVER")}}
	err := Run(ctx, task, os.Args[1:], env)
	status := exitStatus(err, got())
	if err != nil {
		Report(task, env, os.Args[1:], err, status)
	}
	os.Exit(status)
}

var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// onSignal returns a context cancelled by the first stop signal and a
// function that tells which signal that was; after it the signals'
// default actions are back, so a second one kills the process.
func onSignal(parent context.Context) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(parent)
	var got atomic.Value
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	go func() {
		select {
		case s := <-sigs:
			got.Store(s)
			signal.Reset(stopSignals...)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() os.Signal {
		s, _ := got.Load().(os.Signal)
		return s
	}
}

func exitStatus(err error, sig os.Signal) int {
	switch {
	case errors.Is(err, ErrUsage):
		return 2
	case sig != nil && (err == nil || errors.Is(err, context.Canceled)):
		if n, ok := sig.(syscall.Signal); ok {
			return 128 + int(n)
		}
		return 1
	case err != nil:
		return 1
	}
	return 0
}
