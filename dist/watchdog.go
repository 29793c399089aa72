package dist

import (
	"sync"
	"time"
)

// Watchdog stops a communicator whose collective runs past a deadline.
// NCCL and MPI never time out a collective by themselves: a rank that
// died or hangs leaves the others waiting for ever. A backend tells the
// watchdog when each collective starts, and how to tell it completed; a
// goroutine polls the ones in flight, and calls abort with a
// *TimeoutError (or the error the poll returned) for the first one that
// runs past the deadline or fails.
type Watchdog struct {
	rank, size int
	timeout    time.Duration
	abort      func(error)

	mu      sync.Mutex
	flights map[uint64]*flight
	next    uint64
	stopped bool
	wake    chan struct{}
	exited  chan struct{}
}

type flight struct {
	op    string
	start time.Time
	done  func() (bool, error)
}

// NewWatchdog starts a watchdog for rank of size that calls abort once,
// from its own goroutine. Stop ends it.
func NewWatchdog(rank, size int, timeout time.Duration, abort func(error)) *Watchdog {
	w := &Watchdog{rank: rank, size: size, timeout: timeout, abort: abort, flights: map[uint64]*flight{},
		wake: make(chan struct{}, 1), exited: make(chan struct{})}
	go w.run()
	return w
}

// Watch starts the clock of collective op; done reports whether it
// completed (an error: it failed). The watchdog forgets it once done
// says so, or when the returned function is called.
func (w *Watchdog) Watch(op string, done func() (bool, error)) (forget func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	id := w.next
	w.flights[id] = &flight{op: op, start: time.Now(), done: done}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return func() {
		w.mu.Lock()
		delete(w.flights, id)
		w.mu.Unlock()
	}
}

// Stop ends the watchdog's goroutine.
func (w *Watchdog) Stop() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		<-w.exited
		return
	}
	w.stopped = true
	w.mu.Unlock()
	close(w.wake)
	<-w.exited
}

// poll is how often the flights are checked: often against a short
// deadline (tests), at most every 100ms.
func (w *Watchdog) poll() time.Duration {
	return min(max(w.timeout/50, time.Millisecond), 100*time.Millisecond)
}

func (w *Watchdog) run() {
	defer close(w.exited)
	tick := time.NewTicker(w.poll())
	defer tick.Stop()
	for {
		w.mu.Lock()
		idle := len(w.flights) == 0
		w.mu.Unlock()
		if idle {
			if _, ok := <-w.wake; !ok {
				return
			}
			continue
		}
		select {
		case _, ok := <-w.wake:
			if !ok {
				return
			}
		case <-tick.C:
		}
		if err := w.check(); err != nil {
			w.abort(err)
			w.mu.Lock()
			w.flights = map[uint64]*flight{}
			w.mu.Unlock()
		}
	}
}

// check polls the flights; the error of the first that failed or is late.
func (w *Watchdog) check() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for id, f := range w.flights {
		done, err := f.done()
		if err != nil {
			return err
		}
		if done {
			delete(w.flights, id)
			continue
		}
		if after := now.Sub(f.start); after > w.timeout {
			return &TimeoutError{Rank: w.rank, Size: w.size, Op: f.op, After: after}
		}
	}
	return nil
}
