package cuda

import (
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
)

// Handles of the driver and cuBLAS, as the C API returns them.
type (
	cuDevice   int32
	cuContext  uintptr
	cuStream   uintptr
	cuEvent    uintptr
	cuModule   uintptr
	cuFunction uintptr
	blasHandle uintptr
	cuGraph    uintptr
	cuExec     uintptr // a CUgraphExec
)

// api is the part of the CUDA driver and cuBLAS the device uses, loaded at
// run time. The cgo build implements it over dlopen (api_cgo.go); the
// CGO_ENABLED=0 build has no implementation, so loadAPI fails and Open
// returns device.ErrUnavailable. Keeping every C call behind this one
// interface keeps the device's own logic (streams, events, memory, the
// status word, launch shapes) the same Go code in both builds.
//
// Every call that takes a cuContext makes it current on the calling OS
// thread first, inside the same cgo call, so no goroutine ever needs
// runtime.LockOSThread and user goroutines are never pinned. Errors are
// *Error values.
type api interface {
	Init() error
	DriverVersion() (int, error)
	DeviceCount() (int, error)
	DeviceGet(ordinal int) (cuDevice, error)
	DeviceName(dev cuDevice) (string, error)
	DeviceAttribute(dev cuDevice, attr int) (int, error)
	DeviceTotalMem(dev cuDevice) (int64, error)
	PrimaryCtxRetain(dev cuDevice) (cuContext, error)
	PrimaryCtxRelease(dev cuDevice) error

	CtxSynchronize(c cuContext) error
	MemGetInfo(c cuContext) (free, total int64, err error)
	MemAlloc(c cuContext, n int64) (alloc.Ptr, error)
	MemFree(c cuContext, p alloc.Ptr) error
	// MemHostAlloc returns n bytes of pinned host memory, mapped into the
	// device's address space (CU_MEMHOSTALLOC_PORTABLE|DEVICEMAP).
	MemHostAlloc(c cuContext, n int64) (unsafe.Pointer, error)
	MemFreeHost(c cuContext, p unsafe.Pointer) error
	MemHostGetDevicePointer(c cuContext, p unsafe.Pointer) (alloc.Ptr, error)
	MemcpyHtoDAsync(c cuContext, dst alloc.Ptr, src unsafe.Pointer, n int64, s cuStream) error
	MemcpyDtoHAsync(c cuContext, dst unsafe.Pointer, src alloc.Ptr, n int64, s cuStream) error
	MemcpyDtoDAsync(c cuContext, dst, src alloc.Ptr, n int64, s cuStream) error
	// MemsetD32Async sets n 32-bit words at dst to v, in order on s.
	MemsetD32Async(c cuContext, dst alloc.Ptr, v uint32, n int64, s cuStream) error

	// StreamCreate makes a non-blocking stream (it does not synchronise
	// with the legacy default stream).
	StreamCreate(c cuContext) (cuStream, error)
	StreamDestroy(c cuContext, s cuStream) error
	StreamSynchronize(c cuContext, s cuStream) error
	StreamWaitEvent(c cuContext, s cuStream, e cuEvent) error
	// EventCreate makes an event; timing false disables timing, which makes
	// recording and waiting cheaper.
	EventCreate(c cuContext, timing bool) (cuEvent, error)
	EventDestroy(c cuContext, e cuEvent) error
	EventRecord(c cuContext, e cuEvent, s cuStream) error
	// EventQuery reports whether the event completed (CUDA_ERROR_NOT_READY
	// is false, not an error).
	EventQuery(c cuContext, e cuEvent) (bool, error)
	EventSynchronize(c cuContext, e cuEvent) error
	EventElapsed(c cuContext, start, end cuEvent) (milliseconds float32, err error)

	// ModuleLoadData JIT-compiles a PTX image (NUL-terminated); the error
	// carries the JIT's log.
	ModuleLoadData(c cuContext, image []byte) (cuModule, error)
	ModuleUnload(c cuContext, m cuModule) error
	ModuleGetFunction(c cuContext, m cuModule, name string) (cuFunction, error)
	// Launch runs f on s; args are the kernel's parameters, each in an
	// 8-byte slot (cuda/kernels/ABI.md).
	Launch(c cuContext, f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error
	// LaunchCooperative is Launch through cuLaunchCooperativeKernel: the
	// GPU starts the grid only when all its blocks can be resident at
	// once (a grid-wide barrier's need), and the driver refuses a grid
	// larger than the GPU holds (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).
	LaunchCooperative(c cuContext, f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error
	// FuncSetAttribute sets one of f's attributes (CUfunction_attribute),
	// e.g. the most dynamic shared memory its launches may ask for.
	FuncSetAttribute(c cuContext, f cuFunction, attr, value int) error
	// Occupancy is how many blocks of f, each of threads threads and
	// sharedBytes of dynamic shared memory, one multiprocessor holds at
	// once (cuOccupancyMaxActiveBlocksPerMultiprocessor).
	Occupancy(c cuContext, f cuFunction, threads int, sharedBytes uint32) (int, error)

	// Graphs reports whether the driver has the stream capture and graph
	// entry points below (CUDA 11.4 and later); without them the device
	// captures nothing and its steps run eagerly.
	Graphs() bool
	// StreamBeginCapture starts capturing s in CU_STREAM_CAPTURE_MODE_RELAXED:
	// the work queued on s is recorded into a graph, not run, until
	// StreamEndCapture. Relaxed, because the capture is begun and ended
	// from whatever OS threads the goroutine runs on, and the device itself
	// refuses what a capture must not do (waits, driver allocations).
	StreamBeginCapture(c cuContext, s cuStream) error
	// StreamEndCapture ends the capture of s and returns its graph; an
	// invalidated capture is an error and no graph.
	StreamEndCapture(c cuContext, s cuStream) (cuGraph, error)
	GraphInstantiate(c cuContext, g cuGraph) (cuExec, error)
	GraphLaunch(c cuContext, e cuExec, s cuStream) error
	GraphExecDestroy(c cuContext, e cuExec) error
	GraphDestroy(c cuContext, g cuGraph) error

	// BLASVersion is cuBLAS's version (e.g. 120804), or an error saying
	// why cuBLAS could not be loaded.
	BLASVersion() (int, error)
	// BLASLibrary is the name cuBLAS was loaded under, "" if it was not.
	BLASLibrary() string
	BLASCreate(c cuContext) (blasHandle, error)
	BLASDestroy(c cuContext, h blasHandle) error
	BLASSetStream(c cuContext, h blasHandle, s cuStream) error
	BLASSetMathMode(c cuContext, h blasHandle, mode int) error
	// BLASSetWorkspace gives cuBLAS its workspace; ok is false when this
	// cuBLAS has no cublasSetWorkspace (before 11.4), and then cuBLAS
	// allocates its own.
	BLASSetWorkspace(c cuContext, h blasHandle, p alloc.Ptr, n int64) (ok bool, err error)
	// BLASGemm is a column-major GEMM (strided batched when batch > 1);
	// double selects cublasDgemm over cublasSgemm.
	BLASGemm(c cuContext, h blasHandle, g blasGemm) error
}

// blasGemm is one column-major cuBLAS GEMM call:
// C = alpha·op(A)·op(B) + beta·C with op(A) m×k and op(B) k×n.
type blasGemm struct {
	Double                    bool
	TransA, TransB            bool
	M, N, K                   int
	Alpha, Beta               float64
	A, B, C                   alloc.Ptr
	LdA, LdB, LdC             int
	StrideA, StrideB, StrideC int64
	Batch                     int
}

// Libraries names the shared libraries loadAPI opens.
type libraries struct {
	driver string   // "" means libcuda.so.1
	blas   []string // tried in order
}

// cuBLAS math modes (cublasMath_t).
const (
	blasDefaultMath = 0
	blasTF32Math    = 3
)

// Device attributes (CUdevice_attribute) the device reads.
const (
	attrMultiprocessorCount    = 16
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	attrCooperativeLaunch      = 95
	attrSharedPerBlockOptin    = 97
)

// funcMaxDynamicShared is CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
// the most dynamic shared memory a launch of the function may ask for,
// 48 KiB less its static shared memory until set higher.
const funcMaxDynamicShared = 8
