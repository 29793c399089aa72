package cpu

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/driver"
)

// lane is where one job's work runs: the device's own (scope 0) or a
// scope's. It has its own compute stream, streams, errors (each stream's
// pending error) and allocation scope; its buffers, staging buffers,
// streams and events belong to owner, the Device or the Scope, and to no
// other lane. The Device and Scope embed it for the methods they share.
type lane struct {
	d      *Device
	owner  device.Device // the Device or Scope its buffers belong to
	label  string        // "the device" or "the scope", in messages
	scope  alloc.Scope   // its allocation scope, 0 for the device's own
	closed atomic.Bool

	compute *stream
	graphs  graphs // graph.go
	// kern is what Kernels hands out, a pointer to it: an interface
	// holding a pointer allocates nothing, where one holding the
	// two-word kernels value did, at every call.
	kern kernels

	mu      sync.Mutex             // guards streams and staging
	streams []*stream              // NewStream streams still open
	staging map[alloc.Ptr]struct{} // a scope's staging buffers still held
}

// allocStream is the allocator stream the lane allocates on: the cache
// hands a freed block only to later work of the same compute stream.
func (l *lane) allocStream() alloc.Stream { return alloc.Stream(l.scope) }

func (l *lane) checkOpen(what string) error {
	if l.d.closed.Load() {
		return fmt.Errorf("%s: %s: the device is %w", l.owner.Name(), what, device.ErrClosed)
	}
	if l.closed.Load() {
		return fmt.Errorf("%s: %s: %s is %w", l.owner.Name(), what, l.label, device.ErrClosed)
	}
	return nil
}

// Alloc returns a buffer from the caching allocator, 512-byte aligned,
// counted in category cat (and in the scope's figures, for a scope).
func (l *lane) Alloc(bytes int64, cat device.Category) (device.Buffer, error) {
	if err := l.checkOpen("Alloc"); err != nil {
		return device.Buffer{}, err
	}
	if bytes < 0 {
		return device.Buffer{}, fmt.Errorf("%s: Alloc of %d bytes: %w", l.owner.Name(), bytes, device.ErrShape)
	}
	p, err := l.d.mem.AllocIn(bytes, l.allocStream(), cat, l.scope)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("%s: %w", l.owner.Name(), err)
	}
	if bytes == 0 {
		return driver.NewBuffer(l.owner, 0, 0, nil), nil
	}
	l.allocated(p)
	mem, err := l.d.host.Bytes(p, bytes)
	if err != nil { // cannot happen: the block lies in a live segment
		_ = l.d.mem.Free(p)
		return device.Buffer{}, fmt.Errorf("%s: %w", l.owner.Name(), err)
	}
	return driver.NewBuffer(l.owner, p, bytes, unsafe.Pointer(unsafe.SliceData(mem))), nil
}

// Free returns b to the cache; later work on the compute stream may reuse
// it, earlier work still sees it.
func (l *lane) Free(b device.Buffer) error {
	if err := l.checkOpen("Free"); err != nil {
		return err
	}
	if err := driver.CheckOwner(l.owner, "Free", "the buffer", b.Device()); err != nil {
		return err
	}
	if b.Len() > 0 && l.graphs.mem.Keep(b.Addr()) {
		return nil // a live graph may write it (device.Grapher)
	}
	return driver.Free(l.owner, l.d.mem, b)
}

// Upload copies src into dst in stream order and waits for the copy.
func (l *lane) Upload(dst device.Buffer, src []byte) error {
	if err := l.checkOpen("Upload"); err != nil {
		return err
	}
	if err := driver.CheckUpload(l.owner, dst, src); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return l.copySync(copyCmd{dst: driver.HostPointer(dst), src: unsafe.Pointer(unsafe.SliceData(src)), n: int64(len(src))})
}

// Download copies src into dst in stream order, waits for the copy and
// reports a pending error of the compute stream.
func (l *lane) Download(dst []byte, src device.Buffer) error {
	if err := l.checkOpen("Download"); err != nil {
		return err
	}
	if err := driver.CheckDownload(l.owner, dst, src); err != nil {
		return err
	}
	if len(dst) == 0 {
		return l.compute.Synchronize()
	}
	if err := l.copySync(copyCmd{dst: unsafe.Pointer(unsafe.SliceData(dst)), src: driver.HostPointer(src), n: int64(len(dst))}); err != nil {
		return err
	}
	return l.compute.report()
}

func (l *lane) copySync(cc copyCmd) error {
	if err := l.inCapture("a copy that waits"); err != nil {
		return err
	}
	seq, err := l.compute.enqueue(func(c *cmd) { c.op, c.copy = opCopy, cc })
	if err != nil {
		return err
	}
	l.d.counts.copies.Add(1)
	l.d.counts.syncs.Add(1)
	l.compute.wait(seq)
	return nil
}

// Stream is the compute stream.
func (l *lane) Stream() device.Stream { return l.compute }

// NewStream starts another stream with a worker goroutine of its own.
func (l *lane) NewStream() (device.Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkOpen("NewStream"); err != nil {
		return nil, err
	}
	s := newStream(l, false)
	l.streams = append(l.streams, s)
	return s, nil
}

// forget removes s from the open streams; false if it was not there.
func (l *lane) forget(s *stream) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.streams, s)
	if i < 0 {
		return false
	}
	l.streams = slices.Delete(l.streams, i, i+1)
	return true
}

// all returns the compute stream and the open streams.
func (l *lane) all() []*stream {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*stream{l.compute}, l.streams...)
}

// stream resolves a device.Stream of this lane.
func (l *lane) stream(what string, s device.Stream) (*stream, error) {
	cs, ok := s.(*stream)
	if !ok || cs.ln != l {
		return nil, fmt.Errorf("%s: %s: stream %T is not from this %s: %w", l.owner.Name(), what, s, labelNoun(l.label), device.ErrForeignBuffer)
	}
	return cs, nil
}

// labelNoun is "device" for "the device".
func labelNoun(label string) string { return label[len("the "):] }

// Staging returns plain host memory from the device's staging cache.
func (l *lane) Staging(bytes int64) (device.HostBuffer, error) {
	if err := l.checkOpen("Staging"); err != nil {
		return device.HostBuffer{}, err
	}
	h, err := driver.AllocStaging(l.owner, l.d.staging, bytes)
	if err != nil || l.scope == 0 {
		return h, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.staging == nil { // the scope closed meanwhile
		return device.HostBuffer{}, errors.Join(l.checkOpen("Staging"), l.d.staging.Free(h.Addr()))
	}
	l.staging[h.Addr()] = struct{}{}
	return h, nil
}

// FreeStaging returns a staging buffer.
func (l *lane) FreeStaging(h device.HostBuffer) error {
	if err := l.checkOpen("FreeStaging"); err != nil {
		return err
	}
	if err := driver.FreeStaging(l.owner, l.d.staging, h); err != nil {
		return err
	}
	if l.scope != 0 {
		l.mu.Lock()
		delete(l.staging, h.Addr())
		l.mu.Unlock()
	}
	return nil
}

// CopyToDevice queues the copy of src into dst on s.
func (l *lane) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	if err := l.checkOpen("CopyToDevice"); err != nil {
		return nil, err
	}
	if err := driver.CheckCopyToDevice(l.owner, dst, src); err != nil {
		return nil, err
	}
	return l.copyAsync("CopyToDevice", s, copyCmd{dst: driver.HostPointer(dst), src: unsafe.Pointer(unsafe.SliceData(src.Bytes())), n: src.Len()})
}

// CopyToHost queues the copy of src into dst on s.
func (l *lane) CopyToHost(dst device.HostBuffer, src device.Buffer, s device.Stream) (device.Event, error) {
	if err := l.checkOpen("CopyToHost"); err != nil {
		return nil, err
	}
	if err := driver.CheckCopyToHost(l.owner, dst, src); err != nil {
		return nil, err
	}
	return l.copyAsync("CopyToHost", s, copyCmd{dst: unsafe.Pointer(unsafe.SliceData(dst.Bytes())), src: driver.HostPointer(src), n: dst.Len()})
}

// copyAsync queues cc on s; the caller checked the lane and buffers.
func (l *lane) copyAsync(what string, s device.Stream, cc copyCmd) (device.Event, error) {
	cs, err := l.stream(what, s)
	if err != nil {
		return nil, err
	}
	if err := cs.inCapture(what); err != nil {
		return nil, err
	}
	seq, err := cs.enqueue(func(c *cmd) {
		c.op = opCopy
		if cc.n > 0 {
			c.copy = cc
		} else {
			c.op = opNone
		}
	})
	if err != nil {
		return nil, err
	}
	if cc.n > 0 {
		l.d.counts.copies.Add(1)
	}
	return event{s: cs, seq: seq}, nil
}

// Synchronize waits for the lane's streams and returns the first pending
// error among them.
func (l *lane) Synchronize() error {
	if err := l.checkOpen("Synchronize"); err != nil {
		return err
	}
	if err := l.inCapture("Synchronize"); err != nil {
		return err
	}
	var first error
	for _, s := range l.all() {
		if err := s.Synchronize(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Kernels returns the kernels, which run on the compute stream.
func (l *lane) Kernels() device.Kernels { return &l.kern }

// shutdown marks the lane closed, drains and stops its streams, and
// returns their pending errors.
func (l *lane) shutdown() error {
	l.mu.Lock()
	l.closed.Store(true)
	all := append([]*stream{l.compute}, l.streams...)
	l.streams = nil
	l.mu.Unlock()
	var errs []error
	for _, s := range all {
		s.shutdown()
		if err := s.report(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// drain waits until the work queued so far on the lane's streams has run,
// and leaves its errors for the streams to report.
func (l *lane) drain() {
	for _, s := range l.all() {
		s.wait(s.queued.Load())
	}
}
