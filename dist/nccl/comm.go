package nccl

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
)

// UniqueID is an ncclUniqueId: the 128 bytes that name a communicator.
// Every rank must open its Comm with the same one: rank 0 makes it with
// NewUniqueID and ships it to the others over a channel of the job's own
// (MPI's broadcast, a key/value store); or, with IDFromAddress, every rank
// computes the same one from the rendezvous address.
type UniqueID [128]byte

// NewUniqueID makes a new id; call it on rank 0 only, and ship the 128
// bytes to the other ranks before they Open. NCCL starts a listener
// thread in the calling process, on a socket whose address the id holds,
// for the other ranks' ncclCommInitRank to connect to.
func NewUniqueID(cfg dist.Config) (UniqueID, error) {
	l, err := load(cfg)
	if err != nil {
		return UniqueID{}, err
	}
	return l.uniqueID()
}

// commIDVar is the variable NCCL reads in ncclGetUniqueId: when it is
// set, the id is derived from the address alone.
const commIDVar = "NCCL_COMM_ID"

// IDFromAddress makes the id every rank computes alike from addr, a
// "host:port" that rank 0's host can listen on (under torchrun,
// $MASTER_ADDR and a port of its own, not MASTER_PORT, which torchrun's
// store holds): it sets NCCL_COMM_ID=addr for the process (an error if
// the variable already holds another address) and calls ncclGetUniqueId,
// which then returns bytes that depend on addr only; rank 0's Open starts
// the listener at addr. No bytes need shipping, but every rank's host
// needs an interface in the same subnet as addr (NCCL looks for one,
// "No usable listening interface found" otherwise; NVIDIA/nccl issue
// #730): true within a node or a flat cluster network, often false
// between Kubernetes pods on different nodes, where NewUniqueID and a
// broadcast of the id are the safe way.
func IDFromAddress(addr string, cfg dist.Config) (UniqueID, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return UniqueID{}, fmt.Errorf("dist/nccl: IDFromAddress: %w", err)
	}
	if p, err := strconv.Atoi(port); host == "" || err != nil || p <= 0 || p > 65535 {
		return UniqueID{}, fmt.Errorf("dist/nccl: IDFromAddress: %q is not host:port", addr)
	}
	l, err := load(cfg)
	if err != nil {
		return UniqueID{}, err
	}
	switch cur := os.Getenv(commIDVar); cur {
	case addr:
	case "":
		if err := os.Setenv(commIDVar, addr); err != nil {
			return UniqueID{}, fmt.Errorf("dist/nccl: IDFromAddress: %w", err)
		}
	default:
		return UniqueID{}, fmt.Errorf("dist/nccl: IDFromAddress(%q): %s is set to %q already", addr, commIDVar, cur)
	}
	return l.uniqueID()
}

// Version is the version of the NCCL that cfg names or the search finds,
// as ncclGetVersion gives it (22703 for 2.27.3), and the name it was
// loaded under.
func Version(cfg dist.Config) (version int, library string, err error) {
	l, err := load(cfg)
	if err != nil {
		return 0, "", err
	}
	v, err := l.version()
	return v, l.path(), err
}

// Native is what a device must offer for NCCL to work on its streams
// (cuda.Device and cuda.Scope do): run fn on an OS thread where its CUDA
// context is current, with s's CUstream handle (nil s: 0).
type Native interface {
	device.Device
	Native(s device.Stream, fn func(stream uintptr) error) error
}

// Comm is a communicator of NCCL on a CUDA device: dist.Comm with
// NCCL's all-reduce and broadcast, queued on the device's streams.
type Comm struct {
	lib        library
	dev        Native
	rank, size int
	handle     commHandle
	version    int
	wd         *dist.Watchdog

	mu       sync.Mutex // guards err and released, and the handle's use by the watchdog
	err      error
	released bool       // ncclCommAbort or ncclCommDestroy was called
	stats    dist.Stats // under mu
}

var _ dist.Comm = (*Comm)(nil)

// Open joins rank of a communicator of size ranks named id, on d, a CUDA
// device or scope (the GPU this rank uses: one per rank, for NCCL does
// not support two ranks on one GPU). Every rank must call it with the
// same id and size, and it blocks until they all have: NCCL has no
// timeout for that, nor a way to abort it. The collectives are watched
// against cfg.Deadline(). A missing NCCL, or a build without cgo, is an
// error wrapping dist.ErrUnavailable.
func Open(d device.Device, rank, size int, id UniqueID, cfg dist.Config) (*Comm, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("dist/nccl: Open: rank %d of %d ranks", rank, size)
	}
	nd, ok := d.(Native)
	if !ok {
		return nil, fmt.Errorf("dist/nccl: Open: device %s (%T) is not a CUDA device", d.Name(), d)
	}
	l, err := load(cfg)
	if err != nil {
		return nil, err
	}
	v, err := l.version()
	if err != nil {
		return nil, err
	}
	c := &Comm{lib: l, dev: nd, rank: rank, size: size, version: v}
	err = nd.Native(nil, func(uintptr) error {
		var err error
		c.handle, err = l.initRank(size, rank, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dist/nccl: rank %d of %d: %w", rank, size, err)
	}
	c.wd = dist.NewWatchdog(rank, size, cfg.Deadline(), c.Abort)
	return c, nil
}

// Rank is this process's rank.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Backend is "nccl".
func (c *Comm) Backend() string { return "nccl" }

// Version is NCCL's version, as ncclGetVersion gives it.
func (c *Comm) Version() int { return c.version }

// Library is the name NCCL was loaded under.
func (c *Comm) Library() string { return c.lib.path() }

// Err is the error that stopped the communicator, nil while it works.
func (c *Comm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AllReduce sums b, float32 or float64 elements, over the ranks in place
// (ncclAllReduce with ncclSum, sendbuff == recvbuff) on s, a stream of
// the communicator's device; the event is recorded on s after it. A
// collective that NCCL refuses stops the communicator (Err), as does the
// watchdog when the event is not complete within the deadline or NCCL
// reports an asynchronous error. An event that completes says the work
// ended, not that it succeeded: check Err after waiting for it.
func (c *Comm) AllReduce(b device.Buffer, dt device.DType, s device.Stream) (device.Event, error) {
	if err := dist.CheckVector(c, "AllReduce", b, dt); err != nil {
		return nil, err
	}
	nt := ncclFloat32
	if dt == device.Float64 {
		nt = ncclFloat64
	}
	n := b.Len() / dt.Size()
	return c.collective("AllReduce", fmt.Sprintf("all-reduce of %d bytes", b.Len()), b, s, func(stream uintptr) error {
		return c.lib.allReduce(uintptr(b.Addr()), n, nt, c.handle, stream)
	})
}

// Broadcast copies root's b into every rank's b, as bytes
// (ncclBroadcast of ncclUint8, in place), on s; see AllReduce.
func (c *Comm) Broadcast(b device.Buffer, root int, s device.Stream) (device.Event, error) {
	if err := dist.CheckRoot(c, root); err != nil {
		return nil, err
	}
	if b.IsZero() {
		return nil, fmt.Errorf("dist: nccl Broadcast: a zero buffer: %w", device.ErrShape)
	}
	return c.collective("Broadcast", fmt.Sprintf("broadcast of %d bytes from rank %d", b.Len(), root), b, s, func(stream uintptr) error {
		return c.lib.broadcast(uintptr(b.Addr()), b.Len(), root, c.handle, stream)
	})
}

// collective queues call on s under the watchdog and records its event.
func (c *Comm) collective(what, op string, b device.Buffer, s device.Stream, call func(stream uintptr) error) (device.Event, error) {
	if b.Device() != device.Device(c.dev) {
		return nil, fmt.Errorf("dist: nccl %s: the buffer is %s's, the communicator's device is %s: %w", what, b.Device().Name(), c.dev.Name(), device.ErrForeignBuffer)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	// Watched from before the call, which may block (NCCL connects the
	// ranks at their first collective), until the event completes.
	var ev atomic.Pointer[device.Event]
	forget := c.wd.Watch(op, func() (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.released {
			return true, nil // stopped: nothing left to watch
		}
		if e := ev.Load(); e != nil {
			if done, err := (*e).Done(); done || err != nil {
				return done, err
			}
		}
		return false, c.lib.asyncError(c.handle)
	})
	called := false // the stream was ours and NCCL was called: a failure from here on stops the communicator
	err := c.dev.Native(s, func(stream uintptr) error {
		called = true
		return call(stream)
	})
	var e device.Event
	if err == nil {
		e, err = s.Record()
	}
	if err != nil {
		forget()
		err = fmt.Errorf("dist: nccl rank %d of %d: %s: %w", c.rank, c.size, op, err)
		if !called {
			return nil, err // a stream of another device, a closed one
		}
		c.Abort(err)
		return nil, c.Err()
	}
	ev.Store(&e)
	c.mu.Lock()
	c.stats.Collectives++
	c.stats.Bytes += b.Len()
	c.mu.Unlock()
	return e, nil
}

var _ dist.Counter = (*Comm)(nil)

// Stats counts the collectives queued; their time runs on the GPU, and
// Busy stays 0.
func (c *Comm) Stats() dist.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Abort stops the communicator: ncclCommAbort, which ends this rank's
// collectives in flight; every later call returns an error wrapping
// dist.ErrAborted and reason (a *dist.TimeoutError from the watchdog). The
// other ranks are not told: their collectives with this one fail, or
// their watchdogs stop them. Safe to call from any goroutine, at any
// time, more than once (the first reason stays).
func (c *Comm) Abort(reason error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = fmt.Errorf("dist: nccl rank %d of %d: %w: %w", c.rank, c.size, dist.ErrAborted, reason)
	release := !c.released
	c.released = true
	c.mu.Unlock()
	if release {
		_ = c.native(func() error { return c.lib.abort(c.handle) }) // nothing to do about a failed abort
	}
}

// native runs fn where the device's context is current; once the device
// closed, where it runs (NCCL makes its own device current for abort and
// destroy).
func (c *Comm) native(fn func() error) error {
	err := c.dev.Native(nil, func(uintptr) error { return fn() })
	if errors.Is(err, device.ErrClosed) {
		return fn()
	}
	return err
}

// Close releases the communicator after its work completed: ncclCommDestroy
// when it works, nothing more after Abort (which released it). Later
// calls return an error wrapping device.ErrClosed. Close stops the
// watchdog; close the communicator before its device.
func (c *Comm) Close() error {
	c.wd.Stop()
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		return nil
	}
	c.released = true
	c.err = fmt.Errorf("dist: nccl rank %d of %d: the communicator is %w", c.rank, c.size, device.ErrClosed)
	c.mu.Unlock()
	if err := c.native(func() error { return c.lib.destroy(c.handle) }); err != nil {
		return fmt.Errorf("dist: nccl rank %d of %d: Close: %w", c.rank, c.size, err)
	}
	return nil
}
