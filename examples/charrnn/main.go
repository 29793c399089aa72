// Command charrnn trains a character-level LSTM or GRU, samples from it,
// evaluates it and measures it: go run ./examples/charrnn train. See the
// charrnn package (examples/charrnn/charrnn) for the commands and flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/gocurrent/gocurrent/cuda"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/examples/charrnn/internal/progress"
)

func main() {
	// The first Ctrl-C cancels the context: training finishes its step,
	// saves the checkpoint and returns. A second one kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := charrnn.Run(ctx, os.Args[1:], charrnn.Env{
		Stdout: os.Stdout, Stderr: os.Stderr, Live: progress.IsTerminal(os.Stderr), GOROOT: os.Getenv("GOROOT"),
		CUDA: cuda.Config{BLASLibrary: os.Getenv("GOCURRENT_CUBLAS"), DriverLibrary: os.Getenv("GOCURRENT_CUDA_DRIVER")},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "charrnn:", err)
		if errors.Is(err, charrnn.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
