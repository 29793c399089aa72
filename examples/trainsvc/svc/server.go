package svc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/train"
)

// The errors of Server's methods that callers branch on; the HTTP
// handler maps them to status codes.
var (
	// ErrNotFound: no job has the id (404).
	ErrNotFound = errors.New("trainsvc: no such job")
	// ErrConflict: the job is not in a state the request applies to:
	// cancelling a job that is not running, resuming one that is not
	// stopped (409).
	ErrConflict = errors.New("trainsvc: job state conflict")
	// ErrDraining: the server is shutting down and starts no job (503).
	ErrDraining = errors.New("trainsvc: server is draining")
)

// Config configures a Server. Device and StateDir are required; the other
// fields' zero values work.
type Config struct {
	// Device is the device every job runs on, each in a scope of its own
	// (device.NewScope): its own streams, errors, memory figures and
	// memory limit. The Server does not close it.
	Device device.Device
	// StateDir holds a directory per job (StateDir/job-N: spec.json,
	// status.json, checkpoint.safetensors). New creates it if needed and
	// lists the jobs it holds, so a restarted server can resume them.
	StateDir string
	// OnStep, when set, is called after every optimizer step of every
	// job, on the job's goroutine (it delays that job's next step): the
	// job's id and the trainer's progress.
	OnStep func(job string, p train.Progress)
	// Logger receives the jobs' state changes and the trainers'
	// diagnostics; nil means none.
	Logger *slog.Logger
}

// Server runs training jobs on one device, each in its own scope,
// concurrently, and keeps them in a state directory. Its methods are safe
// for concurrent use; Handler serves them over HTTP.
type Server struct {
	cfg     Config
	reg     *prometheus.Registry
	failed  *prometheus.CounterVec
	handler http.Handler

	mu       sync.Mutex
	jobs     map[string]*job
	order    []*job // by id number
	next     int    // the number of the next job's id
	draining bool
	running  sync.WaitGroup // the jobs' goroutines; Add under mu, after draining is checked
}

// job is one job: its spec (fixed), its status and the run under way.
type job struct {
	id, dir string
	spec    Spec

	mu     sync.Mutex
	st     Status
	err    error                   // the failed run's error
	cancel context.CancelCauseFunc // stops the run under way; nil when none
	done   chan struct{}           // closed when the current run ends (already closed when none)
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// New returns a server of the jobs in cfg.StateDir (created if missing);
// the jobs it finds are listed and none is started: resume them with
// Resume. Jobs that were live are Interrupted.
func New(cfg Config) (*Server, error) {
	if cfg.Device == nil {
		return nil, errors.New("trainsvc: Config.Device is nil")
	}
	if cfg.StateDir == "" {
		return nil, errors.New("trainsvc: Config.StateDir is empty")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o777); err != nil {
		return nil, fmt.Errorf("trainsvc: state directory: %w", err)
	}
	// Absolute, as the checkpoint paths of the statuses are.
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("trainsvc: state directory: %w", err)
	}
	cfg.StateDir = dir
	jobs, next, err := loadJobs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, jobs: map[string]*job{}, order: jobs, next: next, reg: prometheus.NewRegistry()}
	for _, j := range jobs {
		s.jobs[j.id] = j
		// Save what loading concluded (Interrupted), so the file agrees with GET.
		if err := j.persist(); err != nil {
			return nil, err
		}
	}
	s.failed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gocurrent_jobs_failed_total",
		Help: "Jobs that failed since the server started, by kind of error (index, non_finite, out_of_memory, data, checkpoint, other).",
	}, []string{"kind"})
	if err := s.reg.Register(s.failed); err != nil {
		return nil, err
	}
	if err := s.reg.Register(collector{s}); err != nil {
		return nil, err
	}
	s.handler = newHandler(s)
	s.logf("trainsvc: state directory %s: %d jobs", cfg.StateDir, len(jobs))
	return s, nil
}

// Registry is the server's own Prometheus registry (GET /metrics serves
// it): the jobs' figures and the failure counter. Register more
// collectors in it (the Go runtime's, say) to serve them beside.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logger != nil {
		s.cfg.Logger.Info(fmt.Sprintf(format, args...))
	}
}

func sortJobs(jobs []*job) {
	slices.SortFunc(jobs, func(a, b *job) int {
		na, _ := jobNumber(a.id)
		nb, _ := jobNumber(b.id)
		return na - nb
	})
}

// Submit checks spec, fills its defaults in (and makes Data absolute),
// saves it as a new job and starts it. The status returned has the job's id. A spec that cannot run
// is an error matching ErrInvalid; a draining server's, ErrDraining.
func (s *Server) Submit(spec Spec) (Status, error) {
	spec = spec.withDefaults()
	if err := spec.validate(); err != nil {
		return Status{}, err
	}
	if _, err := os.Stat(spec.Data); err != nil {
		return Status{}, fmt.Errorf("%w: data: %w", ErrInvalid, err)
	}
	// Absolute, so that a server restarted elsewhere finds it.
	abs, err := filepath.Abs(spec.Data)
	if err != nil {
		return Status{}, fmt.Errorf("%w: data: %w", ErrInvalid, err)
	}
	spec.Data = abs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return Status{}, ErrDraining
	}
	id := idPrefix + strconv.Itoa(s.next)
	j := &job{id: id, dir: filepath.Join(s.cfg.StateDir, id), spec: spec, done: closedChan()}
	if err := os.Mkdir(j.dir, 0o777); err != nil {
		return Status{}, fmt.Errorf("trainsvc: job %s: %w", id, err)
	}
	s.next++
	if err := writeJSON(filepath.Join(j.dir, specFile), spec); err != nil {
		return Status{}, fmt.Errorf("trainsvc: job %s: %w", id, err)
	}
	now := time.Now().UTC()
	j.st = Status{ID: id, Spec: spec, Steps: spec.Steps, Loss: Float(math.NaN()), Created: now, Updated: now}
	s.jobs[id] = j
	s.order = append(s.order, j)
	return s.startLocked(j, false)
}

// Resume starts a Cancelled, Drained or Interrupted job again, from its
// checkpoint (exactly where it stopped) or, if it has none, from the
// start. Another state is an error matching ErrConflict.
func (s *Server) Resume(id string) (Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return Status{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if s.draining {
		return Status{}, ErrDraining
	}
	j.mu.Lock()
	st := j.st.State
	j.mu.Unlock()
	if !st.resumable() {
		return Status{}, fmt.Errorf("%w: job %s is %s; only a cancelled, drained or interrupted job resumes", ErrConflict, id, st)
	}
	// A spec saved by a server that did not check it as this one does
	// (issue 46: batch 2^40 with accum 2^24 came back interrupted and
	// resumable, and its resume killed the server again).
	if err := j.spec.validate(); err != nil {
		return Status{}, fmt.Errorf("job %s: %w", id, err)
	}
	return s.startLocked(j, true)
}

// startLocked starts j's run; s.mu is held, and the server is not
// draining.
func (s *Server) startLocked(j *job, resume bool) (Status, error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	j.mu.Lock()
	j.st.State, j.st.Resumable = Running, false
	j.st.Error, j.st.ErrorKind, j.err = "", "", nil
	j.st.Runs++
	j.st.Updated = time.Now().UTC()
	j.cancel, j.done = cancel, make(chan struct{})
	st := j.status()
	err := j.persist()
	j.mu.Unlock()
	if err != nil {
		cancel(err)
		j.finish(context.Background(), err)
		return st, err
	}
	s.running.Add(1)
	go s.run(ctx, j, resume)
	s.logf("trainsvc: job %s started (run %d)", j.id, st.Runs)
	return st, nil
}

// Cancel stops a running job: it finishes its step, writes its
// checkpoint and becomes Cancelled, resumable. Cancel does not wait (see
// Wait); the status returned is Stopping. A job that is not running is an
// error matching ErrConflict.
func (s *Server) Cancel(id string) (Status, error) {
	j, err := s.job(id)
	if err != nil {
		return Status{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	switch j.st.State {
	case Stopping:
		return j.status(), nil
	case Running:
		j.st.State = Stopping
		j.cancel(errCancelled)
		return j.status(), nil
	}
	return j.status(), fmt.Errorf("%w: job %s is %s, not running", ErrConflict, id, j.st.State)
}

// Job returns a job's status.
func (s *Server) Job(id string) (Status, error) {
	j, err := s.job(id)
	if err != nil {
		return Status{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.status(), nil
}

// Jobs returns every job's status, in the order they were submitted.
func (s *Server) Jobs() []Status {
	s.mu.Lock()
	jobs := slices.Clone(s.order)
	s.mu.Unlock()
	out := make([]Status, len(jobs))
	for i, j := range jobs {
		j.mu.Lock()
		out[i] = j.status()
		j.mu.Unlock()
	}
	return out
}

// Wait waits until the job's run under way, if any, has ended, and
// returns its status; ctx's error if ctx ends first.
func (s *Server) Wait(ctx context.Context, id string) (Status, error) {
	j, err := s.job(id)
	if err != nil {
		return Status{}, err
	}
	j.mu.Lock()
	done := j.done
	j.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return Status{}, ctx.Err()
	}
	return s.Job(id)
}

// Drain stops every running job the way Cancel does, but Drained, and
// waits until each has written its checkpoint; from then on the server
// starts no job (Submit and Resume fail with ErrDraining) and Drain
// returns at once. It returns ctx's error if ctx ends first, the jobs
// still stopping.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	jobs := slices.Clone(s.order)
	s.mu.Unlock()
	n := 0
	for _, j := range jobs {
		j.mu.Lock()
		if j.st.State.live() {
			j.st.State = Stopping
			j.cancel(errDrained)
			n++
		}
		j.mu.Unlock()
	}
	if n > 0 {
		s.logf("trainsvc: draining %d jobs", n)
	}
	done := make(chan struct{})
	go func() {
		s.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("trainsvc: drain: %w", ctx.Err())
	}
}

// Close drains the server (Drain) and waits for it. The device is the
// caller's to close, afterwards.
func (s *Server) Close() error {
	return s.Drain(context.Background())
}

func (s *Server) job(id string) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return j, nil
}

// status returns a copy of j's status; j.mu is held.
func (j *job) status() Status {
	st := j.st
	st.Memory = maps.Clone(j.st.Memory)
	if st.Memory == nil {
		st.Memory = map[string]int64{} // {} in JSON before the first step
	}
	st.Err = j.err
	return st
}

// persist writes j's status file; j.mu is held.
func (j *job) persist() error {
	if err := writeJSON(filepath.Join(j.dir, statusFile), j.st); err != nil {
		return fmt.Errorf("trainsvc: job %s: %w", j.id, err)
	}
	return nil
}

// finish records how j's run ended, given the run's error and context,
// saves the status and wakes Wait. It returns the state it ended in.
func (j *job) finish(ctx context.Context, err error) State {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case err == nil:
		j.st.State = Done
	case ctx.Err() != nil && onlyCancelled(err):
		j.st.State = Cancelled
		if errors.Is(context.Cause(ctx), errDrained) {
			j.st.State = Drained
		}
	default:
		j.st.State, j.err = Failed, err
		j.st.Error, j.st.ErrorKind = err.Error(), ErrorKind(err)
	}
	j.st.Checkpoint = ""
	if p := filepath.Join(j.dir, checkpointFile); exists(p) {
		j.st.Checkpoint = p
	}
	j.st.Resumable = j.st.State.resumable()
	j.st.Updated = time.Now().UTC()
	if perr := j.persist(); perr != nil && j.st.State != Failed {
		j.st.State, j.err = Failed, perr
		j.st.Error, j.st.ErrorKind, j.st.Resumable = perr.Error(), ErrorKind(perr), false
	}
	if j.cancel != nil {
		j.cancel(nil)
		j.cancel = nil
	}
	close(j.done)
	return j.st.State
}
