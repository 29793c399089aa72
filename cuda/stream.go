package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// stream is a CUDA stream of a lane (the device's or a scope's): its
// compute stream, or one from NewStream. Work is queued by driver calls
// that return at once; the driver keeps the order.
type stream struct {
	ln      *lane
	s       cuStream
	id      alloc.Stream
	compute bool

	mu     sync.Mutex
	closed bool
}

var _ device.Stream = (*stream)(nil)

// isClosed reports whether the stream, or the lane it belongs to, is
// closed.
func (s *stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.ln.isClosed()
}

// inCapture is the error of what, on the compute stream while it is
// being captured; nil on another stream or outside a capture.
func (s *stream) inCapture(what string) error {
	if !s.compute {
		return nil
	}
	return s.ln.inCapture(what)
}

func (s *stream) markClosed() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

func (s *stream) closedErr(what string) error {
	l := s.ln
	if l.d.closed.Load() {
		return fmt.Errorf("%s: %s on a stream of a device that is %w", l.name, what, device.ErrClosed)
	}
	if l.closed.Load() {
		return fmt.Errorf("%s: %s on a stream of %s, which is %w", l.name, what, l.label, device.ErrClosed)
	}
	return fmt.Errorf("%s: %s: the stream is %w", l.name, what, device.ErrClosed)
}

// Record queues an event on the stream. On error the event is a nil
// interface, not a nil *event: a caller that keeps what it got and
// checks it against nil later must not Wait on a nil pointer.
func (s *stream) Record() (device.Event, error) {
	if s.isClosed() {
		return nil, s.closedErr("Record")
	}
	if err := s.inCapture("Stream.Record"); err != nil {
		return nil, err
	}
	e, err := s.record()
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (s *stream) record() (*event, error) {
	d := s.ln.d
	e, err := d.events.get(d.api, d.ctx)
	if err != nil {
		return nil, err
	}
	if err := d.api.EventRecord(d.ctx, e, s.s); err != nil {
		d.events.put(e)
		return nil, err
	}
	ev := &event{s: s, e: e}
	// An event the caller drops goes back to the pool; the allocator's
	// events go back through Release instead, and sooner.
	ev.cleanup = runtime.AddCleanup(ev, func(e cuEvent) { d.recycle(e) }, e)
	return ev, nil
}

// recycle returns an event a caller dropped to the pool, unless the
// device was closed (its context, and the event with it, may be gone).
func (d *Device) recycle(e cuEvent) {
	if !d.closed.Load() {
		d.events.put(e)
	}
}

// Wait makes work queued on s after the call wait for e, an event of the
// same device or scope.
func (s *stream) Wait(e device.Event) error {
	ev, ok := e.(*event)
	if !ok || ev.s.ln != s.ln {
		return fmt.Errorf("%s: Stream.Wait: event %T is not from this %s: %w", s.ln.name, e, strings.TrimPrefix(s.ln.label, "the "), device.ErrForeignBuffer)
	}
	if s.isClosed() {
		return s.closedErr("Wait")
	}
	if err := s.inCapture("Stream.Wait"); err != nil {
		return err
	}
	if ev.s == s {
		return nil // a stream's own work is already in order
	}
	d := s.ln.d
	err := d.api.StreamWaitEvent(d.ctx, s.s, ev.e)
	runtime.KeepAlive(ev) // the handle must not be recycled before the wait is queued
	return err
}

// Synchronize waits for the stream's work; on the compute stream it also
// reports, once, the index errors its kernels raised.
func (s *stream) Synchronize() error {
	if s.isClosed() {
		return s.closedErr("Synchronize")
	}
	if err := s.inCapture("Stream.Synchronize"); err != nil {
		return err
	}
	s.ln.d.counts.syncs.Add(1)
	if s.compute {
		return s.ln.readStatus(s.s, true)
	}
	return s.ln.d.api.StreamSynchronize(s.ln.d.ctx, s.s)
}

// Close waits for the stream's work and destroys it.
func (s *stream) Close() error {
	l := s.ln
	if s.compute {
		return fmt.Errorf("%s: the compute stream belongs to %s and closes with it", l.name, l.label)
	}
	d := l.d
	d.mu.Lock()
	if l.streams[s.id] != s {
		d.mu.Unlock()
		return s.closedErr("Close")
	}
	delete(l.streams, s.id)
	delete(d.streams, s.id)
	d.mu.Unlock()
	s.markClosed()
	return errors.Join(d.api.StreamSynchronize(d.ctx, s.s), d.api.StreamDestroy(d.ctx, s.s))
}

// event is a CUDA event recorded on a stream. It satisfies device.Event
// and alloc.Event.
type event struct {
	s       *stream
	e       cuEvent
	cleanup runtime.Cleanup
}

var (
	_ device.Event = (*event)(nil)
	_ alloc.Event  = (*event)(nil)
)

// Done reports whether the work before the event completed.
func (e *event) Done() (bool, error) {
	l := e.s.ln
	d := l.d
	if l.isClosed() {
		if d.settled.Load() {
			return true, nil
		}
		return false, e.s.closedErr("Event.Done")
	}
	done, err := d.api.EventQuery(d.ctx, e.e)
	runtime.KeepAlive(e)
	return done, err
}

// Wait blocks until the work before the event completed. An event of the
// compute stream also returns the index errors raised so far, without
// clearing them: the stream's next Synchronize reports them.
func (e *event) Wait() error {
	l := e.s.ln
	d := l.d
	if l.isClosed() {
		if d.settled.Load() {
			return nil
		}
		return e.s.closedErr("Event.Wait")
	}
	d.counts.syncs.Add(1)
	err := d.api.EventSynchronize(d.ctx, e.e)
	runtime.KeepAlive(e)
	if err != nil {
		return err
	}
	if e.s.compute {
		return l.readStatus(l.statusStream, false)
	}
	return nil
}

// Release returns the event to the device's pool; the caching allocators
// call it once the event completed and they no longer need it.
func (e *event) Release() {
	e.cleanup.Stop()
	e.s.ln.d.recycle(e.e)
}

// eventPool keeps created events for reuse: creating one is a driver
// call, and the loader and the allocators record one per batch or free.
type eventPool struct {
	mu   sync.Mutex
	free []cuEvent
	all  []cuEvent // every event made, destroyed by drain
}

func (p *eventPool) get(a api, c cuContext) (cuEvent, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()
	e, err := a.EventCreate(c, false)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.all = append(p.all, e)
	p.mu.Unlock()
	return e, nil
}

func (p *eventPool) put(e cuEvent) {
	p.mu.Lock()
	p.free = append(p.free, e)
	p.mu.Unlock()
}

// drain destroys every event the pool made, in use or not.
func (p *eventPool) drain(a api, c cuContext) error {
	p.mu.Lock()
	all := p.all
	p.all, p.free = nil, nil
	p.mu.Unlock()
	var errs []error
	for _, e := range all {
		if err := a.EventDestroy(c, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
