package device

import (
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/alloc"
)

// The helpers below are for device implementations: the parts of Staging,
// FreeStaging, CopyToDevice and CopyToHost that do not depend on the
// device, so every device checks and serves them alike. Error messages
// start with d.Name().

// AllocStaging returns a staging buffer of exactly bytes bytes from c,
// owned by d.
func AllocStaging(d Device, c *alloc.HostCache, bytes int64) (HostBuffer, error) {
	if bytes <= 0 {
		return HostBuffer{}, fmt.Errorf("%s: Staging of %d bytes: %w", d.Name(), bytes, ErrShape)
	}
	p, err := c.Alloc(bytes)
	if err != nil {
		return HostBuffer{}, fmt.Errorf("%s: Staging: %w", d.Name(), err)
	}
	mem, err := c.Bytes(p)
	if err != nil {
		_ = c.Free(p)
		return HostBuffer{}, fmt.Errorf("%s: Staging: %w", d.Name(), err)
	}
	return NewHostBuffer(d, p, mem[:bytes:bytes]), nil
}

// FreeStaging returns h, a buffer AllocStaging served d from c.
func FreeStaging(d Device, c *alloc.HostCache, h HostBuffer) error {
	if err := CheckOwner(d, "FreeStaging", "the buffer", h.Device()); err != nil {
		return err
	}
	if err := c.Free(h.Addr()); err != nil {
		return fmt.Errorf("%s: FreeStaging: %w", d.Name(), err)
	}
	return nil
}

// CheckCopyToDevice checks CopyToDevice's buffers: both d's, src no
// longer than dst.
func CheckCopyToDevice(d Device, dst Buffer, src HostBuffer) error {
	if err := errors.Join(CheckOwner(d, "CopyToDevice", "dst", dst.Device()),
		CheckOwner(d, "CopyToDevice", "src", src.Device())); err != nil {
		return err
	}
	if src.Len() > dst.Len() {
		return fmt.Errorf("%s: CopyToDevice of %d bytes into a %d-byte buffer: %w", d.Name(), src.Len(), dst.Len(), ErrShape)
	}
	return nil
}

// CheckCopyToHost checks CopyToHost's buffers: both d's, dst no longer
// than src.
func CheckCopyToHost(d Device, dst HostBuffer, src Buffer) error {
	if err := errors.Join(CheckOwner(d, "CopyToHost", "src", src.Device()),
		CheckOwner(d, "CopyToHost", "dst", dst.Device())); err != nil {
		return err
	}
	if dst.Len() > src.Len() {
		return fmt.Errorf("%s: CopyToHost of %d bytes from a %d-byte buffer: %w", d.Name(), dst.Len(), src.Len(), ErrShape)
	}
	return nil
}
