package alloc

import "fmt"

// Ptr is an address in the memory a Source serves: a device address on a
// GPU, a host address on the CPU device, a fake address on the simulated
// device. The zero Ptr is nil: Alloc(0) returns it and Free(0) accepts it.
type Ptr uint64

// String formats the address in hex, as memory addresses are usually read.
func (p Ptr) String() string { return fmt.Sprintf("0x%x", uint64(p)) }

// Stream names an ordered queue of device work. Work queued on one stream
// runs in order, so memory freed on a stream can be handed out again on the
// same stream at once; on another stream it can be reused only once the work
// that used it has completed. Stream 0 is the device's default stream; the
// device assigns other numbers.
type Stream uint64

// Source is the raw memory underneath an allocator: it allocates and frees
// whole segments (a cudaMalloc, an mmap) and reports the device's memory.
// Segments are expensive to get and to give back, which is why Caching
// exists. A Source must be safe for concurrent use.
type Source interface {
	// Allocate returns a segment of exactly size bytes (size > 0), aligned
	// to at least 512 bytes. When the device has no room it returns an
	// error for which errors.Is(err, ErrOutOfMemory) holds; any other error
	// is a device fault and is passed on to the caller unchanged.
	Allocate(size int64) (Ptr, error)
	// Release returns a segment obtained from Allocate; size is the size
	// it was allocated with.
	Release(p Ptr, size int64) error
	// MemInfo reports the device's free and total memory in bytes.
	MemInfo() (free, total int64, err error)
}

// Event marks a point in a stream: it completes when all work queued on
// the stream before it has finished.
type Event interface {
	// Done reports whether the event has completed, without blocking.
	Done() (bool, error)
	// Wait blocks until the event has completed.
	Wait() error
}

// Events is the optional capability of a Source whose device runs work on
// streams. Caching and HostCache discover it by type assertion; without it,
// RecordStream is an error (there is nothing that could tell when the other
// stream is done).
type Events interface {
	// Record enqueues a new event on stream s and returns it.
	Record(s Stream) (Event, error)
}

// releaser is implemented by events that come from a pool and should go
// back to it once the allocator no longer needs them.
type releaser interface{ Release() }

// HostAccessible is the optional capability of a Source whose memory the
// host can read and write (the host source, a pinned-host source).
type HostAccessible interface {
	// Bytes returns the n bytes at p as a slice that aliases the memory.
	// The slice is valid until the segment holding p is released.
	Bytes(p Ptr, n int64) ([]byte, error)
}

// sourceName names a Source in messages: its String method if it has one,
// else its type.
func sourceName(src Source) string {
	if s, ok := src.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", src)
}
