package mpi

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gocurrent/gocurrent/dist"
)

// Error is the error of an MPI call that returned an error code.
type Error struct {
	Op      string // the MPI function: "MPI_Allreduce", ...
	Code    int    // MPI's error code
	Message string // MPI_Error_string's text for Code
}

func (e *Error) Error() string {
	return fmt.Sprintf("mpi: %s: %s (MPI error %d)", e.Op, e.Message, e.Code)
}

// process holds the process's one World: MPI is initialised once per
// process, and never again after MPI_Finalize.
var process struct {
	mu        sync.Mutex
	world     *World
	finalized bool
}

// errFinalized is Join's error after the World was closed.
var errFinalized = errors.New("mpi: MPI was finalized in this process, and cannot be initialised again")

// World is the job's ranks, MPI_COMM_WORLD: MPI initialised once per
// process, with the goroutine that makes every MPI call. A World is safe
// for concurrent use; its calls run one at a time, in the order they
// reach its goroutine.
type World struct {
	api     api
	library string
	rank    int
	size    int
	// maxCount is the most elements one MPI call moves (its count is a C
	// int); longer vectors take several calls. Tests lower it.
	maxCount int

	calls  chan call
	exited chan struct{} // closed when the MPI goroutine ended
	refs   int           // Joins not yet Closed; guarded by process.mu
}

// call is a function to run on the MPI goroutine, and where its error goes.
type call struct {
	fn   func() error
	done chan error
}

// Join initialises MPI, once per process, and returns the job's World: it
// opens cfg.MPILibrary (DefaultLibrary when empty) and calls
// MPI_Init_thread from a goroutine of its own, locked to its OS thread,
// which then makes every MPI call of the process. A later Join returns the
// same World, counting one more user; each Join is matched by a Close.
// Under mpirun the World is the job's ranks; outside it the process is a
// job of one rank (an MPI singleton).
//
// A library that cannot be loaded, or lacks a symbol, is an error
// wrapping dist.ErrUnavailable. Joining after the last Close is an error:
// MPI cannot be initialised twice in a process.
func Join(cfg dist.Config) (*World, error) {
	path := cfg.MPILibrary
	if path == "" {
		path = DefaultLibrary
	}
	process.mu.Lock()
	defer process.mu.Unlock()
	if w := process.world; w != nil {
		if w.library != path {
			return nil, fmt.Errorf("mpi: MPI is initialised in this process from %s, and cannot be joined from %s too", w.library, path)
		}
		w.refs++
		return w, nil
	}
	if process.finalized {
		return nil, errFinalized
	}
	a, err := loadAPI(path)
	if err != nil {
		return nil, err
	}
	w := &World{api: a, library: path, maxCount: math.MaxInt32, calls: make(chan call), exited: make(chan struct{})}
	started := make(chan error, 1)
	go w.serve(started)
	if err := <-started; err != nil {
		<-w.exited
		return nil, err
	}
	w.refs = 1
	process.world = w
	return w, nil
}

// serve is the MPI goroutine: it initialises MPI on its locked OS thread,
// then runs the calls sent to it until one finalizes MPI. It never
// unlocks the thread, which ends with it.
func (w *World) serve(started chan<- error) {
	runtime.LockOSThread()
	defer close(w.exited)
	if err := w.init(); err != nil {
		started <- err
		return
	}
	started <- nil
	for c := range w.calls {
		err := c.fn()
		c.done <- err
		if errors.Is(err, errFinalized) {
			return
		}
	}
}

// init runs on the MPI goroutine.
func (w *World) init() error {
	if done, code := w.api.Finalized(); code != 0 {
		return w.error("MPI_Finalized", code)
	} else if done {
		return errFinalized
	}
	if done, code := w.api.Initialized(); code != 0 {
		return w.error("MPI_Initialized", code)
	} else if done {
		return errors.New("mpi: MPI was initialised in this process by other code than package mpi")
	}
	provided, code := w.api.InitThread(threadMultiple)
	if code != 0 {
		return w.error("MPI_Init_thread", code)
	}
	if provided < threadFunneled {
		// A rank must still finalize, or mpirun reports it as failed.
		w.api.Finalize()
		return fmt.Errorf("mpi: %s grants thread level %d (MPI_THREAD_SINGLE); package mpi needs MPI_THREAD_FUNNELED (1) or more", w.library, provided)
	}
	var err error
	if w.rank, code = w.api.Rank(); code != 0 {
		err = w.error("MPI_Comm_rank", code)
	} else if w.size, code = w.api.Size(); code != 0 {
		err = w.error("MPI_Comm_size", code)
	}
	if err != nil {
		w.api.Finalize()
	}
	return err
}

// error turns MPI's error code into an *Error.
func (w *World) error(op string, code int) error {
	msg := w.api.ErrorString(code)
	if msg == "" {
		msg = "unknown error"
	}
	return &Error{Op: op, Code: code, Message: msg}
}

// do runs fn on the MPI goroutine and returns its error.
func (w *World) do(fn func() error) error {
	c := call{fn: fn, done: make(chan error, 1)}
	select {
	case w.calls <- c:
	case <-w.exited:
		return errFinalized
	}
	return <-c.done
}

// Rank is this process's rank in the job, 0 to Size()-1.
func (w *World) Rank() int { return w.rank }

// Size is the number of ranks in the job.
func (w *World) Size() int { return w.size }

// Broadcast copies root's b into every rank's b, which must be as long on
// every rank (MPI_Bcast of MPI_BYTE). It is a collective: every rank
// calls it, with the same root. It blocks until this rank's part is done.
func (w *World) Broadcast(b []byte, root int) error {
	if root < 0 || root >= w.size {
		return fmt.Errorf("mpi: Broadcast: root %d of %d ranks", root, w.size)
	}
	return w.do(func() error { return w.bcast(b, mpiByte, 1, root) })
}

// Barrier returns when every rank called it (MPI_Barrier).
func (w *World) Barrier() error {
	return w.do(func() error {
		if code := w.api.Barrier(); code != 0 {
			return w.error("MPI_Barrier", code)
		}
		return nil
	})
}

// Abort ends the job: it writes "gocurrent: rank R aborts the job:
// reason" to standard error, then calls MPI_Abort(MPI_COMM_WORLD, 1), on
// which Open MPI's mpirun ends every rank. It is the one call any
// goroutine may make while the MPI goroutine is blocked in a collective,
// which is how a watchdog stops a job that hangs. It does not return
// while MPI ends the process.
func (w *World) Abort(reason error) {
	if reason == nil {
		reason = errors.New("no reason given")
	}
	fmt.Fprintf(os.Stderr, "gocurrent: rank %d aborts the job: %v\n", w.rank, reason)
	w.api.Abort(1)
}

// Close ends this user's share of the World. The last Close finalizes MPI
// (MPI_Finalize, a collective in effect: Open MPI waits there for the
// other ranks); after it, MPI cannot be initialised again in the process,
// and Join returns an error. Communicators made on the World must be
// closed first. Under mpirun a rank that exits without the last Close is
// reported as failed.
func (w *World) Close() error {
	process.mu.Lock()
	defer process.mu.Unlock()
	if process.world != w {
		return errFinalized
	}
	if w.refs--; w.refs > 0 {
		return nil
	}
	process.world = nil
	process.finalized = true
	var err error
	_ = w.do(func() error {
		if code := w.api.Finalize(); code != 0 {
			err = w.error("MPI_Finalize", code)
		}
		return errFinalized
	})
	<-w.exited
	return err
}

// allReduce sums mem, a vector of elements of size bytes of type t, over
// the ranks in place; on the MPI goroutine.
func (w *World) allReduce(mem []byte, t dtype, size int) error {
	n := len(mem) / size
	for off := 0; off < n; off += w.maxCount {
		count := min(n-off, w.maxCount)
		if code := w.api.AllReduceSum(unsafe.Pointer(&mem[off*size]), count, t); code != 0 {
			return w.error("MPI_Allreduce", code)
		}
	}
	return nil
}

// bcast broadcasts mem, of elements of size bytes of type t, from root; on
// the MPI goroutine.
func (w *World) bcast(mem []byte, t dtype, size, root int) error {
	n := len(mem) / size
	for off := 0; off < n; off += w.maxCount {
		count := min(n-off, w.maxCount)
		if code := w.api.Bcast(unsafe.Pointer(&mem[off*size]), count, t, root); code != 0 {
			return w.error("MPI_Bcast", code)
		}
	}
	return nil
}
