package cuda

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	// devdriver, not driver: in this package "driver" is the CUDA driver.
	devdriver "github.com/gocurrent/gocurrent/device/driver"
)

// Info describes the GPU behind a Device.
type Info struct {
	Name              string // the GPU's name, e.g. "NVIDIA H200"
	Ordinal           int
	ComputeCapability [2]int // major, minor
	Multiprocessors   int
	TotalMemory       int64 // bytes
	DriverVersion     int   // e.g. 12080 for CUDA 12.8
	BLASVersion       int   // e.g. 120804 for cuBLAS 12.8.4
	BLASLibrary       string
	PTX               string // the PTX architecture loaded: "compute_80"
	TF32              bool
}

// Device is the CUDA device: device.Device on one GPU, in the GPU's primary
// context (the one the CUDA runtime, and so PyTorch, uses too). Its memory
// comes from an alloc.Caching over cuMemAlloc, its staging buffers from an
// alloc.HostCache over pinned, mapped host memory; kernels and cuBLAS run
// on the compute stream, and NewStream streams are for copies. It is safe
// for concurrent use by several goroutines, none of which it pins to an OS
// thread.
type Device struct {
	cfg  Config
	api  api
	dev  cuDevice
	ctx  cuContext
	name string
	info Info

	mem     *alloc.Caching
	staging *alloc.HostCache
	compute *stream
	events  eventPool

	blasMu    sync.Mutex // a cuBLAS handle must not be used by two threads at once
	blas      blasHandle
	workspace alloc.Ptr
	wsBytes   int64 // the workspace's size

	modules []cuModule
	fn      [numKernels][2]cuFunction // [kernel][0 float32, 1 float64]
	checkID cuFunction
	fillI32 cuFunction

	// statusDev is the word in device memory that kernels raise index
	// errors in (status* bits, with a device-scope atomicOr). The host
	// learns it at the synchronisation points: a 4-byte copy into
	// statusHost, pinned, queued before the wait (see readStatus). Device
	// memory rather than mapped host memory, because atomics from the GPU
	// into host memory over PCIe are not something every platform offers.
	statusDev    alloc.Ptr
	statusHost   unsafe.Pointer
	statusStream cuStream   // reads the word without waiting for the compute stream
	statusMu     sync.Mutex // one status read at a time: they share statusHost

	launchMu sync.Mutex // guards args
	args     [32]uint64

	closed atomic.Bool
	mu     sync.Mutex // guards streams and nextID
	// streams are the NewStream streams still open, by allocator stream id.
	streams map[alloc.Stream]*stream
	nextID  alloc.Stream
}

var (
	_ device.Device           = (*Device)(nil)
	_ device.Allocator        = (*Device)(nil)
	_ device.StagingAllocator = (*Device)(nil)
)

// Open returns the CUDA device of the GPU cfg.Ordinal. On a machine or
// build without a usable GPU (no driver, no GPU, too old a GPU, no cuBLAS,
// a CGO_ENABLED=0 build) the error matches device.ErrUnavailable and says
// what was missing; Open never exits or panics for it.
func Open(cfg Config) (*Device, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a, err := loadAPI(cfg.libraries())
	if err != nil {
		return nil, err
	}
	return open(a, cfg)
}

// unavailable wraps err, the reason the GPU cannot be used, so that it
// matches device.ErrUnavailable.
func unavailable(ordinal int, what string, err error) error {
	if err == nil {
		return fmt.Errorf("%w: cuda:%d: %s", device.ErrUnavailable, ordinal, what)
	}
	if errors.Is(err, device.ErrUnavailable) {
		return fmt.Errorf("cuda:%d: %s: %w", ordinal, what, err)
	}
	return fmt.Errorf("%w: cuda:%d: %s: %w", device.ErrUnavailable, ordinal, what, err)
}

// minCompute is the oldest compute capability the embedded PTX runs on.
const minCompute = 80

// open opens the device over a loaded api; tests pass a fake one.
func open(a api, cfg Config) (*Device, error) {
	ord := cfg.Ordinal
	if err := a.Init(); err != nil {
		return nil, unavailable(ord, "the CUDA driver found no usable GPU", err)
	}
	n, err := a.DeviceCount()
	if err != nil {
		return nil, unavailable(ord, "counting GPUs", err)
	}
	if ord >= n {
		return nil, unavailable(ord, fmt.Sprintf("this machine has %d GPU(s)", n), nil)
	}
	d := &Device{cfg: cfg, api: a, name: fmt.Sprintf("cuda:%d", ord), streams: map[alloc.Stream]*stream{}}
	if d.dev, err = a.DeviceGet(ord); err != nil {
		return nil, unavailable(ord, "getting the GPU", err)
	}
	if err := d.readInfo(); err != nil {
		return nil, err
	}
	cc := d.info.ComputeCapability[0]*10 + d.info.ComputeCapability[1]
	if cc < minCompute {
		return nil, unavailable(ord, fmt.Sprintf("%s has compute capability %d.%d; the kernels need %d.%d or later",
			d.info.Name, d.info.ComputeCapability[0], d.info.ComputeCapability[1], minCompute/10, minCompute%10), nil)
	}
	if d.info.BLASVersion, err = a.BLASVersion(); err != nil {
		return nil, unavailable(ord, "loading cuBLAS", err)
	}
	if d.ctx, err = a.PrimaryCtxRetain(d.dev); err != nil {
		return nil, unavailable(ord, "retaining the primary context", err)
	}
	if err := d.start(cc); err != nil {
		return nil, errors.Join(fmt.Errorf("cuda:%d: %w", ord, err), d.release())
	}
	return d, nil
}

func (d *Device) readInfo() error {
	a, ord := d.api, d.cfg.Ordinal
	var err error
	info := Info{Ordinal: ord, TF32: d.cfg.TF32}
	if info.Name, err = a.DeviceName(d.dev); err != nil {
		return unavailable(ord, "reading the GPU's name", err)
	}
	for i, attr := range []int{attrComputeCapabilityMajor, attrComputeCapabilityMinor} {
		if info.ComputeCapability[i], err = a.DeviceAttribute(d.dev, attr); err != nil {
			return unavailable(ord, "reading the compute capability", err)
		}
	}
	if info.Multiprocessors, err = a.DeviceAttribute(d.dev, attrMultiprocessorCount); err != nil {
		return unavailable(ord, "reading the multiprocessor count", err)
	}
	if info.TotalMemory, err = a.DeviceTotalMem(d.dev); err != nil {
		return unavailable(ord, "reading the memory size", err)
	}
	if info.DriverVersion, err = a.DriverVersion(); err != nil {
		return unavailable(ord, "reading the driver version", err)
	}
	info.BLASLibrary = a.BLASLibrary()
	d.info = info
	return nil
}

// start makes what the device runs with, in the retained context: the
// compute stream, the status word, the kernels, cuBLAS and the allocators.
// On error, release undoes whatever it made.
func (d *Device) start(cc int) error {
	a, c := d.api, d.ctx
	s, err := a.StreamCreate(c)
	if err != nil {
		return fmt.Errorf("creating the compute stream: %w", err)
	}
	d.compute = &stream{d: d, s: s, id: 0, compute: true}

	if err := d.startStatus(); err != nil {
		return err
	}

	if err := d.loadKernels(cc); err != nil {
		return err
	}

	d.mem, err = alloc.NewCaching(&deviceSource{d: d}, d.cfg.Memory)
	if err != nil {
		return err
	}
	d.staging = alloc.NewHostCache(&pinnedSource{d: d})

	if d.blas, err = a.BLASCreate(c); err != nil {
		return fmt.Errorf("creating the cuBLAS handle: %w", err)
	}
	if err := a.BLASSetStream(c, d.blas, d.compute.s); err != nil {
		return err
	}
	mode := blasDefaultMath
	if d.cfg.TF32 {
		mode = blasTF32Math
	}
	if err := a.BLASSetMathMode(c, d.blas, mode); err != nil {
		return err
	}
	// The workspace is set after the stream: cublasSetStream resets it.
	if ws := d.cfg.Workspace(); ws > 0 {
		p, err := d.mem.AllocCategory(ws, 0, alloc.Workspace)
		if err != nil {
			return fmt.Errorf("allocating the cuBLAS workspace: %w", err)
		}
		ok, err := a.BLASSetWorkspace(c, d.blas, p, ws)
		if err != nil || !ok {
			_ = d.mem.Free(p)
		} else {
			d.workspace, d.wsBytes = p, ws
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// release frees what start made and the context, tolerating a partial
// start; it is Close without the checks.
func (d *Device) release() error {
	a, c := d.api, d.ctx
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if d.blas != 0 {
		keep(a.BLASDestroy(c, d.blas))
		d.blas = 0
	}
	if d.mem != nil {
		keep(d.mem.ReleaseAll())
	}
	if d.staging != nil {
		keep(d.staging.ReleaseAll())
	}
	for _, m := range d.modules {
		keep(a.ModuleUnload(c, m))
	}
	d.modules = nil
	keep(d.releaseStatus())
	keep(d.events.drain(a, c))
	if d.compute != nil {
		keep(a.StreamDestroy(c, d.compute.s))
	}
	if d.ctx != 0 {
		keep(a.PrimaryCtxRelease(d.dev))
	}
	return errors.Join(errs...)
}

// Name is "cuda:N".
func (d *Device) Name() string { return d.name }

// Info describes the GPU.
func (d *Device) Info() Info { return d.info }

// BLASWorkspace is the bytes of cuBLAS workspace the device allocated
// (Config.BLASWorkspace resolved), 0 when it set none.
func (d *Device) BLASWorkspace() int64 { return d.wsBytes }

// Memory is the device's caching allocator, for snapshots, traces and
// EmptyCache.
func (d *Device) Memory() *alloc.Caching { return d.mem }

// StagingMemory is the host cache that serves Staging
// (device.StagingAllocator).
func (d *Device) StagingMemory() *alloc.HostCache { return d.staging }

func (d *Device) checkOpen(what string) error {
	if d.closed.Load() {
		return fmt.Errorf("cuda: %s: the device is %w", what, device.ErrClosed)
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
		return device.Buffer{}, fmt.Errorf("cuda: Alloc of %d bytes: %w", bytes, device.ErrShape)
	}
	p, err := d.mem.AllocCategory(bytes, 0, cat)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("%s: %w", d.name, err)
	}
	return devdriver.NewBuffer(d, p, bytes, nil), nil
}

// Free returns b to the cache. The cache serves the compute stream, so
// kernels queued before the Free still see valid memory.
func (d *Device) Free(b device.Buffer) error {
	if err := d.checkOpen("Free"); err != nil {
		return err
	}
	return devdriver.Free(d, d.mem, b)
}

// Upload copies src into dst after the work queued on the compute stream
// and waits for it. From pageable Go memory the driver stages the copy
// itself; the loader's path is Staging and CopyToDevice.
func (d *Device) Upload(dst device.Buffer, src []byte) error {
	if err := d.checkOpen("Upload"); err != nil {
		return err
	}
	if err := devdriver.CheckUpload(d, dst, src); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	if err := d.api.MemcpyHtoDAsync(d.ctx, dst.Addr(), unsafe.Pointer(unsafe.SliceData(src)), int64(len(src)), d.compute.s); err != nil {
		return err
	}
	return d.api.StreamSynchronize(d.ctx, d.compute.s)
}

// Download copies the first len(dst) bytes of src into dst after the work
// queued on the compute stream, waits for it, and reports the compute
// stream's pending error.
func (d *Device) Download(dst []byte, src device.Buffer) error {
	if err := d.checkOpen("Download"); err != nil {
		return err
	}
	if err := devdriver.CheckDownload(d, dst, src); err != nil {
		return err
	}
	if len(dst) > 0 {
		if err := d.api.MemcpyDtoHAsync(d.ctx, unsafe.Pointer(unsafe.SliceData(dst)), src.Addr(), int64(len(dst)), d.compute.s); err != nil {
			return err
		}
	}
	return d.compute.Synchronize()
}

// Stream is the compute stream.
func (d *Device) Stream() device.Stream { return d.compute }

// NewStream creates another stream, for copies that overlap the compute
// stream's kernels.
func (d *Device) NewStream() (device.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen("NewStream"); err != nil {
		return nil, err
	}
	s, err := d.api.StreamCreate(d.ctx)
	if err != nil {
		return nil, err
	}
	d.nextID++
	st := &stream{d: d, s: s, id: d.nextID}
	d.streams[st.id] = st
	return st, nil
}

// streamOf resolves a device.Stream of this device.
func (d *Device) streamOf(what string, s device.Stream) (*stream, error) {
	cs, ok := s.(*stream)
	if !ok || cs.d != d {
		return nil, fmt.Errorf("cuda: %s: stream %T is not from this device: %w", what, s, device.ErrForeignBuffer)
	}
	if cs.isClosed() {
		return nil, fmt.Errorf("cuda: %s: the stream is %w", what, device.ErrClosed)
	}
	return cs, nil
}

// byID returns the open stream with allocator id s.
func (d *Device) byID(s alloc.Stream) (*stream, error) {
	if s == 0 {
		return d.compute, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.streams[s]
	if !ok {
		return nil, fmt.Errorf("cuda: no open stream %d", s)
	}
	return st, nil
}

// Staging returns pinned host memory, mapped into the device's address
// space, from a cache of its own.
func (d *Device) Staging(bytes int64) (device.HostBuffer, error) {
	if err := d.checkOpen("Staging"); err != nil {
		return device.HostBuffer{}, err
	}
	return devdriver.AllocStaging(d, d.staging, bytes)
}

// FreeStaging returns a staging buffer.
func (d *Device) FreeStaging(h device.HostBuffer) error {
	if err := d.checkOpen("FreeStaging"); err != nil {
		return err
	}
	return devdriver.FreeStaging(d, d.staging, h)
}

// CopyToDevice queues an asynchronous copy of src into dst on s.
func (d *Device) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	if err := d.checkOpen("CopyToDevice"); err != nil {
		return nil, err
	}
	if err := devdriver.CheckCopyToDevice(d, dst, src); err != nil {
		return nil, err
	}
	st, err := d.streamOf("CopyToDevice", s)
	if err != nil {
		return nil, err
	}
	if src.Len() > 0 {
		if err := d.api.MemcpyHtoDAsync(d.ctx, dst.Addr(), unsafe.Pointer(unsafe.SliceData(src.Bytes())), src.Len(), st.s); err != nil {
			return nil, err
		}
	}
	return st.Record()
}

// CopyToHost queues an asynchronous copy of the first dst.Len() bytes of
// src into dst on s.
func (d *Device) CopyToHost(dst device.HostBuffer, src device.Buffer, s device.Stream) (device.Event, error) {
	if err := d.checkOpen("CopyToHost"); err != nil {
		return nil, err
	}
	if err := devdriver.CheckCopyToHost(d, dst, src); err != nil {
		return nil, err
	}
	st, err := d.streamOf("CopyToHost", s)
	if err != nil {
		return nil, err
	}
	if dst.Len() > 0 {
		if err := d.api.MemcpyDtoHAsync(d.ctx, unsafe.Pointer(unsafe.SliceData(dst.Bytes())), src.Addr(), dst.Len(), st.s); err != nil {
			return nil, err
		}
	}
	return st.Record()
}

// Synchronize waits for every stream of the device and returns the first
// error their work raised.
func (d *Device) Synchronize() error {
	if err := d.checkOpen("Synchronize"); err != nil {
		return err
	}
	var first error
	for _, s := range d.allStreams() {
		if err := s.Synchronize(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (d *Device) allStreams() []*stream {
	d.mu.Lock()
	defer d.mu.Unlock()
	all := []*stream{d.compute}
	for _, s := range d.streams {
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b *stream) int { return int(a.id) - int(b.id) })
	return all
}

// MemStats returns the caching allocator's figures.
func (d *Device) MemStats() alloc.Stats { return d.mem.Stats() }

// Kernels returns the kernels; they and cuBLAS run on the compute stream.
func (d *Device) Kernels() device.Kernels { return kernels{d} }

// Close waits for the queued work, destroys the streams, frees all device
// and pinned memory (buffers not freed included: they must not be used
// again) and releases the primary context.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed.Swap(true) {
		d.mu.Unlock()
		return nil
	}
	streams := make([]*stream, 0, len(d.streams))
	for _, s := range d.streams {
		streams = append(streams, s)
	}
	d.streams = nil
	d.mu.Unlock()
	var errs []error
	if err := d.api.CtxSynchronize(d.ctx); err != nil {
		errs = append(errs, err)
	} else if err := d.readStatus(d.statusStream, false); err != nil {
		errs = append(errs, err)
	}
	for _, s := range streams {
		s.markClosed()
		if err := d.api.StreamDestroy(d.ctx, s.s); err != nil {
			errs = append(errs, err)
		}
	}
	d.compute.markClosed()
	if err := d.release(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: Close: %w", d.name, errors.Join(errs...))
	}
	return nil
}

// Status bits the kernels raise (cuda/kernels/ABI.md).
const (
	statusEmbedding           = 1
	statusEmbeddingGrad       = 2
	statusSoftmaxCrossEntropy = 4
	statusGatherSeq           = 8
	statusSeqPoolGrad         = 16
)

// startStatus makes the status word, zeroed, and what reads it back.
func (d *Device) startStatus() error {
	a, c := d.api, d.ctx
	var err error
	if d.statusDev, err = a.MemAlloc(c, 4); err != nil {
		return fmt.Errorf("allocating the status word: %w", err)
	}
	if d.statusHost, err = a.MemHostAlloc(c, 4); err != nil {
		return fmt.Errorf("allocating the status word's host copy: %w", err)
	}
	if d.statusStream, err = a.StreamCreate(c); err != nil {
		return fmt.Errorf("creating the status stream: %w", err)
	}
	if err := a.MemsetD32Async(c, d.statusDev, 0, 1, d.compute.s); err != nil {
		return fmt.Errorf("zeroing the status word: %w", err)
	}
	return a.StreamSynchronize(c, d.compute.s)
}

// releaseStatus frees what startStatus made, tolerating a partial start.
func (d *Device) releaseStatus() error {
	a, c := d.api, d.ctx
	var errs []error
	if d.statusStream != 0 {
		errs = append(errs, a.StreamDestroy(c, d.statusStream))
		d.statusStream = 0
	}
	if d.statusHost != nil {
		errs = append(errs, a.MemFreeHost(c, d.statusHost))
		d.statusHost = nil
	}
	if d.statusDev != 0 {
		errs = append(errs, a.MemFree(c, d.statusDev))
		d.statusDev = 0
	}
	return errors.Join(errs...)
}

// readStatus copies the status word to the host on stream s, waits for
// s, and returns the index errors it holds; clear also resets the word,
// in order on s, after the copy.
//
// On the compute stream (Synchronize, Download: clear set) the copy and
// the reset come after the work being waited for and before any queued
// later, so a bit is reported exactly once, by the first synchronisation
// after the kernel that raised it. On the status stream (Event.Wait,
// Close: clear unset) it waits for nothing queued on the compute stream
// and leaves the bits for the next synchronisation; call it once the work
// whose errors it should see has completed.
func (d *Device) readStatus(s cuStream, clear bool) error {
	a, c := d.api, d.ctx
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	if err := a.MemcpyDtoHAsync(c, d.statusHost, d.statusDev, 4, s); err != nil {
		return err
	}
	if clear {
		if err := a.MemsetD32Async(c, d.statusDev, 0, 1, s); err != nil {
			return err
		}
	}
	if err := a.StreamSynchronize(c, s); err != nil {
		return err
	}
	return d.indexError(atomic.LoadUint32((*uint32)(d.statusHost)))
}

// indexError names the kernels whose bits are set, as an error matching
// device.ErrIndex; nil when none is.
func (d *Device) indexError(bits uint32) error {
	if bits == 0 {
		return nil
	}
	var names []string
	for _, k := range []struct {
		bit  uint32
		name string
	}{{statusEmbedding, "Embedding: a token id"}, {statusEmbeddingGrad, "EmbeddingGrad: a token id"},
		{statusSoftmaxCrossEntropy, "SoftmaxCrossEntropy: a target class"}, {statusGatherSeq, "GatherSeq: a sequence index"},
		{statusSeqPoolGrad, "SeqPoolGrad: an ArgMax step"}} {
		if bits&k.bit != 0 {
			names = append(names, k.name)
		}
	}
	return fmt.Errorf("%s: %s out of range: %w", d.name, strings.Join(names, ", "), device.ErrIndex)
}
