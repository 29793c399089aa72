// Package cpu is the CPU device: device.Device on the host's cores, always
// built, with the same memory policy, stream semantics and kernels as the
// CUDA device, so that everything above the seam is developed and tested
// here and runs unchanged on a GPU.
//
// # Memory
//
// Buffers come from an alloc.Caching over alloc.Host: anonymous mmap
// segments, off the Go heap, which the garbage collector neither scans nor
// moves. Config.Capacity caps them, to train under the memory limit of a
// GPU. Staging buffers come from an alloc.HostCache of their own. The
// device is a device.Allocator: Memory returns its alloc.Caching, for
// snapshots and EmptyCache.
//
// # Streams
//
// Each stream is a goroutine that runs the stream's commands in order from
// a fixed ring of command slots; queuing a kernel copies its argument
// struct into a slot, so it allocates nothing. The caller runs ahead until
// the ring is full. Events are sequence numbers in a stream. A stream that
// waits for another stream's event blocks its own goroutine, not the caller.
//
// # Kernels
//
// GEMMs go through gorgonia.org/tensor's BLAS interface: Config.BLAS, or the
// BLAS chosen with tensor.Use, except that tensor's default (gonum's pure-Go
// BLAS) is replaced by package gemm's packed AVX2/FMA SGEMM. Pointwise
// kernels (package internal/kern) are split by rows or columns across a team
// of Config.Threads goroutines when they are large enough to gain from it;
// reductions combine per-part float64 partial sums in a fixed order, so
// results do not depend on scheduling. The recurrent cells' fused forms
// (device.LSTMCell and GRUCell given their recurrent product, and their
// gradients given the next step's) gain nothing from fusing here, where a
// call costs no launch: each is the recurrent Gemm queued before the cell
// or its gradient, the same results and counts as the two calls.
//
// # Scopes
//
// Device.Scope opens a Scope (device.Scope): a lane of its own beside the
// device's, with its own compute stream goroutine, streams, errors and
// allocation scope of the shared caching allocator. The scopes' kernels
// share the device's thread team; releasing a cached segment waits for
// every stream, the scopes' included.
//
// # Concurrency
//
// The device and its scopes are safe for concurrent use. Kernels queued from several
// goroutines run in the order their calls returned.
package cpu
