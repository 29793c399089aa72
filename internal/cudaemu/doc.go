// Package cudaemu is a CUDA GPU emulated on the CPU, for gocurrent's tests
// on machines without one: a shared library that exports the CUDA driver
// API and cuBLAS entry points package cuda loads (the same names, the _v2
// ones included, and the same C prototypes), with the real kernels of
// cuda/kernels compiled for the CPU behind cuLaunchKernel. Opening the CUDA
// device over it,
//
//	lib, err := cudaemu.Cached()
//	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, errors.ErrUnsupported) {
//		t.Skip(err) // no g++, or a CGO_ENABLED=0 build
//	}
//	d, err := cuda.Open(cuda.Config{DriverLibrary: lib.Path(), BLASLibrary: lib.Path()})
//
// runs the whole real device, cgo bindings included, with only the driver
// and cuBLAS themselves emulated. It is a test tool, never the shipped
// path. From a shell, `go run ./internal/cudaemu/cmd/cudaemu` prints the
// library's path for GOCURRENT_CUDA_DRIVER and GOCURRENT_CUBLAS.
//
// # The emulated GPU
//
// The kernels (emu.cc.in, emu.h.in) run on the calling thread: the blocks
// one after another, the threads of a block as fibers switched at every
// __syncthreads and warp shuffle, so barriers and shuffles behave as on a
// GPU for kernels whose barriers are block-uniform and shuffles
// warp-uniform. Each fiber runs until its next barrier; between two
// barriers the fibers run in an order drawn afresh each time
// (deterministically, from the block's index), and shared memory starts as
// 0xff bytes (NaN as a double), so a kernel that misses a barrier reads a
// word before or after another thread writes it, or reads the poison, and
// gets a wrong result: TestMissingBarrier deletes each barrier of
// cuda/kernels in turn and checks the emulator catches it. A kernel with a
// grid-wide barrier (the persistent walks' gc_grid_sync) runs the threads
// of all its blocks as fibers of one round-robin instead, each block with
// its own shared memory, and the barrier holds a fiber until every thread
// of the grid has reached it; a launch of such a kernel with more blocks
// than the device holds at once fails (a GPU could not keep them all
// resident, and would wait for ever), and so does one whose barrier some
// threads finish without. How many it holds is
// cuOccupancyMaxActiveBlocksPerMultiprocessor's answer, by an H100's
// limits (2048 threads, 32 blocks and 228 KiB of shared memory a
// multiprocessor, 1 KiB of it reserved a block; a kernel's static shared
// memory and registers, which only a GPU image knows, are not counted),
// on every multiprocessor. A block's dynamic shared memory (the launch's
// bytes, GC_SHARED_DYNAMIC) is poisoned as its static arrays are; a
// launch asking for more than its function's limit (48 KiB until
// cuFuncSetAttribute's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
// at most 227 KiB) is CUDA_ERROR_INVALID_VALUE, and a cooperative launch
// (cuLaunchCooperativeKernel) of a grid the device cannot hold at once is
// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE. On x86-64 a
// fiber switch is a few instructions (no system call, unlike swapcontext).
// It is the one CUDA emulator: the conformance suite runs on it through
// package cuda's real launch code (cuda.TestEmulatedConformance). The driver and cuBLAS (driver.cc.in) are one device named
// "gocurrent CUDA emulator (CPU)" (so a test can tell it from a GPU), of
// compute capability 9.0, with 132 multiprocessors (GOCURRENT_EMU_MULTIPROCESSORS
// sets another number, read at each cuInit, so that a test can run a kernel
// sized to the GPU on a small one), whose memory is host memory with a
// capacity of GOCURRENT_EMU_MEMORY bytes (read at each cuInit; 4 GiB by
// default).
// Everything runs under one lock when it is enqueued, so it is slow, safe
// for concurrent use, and blind to a missing wait between streams run
// eagerly (only a GPU shows those; a graph's replay shows some, below). What it does check is what a GPU would show later,
// or not at all: new
// device memory is NaN bytes (cuMemAlloc does not zero), copies, memsets
// and GEMM operands must lie inside live allocations, calls need a current
// context, and float32 GEMMs round in float32 (and to TF32 inputs in
// CUBLAS_TF32_TENSOR_OP_MATH) rather than agreeing with a CPU to the bit.
// Failures are the driver's CUresult and cuBLAS's status codes.
//
// # Stream capture and graphs
//
// A stream that captures (cuStreamBeginCapture_v2, in mode GLOBAL,
// THREAD_LOCAL or RELAXED) records the work enqueued on it instead of
// running it: copies and memsets (their pointers: a host buffer is read or
// written when the graph runs), kernels (their parameter values when
// cuLaunchKernel was called, as the driver copies them), cuBLAS GEMMs on a
// handle whose stream captures (alpha and beta as they were, cuBLAS's host
// pointer mode) and graphs launched on it. Capture crosses streams as
// CUDA's does: an event recorded on a capturing stream marks the work
// before it, a stream not capturing that waits for it joins the capture
// (a fork: its work is recorded after that work), and a wait of the
// capture's own streams for it adds that dependency (a join, when the
// origin waits). cuStreamEndCapture, on the origin only
// (CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, 903, elsewhere), takes every
// stream of the capture out of it and makes the recording a graph of
// nodes and their dependencies, or none when a forked stream has work
// that the origin's last work does not depend on
// (CUDA_ERROR_STREAM_CAPTURE_UNJOINED, 904); a wait that would merge two
// captures is CUDA_ERROR_STREAM_CAPTURE_MERGE (902) and invalidates both.
// cuGraphInstantiateWithFlags makes an executable graph with its own copy
// of the work (destroying or changing the graph later changes nothing),
// and cuGraphLaunch runs that work again when it is called, as everything
// else here, in an order its dependencies allow that runs, of the nodes
// ready, the one recorded last first: work on parallel branches then runs
// in another order than it was enqueued, so a graph missing a dependency
// computes another result than the eager calls. Arguments are checked
// at capture, as the eager calls check them, and a copy's or memset's
// device memory again at each launch, with a GEMM's: a launch whose work
// touches memory freed since fails as the eager call would
// (CUDA_ERROR_INVALID_VALUE), after the nodes before it ran and before
// those after it. cuGraphUpload only checks its arguments.
//
// What a capture forbids on a GPU is refused, and invalidates the capture,
// so cuStreamEndCapture then returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
// (901) and no graph: synchronising the capturing stream, or the context
// while any stream captures (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900);
// querying or synchronising an event last recorded in a capture
// (CUDA_ERROR_CAPTURED_EVENT, 907); cuMemAlloc, cuMemFree, cuMemHostAlloc,
// cuMemFreeHost, cuEventQuery and cuEventSynchronize from any thread while
// a GLOBAL capture goes on, or from the capturing thread of a
// THREAD_LOCAL one (900; RELAXED captures allow them); work on the legacy
// stream while a blocking stream captures
// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, 906); and any call that fails while
// its stream captures. Work on an invalidated capture is 901. Beginning a
// capture twice, or ending one that was not begun, is
// CUDA_ERROR_ILLEGAL_STATE (401); a GLOBAL or THREAD_LOCAL capture must end
// on the thread that began it (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
// 908). Each thread's own interaction mode is GLOBAL, the default
// (cuThreadExchangeStreamCaptureMode is not emulated).
//
// What it does not do: the legacy stream and CU_STREAM_PER_THREAD neither
// capture nor join a capture (900). Graphs are built by capture only (no
// cuGraphAdd*Node, no cuGraphExecUpdate), have no memory nodes or event
// nodes, and their work runs when cuGraphLaunch is called, so it is no
// faster than the eager calls. Outside graphs the streams still run one
// call after another, blind to a missing wait between them.
//
// # NCCL
//
// The library also exports the NCCL entry points package dist/nccl
// resolves (nccl.cc.in): the ranks of a communicator are goroutines of one
// process, each locked to its OS thread, on the one emulated device.
// ncclGetUniqueId names an in-process rendezvous (with NCCL_COMM_ID set,
// one derived from the address alone, as NCCL does), ncclCommInitRank
// blocks until every rank joined, and a collective (ncclAllReduce with
// ncclSum, ncclBroadcast) is the one kind of work that stays pending on
// its stream after its call returns: it runs when the last rank queues
// it, summing in rank order so every rank gets the same bits, and until
// then an event recorded after it is not complete and work queued after
// it waits in its own call. ncclCommAbort releases the rank's pending
// collectives without telling the other ranks; Lib.FailNCCL injects an
// asynchronous error (ncclCommGetAsyncError).
//
// # Building
//
// Build compiles the library with g++ into a directory of the caller's;
// Cached builds it once per process, into the user's cache directory
// under a name that is the SHA-256 of its sources and of g++'s version, so
// test binaries share one build until a source changes. Both link the
// kernels' part (emu.cc.in, which includes them) with the driver's object
// (driver.cc.in and nccl.cc.in), compiled at the same time and kept in the
// cache directory too, under the SHA-256 of its own sources: a build of
// other kernels (TestMissingBarrier's, of kernels each missing a barrier)
// compiles only the kernels' part again. Both find the
// sources next to this package's own, and so need the source tree the
// binary was built from (not -trimpath). Without g++ they return an error
// matching exec.ErrNotFound; in a CGO_ENABLED=0 build, which cannot load
// the library, one matching errors.ErrUnsupported.
package cudaemu
