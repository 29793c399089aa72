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
