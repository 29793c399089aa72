// Package seam carries package device's unexported constructors and
// accessors to package device/driver, so that device implementations can
// make and read Buffers while the consumer package, device, exports no
// constructor.
//
// device.Buffer and device.HostBuffer have unexported fields, so only
// package device can build them. Package device registers functions that
// do (Register, from its init), and package device/driver loads them
// (Load, when it is initialised). The order is sound: driver imports
// device, and the Go specification initialises an imported package,
// init functions included, before the package that imports it. This
// package cannot import device (device imports it), so the functions'
// types are type parameters, which device and driver instantiate with the
// same types; Load panics at driver's initialisation, before any other
// code runs, if they differ.
//
// Only packages device and device/driver use this package.
package seam

import (
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
)

// Funcs are package device's functions for device implementations. D, B
// and H are device.Device, device.Buffer and device.HostBuffer.
type Funcs[D, B, H any] struct {
	// NewBuffer makes the Buffer for size bytes at addr on dev; host is the
	// same memory as the host addresses it, or nil.
	NewBuffer func(dev D, addr alloc.Ptr, size int64, host unsafe.Pointer) B
	// NewHostBuffer makes the HostBuffer for mem, at addr in dev's staging
	// allocator.
	NewHostBuffer func(dev D, addr alloc.Ptr, mem []byte) H
	// HostPointer is the host address of b's memory, or nil.
	HostPointer func(b B) unsafe.Pointer
	// CheckOwner is the ownership check the kernels' argument checks use.
	CheckOwner func(d D, op, name string, owner D) error
}

// funcs is set once, by package device's init, before any reader exists.
var funcs any

// Register records f; package device calls it from its init.
func Register[D, B, H any](f Funcs[D, B, H]) { funcs = f }

// Load returns what Register recorded. It panics if nothing was, or if
// the type arguments differ from Register's.
func Load[D, B, H any]() Funcs[D, B, H] {
	f, ok := funcs.(Funcs[D, B, H])
	if !ok {
		panic("device/internal/seam: Load before package device registered its functions, or with other types")
	}
	return f
}
