// Package device is the seam between gocurrent's layers and the hardware
// they run on. A Device owns memory and runs kernels in stream order; the
// layers (package rnn), the loader and the trainer are written once against
// it, and run unchanged on the CPU device (package device/cpu, always built)
// and the CUDA device (package cuda). Both pass the conformance suite in
// device/devicetest: same inputs, same results within tolerance.
//
// # Consumers and implementers
//
// This package is the consumers' side of the seam, as database/sql is for
// databases: the interfaces (Device, Stream, Event, Kernels), the values
// that cross it (Buffer, HostBuffer, the kernels' argument structs), the
// sentinel errors, and UploadSlice and DownloadSlice. Code that runs on a
// device imports this package and never a device's own, except to open
// one. What only an implementation needs (making Buffers, reading a
// Buffer's host pointer, the argument checks every device starts its
// methods with) is in package device/driver, as database/sql/driver is for
// database drivers, so it is neither in this package's API nor in its
// users' way. A Buffer can only be made there: this package exports no
// constructor.
//
// Capabilities beyond Device are optional interfaces, discovered by type
// assertion, never by a type switch over concrete devices: Allocator (the
// device's caching allocator, for snapshots and EmptyCache) is one, and
// Grapher (work recorded once and replayed by one launch: CUDA graphs) is
// another; both devices of this module implement them.
//
// # Memory
//
// Every Buffer comes from the device's caching allocator (alloc.Caching):
// over cuMemAlloc on a GPU, over anonymous mmap segments on the CPU. A
// Buffer is a small value naming a range of device memory; Slice and Elems
// take views of it without copying. Steady-state training allocates from
// the cache only, so it neither calls the driver nor makes Go garbage, and
// MemStats means the same on both devices. Staging buffers (HostBuffer) are
// the host side of asynchronous copies: pinned on CUDA.
//
// # Streams and events
//
// Work is queued on streams and runs asynchronously to the caller, in the
// order it was queued, on the CPU device too: each CPU stream is a
// goroutine. A caller that reads a result without waiting for it (an Event,
// Synchronize, a Download) has a bug on every device, and under -race the
// CPU device shows it. Kernels run on the compute stream (Device.Stream);
// the loader copies batches on a stream of its own (NewStream, CopyToDevice)
// and the compute stream waits for the copy's event, so the copy of the next
// batch overlaps the work on the current one.
//
// # Kernels
//
// Kernels are the fused operations recurrent training needs: GEMM (row-major,
// transposes, alpha and beta, strided batches), the LSTM and GRU cell
// forward and backward (PyTorch's gate orders and GRU semantics), embedding
// and its scatter-add backward, softmax cross-entropy, seeded dropout,
// SGD/Adam/AdamW/RMSprop updates, and the small vector operations (bias,
// row sums, fill, copy, axpby, multiply, clamp, sum of squares) that clip
// gradients and move state. Each takes one argument struct whose Check
// method validates it; see Kernels for the shared rules.
//
// # Errors
//
// Misuse is an error, never a crash: a buffer of another device
// (ErrForeignBuffer), a size or shape the buffers do not match (ErrShape),
// a closed device (ErrClosed). An index out of range met while a kernel
// runs (ErrIndex) is reported by the next Synchronize, Download or
// Event.Wait, as a GPU would. Opening a device the machine lacks is an
// error matching ErrUnavailable; nothing exits or panics for it. Out of
// memory is alloc.ErrOutOfMemory, with the allocator's figures.
//
// # Scopes
//
// Several jobs share a device through scopes (NewScope, the Scoper
// capability of the CPU and CUDA devices): a Scope is a Device of its own,
// which layers, loaders and trainers run in unchanged, with its own compute
// and copy streams, its own errors (an index out of range in one job is
// reported to that job only), its own memory figures and an optional
// memory limit in the shared caching allocator, and a Close that gives
// back everything it holds. scope.go says exactly what is isolated and what
// stays shared.
//
// # Concurrency
//
// Devices, scopes, streams and events are safe for concurrent use. What is
// built over a device (rnn's layers and states, models, train's Trainer,
// loader's iterations) is used by one goroutine at a time, and refuses a
// call that meets another's with an error matching ErrBusy rather than
// race on device memory; models' shares are how one model serves many
// goroutines. Errors a device finds while work runs (ErrIndex) are the
// stream's: on a device several goroutines use, the next synchronisation
// reports them, whoever makes it.
//
// Example (CPU device, C = A·B for 2×2 matrices):
//
//	d, err := cpu.Open(cpu.Config{})
//	if err != nil { ... }
//	defer d.Close()
//	a, _ := d.Alloc(16, device.Workspace); b, _ := d.Alloc(16, device.Workspace); c, _ := d.Alloc(16, device.Workspace)
//	device.UploadSlice(d, a, []float32{1, 2, 3, 4})
//	device.UploadSlice(d, b, []float32{5, 6, 7, 8})
//	err = d.Kernels().Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 2, Alpha: 1, A: a, B: b, C: c})
//	out := make([]float32, 4)
//	err = device.DownloadSlice(d, out, c) // waits for the GEMM: [19 22 43 50]
package device
