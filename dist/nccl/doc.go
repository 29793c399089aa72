// Package nccl is dist.Comm over NVIDIA's NCCL, for data-parallel
// training on CUDA devices (package cuda): the gradients' all-reduce and
// the weights' broadcast run as NCCL collectives on the device's own
// streams, ordered with its kernels.
//
// NCCL is loaded at run time with dlopen, as the CUDA driver and cuBLAS
// are, through our own declarations of its C API (no NCCL header at
// build time): dist.Config.NCCLLibrary names the library; "" tries
// libnccl.so.2 on the dynamic linker's path, then the copies PyTorch's
// pip wheels install (site-packages/nvidia/nccl/lib under the python3
// folders of /usr/lib, /usr/local/lib, /opt/conda/lib and ~/.local/lib),
// then the CUDA toolkit's and the distribution's library folders. A
// missing library or entry point, or a CGO_ENABLED=0 build, is an error
// wrapping dist.ErrUnavailable that says what is missing.
//
// # Joining a job
//
// Every rank opens its Comm with the same UniqueID (128 bytes). Rank 0
// makes it with NewUniqueID and the job ships it to the others before
// they Open: under mpirun, with MPI's broadcast (package dist/mpi), as
// NCCL's own examples do. Under torchrun, where only MASTER_ADDR is
// known, IDFromAddress derives the same id on every rank from an address
// on rank 0's host (NCCL_COMM_ID), which works when the hosts share a
// subnet. Open blocks until every rank joined.
//
//	id, err := nccl.NewUniqueID(cfg)         // rank 0; then broadcast id
//	comm, err := nccl.Open(gpu, rank, size, id, cfg)
//	ev, err := comm.AllReduce(grads, device.Float32, gpu.Stream())
//
// # Concurrency
//
// NCCL runs on the OS thread of the call, with the device's context made
// current there: every call goes through the device's Native hook
// (cuda.Device.Native). One rank per GPU; one goroutine at a time uses a
// Comm, except Abort and Err.
//
// # Errors and hangs
//
// Every ncclResult_t other than ncclSuccess is an *Error carrying
// ncclGetErrorString's text. NCCL never times out a collective; each one
// is watched (dist.Watchdog) from its call until its event completes, by
// polling the event and ncclCommGetAsyncError. Past dist.Config's
// deadline (a *dist.TimeoutError), on an asynchronous error, or when NCCL
// refuses a collective, the communicator is aborted: ncclCommAbort
// (never ncclCommDestroy, which could wait for ever for the other ranks),
// Err set, and every later call an error wrapping dist.ErrAborted. Close
// destroys a communicator that works.
//
// # Testing without a GPU
//
// The CUDA emulator (internal/cudaemu) exports NCCL's entry points too,
// an in-process NCCL whose ranks are goroutines: this package's tests
// open a device and a Comm per goroutine over it, through the real cgo
// bindings. TestGPU runs one rank on a real GPU (.ci/gpu-run dist).
package nccl
