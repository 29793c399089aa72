package svc

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// State is where a job is in its life.
type State string

// The states of a job. Running and Stopping are live; the others are
// where a run ended. Cancelled, Drained and Interrupted jobs can be
// resumed (Server.Resume): from their checkpoint when they have one,
// otherwise from the start.
const (
	// Running: the job is being built or trained.
	Running State = "running"
	// Stopping: Cancel or Drain asked it to stop; it finishes its step
	// and writes its checkpoint.
	Stopping State = "stopping"
	// Done: it reached its steps; its checkpoint holds the final state.
	Done State = "done"
	// Failed: it stopped on an error (Status.Error, Status.ErrorKind).
	Failed State = "failed"
	// Cancelled: DELETE /jobs/{id} (Server.Cancel) stopped it.
	Cancelled State = "cancelled"
	// Drained: the server stopped it while shutting down (Server.Drain).
	Drained State = "drained"
	// Interrupted: a restarted server found it running: the process that
	// ran it ended without draining. Its checkpoint is the last one it
	// wrote, if any.
	Interrupted State = "interrupted"
)

// states lists every State, for the state metric.
var states = []State{Running, Stopping, Done, Failed, Cancelled, Drained, Interrupted}

// resumable reports whether a job in state st may be resumed.
func (st State) resumable() bool {
	return st == Cancelled || st == Drained || st == Interrupted
}

// live reports whether a job in state st has a run under way.
func (st State) live() bool { return st == Running || st == Stopping }

// The kinds of error a job fails with (Status.ErrorKind), from the
// sentinel its error matches.
const (
	KindIndex       = "index"         // device.ErrIndex: a token id outside the model's vocabulary
	KindNonFinite   = "non_finite"    // train.ErrNonFinite: the loss or gradient diverged
	KindOutOfMemory = "out_of_memory" // alloc.ErrOutOfMemory: the job's limit or the device's memory
	KindData        = "data"          // the data: missing, unreadable, not UTF-8, empty, too short
	KindCheckpoint  = "checkpoint"    // a resumed job's checkpoint is damaged or does not fit
	KindOther       = "other"
)

// ErrorKind classifies a job's error by the sentinel it matches.
func ErrorKind(err error) string {
	var dataErr *loader.DataError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, device.ErrIndex):
		return KindIndex
	case errors.Is(err, train.ErrNonFinite):
		return KindNonFinite
	case errors.Is(err, alloc.ErrOutOfMemory):
		return KindOutOfMemory
	case errors.As(err, &dataErr), errors.Is(err, loader.ErrEmpty), errors.Is(err, loader.ErrTooShort),
		errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return KindData
	case errors.Is(err, train.ErrCorrupt), errors.Is(err, train.ErrMismatch), errors.Is(err, train.ErrNonFiniteWeights):
		return KindCheckpoint
	}
	return KindOther
}

// Status is a job's state and figures, as GET /jobs/{id} returns it in
// JSON and status.json in the job's directory keeps it.
type Status struct {
	ID    string `json:"id"`
	State State  `json:"state"`
	// Spec is the job as it runs, defaults filled in.
	Spec Spec `json:"spec"`
	// Step is the optimizer steps taken (counting those of the runs it
	// resumed), Steps the target, Skipped the steps skipped for a
	// non-finite loss or gradient.
	Step    int64 `json:"step"`
	Steps   int64 `json:"steps"`
	Skipped int64 `json:"skipped"`
	// Loss is the last step's mean cross-entropy, nats per character (null
	// in JSON before the first step, or when it was not finite).
	Loss Float `json:"loss"`
	// TokensPerSecond is the training rate of the current run so far;
	// DataWait the fraction of its time spent waiting for batches.
	TokensPerSecond float64 `json:"tokens_per_s"`
	DataWait        float64 `json:"data_wait"`
	// Memory is the bytes each memory category of the job's scope holds
	// (alloc.Category names: parameters, gradients, optimizer_state,
	// activations, workspace, batches, state, other), those holding any,
	// after the last step; AllocatedBytes their sum, ReservedBytes what the
	// scope reserves (the figure MemoryLimit caps), PeakReservedBytes its
	// peak in the current run.
	Memory            map[string]int64 `json:"memory"`
	AllocatedBytes    int64            `json:"allocated_bytes"`
	ReservedBytes     int64            `json:"reserved_bytes"`
	PeakReservedBytes int64            `json:"peak_reserved_bytes"`
	// Error is why a failed job failed, and ErrorKind which kind of error
	// that is (KindIndex, KindNonFinite, KindOutOfMemory, KindData,
	// KindCheckpoint, KindOther).
	Error     string `json:"error,omitempty"`
	ErrorKind string `json:"error_kind,omitempty"`
	// Checkpoint is the job's checkpoint file, when it has written one.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Resumable says POST /jobs/{id}/resume would continue it.
	Resumable bool `json:"resumable"`
	// Runs counts the runs started: 1, plus one per resume.
	Runs int `json:"runs"`
	// Created is when the job was submitted, Updated when its status last
	// changed state.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`

	// Err is the error a failed job failed with, for errors.Is in Go;
	// only Server's methods fill it (a status read back from disk or JSON
	// has Error alone).
	Err error `json:"-"`
}

// Float is a float64 whose JSON is null when it is NaN or infinite
// (which JSON cannot hold).
type Float float64

// MarshalJSON writes f, or null.
func (f Float) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

// UnmarshalJSON reads a number, or null as NaN.
func (f *Float) UnmarshalJSON(p []byte) error {
	if string(p) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	var v float64
	if err := json.Unmarshal(p, &v); err != nil {
		return err
	}
	*f = Float(v)
	return nil
}

// Stop causes: why a job's context was cancelled.
var (
	errCancelled = errors.New("cancelled")
	errDrained   = errors.New("drained: the server is shutting down")
)

// onlyCancelled reports whether err is ctx's cancellation and nothing
// else: a job that was stopped but failed to save its checkpoint has
// failed.
func onlyCancelled(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyCancelled(e) {
				return false
			}
		}
		return true
	}
	if !errors.Is(err, context.Canceled) {
		return false
	}
	if u := errors.Unwrap(err); u != nil && u != context.Canceled {
		return onlyCancelled(u)
	}
	return true
}
