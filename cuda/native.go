package cuda

import (
	"fmt"
	"runtime"

	"github.com/gocurrent/gocurrent/device"
)

// Native runs fn on an OS thread where the device's context (the GPU's
// primary context, the one the CUDA runtime uses) is current, handing it
// s's CUstream handle (a cudaStream_t to the runtime): the hook for a
// library that queues work of its own on the device's streams, as NCCL's
// collectives do. s is a stream of this device or scope, or nil for a
// call that queues nothing (fn then gets 0, the legacy default stream,
// which it must not queue work on). A buffer's device pointer is its
// Addr, a CUdeviceptr.
//
// The goroutine stays locked to the thread until fn returns, so every
// call fn makes runs with the context current; fn must not keep the
// handle, nor use it after the stream or the device closed. Work fn
// queues on the stream is ordered like the device's own: after what was
// queued before, before what is queued after, and an event recorded on s
// after fn returns completes when it does. Native refuses a closed device
// or stream, a stream of another device, and the compute stream while it
// is being captured into a CUDA graph; a device opened over a driver
// that cannot make a context current on a thread (the tests' fake one)
// is device.ErrUnavailable.
func (l *lane) Native(s device.Stream, fn func(stream uintptr) error) error {
	if err := l.checkOpen("Native"); err != nil {
		return err
	}
	var h cuStream
	if s != nil {
		st, err := l.streamOf("Native", s)
		if err != nil {
			return err
		}
		if err := st.inCapture("Native"); err != nil {
			return err
		}
		h = st.s
	}
	mc, ok := l.d.raw.(interface{ makeCurrent(cuContext) error })
	if !ok {
		return fmt.Errorf("%s: Native: %w: this driver cannot make the context current on a thread", l.name, device.ErrUnavailable)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := mc.makeCurrent(l.d.ctx); err != nil {
		return fmt.Errorf("%s: Native: %w", l.name, err)
	}
	return fn(uintptr(h))
}
