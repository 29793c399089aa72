package device

import (
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/alloc"
)

// Scopes: isolated jobs on one device. A training service runs several
// jobs on one GPU; each gets a Scope, a Device of its own over the shared
// one, and hands it to its layers, loader and trainer, which run inside it
// unchanged:
//
//	s, err := device.NewScope(d, device.ScopeConfig{Name: "job-3", Limit: 2 << 30})
//	if err != nil { ... }
//	defer s.Close()
//	model, err := models.NewCharRNN(s, cfg) // everything it allocates and runs is the job's
//
// What a scope isolates:
//   - Streams. Its kernels and Upload/Download run on a compute stream of
//     its own, its copies on streams of its own (NewStream); one job's
//     work never waits behind another's, except for the device itself.
//   - Errors. An error raised by its work (an index out of range) is
//     reported by its own Synchronize, Download and events, never by
//     another scope's or the device's.
//   - Memory. It allocates in its own allocation scope (alloc.Scope) of the
//     device's caching allocator: its figures (MemStats, MemoryReport) are
//     its own, and ScopeConfig.Limit caps the memory it reserves. A job that
//     reaches its limit gets the out-of-memory error and frees only its own
//     cache trying to avoid it; the other jobs' memory is never touched.
//   - Ownership. Its buffers, staging buffers, streams and events are its
//     own: passing one to the device or to another scope is
//     ErrForeignBuffer, as between two devices.
//   - Lifetime. Close waits for its work, closes its streams and gives
//     back everything it still holds, buffers not freed included, so a job
//     that failed halfway leaks nothing. Closing the device closes its
//     scopes first.
//
// The device's own Stream, Synchronize and MemStats are the device's
// scope 0: they neither wait for nor report the scopes' work, and the
// device without scopes behaves as it always did. What stays shared is
// the hardware (a job's kernels still compete for the GPU's time) and a
// fatal device error (a CUDA context that a kernel crashed is lost to every
// job in it, as in any CUDA program).

// ScopeConfig configures a Scope. The zero value works: an unnamed scope
// with no limit but the device's.
type ScopeConfig struct {
	// Name names the job in the scope's Name ("cuda:0/job-3"), its errors
	// and reports. Empty: "scope-N", N its allocation scope.
	Name string
	// Limit caps the device memory the scope reserves (the segments its
	// allocations hold in the caching allocator), in bytes; 0 means no cap
	// but the device's.
	Limit int64
}

// Scope is a Device for one job on a shared device (see ScopeConfig and
// the package's section on scopes). It is safe for concurrent use.
type Scope interface {
	Device
	// Parent is the device the scope runs on.
	Parent() Device
	// ID is the scope's allocation scope: its key in the device's
	// allocator (alloc.Caching.ScopeStats, alloc.Report.Scopes).
	ID() alloc.Scope
	// Limit is ScopeConfig.Limit.
	Limit() int64
}

// Scoper is implemented by a Device that runs scopes: the CPU and the CUDA
// device.
type Scoper interface {
	// Scope opens a scope on the device.
	Scope(cfg ScopeConfig) (Scope, error)
}

// NewScope opens a scope on d. The error matches errors.ErrUnsupported for
// a device that has no scopes, and ErrClosed for a closed device.
func NewScope(d Device, cfg ScopeConfig) (Scope, error) {
	if cfg.Limit < 0 {
		return nil, fmt.Errorf("device: %s: scope limit %d is negative: %w", d.Name(), cfg.Limit, ErrShape)
	}
	sc, ok := d.(Scoper)
	if !ok {
		return nil, fmt.Errorf("device: %s does not run scopes: %w", d.Name(), errors.ErrUnsupported)
	}
	return sc.Scope(cfg)
}
