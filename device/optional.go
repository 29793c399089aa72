package device

import "github.com/gocurrent/gocurrent/alloc"

// Optional capabilities. A Device may offer more than the Device
// interface; callers discover it by type assertion on the interfaces
// below, never by a type switch over concrete devices, so code written
// against them works with any device that has the capability:
//
//	if a, ok := d.(device.Allocator); ok {
//		snap := a.Memory().Snapshot() // the segments and their blocks
//		...
//	}

// Valueless is implemented by a Device whose buffers hold no values: an
// upload is checked and dropped, a download gives zeros, kernels check
// their arguments and compute nothing (device/meta, the planner's
// device). Code that computes values only to upload them, such as a
// layer's initial parameters (of any size a plan asks about), skips the
// computing on it; the calls and the allocations are what such a device
// is for.
type Valueless interface {
	// HoldsNoValues marks the capability; it does nothing.
	HoldsNoValues()
}

// Allocator is implemented by a Device whose buffers come from a caching
// allocator it exposes: for snapshots, traces, EmptyCache and the
// allocator's settings. The CPU and the CUDA device implement it.
type Allocator interface {
	// Memory is the device's caching allocator, the one Alloc and Free
	// use. Callers inspect and trim it (Stats, Snapshot, EmptyCache); they
	// do not Alloc or Free blocks through it, which bypasses the device's
	// Buffers.
	Memory() *alloc.Caching
}

// StagingAllocator is implemented by a Device whose staging buffers come
// from a host cache it exposes. The CPU and the CUDA device implement it.
type StagingAllocator interface {
	// StagingMemory is the cache Staging and FreeStaging use.
	StagingMemory() *alloc.HostCache
}

// MemoryReport returns where d's memory goes (alloc.Report): the bytes
// per category, the cache, the device's figures outside the allocator and
// the host staging. For a Scope it is the scope's (alloc.Caching.
// ScopeReport): its categories, cache and limit, and what it does not hold
// as outside. ok is false for a device that does not expose its allocator
// (no Allocator capability, or a scope of such a device).
func MemoryReport(d Device) (r alloc.Report, ok bool) {
	if s, isScope := d.(Scope); isScope {
		a, ok := s.Parent().(Allocator)
		if !ok {
			return alloc.Report{}, false
		}
		r = a.Memory().ScopeReport(s.ID())
		r.Device = s.Name()
		return r, true
	}
	a, ok := d.(Allocator)
	if !ok {
		return alloc.Report{}, false
	}
	var staging *alloc.HostCache
	if s, ok := d.(StagingAllocator); ok {
		staging = s.StagingMemory()
	}
	r = a.Memory().Report(staging)
	r.Device = d.Name()
	return r, true
}

// Counter is implemented by a Device that counts the work it is asked
// for, so a benchmark can say what a training step or a sampled token
// costs in calls (the CPU and the CUDA device). The counts are cumulative
// since the device opened, its scopes' included: take differences.
type Counter interface {
	Counts() Counts
}

// Counts are the operations a device was asked for, counted alike on
// every device.
type Counts struct {
	// Syncs counts the host's waits for device work: a stream's or the
	// device's Synchronize (one per stream waited for), Upload, Download
	// and Event.Wait. A training loop that never waits has none.
	Syncs int64
	// Launches counts the kernels queued, GEMMs and copies aside.
	Launches int64
	// GEMMs counts Kernels().Gemm calls (cuBLAS calls on a GPU).
	GEMMs int64
	// Copies counts the memory copies queued: Upload, Download,
	// CopyToDevice, CopyToHost and the Copy kernel.
	Copies int64
	// Graphs counts Graph.Launch calls. The work a graph recorded counts
	// in Launches, GEMMs and Copies at every launch, as the calls did (it
	// runs again), and not while it is recorded (it does not run then).
	Graphs int64
	// Calls counts what the host queued: the launches, GEMMs and copies
	// it queued itself (on a GPU, each a driver or cuBLAS call), and the
	// graph launches; the work a graph replays is not counted again.
	// Launches + GEMMs + Copies is the work the device ran, Calls what
	// queuing it cost the host.
	Calls int64
}

// Sub returns c - o, the counts of what happened between two readings.
func (c Counts) Sub(o Counts) Counts {
	return Counts{Syncs: c.Syncs - o.Syncs, Launches: c.Launches - o.Launches, GEMMs: c.GEMMs - o.GEMMs, Copies: c.Copies - o.Copies,
		Graphs: c.Graphs - o.Graphs, Calls: c.Calls - o.Calls}
}

// ProductRower is implemented by a device that says how many rows (steps
// × batch) the layers' products over many steps (a recurrent stack's input
// projection, weight gradients and bias sums) should cover at a time. The
// CUDA device does: 2048, where a launch costs more than a larger product
// (a window of 64 steps of a batch of 32 is one product, not 8).
type ProductRower interface {
	ProductRows() int
}

// DefaultProductRows is the rows of a product over steps on a device that
// does not say (ProductRower): one block of the CPU device's matrix
// product along its inner dimension, where cutting the weight gradients
// costs nothing.
const DefaultProductRows = 256

// ProductRows is d's ProductRows, or DefaultProductRows.
func ProductRows(d Device) int {
	if p, ok := d.(ProductRower); ok {
		if n := p.ProductRows(); n > 0 {
			return n
		}
	}
	return DefaultProductRows
}

// HostCaller is implemented by a device whose buffers are host memory and
// whose streams run host functions in stream order: the CPU device (and
// its scopes). A collective library that works on host memory (MPI, in
// package dist/mpi) runs on such a device's streams through it, as a GPU
// library (NCCL) queues its kernels on a CUDA stream.
type HostCaller interface {
	// CallHost queues fn on stream s: fn runs after the work queued on s
	// before it, and the work queued on s after it waits for it to return.
	// fn gets the memory of bufs, in order, bufs[i].Len() bytes each, to
	// read and write in place; it must not keep them after it returns. An
	// error fn returns is raised by s as a kernel's error is: the next
	// Synchronize of s (or of the device, for the compute stream) reports
	// it. The call does not wait for fn. It is refused on the compute
	// stream while it records a graph (ErrNotCapturable).
	CallHost(s Stream, fn func(mem [][]byte) error, bufs ...Buffer) error
}
