// Package meta is the planning device: a device.Device that keeps the
// books of memory and runs nothing. Its buffers come from the same caching
// allocator as the CPU and CUDA devices' (alloc.Caching, same policy,
// same rounding), over a source that hands out address ranges and no
// memory; its kernels check their arguments and return; Download writes
// zeros. Running a model's real code on it (building the model and the
// trainer, taking training steps) therefore allocates, by category, what
// the same run allocates on a real device, without touching one: that is
// how gocurrent predicts memory before a run (models.PlanMemory), as
// PyTorch's "meta" tensors do for shapes.
//
// Like makes it mimic a CUDA device's own allocations (the cuBLAS
// workspace, the temporaries of the loss and norm kernels); the CPU device
// allocates nothing of its own.
package meta

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/driver"
)

// Config describes the device a meta device stands for.
type Config struct {
	// Name is the device's name in reports; "" means "meta".
	Name string
	// Capacity is the memory of the device it stands for, in bytes; 0
	// means unlimited. An allocation past it fails with the allocator's
	// typed out-of-memory error, as on the real device.
	Capacity int64
	// Memory is the caching allocator's policy (alloc.Config), the real
	// device's.
	Memory alloc.Config
	// Workspace is memory the device allocates for itself when it opens,
	// counted as alloc.Workspace: a CUDA device's cuBLAS workspace.
	Workspace int64
	// KernelTemporaries makes SoftmaxCrossEntropy, SumSquares and SumRows
	// allocate and free the temporaries the CUDA device's kernels use.
	KernelTemporaries bool
	// ProductRows is the device's device.ProductRows, which the layers'
	// chunks follow; 0 means device.DefaultProductRows.
	ProductRows int
}

// CUDA returns the Config of a CUDA device with capacity bytes and the
// allocator policy mem, and blasWorkspace bytes of cuBLAS workspace
// (cuda.Config.BLASWorkspace resolved: 32 MiB by default, 0 for none).
func CUDA(name string, capacity int64, mem alloc.Config, blasWorkspace int64) Config {
	return Config{Name: name, Capacity: capacity, Memory: mem, Workspace: blasWorkspace, KernelTemporaries: true, ProductRows: CUDAProductRows}
}

// CUDAProductRows is the CUDA device's device.ProductRows.
const CUDAProductRows = 2048

// The CUDA device's kernel temporaries (package cuda, launch.go): the loss
// kernel sums its rows through N doubles; the norm kernel through one
// double per block, at most maxParts blocks of about partWork elements;
// SumRows, when it cuts the rows into slices (rowSlices), through one
// double per slice and column.
const (
	maxParts    = 1024
	partWork    = 2048
	rowSlice    = 64
	rowBlocks   = 1024
	onePassRows = 512
)

// rowSlices is the number of slices the CUDA device's SumRows cuts rows
// rows of cols columns into (package cuda's rowSlices); 1 is one pass,
// without a temporary.
func rowSlices(rows, cols int) int {
	if rows <= onePassRows {
		return 1
	}
	colBlocks := (cols + 31) / 32
	slices := max(1, min((rows+rowSlice-1)/rowSlice, rowBlocks/colBlocks))
	slice := (rows + slices - 1) / slices
	return (rows + slice - 1) / slice
}

// unlimited is the capacity of a meta device without one: 64 PiB, more
// than any device has, and less than the allocator's largest request.
const unlimited = 1 << 56

// Device is a meta device. It is safe for concurrent use.
type Device struct {
	cfg     Config
	src     *source
	mem     *alloc.Caching
	staging *alloc.HostCache
	compute *stream
	closed  atomic.Bool

	mu     sync.Mutex
	allocs int // Alloc calls so far
	failAt int // the Alloc call to fail, 0 for none

	branches []*branch // the branches opened (branch.go)
	// nextID is the last allocator stream id a branch took for its
	// kernels' temporaries, idle those of closed branches, which the next
	// branches take again (as the CUDA device's).
	nextID alloc.Stream
	idle   []alloc.Stream

	graphs driver.GraphMemory // the blocks graphs keep (graph.go)
}

var (
	_ device.Device           = (*Device)(nil)
	_ device.Allocator        = (*Device)(nil)
	_ device.StagingAllocator = (*Device)(nil)
)

// Open starts a meta device.
func Open(cfg Config) (*Device, error) {
	if cfg.Capacity < 0 || cfg.Workspace < 0 {
		return nil, fmt.Errorf("meta: capacity %d and workspace %d must not be negative", cfg.Capacity, cfg.Workspace)
	}
	if cfg.Name == "" {
		cfg.Name = "meta"
	}
	src := &source{capacity: cfg.Capacity, next: 1 << 20}
	if src.capacity == 0 {
		src.capacity = unlimited
	}
	mem, err := alloc.NewCaching(src, cfg.Memory)
	if err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	d := &Device{cfg: cfg, src: src, mem: mem, staging: alloc.NewHostCache(alloc.NewHost(0))}
	d.compute = &stream{d: d, compute: true}
	if cfg.Workspace > 0 {
		if _, err := mem.AllocCategory(cfg.Workspace, 0, alloc.Workspace); err != nil {
			return nil, fmt.Errorf("meta: the device's workspace: %w", err)
		}
	}
	return d, nil
}

// HoldsNoValues makes the device a device.Valueless: its buffers hold no
// values, so layers skip drawing their initial parameters on it.
func (d *Device) HoldsNoValues() {}

// Name is the Config's name.
func (d *Device) Name() string { return d.cfg.Name }

// ProductRows is Config.ProductRows (device.ProductRower).
func (d *Device) ProductRows() int { return d.cfg.ProductRows }

// Config returns the configuration the device was opened with.
func (d *Device) Config() Config { return d.cfg }

// Memory is the caching allocator.
func (d *Device) Memory() *alloc.Caching { return d.mem }

// StagingMemory is the host cache that serves Staging: real host memory,
// since the loader writes batches into it.
func (d *Device) StagingMemory() *alloc.HostCache { return d.staging }

func (d *Device) checkOpen(what string) error {
	if d.closed.Load() {
		return fmt.Errorf("%s: %s: the device is %w", d.cfg.Name, what, device.ErrClosed)
	}
	return nil
}

// Alloc accounts for a buffer of bytes bytes in category cat; it holds no
// memory.
func (d *Device) Alloc(bytes int64, cat device.Category) (device.Buffer, error) {
	if err := d.checkOpen("Alloc"); err != nil {
		return device.Buffer{}, err
	}
	if bytes < 0 {
		return device.Buffer{}, fmt.Errorf("%s: Alloc of %d bytes: %w", d.cfg.Name, bytes, device.ErrShape)
	}
	d.mu.Lock()
	d.allocs++
	fail := d.allocs == d.failAt
	d.mu.Unlock()
	if fail {
		return device.Buffer{}, fmt.Errorf("%s: allocation %d of %d bytes failed (FailAlloc): %w", d.cfg.Name, d.failAt, bytes, alloc.ErrOutOfMemory)
	}
	p, err := d.mem.AllocCategory(bytes, 0, cat)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("%s: %w", d.cfg.Name, err)
	}
	d.graphs.Allocated(p)
	return driver.NewBuffer(d, p, bytes, nil), nil
}

// FailAlloc makes the k-th call of Alloc from now on (k ≥ 1) fail with an
// error matching alloc.ErrOutOfMemory, as a device out of memory there
// would; 0 fails none. Allocs counts the calls. Together they let a test
// fail every allocation of a piece of code in turn and check that each
// failure is reported and leaks nothing.
func (d *Device) FailAlloc(k int) {
	d.mu.Lock()
	d.allocs, d.failAt = 0, k
	d.mu.Unlock()
}

// Allocs is the number of Alloc calls since the device opened or since
// FailAlloc.
func (d *Device) Allocs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.allocs
}

// Free returns b to the cache.
func (d *Device) Free(b device.Buffer) error {
	if err := d.checkOpen("Free"); err != nil {
		return err
	}
	if err := driver.CheckOwner(d, "Free", "the buffer", b.Device()); err != nil {
		return err
	}
	if b.Len() > 0 && d.graphs.Keep(b.Addr()) {
		return nil
	}
	return driver.Free(d, d.mem, b)
}

// Upload checks its arguments and copies nothing.
func (d *Device) Upload(dst device.Buffer, src []byte) error {
	if err := d.checkOpen("Upload"); err != nil {
		return err
	}
	if err := driver.CheckUpload(d, dst, src); err != nil {
		return err
	}
	return d.inCapture("Upload")
}

// Download checks its arguments and writes zeros into dst: a meta buffer
// holds no values.
func (d *Device) Download(dst []byte, src device.Buffer) error {
	if err := d.checkOpen("Download"); err != nil {
		return err
	}
	if err := driver.CheckDownload(d, dst, src); err != nil {
		return err
	}
	if err := d.inCapture("Download"); err != nil {
		return err
	}
	clear(dst)
	return nil
}

// Stream is the compute stream.
func (d *Device) Stream() device.Stream { return d.compute }

// NewStream returns another stream.
func (d *Device) NewStream() (device.Stream, error) {
	if err := d.checkOpen("NewStream"); err != nil {
		return nil, err
	}
	return &stream{d: d}, nil
}

// Staging returns plain host memory.
func (d *Device) Staging(bytes int64) (device.HostBuffer, error) {
	if err := d.checkOpen("Staging"); err != nil {
		return device.HostBuffer{}, err
	}
	return driver.AllocStaging(d, d.staging, bytes)
}

// FreeStaging returns a staging buffer.
func (d *Device) FreeStaging(h device.HostBuffer) error {
	if err := d.checkOpen("FreeStaging"); err != nil {
		return err
	}
	return driver.FreeStaging(d, d.staging, h)
}

// CopyToDevice checks its arguments; the copy is done at once.
func (d *Device) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	if err := d.checkOpen("CopyToDevice"); err != nil {
		return nil, err
	}
	if err := driver.CheckCopyToDevice(d, dst, src); err != nil {
		return nil, err
	}
	return d.onStream("CopyToDevice", s)
}

// CopyToHost checks its arguments and writes zeros into dst.
func (d *Device) CopyToHost(dst device.HostBuffer, src device.Buffer, s device.Stream) (device.Event, error) {
	if err := d.checkOpen("CopyToHost"); err != nil {
		return nil, err
	}
	if err := driver.CheckCopyToHost(d, dst, src); err != nil {
		return nil, err
	}
	clear(dst.Bytes())
	return d.onStream("CopyToHost", s)
}

func (d *Device) onStream(what string, s device.Stream) (device.Event, error) {
	ms, ok := s.(*stream)
	if !ok || ms.d != d {
		return nil, fmt.Errorf("%s: %s: the stream is not one of this device's: %w", d.cfg.Name, what, device.ErrForeignBuffer)
	}
	if !ms.usable() {
		return nil, fmt.Errorf("%s: %s: the stream is %w", d.cfg.Name, what, device.ErrClosed)
	}
	if ms.compute {
		if err := d.inCapture(what); err != nil {
			return nil, err
		}
	}
	return event{}, nil
}

// Synchronize returns at once: nothing runs.
func (d *Device) Synchronize() error {
	if err := d.checkOpen("Synchronize"); err != nil {
		return err
	}
	return d.inCapture("Synchronize")
}

// MemStats returns the allocator's figures.
func (d *Device) MemStats() alloc.Stats { return d.mem.Stats() }

// Kernels returns kernels that check their arguments and do nothing else.
func (d *Device) Kernels() device.Kernels { return kernels{d: d} }

// Close releases the books; later calls return device.ErrClosed.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	return errors.Join(d.mem.ReleaseAll(), d.staging.ReleaseAll())
}

// source hands out address ranges, never reused, and keeps the count of
// bytes held against the capacity.
type source struct {
	mu             sync.Mutex
	capacity, used int64
	next           alloc.Ptr
}

func (s *source) String() string { return "meta device" }

func (s *source) Allocate(size int64) (alloc.Ptr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used+size > s.capacity {
		return 0, fmt.Errorf("meta: %d bytes with %d of %d held: %w", size, s.used, s.capacity, alloc.ErrOutOfMemory)
	}
	p := s.next
	s.next += alloc.Ptr((size + 511) / 512 * 512)
	s.used += size
	return p, nil
}

func (s *source) Release(_ alloc.Ptr, size int64) error {
	s.mu.Lock()
	s.used -= size
	s.mu.Unlock()
	return nil
}

func (s *source) MemInfo() (free, total int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capacity - s.used, s.capacity, nil
}

// stream is a stream on which everything has always completed.
type stream struct {
	d       *Device
	compute bool
	closed  atomic.Bool
}

// usable reports whether the stream and its device are open.
func (s *stream) usable() bool { return !s.closed.Load() && !s.d.closed.Load() }

func (s *stream) Record() (device.Event, error) {
	if !s.usable() {
		return nil, fmt.Errorf("%s: Record: the stream is %w", s.d.cfg.Name, device.ErrClosed)
	}
	if s.compute {
		if err := s.d.inCapture("Stream.Record"); err != nil {
			return nil, err
		}
	}
	return event{}, nil
}

func (s *stream) Wait(e device.Event) error {
	if !s.usable() {
		return fmt.Errorf("%s: Wait: the stream is %w", s.d.cfg.Name, device.ErrClosed)
	}
	if _, ok := e.(event); !ok {
		return fmt.Errorf("%s: Wait: the event is not one of this device's: %w", s.d.cfg.Name, device.ErrForeignBuffer)
	}
	if s.compute {
		return s.d.inCapture("Stream.Wait")
	}
	return nil
}

func (s *stream) Synchronize() error {
	if !s.usable() {
		return fmt.Errorf("%s: Synchronize: the stream is %w", s.d.cfg.Name, device.ErrClosed)
	}
	if s.compute {
		return s.d.inCapture("Stream.Synchronize")
	}
	return nil
}

func (s *stream) Close() error {
	if s.compute {
		return fmt.Errorf("%s: the compute stream belongs to the device and cannot be closed", s.d.cfg.Name)
	}
	if s.closed.Swap(true) {
		return fmt.Errorf("%s: Close: the stream is %w", s.d.cfg.Name, device.ErrClosed)
	}
	return nil
}

// event has always completed.
type event struct{}

func (event) Done() (bool, error) { return true, nil }
func (event) Wait() error         { return nil }
