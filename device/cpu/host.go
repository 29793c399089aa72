package cpu

import (
	"fmt"
	"unsafe"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/driver"
)

// hostCmd is a host function queued by CallHost, with the memory of its
// buffers.
type hostCmd struct {
	fn  func(mem [][]byte) error
	mem [][]byte
}

func (h *hostCmd) run() error {
	if err := h.fn(h.mem); err != nil {
		return fmt.Errorf("cpu: a host function queued on a stream: %w", err)
	}
	return nil
}

var _ device.HostCaller = (*Device)(nil)

// CallHost queues fn on stream s, with the memory of bufs
// (device.HostCaller): the CPU device's buffers are host memory, so fn
// reads and writes them in place, in stream order.
func (l *lane) CallHost(s device.Stream, fn func(mem [][]byte) error, bufs ...device.Buffer) error {
	if err := l.checkOpen("CallHost"); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%s: CallHost: nil function", l.owner.Name())
	}
	mem := make([][]byte, len(bufs))
	for i, b := range bufs {
		if err := driver.CheckOwner(l.owner, "CallHost", fmt.Sprintf("buffer %d", i), b.Device()); err != nil {
			return err
		}
		if b.Len() > 0 {
			mem[i] = unsafe.Slice((*byte)(driver.HostPointer(b)), b.Len())
		} else {
			mem[i] = []byte{}
		}
	}
	cs, err := l.stream("CallHost", s)
	if err != nil {
		return err
	}
	if err := cs.inCapture("CallHost"); err != nil {
		return err
	}
	_, err = cs.enqueue(func(c *cmd) { c.op = opHost; c.host = hostCmd{fn: fn, mem: mem} })
	return err
}

var _ device.HostCaller = (*Scope)(nil)
