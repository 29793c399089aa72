// Command trainsvc is a reference training service: an HTTP API that runs
// char-RNN training jobs concurrently on one device, each in a scope of
// its own, keeps them in a state directory, and exposes their figures to
// Prometheus. The service itself is package
// github.com/gocurrent/gocurrent/examples/trainsvc/svc; this is its thin
// main:
//
//	go run ./examples/trainsvc -addr 127.0.0.1:8080 -state ./trainsvc-state -device auto
//	curl -s -XPOST localhost:8080/jobs -d '{"data": "input.txt", "model": {"cell": "gru", "hidden": 128}, "steps": 500}'
//	curl -s localhost:8080/jobs/job-1
//	curl -s -XDELETE localhost:8080/jobs/job-1          # stops after its step, checkpointed
//	curl -s -XPOST localhost:8080/jobs/job-1/resume     # continues exactly
//	curl -s localhost:8080/metrics
//
// SIGTERM or SIGINT drains: every running job finishes its step and writes
// its checkpoint ("drained"), then the process exits with status 0; a
// second signal kills it. Started again on the same -state, the service
// lists the jobs and POST /jobs/{id}/resume continues any of them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/examples/trainsvc/svc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve HTTP on")
	state := flag.String("state", "trainsvc-state", "directory the jobs are kept in (spec, status and checkpoint of each)")
	dev := flag.String("device", "auto", "device the jobs share: auto, cpu, cuda or cuda:N")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "trainsvc: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The CUDA libraries, when they are not on the loader's path: as the
	// char-RNN example takes them.
	gpu := cuda.Config{DriverLibrary: os.Getenv("GOCURRENT_CUDA_DRIVER"), BLASLibrary: os.Getenv("GOCURRENT_CUBLAS")}
	ln, err := net.Listen("tcp", *addr)
	if err == nil {
		err = run(ctx, stop, ln, *state, *dev, gpu, log)
	}
	if err != nil {
		log.Error(err.Error())
		os.Exit(1)
	}
}

// run serves on ln until ctx is cancelled (a signal), then drains the
// jobs and shuts the HTTP server down. stop restores the signals' default action
// once the first has arrived, so a second one kills the process.
func run(ctx context.Context, stop func(), ln net.Listener, state, dev string, gpu cuda.Config, log *slog.Logger) (err error) {
	defer ln.Close() // Serve closes it too; before Serve, this does
	d, err := devices.Open(dev, devices.Config{CUDA: gpu})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	s, err := svc.New(svc.Config{Device: d, StateDir: state, Logger: log})
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("trainsvc: serving", "addr", ln.Addr().String(), "device", d.Name(), "state", state)
	select {
	case err = <-served: // the listener failed
	case <-ctx.Done():
		stop()
		log.Info("trainsvc: draining: every running job checkpoints")
		err = s.Drain(context.Background())
		err = errors.Join(err, hs.Shutdown(context.Background()))
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
	}
	return errors.Join(err, s.Close())
}
