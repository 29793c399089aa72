package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gocurrent/gocurrent/device"
)

// queueDepth is the number of commands a stream holds before the caller
// blocks: deep enough that the host runs well ahead of the work (a whole
// time step of an LSTM layer is a handful of commands), small enough that a
// stalled stream is noticed.
const queueDepth = 64

// stream runs its commands in order on one goroutine of its own, so work on
// the CPU device is asynchronous to the caller exactly as on a GPU: a
// caller that reads a result without waiting races with the worker, and
// the race detector says so.
//
// Commands live in a ring of fixed slots written in place, so queuing one
// allocates nothing. A slot is reused only after its command completed.
type stream struct {
	dev     *Device
	ln      *lane // the device's or the scope's whose stream it is
	compute bool
	branch  *branch // the branch whose stream it is, nil for another

	mu       sync.Mutex
	notEmpty sync.Cond // the worker waits here for work
	notFull  sync.Cond // callers wait here for a free slot
	progress sync.Cond // waiters for a sequence number wait here
	ring     [queueDepth]cmd
	queued   atomic.Uint64 // commands queued so far (written under mu); the next gets this number + 1
	done     atomic.Uint64
	err      error // first error raised by the work, until reported
	closing  bool
	exited   chan struct{}

	wg sync.WaitGroup // for the pool, used by the worker only
}

func newStream(l *lane, compute bool) *stream {
	s := &stream{dev: l.d, ln: l, compute: compute, exited: make(chan struct{})}
	s.notEmpty.L = &s.mu
	s.notFull.L = &s.mu
	s.progress.L = &s.mu
	go s.run()
	return s
}

var _ device.Stream = (*stream)(nil)

// enqueue reserves the next slot, lets fill write the command into it and
// hands it to the worker. It returns the command's sequence number (0 for
// a command recorded into a graph).
func (s *stream) enqueue(fill func(c *cmd)) (uint64, error) {
	seq, _, err := s.enqueueAt(fill)
	return seq, err
}

// enqueueAt is enqueue that also returns the graph the command was
// recorded into instead of run, nil when it was queued.
func (s *stream) enqueueAt(fill func(c *cmd)) (uint64, *graph, error) {
	s.mu.Lock()
	for !s.closing && s.queued.Load()-s.done.Load() >= queueDepth {
		s.notFull.Wait()
	}
	if s.closing {
		s.mu.Unlock()
		return 0, nil, s.closedErr()
	}
	if err := s.branchCheck(); err != nil {
		s.mu.Unlock()
		return 0, nil, err
	}
	if rec := s.recording(); rec != nil {
		// Recorded for a graph, not run (lane.Capture).
		var c cmd
		fill(&c)
		rec.cmds = append(rec.cmds, c)
		s.mu.Unlock()
		return 0, rec, nil
	}
	seq := s.queued.Load() + 1
	c := &s.ring[(seq-1)%queueDepth]
	fill(c)
	s.queued.Store(seq)
	s.notEmpty.Signal()
	s.mu.Unlock()
	return seq, nil, nil
}

func (s *stream) closedErr() error {
	if s.dev.closed.Load() {
		return fmt.Errorf("cpu: a stream of a device that is %w", device.ErrClosed)
	}
	if s.ln.closed.Load() {
		return fmt.Errorf("%s: a stream of %s, which is %w", s.ln.owner.Name(), s.ln.label, device.ErrClosed)
	}
	return fmt.Errorf("cpu: the stream is %w", device.ErrClosed)
}

// run is the worker: it executes commands in order until the stream is
// closed and drained.
func (s *stream) run() {
	defer close(s.exited)
	for {
		spin(func() bool { return s.queued.Load() != s.done.Load() })
		s.mu.Lock()
		for s.done.Load() == s.queued.Load() && !s.closing {
			s.notEmpty.Wait()
		}
		if s.done.Load() == s.queued.Load() {
			s.mu.Unlock()
			return
		}
		c := &s.ring[s.done.Load()%queueDepth]
		s.mu.Unlock()

		err := s.exec(c)

		s.mu.Lock()
		if err != nil && s.err == nil {
			s.err = err
		}
		c.release()
		s.done.Add(1)
		s.notFull.Signal()
		s.progress.Broadcast()
		s.mu.Unlock()
	}
}

// wait blocks until command seq completed.
func (s *stream) wait(seq uint64) {
	if spin(func() bool { return s.done.Load() >= seq }) {
		return
	}
	s.mu.Lock()
	for s.done.Load() < seq {
		s.progress.Wait()
	}
	s.mu.Unlock()
}

// report returns the pending error, if any, and clears it.
func (s *stream) report() error {
	s.mu.Lock()
	err := s.err
	s.err = nil
	s.mu.Unlock()
	return err
}

// peek returns the pending error without clearing it.
func (s *stream) peek() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *stream) Record() (device.Event, error) {
	if err := s.inCapture("Stream.Record"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, s.closedErr()
	}
	seq := s.queued.Load()
	s.mu.Unlock()
	return event{s: s, seq: seq}, nil
}

func (s *stream) Wait(e device.Event) error {
	ev, ok := e.(event)
	if !ok || ev.s.ln != s.ln {
		return fmt.Errorf("%s: Stream.Wait: event %T is not from this %s: %w", s.ln.owner.Name(), e, labelNoun(s.ln.label), device.ErrForeignBuffer)
	}
	if err := s.inCapture("Stream.Wait"); err != nil {
		return err
	}
	if ev.s == s {
		if s.isClosing() {
			return s.closedErr()
		}
		return nil // a stream's own work is already in order
	}
	_, err := s.enqueue(func(c *cmd) { c.op = opWait; c.wait = ev })
	return err
}

func (s *stream) Synchronize() error {
	if err := s.inCapture("Stream.Synchronize"); err != nil {
		return err
	}
	s.mu.Lock()
	seq, closing := s.queued.Load(), s.closing
	s.mu.Unlock()
	if closing {
		return s.closedErr()
	}
	s.dev.counts.syncs.Add(1)
	s.wait(seq)
	return s.report()
}

// recording is the graph the stream records into, nil when none: a
// compute stream's, set under its mu, or the one its branch was forked
// into (under the branch stream's mu); the caller holds s.mu.
func (s *stream) recording() *graph {
	if s.branch != nil {
		return s.branch.rec
	}
	if !s.compute {
		return nil
	}
	return s.ln.graphs.rec
}

// inCapture is the error of what on the compute stream while it records
// a graph; nil on another stream or outside a capture.
func (s *stream) inCapture(what string) error {
	if !s.compute {
		return nil
	}
	return s.ln.inCapture(what)
}

func (s *stream) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *stream) Close() error {
	if s.compute {
		return fmt.Errorf("%s: the compute stream belongs to %s and closes with it", s.ln.owner.Name(), s.ln.label)
	}
	if !s.ln.forget(s) {
		return fmt.Errorf("cpu: the stream is already %w", device.ErrClosed)
	}
	s.shutdown()
	return nil
}

// shutdown lets the worker drain the queue, then stops it.
func (s *stream) shutdown() {
	s.mu.Lock()
	s.closing = true
	s.notEmpty.Broadcast()
	s.notFull.Broadcast()
	s.mu.Unlock()
	<-s.exited
}

// event is a point in a stream: the number of commands queued before it.
type event struct {
	s   *stream
	seq uint64
}

var _ device.Event = event{}

func (e event) Done() (bool, error) {
	return e.s.done.Load() >= e.seq, nil
}

func (e event) Wait() error {
	e.s.dev.counts.syncs.Add(1)
	e.s.wait(e.seq)
	return e.s.peek()
}

// copyCmd is a memory copy between host-addressable ranges.
type copyCmd struct {
	dst, src unsafe.Pointer
	n        int64
}

// spinFor is how long a goroutine that ran out of work polls for more
// before it parks. Waking a parked goroutine takes tens to hundreds of
// microseconds on a virtual machine (the idle core halts), longer than most
// kernels of a time step; polling briefly keeps the stream, the thread team
// and a waiting caller in step, and yields the core to any other runnable
// goroutine meanwhile.
const spinFor = 50 * time.Microsecond

// spin polls ready until it holds or spinFor passed, and reports which.
func spin(ready func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i&63 == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) > spinFor {
				return false
			}
		}
		runtime.Gosched()
	}
}
