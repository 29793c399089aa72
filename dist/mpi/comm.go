package mpi

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
)

// comm is New's communicator: MPI_COMM_WORLD, over a device whose
// buffers are host memory.
type comm struct {
	world *World
	host  device.HostCaller
	watch *dist.Watchdog

	mu     sync.Mutex
	err    error // Err: the failure, or the abort
	closed bool
	stats  dist.Stats // under mu
}

var _ dist.Counter = (*comm)(nil)

// Stats counts the collectives queued and the time they ran in MPI.
func (c *comm) Stats() dist.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

var _ dist.Comm = (*comm)(nil)

// New returns a communicator of w's ranks whose collectives run on the
// streams of d, a device that runs host functions in stream order
// (device.HostCaller: the CPU device and its scopes). A collective is a
// host function queued on the stream it is given, which hands the
// buffer's memory to MPI on the World's goroutine, so it runs after the
// stream's earlier work and blocks the stream's later work, and not the
// caller, until every rank took part.
//
// Each collective is watched from the moment it starts running until it
// returns: one that runs past cfg.Deadline() aborts the communicator with
// a *dist.TimeoutError, which ends the whole job (World.Abort), so every
// rank stops instead of waiting for ever. Close the communicator before
// the World.
func New(d device.Device, w *World, cfg dist.Config) (dist.Comm, error) {
	if w == nil {
		return nil, errors.New("mpi: New: nil World (call Join first)")
	}
	host, ok := d.(device.HostCaller)
	if !ok {
		return nil, fmt.Errorf("mpi: New: device %s does not run host functions on its streams (device.HostCaller): MPI works on host memory, so use the CPU device, or NCCL (dist/nccl) between GPUs", d.Name())
	}
	select {
	case <-w.exited:
		return nil, errFinalized
	default:
	}
	c := &comm{world: w, host: host}
	c.watch = dist.NewWatchdog(w.Rank(), w.Size(), cfg.Deadline(), c.Abort)
	return c, nil
}

func (c *comm) Rank() int       { return c.world.Rank() }
func (c *comm) Size() int       { return c.world.Size() }
func (c *comm) Backend() string { return "mpi" }

func (c *comm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Abort records reason as Err and ends the job (World.Abort): MPI has no
// way to stop a collective in flight but to end every rank. After Close
// it does nothing: the communicator has no collective left to stop, and
// the World is its own.
func (c *comm) Abort(reason error) {
	if reason == nil {
		reason = errors.New("no reason given")
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.err == nil {
		c.err = fmt.Errorf("%w: %w", dist.ErrAborted, reason)
	}
	c.mu.Unlock()
	c.world.Abort(reason)
}

// Close stops the watchdog. It leaves the World to its own Close.
func (c *comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	if c.err == nil {
		// Err reports it as nccl's does: what stopped the communicator.
		c.err = fmt.Errorf("dist: mpi: the communicator is %w", device.ErrClosed)
	}
	c.mu.Unlock()
	c.watch.Stop()
	return nil
}

// usable is the error of a call on a closed or failed communicator.
func (c *comm) usable(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("dist: mpi %s: %w", op, device.ErrClosed)
	}
	return c.err
}

func (c *comm) AllReduce(b device.Buffer, dt device.DType, s device.Stream) (device.Event, error) {
	if err := dist.CheckVector(c, "AllReduce", b, dt); err != nil {
		return nil, err
	}
	t, size := mpiFloat, 4
	if dt == device.Float64 {
		t, size = mpiDouble, 8
	}
	op := fmt.Sprintf("all-reduce of %d bytes of %v", b.Len(), dt)
	return c.queue("AllReduce", op, b, s, func(mem []byte) error { return c.world.allReduce(mem, t, size) })
}

func (c *comm) Broadcast(b device.Buffer, root int, s device.Stream) (device.Event, error) {
	if err := dist.CheckRoot(c, root); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("broadcast of %d bytes from rank %d", b.Len(), root)
	return c.queue("Broadcast", op, b, s, func(mem []byte) error { return c.world.bcast(mem, mpiByte, 1, root) })
}

// queue queues collective op on s: run, on the MPI goroutine, with b's
// memory, watched while it runs. A failure is recorded as Err and raised
// on s.
func (c *comm) queue(name, op string, b device.Buffer, s device.Stream, run func(mem []byte) error) (device.Event, error) {
	if err := c.usable(name); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.stats.Collectives++
	c.stats.Bytes += b.Len()
	c.mu.Unlock()
	err := c.host.CallHost(s, func(mem [][]byte) error {
		if err := c.usable(name); err != nil {
			return err
		}
		forget := c.watch.Watch(op, inFlight)
		defer forget()
		start := time.Now()
		err := c.world.do(func() error { return run(mem[0]) })
		c.mu.Lock()
		c.stats.Busy += time.Since(start)
		c.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("dist: mpi: rank %d of %d: %s: %w", c.Rank(), c.Size(), op, err)
			c.mu.Lock()
			if c.err == nil {
				c.err = err
			}
			c.mu.Unlock()
		}
		return err
	}, b)
	if err != nil {
		return nil, err
	}
	return s.Record()
}

// inFlight is the watchdog's poll of a collective: running until the
// host function returns and forgets it.
func inFlight() (bool, error) { return false, nil }
