package device

import "errors"

// Grapher is implemented by a Device that can record the work queued on
// its compute stream into a graph and queue the whole graph again later
// with one call: a CUDA graph on a GPU (stream capture, then cuGraphLaunch),
// a recorded list of commands on the CPU device. A step made of hundreds
// of small kernels then costs the host one launch instead of hundreds of
// calls, and the layers' Go code does not run at all. The CPU and the CUDA
// device (and their scopes) implement it.
//
// A graph replays exactly the work recorded: the same kernels with the
// same arguments on the same buffers. Whatever changes from one replay to
// the next must therefore be in device memory that the kernels read (a
// buffer the caller writes before each Launch), never in a kernel's
// arguments; and the caller must not Launch a graph once a buffer it used
// was replaced (a shape change: capture again). Replays compute the same
// bits as the calls recorded would have.
type Grapher interface {
	// Capture calls record and records, instead of running it, the work
	// record queues on the compute stream: kernels, GEMMs and Copy. It
	// returns the graph, or an error: record's, or one matching
	// ErrNotCapturable when record did what a graph cannot hold (then
	// nothing record queued ran; the caller runs the work eagerly
	// instead).
	//
	// Not capturable, while record runs: waiting for the device
	// (Synchronize, Upload, Download), Record, Wait, Synchronize,
	// CopyToDevice and CopyToHost on the compute stream, and another
	// Capture on the same device or scope. An event recorded before the
	// capture may still be waited for; other streams and goroutines work
	// as usual. An Alloc the cache cannot serve asks the driver for memory
	// during the capture (CUDA's relaxed capture mode allows it); running
	// the work once eagerly first, as the trainer and Sample do, keeps the
	// driver out of it.
	//
	// Memory: Alloc and Free work during record. Every buffer allocated
	// while record runs or before, once freed, is kept by the graph until
	// its Close (the replays may use it) and counted as allocated
	// meanwhile; the cache hands it out again only then. The caller still
	// must not launch a graph once a buffer it used was replaced: the
	// replay would write the old one.
	Capture(record func() error) (Graph, error)
}

// Graph is recorded work (Grapher.Capture). It is safe for concurrent use.
type Graph interface {
	// Launch queues the recorded work on the compute stream of the device
	// that captured it, after the work queued before. It returns without
	// waiting; errors the work raises are reported as the calls' would
	// have been (an index out of range by the next synchronisation).
	Launch() error
	// Close releases the graph and gives back the memory it kept, after
	// the launches already queued (it does not wait for them). Later
	// Launches return an error matching ErrClosed; Close is idempotent.
	Close() error
}

// ErrNotCapturable is matched by the error of a Capture whose work cannot
// be recorded in a graph, and of the call that made it so.
var ErrNotCapturable = errors.New("device: not capturable in a graph")
