package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"gonum.org/v1/gonum/blas/gonum"
	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu/gemm"
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
// Threads goroutines. It is safe for concurrent use. Its methods not
// listed below (Alloc, Free, the copies, streams, Synchronize, Kernels)
// are the device's own lane's, which a Scope has too.
type Device struct {
	lane    // the device's own: scope 0
	cfg     Config
	blas    tensor.BLAS
	host    *alloc.Host
	mem     *alloc.Caching
	staging *alloc.HostCache
	pool    *pool
	closed  atomic.Bool
	counts  counts // what the device was asked for (device.Counter)

	scopesMu sync.Mutex // guards scopes and closing
	scopes   []*Scope   // the scopes still open
	closing  bool       // Close began: no new scope
}

var (
	_ device.Device           = (*Device)(nil)
	_ device.Allocator        = (*Device)(nil)
	_ device.StagingAllocator = (*Device)(nil)
	_ device.Scoper           = (*Device)(nil)
	_ device.Counter          = (*Device)(nil)
)

// counts are device.Counts as they are kept: atomics the lanes add to.
// replayed is the launches, GEMMs and copies graphs replayed, which are
// not the host's calls (device.Counts.Calls).
type counts struct{ syncs, launches, gemms, copies, graphs, replayed atomic.Int64 }

// Counts returns what the device was asked for since it opened, its
// scopes' work included (device.Counter).
func (d *Device) Counts() device.Counts {
	c := &d.counts
	n := device.Counts{Syncs: c.syncs.Load(), Launches: c.launches.Load(), GEMMs: c.gemms.Load(), Copies: c.copies.Load(), Graphs: c.graphs.Load()}
	n.Calls = n.Launches + n.GEMMs + n.Copies + n.Graphs - c.replayed.Load()
	return n
}

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
	d.lane.d, d.lane.owner, d.lane.label = d, d, "the device"
	d.lane.kern = kernels{l: &d.lane}
	d.compute = newStream(&d.lane, true)
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

// drain waits until the work queued so far on every stream, the scopes'
// included, has run, and leaves its errors for the streams to report.
func (d *Device) drain() {
	if d.compute == nil { // still opening
		return
	}
	d.lane.drain()
	d.scopesMu.Lock()
	scopes := slices.Clone(d.scopes)
	d.scopesMu.Unlock()
	for _, sc := range scopes {
		sc.lane.drain()
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

// MemStats returns the caching allocator's figures: the whole device's,
// the scopes' memory included.
func (d *Device) MemStats() alloc.Stats { return d.mem.Stats() }

// Memory is the device's caching allocator, for snapshots, traces and
// EmptyCache.
func (d *Device) Memory() *alloc.Caching { return d.mem }

// StagingMemory is the host cache that serves Staging
// (device.StagingAllocator).
func (d *Device) StagingMemory() *alloc.HostCache { return d.staging }

// Close closes the scopes still open, waits for the streams to drain,
// stops them and the thread team, and unmaps all memory, including buffers
// not freed: they must not be used again.
func (d *Device) Close() error {
	d.scopesMu.Lock()
	if d.closing {
		d.scopesMu.Unlock()
		return nil
	}
	d.closing = true
	scopes := slices.Clone(d.scopes)
	d.scopesMu.Unlock()
	var errs []error
	for _, sc := range scopes {
		if err := sc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	d.closed.Store(true)
	if err := d.lane.shutdown(); err != nil {
		errs = append(errs, err)
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
