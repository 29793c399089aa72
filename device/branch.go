package device

import (
	"errors"
	"fmt"
)

// Brancher is implemented by a Device (or Scope) that can run kernels on a
// second stream beside its compute stream: a branch. Work that does not
// depend on what the compute stream is doing (layer l's weight gradients
// while the walk back of layer l−1 goes on, one layer's steps beside the
// next one's) then runs at the same time on a GPU, each stream filling
// what the other leaves idle. The CPU and the CUDA device implement it.
//
// A branch is ordered against the compute stream by Fork and Join only:
//
//	b, err := device.NewBranch(d)
//	...
//	defer b.Close()
//	k := b.Kernels()
//	_ = b.Fork()                   // b's work waits for the compute stream's so far
//	_ = k.Gemm(device.Gemm{...})   // runs beside what the compute stream does next
//	_ = b.Join()                   // the compute stream's next work waits for it
//
// What it shares with its device: memory (its kernels read and write the
// device's Buffers), index errors (raised on the branch, they are
// reported by the compute stream's next synchronisation after a Join,
// and seen by a StepGuard queued after it), the counts (device.Counter)
// and graphs: while the compute stream is being captured (Grapher), a
// branch forked during the capture is captured with it, as a parallel
// branch of the graph, and must be joined before the capture ends (or the
// capture fails with ErrNotCapturable); work queued on a branch not
// forked during the capture is refused then, since it would run outside
// the graph.
//
// Memory: a buffer the branch uses must not be freed (nor its memory be
// reused by the compute stream's later work) before a Join queued after
// that use. Each branch holds what its kernels need of their own: a
// stream and, on CUDA, a cuBLAS handle and workspace.
type Brancher interface {
	// Branch opens a branch of the compute stream. While the compute
	// stream is being captured it may be refused with ErrNotCapturable
	// (CUDA makes no stream inside a capture): open branches beforehand.
	Branch() (Branch, error)
}

// Branch is a second stream of a device's kernels (Brancher). Its methods
// are safe for concurrent use, but work is queued on it in the order the
// calls return, so one goroutine queues a branch's work, as the compute
// stream's.
type Branch interface {
	// Kernels are the device's kernels, queued on the branch's stream.
	Kernels() Kernels
	// Fork makes the branch's work queued after it wait for the work
	// queued on the compute stream so far.
	Fork() error
	// Join makes the compute stream's work queued after it wait for the
	// branch's work queued so far, and take its errors.
	Join() error
	// Close releases the branch once its work queued so far completed (on
	// CUDA it does not wait for it; the CPU device's stops the branch's
	// worker after it): its stream and what its kernels held. A
	// branch whose work was not joined loses its errors. Later calls
	// return an error matching ErrClosed; Close is idempotent. Closing the
	// device closes its branches.
	Close() error
}

// NewBranch opens a branch of d's compute stream. The error matches
// errors.ErrUnsupported for a device without branches (Brancher), and
// ErrClosed for a closed device.
func NewBranch(d Device) (Branch, error) {
	b, ok := d.(Brancher)
	if !ok {
		return nil, fmt.Errorf("device: %s has no branches: %w", d.Name(), errors.ErrUnsupported)
	}
	return b.Branch()
}
