package cuda

import (
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
)

// deviceSource is the GPU's memory as an alloc.Source: segments from
// cuMemAlloc, free and total memory from cuMemGetInfo, and events on the
// device's streams for RecordStream. A CUDA_ERROR_OUT_OF_MEMORY from
// cuMemAlloc matches alloc.ErrOutOfMemory (see Error.Is), which starts the
// caching allocator's out-of-memory ladder: free cached blocks, retry,
// then report with figures. It keeps the size of every live segment, so
// that a release of an unknown segment or with the wrong size is an error
// (cuMemFree alone would free a known address whatever size it is told).
type deviceSource struct {
	d    *Device
	mu   sync.Mutex
	segs map[alloc.Ptr]int64 // live segments: address -> size; made on first use
}

var (
	_ alloc.Source = (*deviceSource)(nil)
	_ alloc.Events = (*deviceSource)(nil)
)

func (s *deviceSource) String() string { return s.d.name }

// Allocate returns a segment from cuMemAlloc. The driver documents only
// 256-byte alignment; the allocator needs 512. Its segments are 2 MiB or
// larger, which the driver places on its 2 MiB pages, and the check turns
// any surprise into an error rather than a misaligned block.
func (s *deviceSource) Allocate(size int64) (alloc.Ptr, error) {
	p, err := s.d.api.MemAlloc(s.d.ctx, size)
	if err != nil {
		return 0, err
	}
	if p%512 != 0 {
		_ = s.d.api.MemFree(s.d.ctx, p)
		return 0, fmt.Errorf("cuda: cuMemAlloc returned %v, not 512-byte aligned", p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.segs == nil {
		s.segs = make(map[alloc.Ptr]int64)
	}
	s.segs[p] = size
	return p, nil
}

// Release frees a segment. Its blocks are free, but kernels queued before
// they were freed may still be using them, so it waits for the context's
// work first (cudaFree does the same). The allocator releases segments
// only to empty its cache or on the out-of-memory ladder, never per step.
func (s *deviceSource) Release(p alloc.Ptr, size int64) error {
	s.mu.Lock()
	if got, ok := s.segs[p]; !ok || got != size {
		s.mu.Unlock()
		return fmt.Errorf("cuda: release of unknown device segment %v (%d bytes)", p, size)
	}
	delete(s.segs, p)
	s.mu.Unlock()
	err := s.d.api.CtxSynchronize(s.d.ctx)
	if err == nil {
		err = s.d.api.MemFree(s.d.ctx, p)
	}
	if err != nil {
		s.mu.Lock()
		s.segs[p] = size // not freed: it can be released again
		s.mu.Unlock()
	}
	return err
}

// MemInfo reports the GPU's free and total memory.
func (s *deviceSource) MemInfo() (free, total int64, err error) {
	return s.d.api.MemGetInfo(s.d.ctx)
}

// Record records an event on the device's stream numbered st.
func (s *deviceSource) Record(st alloc.Stream) (alloc.Event, error) {
	str, err := s.d.byID(st)
	if err != nil {
		return nil, err
	}
	e, err := str.record()
	if err != nil {
		return nil, err // a nil interface, not a nil *event
	}
	return e, nil
}

// pinnedSource is page-locked host memory from cuMemHostAlloc, mapped
// into the GPU's address space: what makes host-to-device copies
// asynchronous. It serves the device's alloc.HostCache.
type pinnedSource struct {
	d    *Device
	mu   sync.RWMutex
	segs []pinnedSegment // sorted by address
}

type pinnedSegment struct {
	base alloc.Ptr
	mem  unsafe.Pointer
	size int64
}

var (
	_ alloc.Source         = (*pinnedSource)(nil)
	_ alloc.Events         = (*pinnedSource)(nil)
	_ alloc.HostAccessible = (*pinnedSource)(nil)
)

func (s *pinnedSource) String() string { return s.d.name + " pinned host memory" }

// Allocate pins a new segment. The driver reports pinned-memory
// exhaustion as CUDA_ERROR_OUT_OF_MEMORY, which the HostCache treats as
// out of memory.
func (s *pinnedSource) Allocate(size int64) (alloc.Ptr, error) {
	mem, err := s.d.api.MemHostAlloc(s.d.ctx, size)
	if err != nil {
		return 0, err
	}
	p := alloc.Ptr(uintptr(mem))
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > p })
	s.segs = append(s.segs, pinnedSegment{})
	copy(s.segs[i+1:], s.segs[i:])
	s.segs[i] = pinnedSegment{base: p, mem: mem, size: size}
	return p, nil
}

// Release unpins and frees a segment.
func (s *pinnedSource) Release(p alloc.Ptr, size int64) error {
	s.mu.Lock()
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base >= p })
	if i == len(s.segs) || s.segs[i].base != p || s.segs[i].size != size {
		s.mu.Unlock()
		return fmt.Errorf("cuda: release of unknown pinned segment %v (%d bytes)", p, size)
	}
	mem := s.segs[i].mem
	s.segs = append(s.segs[:i], s.segs[i+1:]...)
	s.mu.Unlock()
	return s.d.api.MemFreeHost(s.d.ctx, mem)
}

// MemInfo reports the machine's memory, which pinned memory comes out of.
func (s *pinnedSource) MemInfo() (free, total int64, err error) {
	return alloc.NewHost(0).MemInfo()
}

// Record records an event on the device's stream numbered st.
func (s *pinnedSource) Record(st alloc.Stream) (alloc.Event, error) {
	str, err := s.d.byID(st)
	if err != nil {
		return nil, err
	}
	e, err := str.record()
	if err != nil {
		return nil, err // a nil interface, not a nil *event
	}
	return e, nil
}

// Bytes returns the n bytes at p, which must lie within one segment.
func (s *pinnedSource) Bytes(p alloc.Ptr, n int64) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > p }) - 1
	if i < 0 || n < 0 || int64(p-s.segs[i].base)+n > s.segs[i].size {
		return nil, fmt.Errorf("cuda: [%v, +%d) is not inside a pinned segment", p, n)
	}
	return unsafe.Slice((*byte)(unsafe.Add(s.segs[i].mem, p-s.segs[i].base)), n), nil
}
