package dist

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gocurrent/gocurrent/device"
)

// Comm is a communicator: the ranks of one data-parallel job, and the
// collectives they run together. Every rank must issue the same
// collectives, on buffers of the same sizes, in the same order; a rank
// that issues another one, or none, leaves the others waiting until the
// watchdog (Config.Timeout) stops them.
//
// Collectives are queued on a stream of the buffer's device, like
// kernels: they start after the work queued on the stream before them,
// the work queued after them waits for them, and the returned event
// completes when the result is in place. Implementations: Single (one
// rank, the default), dist/mpi (Open MPI, host memory: the CPU device),
// dist/nccl (NCCL: the CUDA device).
//
// A Comm is used by one goroutine at a time, except Abort and Err, which
// any goroutine may call at any time.
type Comm interface {
	// Rank is this process's rank, 0 to Size()-1. Rank 0 writes the
	// checkpoints and its weights are everyone's at the start.
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Backend names the implementation: "single", "mpi", "nccl".
	Backend() string

	// AllReduce sums b, a vector of b.Len()/dt.Size() elements of dt, over
	// the ranks, in place: every rank ends with the same sum, bit for bit.
	AllReduce(b device.Buffer, dt device.DType, s device.Stream) (device.Event, error)
	// Broadcast copies root's b into every rank's b (of the same length).
	Broadcast(b device.Buffer, root int, s device.Stream) (device.Event, error)

	// Err is the error that stopped the communicator: a collective that
	// failed, or ran past the deadline, on this rank; nil while it works.
	Err() error
	// Abort stops the communicator for reason: collectives in flight end
	// (with an error, or by the end of the job, as the backend can), and
	// every later call returns an error wrapping ErrAborted. The other
	// ranks' collectives fail too, or their own watchdogs stop them.
	Abort(reason error)
	// Close releases the communicator after its work completed. It is
	// not a collective, and does not wait for the other ranks. Later
	// collectives, and Err, return an error matching device.ErrClosed;
	// Abort then does nothing, and a second Close returns nil.
	Close() error
}

var (
	// ErrTimeout is wrapped by the error of a collective that did not
	// complete within Config.Timeout: another rank failed, hangs or left.
	ErrTimeout = errors.New("dist: collective timed out")
	// ErrAborted is wrapped by the error of every call on a communicator
	// after Abort.
	ErrAborted = errors.New("dist: communicator aborted")
	// ErrUnavailable is wrapped by the error of opening a backend whose
	// library this machine or build does not have (no libmpi, no NCCL,
	// no cgo). It is device.ErrUnavailable, so one check covers devices
	// and communicators.
	ErrUnavailable = device.ErrUnavailable
)

// TimeoutError is the error of a collective that ran past the deadline.
type TimeoutError struct {
	Rank, Size int
	Op         string        // "all-reduce of 4,096 bytes", ...
	After      time.Duration // how long it had run
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("dist: rank %d of %d: %s not done after %v: another rank failed, hangs or left the job", e.Rank, e.Size, e.Op, e.After.Round(time.Millisecond))
}

func (e *TimeoutError) Unwrap() error { return ErrTimeout }

// DefaultTimeout is Config.Timeout's default: PyTorch's for NCCL.
const DefaultTimeout = 10 * time.Minute

// Config configures the communicators of package dist's backends. The
// zero value works.
type Config struct {
	// Timeout is how long one collective may run before the watchdog
	// aborts the communicator (ErrTimeout); 0 means DefaultTimeout.
	Timeout time.Duration
	// MPILibrary is Open MPI's library; "" means libmpi.so.40 found by the
	// dynamic linker (the char-RNN example passes GOCURRENT_MPI).
	MPILibrary string
	// NCCLLibrary is NCCL's; "" means libnccl.so.2 found as cuBLAS is
	// (the char-RNN example passes GOCURRENT_NCCL).
	NCCLLibrary string
}

// Deadline is c.Timeout or its default.
func (c Config) Deadline() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// single is Single's communicator. err is under mu: Abort and Err may be
// called from any goroutine (the watchdog's).
type single struct {
	mu  sync.Mutex
	err error
}

// Single returns the communicator of a job of one rank: its collectives
// have nothing to exchange, and queue nothing. After Close they, and Err,
// return an error matching device.ErrClosed.
func Single() Comm { return &single{} }

func (c *single) Rank() int       { return 0 }
func (c *single) Size() int       { return 1 }
func (c *single) Backend() string { return "single" }
func (c *single) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
func (c *single) Abort(reason error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = fmt.Errorf("%w: %v", ErrAborted, reason)
	}
}
func (c *single) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = fmt.Errorf("dist: single: the communicator is %w", device.ErrClosed)
	}
	return nil
}

func (c *single) AllReduce(b device.Buffer, dt device.DType, s device.Stream) (device.Event, error) {
	if err := CheckVector(c, "AllReduce", b, dt); err != nil {
		return nil, err
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return s.Record()
}

func (c *single) Broadcast(b device.Buffer, root int, s device.Stream) (device.Event, error) {
	if err := CheckRoot(c, root); err != nil {
		return nil, err
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return s.Record()
}

// CheckVector is the argument check every backend's AllReduce makes: a
// float type, and a buffer holding whole elements.
func CheckVector(c Comm, op string, b device.Buffer, dt device.DType) error {
	if dt != device.Float32 && dt != device.Float64 {
		return fmt.Errorf("dist: %s %s: type %v; want float32 or float64", c.Backend(), op, dt)
	}
	if b.IsZero() || b.Len()%dt.Size() != 0 {
		return fmt.Errorf("dist: %s %s: a buffer of %d bytes does not hold whole %v elements: %w", c.Backend(), op, b.Len(), dt, device.ErrShape)
	}
	return nil
}

// CheckRoot is every backend's check of a broadcast's root.
func CheckRoot(c Comm, root int) error {
	if root < 0 || root >= c.Size() {
		return fmt.Errorf("dist: %s Broadcast: root %d of %d ranks", c.Backend(), root, c.Size())
	}
	return nil
}

// Stats are the collectives a communicator ran so far.
type Stats struct {
	// Collectives and Bytes count the all-reduces and broadcasts queued,
	// and the bytes they covered on this rank.
	Collectives, Bytes int64
	// Busy is the time they ran, where the backend can tell: MPI's, from
	// the call into the library to its return, waiting for the slowest
	// rank included (what a step pays for them, less what overlaps
	// compute on another stream); 0 for NCCL, whose collectives run on
	// the GPU.
	Busy time.Duration
}

// Counter is implemented by a communicator that counts its collectives
// (dist/mpi's and dist/nccl's).
type Counter interface {
	Stats() Stats
}
