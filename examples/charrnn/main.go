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
	"errors"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/gocurrent/gocurrent/cuda"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/examples/charrnn/internal/progress"
)

// stopSignals end a run the way Ctrl-C does.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

func main() {
	ctx, got := onSignal(context.Background())
	env := charrnn.Env{
		Stdout: os.Stdout, Stderr: os.Stderr, Live: progress.IsTerminal(os.Stderr), GOROOT: os.Getenv("GOROOT"),
		CUDA: cuda.Config{BLASLibrary: os.Getenv("GOCURRENT_CUBLAS"), DriverLibrary: os.Getenv("GOCURRENT_CUDA_DRIVER")},
	}
	err := charrnn.Run(ctx, os.Args[1:], env)
	status := exitStatus(err, got())
	if err != nil {
		charrnn.Report(env, os.Args[1:], err, status)
	}
	os.Exit(status)
}

// onSignal returns a context cancelled by the first stop signal, and a
// function that tells which signal that was (nil: none). The first signal
// lets the run finish its step and save; after it the signals' default
// actions are back, so a second one kills the process.
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

// exitStatus is the process's exit status for a run that returned err
// after sig (nil: no signal) arrived.
func exitStatus(err error, sig os.Signal) int {
	switch {
	case errors.Is(err, charrnn.ErrUsage):
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
