// Package driver is for writing a device: what an implementation of
// device.Device needs and its users never do, as database/sql/driver is to
// database/sql. Layers, loaders and trainers import package device only;
// the CPU device (device/cpu) and the CUDA device (cuda) import this
// package too.
//
// # What an implementation must do
//
// Implement device.Device and device.Kernels with the semantics package
// device documents, and pass the conformance suite: a test that calls
// devicetest.Run with a function opening a fresh device. Assert
// conformance at compile time, with the optional interfaces it offers:
//
//	var (
//		_ device.Device    = (*Device)(nil)
//		_ device.Allocator = (*Device)(nil)
//	)
//
// Make every Buffer with NewBuffer and every HostBuffer with NewHostBuffer,
// owned by the device itself (the value whose methods are called), so
// that the ownership checks recognise them. A host-addressable device
// passes the host pointer to NewBuffer and gets it back, moved by Slice
// and Elems, from HostPointer; a GPU passes nil.
//
// Start each method with the device's own check that it is open (an error
// matching device.ErrClosed once Close began), then the helper below that
// checks the arguments, so that every device rejects the same misuse with
// the same error:
//
//	Free          Free (it also gives the memory back to the allocator)
//	Upload        CheckUpload
//	Download      CheckDownload
//	Staging       AllocStaging (it also serves the buffer)
//	FreeStaging   FreeStaging (it also gives the buffer back)
//	CopyToDevice  CheckCopyToDevice
//	CopyToHost    CheckCopyToHost
//	kernels       the argument's Check method (device.Gemm.Check, ...)
//
// CheckOwner is the ownership check all of them use, for arguments of an
// implementation's own methods.
//
// # Errors
//
// The helpers' errors start with the device's Name and match the sentinels
// of package device: ErrForeignBuffer for a buffer of another device or
// the zero Buffer where one is required, ErrShape for a size the buffers
// do not match. An implementation returns, besides them: an error matching
// device.ErrClosed for every call after Close; device.ErrIndex, from the
// next Synchronize, Download or Event.Wait, for an index out of range met
// while a kernel ran; an error matching alloc.ErrOutOfMemory (from its
// alloc.Caching) when memory runs out; and, from its Open, an error
// matching device.ErrUnavailable when the machine or build lacks the
// hardware. It never panics or exits for any of them.
//
// # How the constructors get here
//
// Buffer and HostBuffer have unexported fields, so only package device can
// build them, and package device exports no constructor: it hands them to
// this package through an internal package at initialisation, which Go
// runs before this package's own because this package imports device.
package driver
