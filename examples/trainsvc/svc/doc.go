// Package svc is a reference training service: it runs char-RNN training
// jobs concurrently on one shared device, each in a device scope of its
// own, over an HTTP API with Prometheus metrics, and keeps them in a state
// directory so that a restarted process can resume them. Command trainsvc
// (examples/trainsvc) is its thin main; a program embeds it the same way:
//
//	d, err := devices.Open("auto", devices.Config{})
//	if err != nil { ... }
//	defer d.Close()
//	s, err := svc.New(svc.Config{Device: d, StateDir: "state",
//		OnStep: func(job string, p train.Progress) { ... }}) // progress, on the job's goroutine
//	if err != nil { ... }
//	http.ListenAndServe(addr, s.Handler())                    // /jobs, /jobs/{id}, /metrics
//	...
//	err = s.Drain(ctx) // on SIGTERM: every running job checkpoints
//
// # Jobs
//
// A job (Spec) names its data (a text file or directory on the server's
// disk), the model (kind "charrnn": an LSTM or GRU stack of a given size),
// the batching, the optimizer, the steps and a memory limit. Submit saves
// the spec in StateDir/job-N/spec.json and starts the job on a goroutine
// of its own: device.NewScope gives it a scope of the shared device (its
// own compute and copy streams, error status, memory figures and, with
// Spec.MemoryLimit, a cap on what it reserves), and the model, the loader
// and the trainer are built on the scope as on any device. Closing the
// scope when the job ends gives back whatever it still held. One job's
// failure (a bad token id, a diverged loss, its limit reached) is that
// job's: the others go on, with the figures and results they would have
// had alone.
//
// A job's progress (the trainer's train.Progress after every step: step,
// loss, tokens/s, data wait, the scope's memory by category) is its
// Status, which GET /jobs/{id} returns, status.json keeps at every change
// of state, and GET /metrics exports labelled by job.
//
// # Stopping and resuming
//
// Cancel (DELETE /jobs/{id}) cancels the job's context: the trainer
// finishes its step, writes StateDir/job-N/checkpoint.safetensors and the
// job is Cancelled. Drain does the same to every running job (they are
// Drained) and waits for them; New, on the same StateDir, lists them again
// (a job found live, whose process ended without draining, is
// Interrupted). Resume (POST /jobs/{id}/resume) rebuilds the job from its
// spec and continues from its checkpoint with train.Trainer.Resume,
// exactly: cancelling at step k and resuming to N gives the weights of an
// uninterrupted run to N, bit for bit.
//
// The API has no authentication and a job reads any file the process may
// read: serve it to trusted clients only (command trainsvc listens on the
// loopback by default).
//
// # Concurrency
//
// A Server's methods and its Handler are safe for concurrent use. Each
// job's training runs on one goroutine, which Config.OnStep is called on;
// Drain and Close wait for every one of them, so a closed Server leaves no
// goroutine behind. The device is the caller's: close it after the
// Server.
//
// # Errors
//
// Submit's errors match ErrInvalid (a spec that cannot run), Cancel's and
// Resume's ErrConflict (a job in the wrong state), every method's
// ErrNotFound (no such job) and ErrDraining (the server is shutting
// down); the HTTP handler answers 400, 409, 404 and 503 for them. A job's
// own failure is in its Status: Err (for errors.Is and errors.As:
// device.ErrIndex, train.ErrNonFinite and *train.NonFiniteError,
// alloc.ErrOutOfMemory and *alloc.OutOfMemoryError naming the job's scope
// and limit), Error (the message) and ErrorKind (the sentinel, named).
package svc
