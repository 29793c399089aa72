package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// Info describes the GPU behind a Device.
type Info struct {
	Name              string // the GPU's name, e.g. "NVIDIA H200"
	Ordinal           int
	ComputeCapability [2]int // major, minor
	Multiprocessors   int
	// SharedPerBlock is the most shared memory a block can opt into, in
	// bytes (227 KiB on an H100 or H200), and Cooperative whether the GPU
	// runs cooperative launches: the persistent walks need both.
	SharedPerBlock int
	Cooperative    bool
	TotalMemory    int64 // bytes
	DriverVersion  int   // e.g. 12080 for CUDA 12.8
	BLASVersion    int   // e.g. 120804 for cuBLAS 12.8.4
	BLASLibrary    string
	PTX            string // the PTX architecture loaded: "compute_80"
	TF32           bool
	// FuseCellsUpTo is Config.FuseCellsUpTo resolved: the largest hidden
	// size the fused cell kernels run at, -1 for none.
	FuseCellsUpTo int
	// WalkCellsUpTo is Config.WalkCellsUpTo resolved: the largest hidden
	// size the persistent walks run at, -1 for none.
	WalkCellsUpTo int
}

// Device is the CUDA device: device.Device on one GPU, in the GPU's primary
// context (the one the CUDA runtime, and so PyTorch, uses too). Its memory
// comes from an alloc.Caching over cuMemAlloc, its staging buffers from an
// alloc.HostCache over pinned, mapped host memory; kernels and cuBLAS run
// on the compute stream, and NewStream streams are for copies. It is safe
// for concurrent use by several goroutines, none of which it pins to an OS
// thread. Its methods not listed below (Alloc, Free, the copies, streams,
// Synchronize, Kernels) are its own lane's, scope 0, which every Scope has
// one of too.
type Device struct {
	lane // the device's own: scope 0

	cfg Config
	api api // the driver, counting (countingAPI)
	raw api // the driver, for the status word's reads, which are not counted

	counts counts
	dev    cuDevice
	ctx    cuContext
	name   string
	info   Info

	mem     *alloc.Caching
	staging *alloc.HostCache
	events  eventPool
	walks   walks

	modules     []cuModule
	fn          [numKernels][2]cuFunction // [kernel][0 float32, 1 float64]
	checkID     cuFunction
	fillI32     cuFunction
	guardedCopy cuFunction
	advance     cuFunction

	closed atomic.Bool
	// captures route the counts of captured work to its graph's (counts.go).
	captures captures
	// settled says Close synchronised the context: every event recorded
	// completed (event.Done and Wait say so after the device closed).
	settled atomic.Bool
	mu      sync.Mutex // guards streams, nextID and every lane's streams and staging
	// streams are every lane's NewStream streams and the scopes' compute
	// streams still open, by allocator stream id (the device's compute
	// stream is 0), for the allocators' events.
	streams map[alloc.Stream]*stream
	nextID  alloc.Stream

	scopesMu sync.Mutex // guards scopes and closing; held while a scope opens
	scopes   map[alloc.Scope]*Scope
	closing  bool // Close began: no new scope
}

var (
	_ device.Device           = (*Device)(nil)
	_ device.Allocator        = (*Device)(nil)
	_ device.StagingAllocator = (*Device)(nil)
	_ device.Scoper           = (*Device)(nil)
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
	d := &Device{cfg: cfg, raw: a, name: fmt.Sprintf("cuda:%d", ord), streams: map[alloc.Stream]*stream{}, scopes: map[alloc.Scope]*Scope{}}
	d.api = countingAPI{api: a, n: &d.counts, cap: &d.captures}
	d.lane.d, d.lane.owner, d.lane.name, d.lane.label = d, d, d.name, "the device"
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
	info := Info{Ordinal: ord, TF32: d.cfg.TF32, FuseCellsUpTo: d.cfg.fuseCellsUpTo(), WalkCellsUpTo: d.cfg.walkCellsUpTo()}
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
	if info.SharedPerBlock, err = a.DeviceAttribute(d.dev, attrSharedPerBlockOptin); err != nil {
		return unavailable(ord, "reading the shared memory a block can have", err)
	}
	coop, err := a.DeviceAttribute(d.dev, attrCooperativeLaunch)
	if err != nil {
		return unavailable(ord, "reading whether the GPU runs cooperative launches", err)
	}
	info.Cooperative = coop != 0
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

// start makes what the device runs with, in the retained context: its
// lane's compute stream and status word, the kernels, the allocators, and
// its lane's cuBLAS handle. On error, release undoes whatever it made.
func (d *Device) start(cc int) error {
	if err := d.lane.start(0); err != nil {
		return err
	}
	if err := d.loadKernels(cc); err != nil {
		return err
	}
	var err error
	d.mem, err = alloc.NewCaching(&deviceSource{d: d}, d.cfg.Memory)
	if err != nil {
		return err
	}
	d.staging = alloc.NewHostCache(&pinnedSource{d: d})
	// Under a memory limit the workspace is at most a sixteenth of it, as
	// a scope's is: a small limit is left for the tensors.
	return d.lane.startBLAS(d.cfg.WorkspaceUnder(d.mem.Limit()), false)
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
	keep(d.lane.releaseBLAS())
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
	keep(d.events.drain(a, c))
	keep(d.lane.releaseStreams())
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

// productRows is the CUDA device's device.ProductRows: a product over 2048
// rows (H = 1024: 17 GFLOP) fills an H100, and a window of 64 steps of a
// batch of 32 is then one product instead of 8 (launches and cuBLAS calls
// are the host's cost of a step at small sizes).
const productRows = 2048

// ProductRows is device.ProductRower's: 2048.
func (d *Device) ProductRows() int { return productRows }

// Memory is the device's caching allocator, for snapshots, traces and
// EmptyCache.
func (d *Device) Memory() *alloc.Caching { return d.mem }

// StagingMemory is the host cache that serves Staging
// (device.StagingAllocator).
func (d *Device) StagingMemory() *alloc.HostCache { return d.staging }

// newStreamID returns a new allocator stream id; d.mu is held.
func (d *Device) newStreamID() alloc.Stream {
	d.nextID++
	return d.nextID
}

// byID returns the open stream with allocator id s.
func (d *Device) byID(s alloc.Stream) (*stream, error) {
	if s == 0 {
		return d.compute, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.streams[s]
	if !ok || st.isClosed() {
		return nil, fmt.Errorf("cuda: no open stream %d", s)
	}
	return st, nil
}

// MemStats returns the caching allocator's figures: the whole device's,
// the scopes' memory included.
func (d *Device) MemStats() alloc.Stats { return d.mem.Stats() }

// Close closes the scopes still open, waits for the queued work, destroys
// the streams and branches, frees all device and pinned memory (buffers not freed
// included: they must not be used again) and releases the primary context.
func (d *Device) Close() error {
	d.scopesMu.Lock()
	if d.closing {
		d.scopesMu.Unlock()
		return nil
	}
	d.closing = true
	scopes := make([]*Scope, 0, len(d.scopes))
	for _, sc := range d.scopes {
		scopes = append(scopes, sc)
	}
	d.scopesMu.Unlock()
	slices.SortFunc(scopes, func(a, b *Scope) int { return int(a.id) - int(b.id) })
	var errs []error
	for _, sc := range scopes {
		if err := sc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	d.closed.Store(true)
	streams := d.lane.takeStreams()
	branches := d.lane.takeBranches()
	if err := d.api.CtxSynchronize(d.ctx); err != nil {
		errs = append(errs, err)
	} else {
		// Every event recorded has completed, and no work can be queued:
		// the allocators' pending events (RecordStream) are done for the
		// waits of their ReleaseAll.
		d.settled.Store(true)
		if err := d.readStatus(d.statusStream, false); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range streams {
		if err := d.api.StreamDestroy(d.ctx, s.s); err != nil {
			errs = append(errs, err)
		}
	}
	if err := d.closeGraphs(); err != nil {
		errs = append(errs, err)
	}
	if err := d.closeBranches(branches); err != nil {
		errs = append(errs, err)
	}
	if err := d.release(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: Close: %w", d.name, errors.Join(errs...))
	}
	return nil
}
