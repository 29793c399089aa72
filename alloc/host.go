package alloc

import (
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"github.com/gocurrent/gocurrent/internal/checked"
)

// Host is the memory of the CPU device: segments mapped straight from the
// operating system (anonymous mmap on Unix), off the Go heap, so the garbage
// collector neither scans nor moves them and releasing one returns it to the
// system at once. The memory is readable and writable through Bytes. An
// optional capacity caps what it hands out, to run CPU training under the
// same memory limit a GPU would impose. Host is safe for concurrent use.
type Host struct {
	mu       sync.RWMutex
	capacity int64
	used     int64
	segs     []hostSegment // sorted by base address
}

type hostSegment struct {
	base Ptr
	mem  []byte
}

var (
	_ Source         = (*Host)(nil)
	_ HostAccessible = (*Host)(nil)
)

// NewHost returns the host source. capacity is the most it hands out in
// bytes; 0 means no cap beyond the machine's memory.
func NewHost(capacity int64) *Host {
	if capacity < 0 {
		panic("alloc: NewHost: negative capacity")
	}
	return &Host{capacity: capacity}
}

// String names the source in messages.
func (h *Host) String() string { return "host" }

// Allocate maps a new zeroed segment of size bytes, page aligned.
func (h *Host) Allocate(size int64) (Ptr, error) {
	if size <= 0 {
		return 0, fmt.Errorf("alloc: host: segment size %d is not positive", size)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	need, ok := checked.Add64(h.used, size)
	if !ok {
		return 0, fmt.Errorf("alloc: host: %d bytes requested with %d in use overflow int64: %w", size, h.used, ErrOutOfMemory)
	}
	if h.capacity > 0 && need > h.capacity {
		return 0, fmt.Errorf("alloc: host: %d bytes requested with %d of the %d-byte capacity in use: %w",
			size, h.used, h.capacity, ErrOutOfMemory)
	}
	// Without a capacity the machine's memory is the cap: the kernel maps
	// more than that lazily, one segment at a time, and the process is
	// killed once the pages are touched, where a GPU's allocator would
	// have refused. (What is free is not the cap: other processes' pages
	// may be given back.)
	if _, total, err := systemMemory(); h.capacity == 0 && err == nil && total > 0 && need > total {
		return 0, fmt.Errorf("alloc: host: %d bytes requested with %d in use, more than the machine's %d bytes of memory: %w",
			size, h.used, total, ErrOutOfMemory)
	}
	mem, err := mapMemory(size)
	if err != nil {
		return 0, fmt.Errorf("alloc: host: mapping %d bytes: %w", size, err)
	}
	p := Ptr(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	i := sort.Search(len(h.segs), func(i int) bool { return h.segs[i].base > p })
	h.segs = append(h.segs, hostSegment{})
	copy(h.segs[i+1:], h.segs[i:])
	h.segs[i] = hostSegment{p, mem}
	h.used += size
	return p, nil
}

// Release unmaps a segment.
func (h *Host) Release(p Ptr, size int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := sort.Search(len(h.segs), func(i int) bool { return h.segs[i].base >= p })
	if i == len(h.segs) || h.segs[i].base != p {
		return fmt.Errorf("alloc: host: release of unknown segment %v", p)
	}
	if int64(len(h.segs[i].mem)) != size {
		return fmt.Errorf("alloc: host: release of segment %v with size %d, allocated with %d", p, size, len(h.segs[i].mem))
	}
	if err := unmapMemory(h.segs[i].mem); err != nil {
		return fmt.Errorf("alloc: host: unmapping segment %v: %w", p, err)
	}
	h.segs = append(h.segs[:i], h.segs[i+1:]...)
	h.used -= size
	return nil
}

// MemInfo reports the capacity left and the capacity when one is set, and
// otherwise the machine's available and total memory.
func (h *Host) MemInfo() (free, total int64, err error) {
	h.mu.RLock()
	used, capacity := h.used, h.capacity
	h.mu.RUnlock()
	avail, phys, err := systemMemory()
	if capacity > 0 {
		free = capacity - used
		if err == nil && avail < free {
			free = avail
		}
		return free, capacity, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("alloc: host: reading the machine's memory: %w", err)
	}
	return avail, phys, nil
}

// Bytes returns the n bytes at p, which must lie within one live segment.
func (h *Host) Bytes(p Ptr, n int64) ([]byte, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	i := sort.Search(len(h.segs), func(i int) bool { return h.segs[i].base > p }) - 1
	if i < 0 || n < 0 || int64(p-h.segs[i].base)+n > int64(len(h.segs[i].mem)) {
		return nil, fmt.Errorf("alloc: host: [%v, +%d) is not inside a live segment", p, n)
	}
	off := int64(p - h.segs[i].base)
	return h.segs[i].mem[off : off+n : off+n], nil
}
