package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"gonum.org/v1/gonum/blas/gonum"
	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu/gemm"
	"github.com/gocurrent/gocurrent/device/driver"
)

// Config configures the CPU device. The zero Config works: all cores, no
// memory cap, PyTorch's allocator defaults, the fast GEMM.
type Config struct {
	// Threads is the number of goroutines a kernel is split across;
	// 0 means runtime.GOMAXPROCS(0).
	Threads int
	// Capacity caps the device's memory in bytes, as a GPU's size would;
	// 0 means the machine's memory.
	Capacity int64
	// Memory configures the caching allocator (alloc.Config; the zero
	// value is PyTorch's default policy).
	Memory alloc.Config
	// BLAS runs the GEMMs. nil means tensor.WhichBLAS(), the BLAS a
	// program chose with tensor.Use, except that gorgonia's default
	// (gonum's pure-Go BLAS, 13-23 GFLOP/s here) is replaced by gemm.BLAS.
	BLAS tensor.BLAS
}

// Device is the CPU device. Its memory comes from an alloc.Caching over
// anonymous mmap segments (alloc.Host), off the Go heap; every stream runs
// its work on a goroutine of its own; kernels are split across a team of
// Threads goroutines. It is safe for concurrent use.
type Device struct {
	cfg     Config
	blas    tensor.BLAS
	host    *alloc.Host
	mem     *alloc.Caching
	staging *alloc.HostCache
	pool    *pool
	compute *stream
	closed  atomic.Bool

	mu      sync.Mutex // guards streams
	streams []*stream  // NewStream streams still open
}

var (
	_ device.Device           = (*Device)(nil)
	_ device.Allocator        = (*Device)(nil)
	_ device.StagingAllocator = (*Device)(nil)
)

// Open starts a CPU device.
func Open(cfg Config) (*Device, error) {
	if cfg.Threads < 0 || cfg.Threads > maxThreads {
		return nil, fmt.Errorf("cpu: Threads %d is not in [0, %d]", cfg.Threads, maxThreads)
	}
	if cfg.Capacity < 0 {
		return nil, fmt.Errorf("cpu: Capacity %d is negative", cfg.Capacity)
	}
	if cfg.Threads == 0 {
		cfg.Threads = min(runtime.GOMAXPROCS(0), maxThreads)
	}
	host := alloc.NewHost(cfg.Capacity)
	d := &Device{
		cfg:     cfg,
		blas:    chooseBLAS(cfg.BLAS),
		host:    host,
		staging: alloc.NewHostCache(alloc.NewHost(0)),
	}
	mem, err := alloc.NewCaching(drainingSource{host, d}, cfg.Memory)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	d.mem, d.pool = mem, newPool(cfg.Threads)
	d.compute = newStream(d, true)
	return d, nil
}

// drainingSource is the device's memory: the host source, except that a
// segment is unmapped only after the work queued on every stream has run.
// The cache gives a freed block to later work only, but when it releases a
// whole segment (EmptyCache, or the out-of-memory ladder) the memory goes
// away at once, and work queued before the Free may still be reading it.
// cudaFree waits for the device for the same reason.
type drainingSource struct {
	*alloc.Host
	d *Device
}

func (s drainingSource) Release(p alloc.Ptr, size int64) error {
	s.d.drain()
	return s.Host.Release(p, size)
}

// drain waits until the work queued so far on every stream has run, and
// leaves its errors for the streams to report.
func (d *Device) drain() {
	d.mu.Lock()
	all := append([]*stream{d.compute}, d.streams...)
	d.mu.Unlock()
	for _, s := range all {
		if s != nil {
			s.wait(s.queued.Load())
		}
	}
}

// chooseBLAS applies Config.BLAS's rule.
func chooseBLAS(b tensor.BLAS) tensor.BLAS {
	if b != nil {
		return b
	}
	b = tensor.WhichBLAS()
	if _, isDefault := b.(gonum.Implementation); isDefault || b == nil {
		return gemm.BLAS{}
	}
	return b
}

// Name is "cpu".
func (d *Device) Name() string { return "cpu" }

// Threads is the number of goroutines kernels are split across.
func (d *Device) Threads() int { return d.cfg.Threads }

func (d *Device) checkOpen(what string) error {
	if d.closed.Load() {
		return fmt.Errorf("cpu: %s: the device is %w", what, device.ErrClosed)
	}
	return nil
}

// Alloc returns a buffer from the caching allocator, 512-byte aligned,
// counted in category cat.
func (d *Device) Alloc(bytes int64, cat device.Category) (device.Buffer, error) {
	if err := d.checkOpen("Alloc"); err != nil {
		return device.Buffer{}, err
	}
	if bytes < 0 {
		return device.Buffer{}, fmt.Errorf("cpu: Alloc of %d bytes: %w", bytes, device.ErrShape)
	}
	p, err := d.mem.AllocCategory(bytes, 0, cat)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("cpu: %w", err)
	}
	if bytes == 0 {
		return driver.NewBuffer(d, 0, 0, nil), nil
	}
	mem, err := d.host.Bytes(p, bytes)
	if err != nil { // cannot happen: the block lies in a live segment
		_ = d.mem.Free(p)
		return device.Buffer{}, fmt.Errorf("cpu: %w", err)
	}
	return driver.NewBuffer(d, p, bytes, unsafe.Pointer(unsafe.SliceData(mem))), nil
}

// Free returns b to the cache; later work on the compute stream may reuse
// it, earlier work still sees it.
func (d *Device) Free(b device.Buffer) error {
	if err := d.checkOpen("Free"); err != nil {
		return err
	}
	return driver.Free(d, d.mem, b)
}

// Upload copies src into dst in stream order and waits for the copy.
func (d *Device) Upload(dst device.Buffer, src []byte) error {
	if err := d.checkOpen("Upload"); err != nil {
		return err
	}
	if err := driver.CheckUpload(d, dst, src); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return d.copySync(copyCmd{dst: driver.HostPointer(dst), src: unsafe.Pointer(unsafe.SliceData(src)), n: int64(len(src))})
}

// Download copies src into dst in stream order, waits for the copy and
// reports a pending error of the compute stream.
func (d *Device) Download(dst []byte, src device.Buffer) error {
	if err := d.checkOpen("Download"); err != nil {
		return err
	}
	if err := driver.CheckDownload(d, dst, src); err != nil {
		return err
	}
	if len(dst) == 0 {
		return d.compute.Synchronize()
	}
	if err := d.copySync(copyCmd{dst: unsafe.Pointer(unsafe.SliceData(dst)), src: driver.HostPointer(src), n: int64(len(dst))}); err != nil {
		return err
	}
	return d.compute.report()
}

func (d *Device) copySync(cc copyCmd) error {
	seq, err := d.compute.enqueue(func(c *cmd) { c.op, c.copy = opCopy, cc })
	if err != nil {
		return err
	}
	d.compute.wait(seq)
	return nil
}

// Stream is the compute stream.
func (d *Device) Stream() device.Stream { return d.compute }

// NewStream starts another stream with a worker goroutine of its own.
func (d *Device) NewStream() (device.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen("NewStream"); err != nil {
		return nil, err
	}
	s := newStream(d, false)
	d.streams = append(d.streams, s)
	return s, nil
}

// forget removes s from the open streams; false if it was not there.
func (d *Device) forget(s *stream) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.Index(d.streams, s)
	if i < 0 {
		return false
	}
	d.streams = slices.Delete(d.streams, i, i+1)
	return true
}

// stream resolves a device.Stream of this device.
func (d *Device) stream(what string, s device.Stream) (*stream, error) {
	cs, ok := s.(*stream)
	if !ok || cs.dev != d {
		return nil, fmt.Errorf("cpu: %s: stream %T is not from this device: %w", what, s, device.ErrForeignBuffer)
	}
	return cs, nil
}

// Staging returns plain host memory from a cache of its own.
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

// CopyToDevice queues the copy of src into dst on s.
func (d *Device) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	if err := d.checkOpen("CopyToDevice"); err != nil {
		return nil, err
	}
	if err := driver.CheckCopyToDevice(d, dst, src); err != nil {
		return nil, err
	}
	return d.copyAsync("CopyToDevice", s, copyCmd{dst: driver.HostPointer(dst), src: unsafe.Pointer(unsafe.SliceData(src.Bytes())), n: src.Len()})
}

// CopyToHost queues the copy of src into dst on s.
func (d *Device) CopyToHost(dst device.HostBuffer, src device.Buffer, s device.Stream) (device.Event, error) {
	if err := d.checkOpen("CopyToHost"); err != nil {
		return nil, err
	}
	if err := driver.CheckCopyToHost(d, dst, src); err != nil {
		return nil, err
	}
	return d.copyAsync("CopyToHost", s, copyCmd{dst: unsafe.Pointer(unsafe.SliceData(dst.Bytes())), src: driver.HostPointer(src), n: dst.Len()})
}

// copyAsync queues cc on s; the caller checked the device and buffers.
func (d *Device) copyAsync(what string, s device.Stream, cc copyCmd) (device.Event, error) {
	cs, err := d.stream(what, s)
	if err != nil {
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
	return event{s: cs, seq: seq}, nil
}

// Synchronize waits for every stream and returns the first pending error.
func (d *Device) Synchronize() error {
	if err := d.checkOpen("Synchronize"); err != nil {
		return err
	}
	d.mu.Lock()
	all := append([]*stream{d.compute}, d.streams...)
	d.mu.Unlock()
	var first error
	for _, s := range all {
		if err := s.Synchronize(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// MemStats returns the caching allocator's figures.
func (d *Device) MemStats() alloc.Stats { return d.mem.Stats() }

// Memory is the device's caching allocator, for snapshots, traces and
// EmptyCache.
func (d *Device) Memory() *alloc.Caching { return d.mem }

// StagingMemory is the host cache that serves Staging
// (device.StagingAllocator).
func (d *Device) StagingMemory() *alloc.HostCache { return d.staging }

// Kernels returns the kernels, which run on the compute stream.
func (d *Device) Kernels() device.Kernels { return kernels{d} }

// Close waits for the streams to drain, stops them and the thread team,
// and unmaps all memory, including buffers not freed: they must not be
// used again.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed.Swap(true) {
		d.mu.Unlock()
		return nil
	}
	all := append([]*stream{d.compute}, d.streams...)
	d.streams = nil
	d.mu.Unlock()
	var errs []error
	for _, s := range all {
		s.shutdown()
		if err := s.report(); err != nil {
			errs = append(errs, err)
		}
	}
	d.pool.stop()
	if err := d.mem.ReleaseAll(); err != nil {
		errs = append(errs, fmt.Errorf("cpu: Close: %w", err))
	}
	if err := d.staging.ReleaseAll(); err != nil {
		errs = append(errs, fmt.Errorf("cpu: Close: %w", err))
	}
	return errors.Join(errs...)
}
