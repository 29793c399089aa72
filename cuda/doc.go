// Package cuda is the CUDA device: device.Device on an NVIDIA GPU.
//
//	d, err := cuda.Open(cuda.Config{})
//	if errors.Is(err, device.ErrUnavailable) {
//		// no driver, no GPU, no cuBLAS, or a CGO_ENABLED=0 build: use the CPU
//	}
//
// # How it finds the driver
//
// Nothing CUDA is linked: the binary's only dynamic dependency is libc, so
// it builds on a machine without CUDA and runs on CUDA 11, 12 and 13
// machines alike. Open loads the driver, libcuda.so.1 (or
// Config.DriverLibrary), with dlopen, resolves the entry points it uses
// with dlsym (the _v2 names cuda.h maps to), calls cuInit, and then loads
// cuBLAS: Config.BLASLibrary if set, else libcublas.so.13, .12 and .11 in
// turn, whichever the dynamic loader finds first. The library never reads
// the environment; the char-RNN example passes GOCURRENT_CUBLAS and
// GOCURRENT_CUDA_DRIVER through Config (PyTorch's pip wheels keep cuBLAS
// under site-packages/nvidia/cublas/lib, off the loader's path).
//
// Everything that can be missing is an error matching
// device.ErrUnavailable that says what was missing: the driver library, a
// GPU (CUDA_ERROR_NO_DEVICE), the ordinal, a GPU of compute capability 8.0
// or later, cuBLAS, or cgo itself (a CGO_ENABLED=0 build compiles the same
// API, and Open returns that error). Nothing exits or panics for it. The
// cgo code is C declarations of our own for the handful of types used, and
// includes only <dlfcn.h> and the C standard headers.
//
// # Contexts and threads
//
// The device works in the GPU's primary context, the one the CUDA runtime
// (and so cuBLAS and PyTorch) uses. Every driver and cuBLAS call goes
// through a small C function that makes that context current on the
// calling OS thread, inside the same cgo call, when it is not already; so
// no goroutine is ever pinned with runtime.LockOSThread, and the device is
// safe for concurrent use from any goroutines. The cuBLAS handle, which
// must not be used by two threads at once, is used under a lock.
//
// A library of its own that calls the CUDA runtime on the device's
// streams (NCCL, for package dist/nccl) goes through Native, the one
// place the device pins a goroutine: it locks the goroutine to its OS
// thread, makes the context current there, and runs the library's calls
// with a stream's raw CUstream handle; buffers' Addr are CUdeviceptrs.
//
// # Memory, streams and errors
//
// Device memory comes from alloc.Caching over cuMemAlloc/cuMemFree (with
// cuMemGetInfo for the figures): after the first training step, steps
// allocate from the cache and call cuMemAlloc no more. A
// CUDA_ERROR_OUT_OF_MEMORY matches alloc.ErrOutOfMemory, which starts the
// allocator's ladder (free cached blocks, retry, then an
// *alloc.OutOfMemoryError with the figures). The cuBLAS workspace is taken
// from the cache at Open (Config.BLASWorkspace). Staging buffers come from
// alloc.HostCache over pinned, mapped host memory (cuMemHostAlloc), and
// both allocators' RecordStream use real CUDA events. The device is a
// device.Allocator: Memory returns its alloc.Caching.
//
// Kernels and cuBLAS run on the compute stream, a non-blocking stream of
// the device's own. NewStream makes more, for copies: CopyToDevice and
// CopyToHost queue cuMemcpy*Async on the stream given and return an
// event, which the compute stream waits on (Stream.Wait queues
// cuStreamWaitEvent, so neither the host nor the compute stream blocks
// for a batch still in flight). No kernel synchronises. Errors found while
// kernels run (a token id, class, sequence index or pooling step out of
// range) set a bit in a status word in device memory (a device-scope
// atomicOr, which every GPU supports; atomics into host memory over PCIe
// are not a given).
// Synchronize and Download queue a 4-byte copy of it and its reset on the
// compute stream before they wait, and Event.Wait reads it on a stream
// of its own once the event completed; all three report device.ErrIndex.
// Every failed driver or cuBLAS call is an *Error with the function, the
// code and its name.
//
// # Scopes
//
// Device.Scope opens a device.Scope: a job's Device on the GPU shared with
// others (see device.ScopeConfig for the semantics). A scope is a lane of
// its own in the device's one context: what is per scope is its compute
// stream (every kernel, cuBLAS call, Upload and Download of the scope runs
// on it), its NewStream streams, its status word with the stream that
// reads it (so an index error raised by its kernels is reported by its
// Synchronize, Download, compute events and Close only), its cuBLAS handle
// bound to its compute stream with a workspace of its own, and its
// allocation scope in the device's caching allocator (alloc.Scope: its
// segments, figures and limit; its allocator stream is its compute
// stream's). A new scope holds no memory: its first Gemm takes the cuBLAS
// workspace, of the device's size (Config.BLASWorkspace) but at most a
// sixteenth of the scope's limit, in the scope as alloc.Workspace (an
// out-of-memory in doing so is that Gemm's error). Its buffers, staging
// buffers, streams and events are foreign to the device and to other
// scopes. Close waits for its streams, reports its unreported errors and
// gives back all it holds; Device.Close closes the scopes still open
// first. The device's own methods are scope 0's: its Synchronize and
// Download neither wait for nor report the scopes' work (its MemStats is
// the whole allocator's).
//
// What is shared: the context and the kernels loaded in it, the pinned
// staging cache, the GPU's time and memory (a cuMemAlloc for one scope can
// fail for memory another holds; the allocator then releases cached
// segments, the other scopes' included, never a live block), and the
// context's fate. A sticky CUDA error, such as an illegal address or a
// kernel that traps, kills the context for every scope and the device
// alike; and releasing a segment to the driver (cuMemFree: emptying a
// cache, the out-of-memory ladder, closing a scope) waits for the whole
// context, scopes included.
//
// # Branches
//
// The device and its scopes are device.Branchers: a branch is a second
// stream of the lane's kernels, for work that may run beside the compute
// stream's. It has a CUDA stream, a cuBLAS handle bound to it with a
// workspace of its own (one handle must not serve two streams at once,
// and cublasSetStream resets the workspace) of the lane's size, taken
// when it opens from the lane's allocation scope as alloc.Workspace (as
// device/meta's branch does), a launch-argument buffer, and an allocator
// stream id for its kernels' temporaries, so that a temporary freed by its
// work is reused only by its later work (a closed branch's id goes to the
// next branch opened, whose stream first waits for the closed one's work).
// Its kernels raise index errors in the lane's status word, which the
// lane's next synchronisation after a Join reports; the counts are the
// device's. Fork is an event recorded on the compute stream and waited
// for by the branch's stream, Join the reverse; in a Capture the same
// calls are CUDA's cross-stream capture, the branch a parallel branch of
// the graph (see Graphs). The lane's Synchronize waits for its branches'
// streams, and its Close closes them.
//
// # Kernels
//
// The kernels are CUDA C in cuda/kernels/*.cu, with the calling
// convention in cuda/kernels/ABI.md. `go generate ./cuda` compiles each
// to PTX for compute_80 with nvcc (the Debian package
// nvidia-cuda-toolkit, from non-free, gives nvcc 11.8); the PTX is
// committed and embedded, each file records the SHA-256 of its sources,
// and a test fails when a source changed without regenerating. The driver
// JIT-compiles it for the GPU at Open (Ampere, Ada, Hopper).
//
// The kernels' logic is tested on machines without a GPU, on the CPU:
// TestEmulatedConformance runs the whole conformance suite
// (device/devicetest: the equations, every aliasing the ABI allows, NULL
// optional buffers, bad ids, NaNs, determinism) on the device opened over
// an emulated driver and cuBLAS (internal/cudaemu: a shared library built
// with g++ that exports the entry points this package resolves and runs
// the real kernel sources on fibers), so through the real cgo bindings and
// launch code; TestEmulatedConformanceSmallGrids runs it again with every
// grid-stride launch capped at two blocks, so that the stride loops run
// many passes. Only a GPU run shows what
// the real driver, the JIT and cuBLAS do, and whether streams are
// synchronised where they must be (the emulator runs everything at
// enqueue).
//
// Gemm is cuBLAS (Sgemm, Dgemm, and their strided-batched forms), row-major
// mapped to column-major by swapping the operands. Config.TF32 lets
// float32 GEMMs use TF32 tensor cores, as PyTorch's allow_tf32 does.
//
// A recurrent cell given its step's recurrent product (device.LSTMCell
// and GRUCell with HPrev and W, as the layers of package rnn call them) is
// one launch of a fused kernel that computes the product and the cell, up
// to Config.FuseCellsUpTo hidden units (256 by default), where a step's
// GEMM is too small to pay for a launch of its own; above that, it is a
// cuBLAS GEMM and the cell kernel, as the two calls would be. Counts says
// which: the fused step is one launch and no GEMM (two launches when the
// step writes h over the previous h, as a sampled token's does). The
// backward's step is fused the same way: a cell gradient given the next
// step's recurrent pre-activation gradient and W (device.LSTMCellGrad and
// GRUCellGrad's fused form, as rnn's walk back calls them) adds their
// product into the gradient with respect to h and runs the cell gradient
// on it in one launch, up to the same bound.
//
// A whole walk of such steps (device.Walker's LSTMWalk and GRUWalk, and
// the walks back, LSTMGradWalk and GRUGradWalk, which rnn queues for each
// window of steps, each step over its running rows with lengths) is the
// per-step calls, or, up to
// Config.WalkCellsUpTo hidden units (none by default, until a GPU run has
// measured it), one launch of a persistent kernel: each block keeps its
// slice of W_hh in shared memory from the first step to the last, each
// step is the fused kernel's arithmetic on each of its blocks' tiles, and
// the blocks, all resident (at most one a multiprocessor), meet at a
// grid-wide barrier between two steps, on two words of the launching
// stream's own after the lane's status word. Its results are the per-step
// launches' to the bit.
//
// # Graphs
//
// The device and its scopes are device.Graphers: Capture records a compute
// stream's work with the driver's stream capture, in relaxed mode (a
// goroutine may begin and end it on different OS threads, and the device
// itself refuses the waits, events and host copies a captured stream must
// not hold), and instantiates it; Graph.Launch is one cuGraphLaunch.
// cuBLAS records as it is, its workspace set before the capture (a
// scope's lazy one is set then). The entry points are optional: a driver
// before 11.4 lacks them, and Capture then returns an error matching
// device.ErrNotCapturable, so callers run their work eagerly. A branch
// forked during the capture joins it (its stream waits for an event
// recorded on the capturing stream), its work recorded with the compute
// stream's as a parallel branch of the graph, and must be joined back
// before the capture ends: else the capture fails with ErrNotCapturable
// (the driver's CUDA_ERROR_STREAM_CAPTURE_UNJOINED), and the branch, out
// of the capture as every stream of it, is usable again. Work or a Join on
// a branch not forked during the capture is refused with ErrNotCapturable;
// a branch closed during it is released when it ends. The fake driver of
// the tests records and replays, and the emulator captures across streams
// and replays a graph in an order its dependencies allow, not the
// capture's; what a GPU's driver does with the graphs (their speed, cuBLAS
// under a capture of two streams, whether the branches overlap) only a GPU
// run shows.
package cuda
