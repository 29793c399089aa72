package driver

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/internal/seam"
)

// fns are package device's constructors and accessors. Package device
// registered them in its init, which ran before this variable is
// initialised because this package imports device.
var fns = seam.Load[device.Device, device.Buffer, device.HostBuffer]()

// NewBuffer makes the Buffer for size bytes at addr on dev. host is the
// same memory as the host addresses it, for host-addressable devices (the
// CPU device), and nil otherwise. It panics if size is negative.
func NewBuffer(dev device.Device, addr alloc.Ptr, size int64, host unsafe.Pointer) device.Buffer {
	if size < 0 {
		panic("driver: NewBuffer: negative size")
	}
	return fns.NewBuffer(dev, addr, size, host)
}

// HostPointer is b's memory as the host addresses it: the host pointer
// NewBuffer was given, moved by Slice and Elems; nil for the zero Buffer
// and for memory the host cannot address (GPU memory). A host-addressable
// device reads and writes it only from work queued on a stream.
func HostPointer(b device.Buffer) unsafe.Pointer { return fns.HostPointer(b) }

// NewHostBuffer makes the HostBuffer for mem, which starts at addr in dev's
// staging allocator.
func NewHostBuffer(dev device.Device, addr alloc.Ptr, mem []byte) device.HostBuffer {
	return fns.NewHostBuffer(dev, addr, mem)
}

// CheckOwner returns an error matching device.ErrForeignBuffer unless
// owner, the Device of a Buffer or HostBuffer named name passed to call op,
// is d. The zero Buffer's owner is nil, and fails too. The kernels'
// argument checks (device.Gemm.Check and the others) use the same check.
func CheckOwner(d device.Device, op, name string, owner device.Device) error {
	return fns.CheckOwner(d, op, name, owner)
}

// The helpers below are the parts of Device methods that do not depend on
// the device: each device calls them after its own check that it is open,
// so every device checks and serves them alike. Their errors start with
// d.Name() and match device.ErrForeignBuffer for a buffer of another
// device (or the zero Buffer) and device.ErrShape for a size the buffers
// do not match.

// Free is Device.Free over d's caching allocator c: it checks that b is
// d's and returns its memory to c. An empty buffer (Alloc(0)) holds no
// memory, so freeing it does nothing.
func Free(d device.Device, c *alloc.Caching, b device.Buffer) error {
	if err := CheckOwner(d, "Free", "the buffer", b.Device()); err != nil {
		return err
	}
	if b.Len() == 0 {
		return nil
	}
	if err := c.Free(b.Addr()); err != nil {
		return fmt.Errorf("%s: Free: %w", d.Name(), err)
	}
	return nil
}

// CheckUpload checks Upload's arguments: dst is d's and holds src.
func CheckUpload(d device.Device, dst device.Buffer, src []byte) error {
	if err := CheckOwner(d, "Upload", "dst", dst.Device()); err != nil {
		return err
	}
	if int64(len(src)) > dst.Len() {
		return fmt.Errorf("%s: Upload of %d bytes into a %d-byte buffer: %w", d.Name(), len(src), dst.Len(), device.ErrShape)
	}
	return nil
}

// CheckDownload checks Download's arguments: src is d's and holds at
// least len(dst) bytes.
func CheckDownload(d device.Device, dst []byte, src device.Buffer) error {
	if err := CheckOwner(d, "Download", "src", src.Device()); err != nil {
		return err
	}
	if int64(len(dst)) > src.Len() {
		return fmt.Errorf("%s: Download of %d bytes from a %d-byte buffer: %w", d.Name(), len(dst), src.Len(), device.ErrShape)
	}
	return nil
}

// AllocStaging is Device.Staging over d's staging cache c: a staging
// buffer of exactly bytes bytes, owned by d. bytes must be positive.
func AllocStaging(d device.Device, c *alloc.HostCache, bytes int64) (device.HostBuffer, error) {
	if bytes <= 0 {
		return device.HostBuffer{}, fmt.Errorf("%s: Staging of %d bytes: %w", d.Name(), bytes, device.ErrShape)
	}
	p, err := c.Alloc(bytes)
	if err != nil {
		return device.HostBuffer{}, fmt.Errorf("%s: Staging: %w", d.Name(), err)
	}
	mem, err := c.Bytes(p)
	if err != nil {
		_ = c.Free(p) // the error returned is Bytes's
		return device.HostBuffer{}, fmt.Errorf("%s: Staging: %w", d.Name(), err)
	}
	return NewHostBuffer(d, p, mem[:bytes:bytes]), nil
}

// FreeStaging is Device.FreeStaging over d's staging cache c: it checks
// that h is d's and returns it to c.
func FreeStaging(d device.Device, c *alloc.HostCache, h device.HostBuffer) error {
	if err := CheckOwner(d, "FreeStaging", "the buffer", h.Device()); err != nil {
		return err
	}
	if err := c.Free(h.Addr()); err != nil {
		return fmt.Errorf("%s: FreeStaging: %w", d.Name(), err)
	}
	return nil
}

// CheckCopyToDevice checks CopyToDevice's buffers: both are d's, and src
// is no longer than dst.
func CheckCopyToDevice(d device.Device, dst device.Buffer, src device.HostBuffer) error {
	if err := errors.Join(CheckOwner(d, "CopyToDevice", "dst", dst.Device()),
		CheckOwner(d, "CopyToDevice", "src", src.Device())); err != nil {
		return err
	}
	if src.Len() > dst.Len() {
		return fmt.Errorf("%s: CopyToDevice of %d bytes into a %d-byte buffer: %w", d.Name(), src.Len(), dst.Len(), device.ErrShape)
	}
	return nil
}

// CheckCopyToHost checks CopyToHost's buffers: both are d's, and dst is
// no longer than src.
func CheckCopyToHost(d device.Device, dst device.HostBuffer, src device.Buffer) error {
	if err := errors.Join(CheckOwner(d, "CopyToHost", "src", src.Device()),
		CheckOwner(d, "CopyToHost", "dst", dst.Device())); err != nil {
		return err
	}
	if dst.Len() > src.Len() {
		return fmt.Errorf("%s: CopyToHost of %d bytes from a %d-byte buffer: %w", d.Name(), dst.Len(), src.Len(), device.ErrShape)
	}
	return nil
}
