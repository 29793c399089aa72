package testdevice

import (
	"sync"

	"github.com/gocurrent/gocurrent/device"
)

// LoaderCopies is a device for a loader (loader.New) that counts the
// batches copied to the device through it, so that a test counting a
// training step's work can leave them out: the loader's producers run
// ahead of the steps by as much as the scheduler lets them, so how many
// of their copies fall between two steps varies. Its lock holds across a
// copy, so that a reading of the device's counts and of its own under it
// agree.
type LoaderCopies struct {
	device.Device
	mu sync.Mutex
	n  int64
}

// CopyToDevice counts the copy and makes it.
func (c *LoaderCopies) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.Device.CopyToDevice(dst, src, s)
}

// CountsWithout returns counter's counts less the copies made through c
// (each a copy and a call).
func (c *LoaderCopies) CountsWithout(counter device.Counter) device.Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := counter.Counts()
	n.Copies -= c.n
	n.Calls -= c.n
	return n
}
