package device

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device/internal/seam"
)

// init hands the constructors and accessors of Buffer and HostBuffer, and
// the ownership check, to package device/driver, through the internal
// package seam: implementations reach them there, and this package, the
// consumers' API, exports no constructor.
func init() {
	seam.Register(seam.Funcs[Device, Buffer, HostBuffer]{
		NewBuffer: func(dev Device, addr alloc.Ptr, size int64, host unsafe.Pointer) Buffer {
			return Buffer{dev: dev, addr: addr, size: size, host: host}
		},
		NewHostBuffer: func(dev Device, addr alloc.Ptr, mem []byte) HostBuffer {
			return HostBuffer{dev: dev, addr: addr, mem: mem}
		},
		HostPointer: func(b Buffer) unsafe.Pointer { return b.host },
		CheckOwner:  checkOwner,
	})
}

// Device owns memory and runs kernels in stream order. Implementations: the
// CPU device (package device/cpu) and the CUDA device (package cuda). Every
// implementation passes the conformance suite in device/devicetest.
//
// A Device is safe for concurrent use by several goroutines; work queued on
// one stream from several goroutines runs in the order the calls returned.
type Device interface {
	// Name is the device's name in messages and flags: "cpu", "cuda:0".
	Name() string

	// Alloc returns a buffer of at least bytes bytes from the device's
	// caching allocator (alloc.Caching), counted in category cat (what it
	// holds: Parameters, Activations, ...; MemStats reports the bytes per
	// category). Its contents are undefined. When the device has no room
	// the error matches alloc.ErrOutOfMemory and is an
	// *alloc.OutOfMemoryError carrying the figures.
	Alloc(bytes int64, cat Category) (Buffer, error)
	// Free returns a buffer obtained from Alloc to the cache. Work already
	// queued on the compute stream that uses it still sees valid memory: the
	// cache hands it out again only to work queued after it. A buffer used
	// on another stream must be freed only after that stream's work on it
	// completed (wait for an event recorded after it).
	Free(b Buffer) error

	// Upload copies src into dst after the work queued on the compute
	// stream, and returns when the copy is done. len(src) must not exceed
	// dst.Len().
	Upload(dst Buffer, src []byte) error
	// Download copies the first len(dst) bytes of src into dst after the
	// work queued on the compute stream, and returns when the copy is done.
	// It reports, as Synchronize does, an error raised by earlier work on
	// the compute stream.
	Download(dst []byte, src Buffer) error

	// Stream is the compute stream: every kernel runs on it.
	Stream() Stream
	// NewStream returns another stream, e.g. for the loader's copies. It
	// is closed with the device if not before.
	NewStream() (Stream, error)

	// Staging returns a host buffer of exactly bytes bytes for asynchronous
	// copies: pinned (page-locked) on CUDA, plain host memory on the CPU
	// device.
	Staging(bytes int64) (HostBuffer, error)
	// FreeStaging returns a staging buffer. Copies that use it must have
	// completed (wait for their events first).
	FreeStaging(h HostBuffer) error
	// CopyToDevice queues a copy of src into dst on stream s and returns
	// an event that completes with the copy. src must not be written, nor
	// dst read by other streams, until the event completed. src.Len() must
	// not exceed dst.Len().
	CopyToDevice(dst Buffer, src HostBuffer, s Stream) (Event, error)
	// CopyToHost queues a copy of the first dst.Len() bytes of src into dst
	// on stream s and returns an event that completes with the copy; dst is
	// valid once it completed.
	CopyToHost(dst HostBuffer, src Buffer, s Stream) (Event, error)

	// Synchronize waits until the work queued on every stream of the
	// device completed, and returns the first error raised by that work.
	Synchronize() error
	// MemStats returns the figures of the device's caching allocator.
	MemStats() alloc.Stats
	// Kernels returns the device's kernels; they run on the compute stream.
	Kernels() Kernels
	// Close waits for queued work, stops the streams and releases all
	// memory. Every later call returns ErrClosed.
	Close() error
}

// Stream is an ordered queue of device work. Work on one stream runs in
// the order it was queued and asynchronously to the caller, on the CPU
// device too: the host must wait (Synchronize, an Event, a Download) before
// it reads what the work wrote. Work on different streams runs
// concurrently unless one waits for an event of the other.
type Stream interface {
	// Record returns an event that completes when the work queued on the
	// stream so far completed.
	Record() (Event, error)
	// Wait makes work queued on this stream after the call wait until e
	// completed. It does not block the caller.
	Wait(e Event) error
	// Synchronize blocks until the work queued so far completed and
	// returns the first error it raised since the last report (once).
	Synchronize() error
	// Close waits for the queued work and releases the stream; every later
	// call on it, Close included, returns ErrClosed. Closing the compute
	// stream is an error: it belongs to the device.
	Close() error
}

// Event marks a point in a stream: it completes when the work queued on
// the stream before it completed. It satisfies alloc.Event.
type Event interface {
	// Done reports whether the event completed, without blocking.
	Done() (bool, error)
	// Wait blocks until the event completed, and returns an error raised
	// by the work before it. It does not count as the report of that error:
	// the stream's next Synchronize still returns it.
	Wait() error
}

var (
	// ErrUnavailable is matched by the error of opening a device that this
	// machine or build does not have (no driver, no GPU, no cgo).
	ErrUnavailable = errors.New("device: unavailable")
	// ErrClosed is matched by the error of every call on a closed device
	// or stream. It is alloc.ErrClosed, the one sentinel for a use after
	// Close in every package.
	ErrClosed = alloc.ErrClosed
	// ErrBusy is matched by the error of a call on an object that another
	// call, from another goroutine, is inside: the objects built over a
	// device (rnn's layers and states, models, train's Trainer, loader's
	// iterations) are used by one goroutine at a time and refuse a second
	// rather than race on device memory. Devices, scopes and streams are
	// safe for concurrent use and never return it. One sentinel for
	// every package, as ErrClosed.
	ErrBusy = errors.New("in use by another goroutine")
	// ErrForeignBuffer is matched by the error of passing a buffer that
	// another device allocated, or the zero Buffer where one is required.
	ErrForeignBuffer = errors.New("device: buffer does not belong to this device")
	// ErrShape is matched by the error of a size or shape that does not
	// match the buffers given, or is invalid in itself.
	ErrShape = errors.New("device: size or shape mismatch")
	// ErrIndex is matched by the error of a kernel that met an index out
	// of range (a token id, a class). Such errors are found while the work
	// runs, so they are reported by the next Synchronize, Download or
	// Event.Wait on the kernel's stream, not by the kernel call.
	ErrIndex = errors.New("device: index out of range")
)

// Category says what an allocation holds (alloc.Category): every Alloc
// names one, and the allocator keeps current and peak bytes per category.
type Category = alloc.Category

// The categories, as alloc names them.
const (
	Parameters     = alloc.Parameters
	Gradients      = alloc.Gradients
	OptimizerState = alloc.OptimizerState
	Activations    = alloc.Activations
	Workspace      = alloc.Workspace
	Batches        = alloc.Batches
	State          = alloc.State
	Other          = alloc.Other
)

// DType is the element type of the data a kernel reads and writes.
type DType uint8

const (
	// Float32 is the type of parameters, activations and gradients.
	Float32 DType = 1 + iota
	// Float64 runs the same kernels in double precision, for gradient
	// checks by finite differences.
	Float64
	// Int32 is the type of token ids and class targets.
	Int32
)

// Size is the size of one element in bytes.
func (t DType) Size() int64 {
	switch t {
	case Float32, Int32:
		return 4
	case Float64:
		return 8
	}
	return 0
}

func (t DType) String() string {
	switch t {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int32:
		return "int32"
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// Buffer is a range of device memory: what Alloc returned, or a slice of
// it. It is a small value, passed by value; copying it does not copy the
// memory. The zero Buffer is "none", accepted where a kernel documents an
// optional buffer. Device implementations make Buffers with
// device/driver.NewBuffer.
type Buffer struct {
	dev  Device
	addr alloc.Ptr
	size int64
	host unsafe.Pointer // the memory as the host addresses it; nil on a GPU
}

// Device is the device that owns the memory; nil for the zero Buffer.
func (b Buffer) Device() Device { return b.dev }

// Addr is the buffer's device address.
func (b Buffer) Addr() alloc.Ptr { return b.addr }

// Len is the buffer's size in bytes.
func (b Buffer) Len() int64 { return b.size }

// IsZero reports whether b is the zero Buffer ("none").
func (b Buffer) IsZero() bool { return b.dev == nil }

// Slice returns the n bytes at offset off. It panics if they are not
// within b, as slicing a Go slice does.
func (b Buffer) Slice(off, n int64) Buffer {
	if off < 0 || n < 0 || off+n > b.size {
		panic(fmt.Sprintf("device: Buffer.Slice [%d, +%d) of a %d-byte buffer", off, n, b.size))
	}
	s := Buffer{dev: b.dev, addr: b.addr + alloc.Ptr(off), size: n}
	if b.host != nil {
		s.host = unsafe.Add(b.host, off)
	}
	return s
}

// Elems returns elements [off, off+n) of b read as an array of t.
func (b Buffer) Elems(t DType, off, n int) Buffer {
	return b.Slice(int64(off)*t.Size(), int64(n)*t.Size())
}

// HostBuffer is host memory for asynchronous copies (Device.Staging):
// pinned on CUDA. The host reads and writes it through Bytes, but only when
// no copy that uses it is in flight. Device implementations make them with
// device/driver.NewHostBuffer.
type HostBuffer struct {
	dev  Device
	addr alloc.Ptr
	mem  []byte
}

// Device is the device whose staging allocator served the buffer.
func (h HostBuffer) Device() Device { return h.dev }

// Addr is the buffer's address in the staging allocator.
func (h HostBuffer) Addr() alloc.Ptr { return h.addr }

// Len is the buffer's size in bytes.
func (h HostBuffer) Len() int64 { return int64(len(h.mem)) }

// Bytes is the buffer's memory.
func (h HostBuffer) Bytes() []byte { return h.mem }

// Slice returns the n bytes at offset off, panicking if they are not
// within h.
func (h HostBuffer) Slice(off, n int64) HostBuffer {
	if off < 0 || n < 0 || off+n > int64(len(h.mem)) {
		panic(fmt.Sprintf("device: HostBuffer.Slice [%d, +%d) of a %d-byte buffer", off, n, len(h.mem)))
	}
	return HostBuffer{dev: h.dev, addr: h.addr + alloc.Ptr(off), mem: h.mem[off : off+n : off+n]}
}

// Elem is the set of Go types a buffer holds.
type Elem interface{ ~float32 | ~float64 | ~int32 }

// UploadSlice copies src into dst as Upload does.
func UploadSlice[T Elem](d Device, dst Buffer, src []T) error {
	return d.Upload(dst, asBytes(src))
}

// DownloadSlice copies src into dst as Download does; it fills len(dst)
// elements.
func DownloadSlice[T Elem](d Device, dst []T, src Buffer) error {
	b := asBytes(dst)
	if int64(len(b)) > src.Len() {
		return fmt.Errorf("device: download of %d bytes from a %d-byte buffer: %w", len(b), src.Len(), ErrShape)
	}
	return d.Download(b, src.Slice(0, int64(len(b))))
}

func asBytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}
