package testdevice

import (
	"sync"

	"github.com/gocurrent/gocurrent/device"
)

// LoaderCopies is a device for a loader (loader.New) whose batch copies a
// test counting a training step's work can leave out: the loader's
// producers run ahead of the steps by as much as the scheduler lets them,
// so how many of their copies fall between two steps varies, and whether
// a producer finds a slot's last copy still in flight (and waits for it,
// a device.Counts.Syncs) depends on the timing too. So each copy made
// through it is waited for at once, a wait counted as its own: the
// loader's later waits for that copy find it done and wait for nothing,
// and CountsWithout leaves out every call, copy and wait of the loader's.
// Its lock holds across a copy and its wait, so that a reading of the
// device's counts and of its own under it agree.
type LoaderCopies struct {
	device.Device
	mu     sync.Mutex
	copies int64 // copies made, each a call
	waits  int64 // waits for them
}

// CopyToDevice counts the copy, makes it and waits for it.
func (c *LoaderCopies) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.copies++
	ev, err := c.Device.CopyToDevice(dst, src, s)
	if err != nil {
		return ev, err
	}
	c.waits++
	return ev, ev.Wait()
}

// CountsWithout returns counter's counts less the copies made through c
// (each a copy and a call) and the waits for them.
func (c *LoaderCopies) CountsWithout(counter device.Counter) device.Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := counter.Counts()
	n.Copies -= c.copies
	n.Calls -= c.copies
	n.Syncs -= c.waits
	return n
}
