package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"sync"
	"testing"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
)

// fakeAPI is a simulated driver for testing the device's own logic on a
// machine without a GPU: Open's checks, memory through the allocators,
// copies, streams, events, the status word, launch shapes, GEMM's
// row-major mapping, and that Close gives back everything, counting calls
// and injecting errors. Device memory is host memory (alloc.Host), so
// copies really copy; launches are recorded, not run (TestEmulatedDriver
// and TestEmulatedConformance run the kernels, over the emulated driver of
// internal/cudaemu); cuBLAS GEMMs are computed by a naive column-major
// loop, which is what checks the operand swap in Gemm. It is a test
// double only: the shipped path is api_cgo.go.
type fakeAPI struct {
	mu sync.Mutex

	initErr error
	devices int
	cc      [2]int
	blasErr error
	// blasCreateErr, if set, is what cublasCreate returns.
	blasCreateErr error

	mem, pinned *alloc.Host
	sizes       map[alloc.Ptr]int64
	pinnedSizes map[alloc.Ptr]int64

	ctxRetained, ctxReleased int
	streams, events          map[uintptr]bool
	next                     uintptr
	modules                  map[cuModule][]byte
	functions                map[cuFunction]string
	launches                 []fakeLaunch
	gemms                    []blasGemm
	gemmStreams              []cuStream // the stream each of gemms ran on: its handle's
	memAllocs                int
	blasHandles              int
	blasStream               map[blasHandle]cuStream  // each live handle's stream
	blasWorkspace            map[blasHandle]alloc.Ptr // each live handle's workspace
	workspace                alloc.Ptr                // the last workspace set
	// logStatus makes the calls that read and reset the status word (a
	// 4-byte copy to the host, a one-word memset) and stream
	// synchronisations append to statusLog, with their stream.
	logStatus bool
	statusLog []string
	// logOrder makes cuStreamDestroy and cuDevicePrimaryCtxRelease append
	// to order ("destroy N", "release"); onSync, if set, is called with
	// the stream at the start of each cuStreamSynchronize, outside the
	// fake's lock.
	logOrder bool
	order    []string
	onSync   func(s cuStream)
	// recordErr, if set, is what EventRecord returns.
	recordErr error
	// onLaunch, if set, is called with the kernel's name after each
	// successful launch, outside the fake's lock: a test's way to make
	// something happen while a kernel method is between launches.
	onLaunch func(name string)
	// noCooperative makes the GPU report no cooperative launches
	// (CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH 0); maxDynamic holds what
	// cuFuncSetAttribute set of a function's dynamic shared memory.
	noCooperative bool
	maxDynamic    map[cuFunction]int
	// noCooperativeCapture makes a cooperative launch on a capturing
	// stream fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
	// invalidate the capture, as a driver that cannot record one would.
	noCooperativeCapture bool

	// Stream capture and graphs: the work queued on a capturing stream is
	// recorded as closures that call the same methods again when a graph
	// made from it is launched. noGraphs makes Graphs report none (a
	// driver before 11.4).
	noGraphs  bool
	capturing map[cuStream]*fakeCapture // every stream taking part in a capture
	graphs    map[cuGraph][]func() error
	execs     map[cuExec][]func() error
	// captured marks the events last recorded on a capturing stream: a
	// wait for one by another stream forks that stream into the capture,
	// or joins it back into the origin.
	captured map[cuEvent]fakeMark
	// eventLog lists the event records and waits, in order: "record E on
	// S" and "S waits for E", with the handles' numbers.
	eventLog []string
}

// fakeCapture is a stream capture under way: the work recorded, in the
// order it was queued, whether something illegal during the capture
// invalidated it, and the streams in it: the origin, which began it, and
// those forked into it (cross-stream capture, as CUDA's: a stream that
// waits for an event recorded on a capturing stream joins the capture).
// last is the index in ops of each stream's last work (-1 for none since
// it joined), joined the index up to which the origin waited for a forked
// stream's work: the capture ends unjoined when a forked stream has work
// past it (CUDA_ERROR_STREAM_CAPTURE_UNJOINED).
type fakeCapture struct {
	ops          []func() error
	invalid      bool
	origin       cuStream
	last, joined map[cuStream]int
}

// fakeMark is where an event was recorded in a capture: after the work
// ops[at] of stream s.
type fakeMark struct {
	c  *fakeCapture
	s  cuStream
	at int
}

type fakeLaunch struct {
	name        string
	grid, block [3]uint32
	shared      uint32 // dynamic shared memory a block
	cooperative bool   // through cuLaunchCooperativeKernel
	args        []uint64
	stream      cuStream
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{
		devices: 1, cc: [2]int{9, 0},
		mem: alloc.NewHost(1 << 30), pinned: alloc.NewHost(0),
		sizes: map[alloc.Ptr]int64{}, pinnedSizes: map[alloc.Ptr]int64{},
		streams: map[uintptr]bool{}, events: map[uintptr]bool{},
		modules: map[cuModule][]byte{}, functions: map[cuFunction]string{},
		blasStream: map[blasHandle]cuStream{}, blasWorkspace: map[blasHandle]alloc.Ptr{},
		capturing: map[cuStream]*fakeCapture{}, graphs: map[cuGraph][]func() error{}, execs: map[cuExec][]func() error{},
		captured: map[cuEvent]fakeMark{},
	}
}

var _ api = (*fakeAPI)(nil)

func (f *fakeAPI) handle() uintptr { f.next++; return f.next }

func (f *fakeAPI) Init() error                 { return f.initErr }
func (f *fakeAPI) DriverVersion() (int, error) { return 12080, nil }
func (f *fakeAPI) DeviceCount() (int, error)   { return f.devices, nil }
func (f *fakeAPI) DeviceGet(ordinal int) (cuDevice, error) {
	if ordinal >= f.devices {
		return 0, newError("cuDeviceGet", 101, "")
	}
	return cuDevice(ordinal), nil
}
func (f *fakeAPI) DeviceName(cuDevice) (string, error) { return "Fake GPU", nil }
func (f *fakeAPI) DeviceAttribute(_ cuDevice, attr int) (int, error) {
	switch attr {
	case attrComputeCapabilityMajor:
		return f.cc[0], nil
	case attrComputeCapabilityMinor:
		return f.cc[1], nil
	case attrMultiprocessorCount:
		return 132, nil
	case attrCooperativeLaunch:
		if f.noCooperative {
			return 0, nil
		}
		return 1, nil
	case attrSharedPerBlockOptin:
		return fakeSharedOptin, nil
	}
	return 0, newError("cuDeviceGetAttribute", 1, "")
}
func (f *fakeAPI) DeviceTotalMem(cuDevice) (int64, error) { return 1 << 30, nil }
func (f *fakeAPI) PrimaryCtxRetain(cuDevice) (cuContext, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctxRetained++
	return cuContext(0xc0), nil
}
func (f *fakeAPI) PrimaryCtxRelease(cuDevice) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctxReleased++
	if f.logOrder {
		f.order = append(f.order, "release")
	}
	return nil
}

func (f *fakeAPI) CtxSynchronize(cuContext) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.capturing {
		c.invalid = true
		return newError("cuCtxSynchronize", 900, "")
	}
	return nil
}
func (f *fakeAPI) MemGetInfo(cuContext) (int64, int64, error) {
	return f.mem.MemInfo()
}

func (f *fakeAPI) MemAlloc(_ cuContext, n int64) (alloc.Ptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.mem.Allocate(n)
	if err != nil {
		return 0, newError("cuMemAlloc", 2, "") // the host source's capacity is the GPU's memory
	}
	f.sizes[p] = n
	f.memAllocs++
	return p, nil
}

func (f *fakeAPI) MemFree(_ cuContext, p alloc.Ptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.sizes[p]
	if !ok {
		return newError("cuMemFree", 1, "")
	}
	delete(f.sizes, p)
	return f.mem.Release(p, n)
}

func (f *fakeAPI) MemHostAlloc(_ cuContext, n int64) (unsafe.Pointer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.pinned.Allocate(n)
	if err != nil {
		return nil, newError("cuMemHostAlloc", 2, "")
	}
	f.pinnedSizes[p] = n
	b, err := f.pinned.Bytes(p, n)
	if err != nil {
		return nil, err
	}
	return unsafe.Pointer(unsafe.SliceData(b)), nil
}

func (f *fakeAPI) MemFreeHost(_ cuContext, p unsafe.Pointer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ptr := alloc.Ptr(uintptr(p))
	n, ok := f.pinnedSizes[ptr]
	if !ok {
		return newError("cuMemFreeHost", 1, "")
	}
	delete(f.pinnedSizes, ptr)
	return f.pinned.Release(ptr, n)
}

func (f *fakeAPI) MemHostGetDevicePointer(_ cuContext, p unsafe.Pointer) (alloc.Ptr, error) {
	return alloc.Ptr(uintptr(p)), nil // unified addressing: the same address
}

// devBytes is the device memory at p.
func (f *fakeAPI) devBytes(p alloc.Ptr, n int64) ([]byte, error) {
	b, err := f.mem.Bytes(p, n)
	if err != nil {
		return nil, newError("cuMemcpy", 1, "")
	}
	return b, nil
}

func (f *fakeAPI) MemcpyHtoDAsync(c cuContext, dst alloc.Ptr, src unsafe.Pointer, n int64, s cuStream) error {
	if f.record(s, func() error { return f.MemcpyHtoDAsync(c, dst, src, n, s) }) {
		return nil
	}
	b, err := f.devBytes(dst, n)
	if err == nil {
		copy(b, unsafe.Slice((*byte)(src), n))
	}
	return err
}

func (f *fakeAPI) log(op string, s cuStream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logStatus {
		f.statusLog = append(f.statusLog, fmt.Sprintf("%s %d", op, s))
	}
}

func (f *fakeAPI) MemcpyDtoHAsync(c cuContext, dst unsafe.Pointer, src alloc.Ptr, n int64, s cuStream) error {
	if f.record(s, func() error { return f.MemcpyDtoHAsync(c, dst, src, n, s) }) {
		return nil
	}
	if n == 4 {
		f.log("copy", s)
	}
	b, err := f.devBytes(src, n)
	if err == nil {
		copy(unsafe.Slice((*byte)(dst), n), b)
	}
	return err
}

func (f *fakeAPI) MemcpyDtoDAsync(c cuContext, dst, src alloc.Ptr, n int64, st cuStream) error {
	if f.record(st, func() error { return f.MemcpyDtoDAsync(c, dst, src, n, st) }) {
		return nil
	}
	d, err := f.devBytes(dst, n)
	if err != nil {
		return err
	}
	s, err := f.devBytes(src, n)
	if err == nil {
		copy(d, s)
	}
	return err
}

func (f *fakeAPI) MemsetD32Async(c cuContext, dst alloc.Ptr, v uint32, n int64, s cuStream) error {
	if f.record(s, func() error { return f.MemsetD32Async(c, dst, v, n, s) }) {
		return nil
	}
	f.log("zero", s)
	b, err := f.devBytes(dst, 4*n)
	if err != nil {
		return err
	}
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return nil
}

func (f *fakeAPI) StreamCreate(cuContext) (cuStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.handle()
	f.streams[h] = true
	return cuStream(h), nil
}

func (f *fakeAPI) StreamDestroy(_ cuContext, s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.streams[uintptr(s)] {
		return newError("cuStreamDestroy", 400, "")
	}
	if c := f.capturing[s]; c != nil {
		// The device never destroys a stream taking part in a capture
		// (a branch closed during one is released at its end).
		c.invalid = true
		return newError("cuStreamDestroy", 900, "")
	}
	delete(f.streams, uintptr(s))
	if f.logOrder {
		f.order = append(f.order, fmt.Sprintf("destroy %d", s))
	}
	return nil
}

func (f *fakeAPI) StreamSynchronize(_ cuContext, s cuStream) error {
	f.mu.Lock()
	hook := f.onSync
	if c := f.capturing[s]; c != nil {
		c.invalid = true
		f.mu.Unlock()
		return newError("cuStreamSynchronize", 900, "") // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	}
	f.mu.Unlock()
	if hook != nil {
		hook(s)
	}
	f.log("sync", s)
	return nil
}

// StreamWaitEvent logs the wait. Waiting for an event recorded in a
// capture forks a stream not capturing into that capture, or, waited for
// by the capture's origin, joins the event's stream back up to the event;
// a wait across two captures is CUDA_ERROR_STREAM_CAPTURE_MERGE, for an
// event of a capture that ended CUDA_ERROR_CAPTURED_EVENT.
func (f *fakeAPI) StreamWaitEvent(_ cuContext, s cuStream, e cuEvent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.eventLog = append(f.eventLog, fmt.Sprintf("%d waits for %d", s, e))
	m, ok := f.captured[e]
	if !ok {
		return nil
	}
	c := f.capturing[s]
	switch {
	case f.capturing[m.c.origin] != m.c:
		if c != nil {
			c.invalid = true
		}
		return newError("cuStreamWaitEvent", 907, "") // CUDA_ERROR_CAPTURED_EVENT
	case c == nil:
		f.capturing[s] = m.c
		m.c.last[s] = -1
	case c != m.c:
		c.invalid, m.c.invalid = true, true
		return newError("cuStreamWaitEvent", 902, "") // CUDA_ERROR_STREAM_CAPTURE_MERGE
	case s == c.origin && m.s != s:
		if j, ok := c.joined[m.s]; !ok || m.at > j {
			c.joined[m.s] = m.at
		}
	}
	return nil
}

func (f *fakeAPI) EventCreate(cuContext, bool) (cuEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.handle()
	f.events[h] = true
	return cuEvent(h), nil
}

func (f *fakeAPI) EventDestroy(_ cuContext, e cuEvent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.events[uintptr(e)] {
		return newError("cuEventDestroy", 400, "")
	}
	delete(f.events, uintptr(e))
	return nil
}

// EventRecord logs the record; on a capturing stream it marks the event
// as recorded in the capture, after the stream's work so far.
func (f *fakeAPI) EventRecord(_ cuContext, e cuEvent, s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.eventLog = append(f.eventLog, fmt.Sprintf("record %d on %d", e, s))
	if c := f.capturing[s]; c != nil {
		f.captured[e] = fakeMark{c: c, s: s, at: c.last[s]}
		return nil
	}
	delete(f.captured, e)
	return f.recordErr
}

func (f *fakeAPI) EventQuery(cuContext, cuEvent) (bool, error)               { return true, nil }
func (f *fakeAPI) EventSynchronize(cuContext, cuEvent) error                 { return nil }
func (f *fakeAPI) EventElapsed(cuContext, cuEvent, cuEvent) (float32, error) { return 0, nil }

func (f *fakeAPI) ModuleLoadData(_ cuContext, image []byte) (cuModule, error) {
	if len(image) == 0 || image[len(image)-1] != 0 || !bytes.Contains(image, []byte(".entry")) {
		return 0, newError("cuModuleLoadDataEx", 218, "") // CUDA_ERROR_INVALID_PTX
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := cuModule(f.handle())
	f.modules[m] = image
	return m, nil
}

func (f *fakeAPI) ModuleUnload(_ cuContext, m cuModule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.modules[m]; !ok {
		return newError("cuModuleUnload", 400, "")
	}
	delete(f.modules, m)
	return nil
}

// ModuleGetFunction finds name only if the PTX declares it as an entry
// point, so opening the fake device checks that every kernel of the ABI
// is in the embedded PTX.
func (f *fakeAPI) ModuleGetFunction(_ cuContext, m cuModule, name string) (cuFunction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	entry := regexp.MustCompile(`\.entry\s+` + regexp.QuoteMeta(name) + `\s*\(`)
	if !entry.Match(f.modules[m]) {
		return 0, newError("cuModuleGetFunction", 500, "") // CUDA_ERROR_NOT_FOUND
	}
	h := cuFunction(f.handle())
	f.functions[h] = name
	return h, nil
}

// Launch records the launch, and runs one kernel's index check:
// gc_embedding_* raises statusEmbedding in the status word it is given
// when an id is out of range, as the kernel does on the GPU, so that tests
// see an index error reach the status word of the lane that launched it.
func (f *fakeAPI) Launch(c cuContext, fn cuFunction, grid, block [3]uint32, shared uint32, s cuStream, args []uint64) error {
	return f.launch(false, c, fn, grid, block, shared, s, args)
}

// LaunchCooperative is Launch, marked cooperative, and refused with more
// blocks than the GPU holds at once (Occupancy on each multiprocessor).
func (f *fakeAPI) LaunchCooperative(c cuContext, fn cuFunction, grid, block [3]uint32, shared uint32, s cuStream, args []uint64) error {
	return f.launch(true, c, fn, grid, block, shared, s, args)
}

func (f *fakeAPI) launch(cooperative bool, c cuContext, fn cuFunction, grid, block [3]uint32, shared uint32, s cuStream, args []uint64) error {
	call := "cuLaunchKernel"
	if cooperative {
		call = "cuLaunchCooperativeKernel"
		n, err := f.Occupancy(c, fn, int(block[0]*block[1]*block[2]), shared)
		if err != nil {
			return err
		}
		if int64(grid[0])*int64(grid[1])*int64(grid[2]) > int64(n)*132 {
			return newError(call, 720, "") // CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
		}
	}
	if cooperative && f.refuseInCapture(s) {
		return newError(call, 900, "") // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	}
	// The launch's arguments are read now, as cuLaunchKernel does during
	// a capture: later changes to args do not reach the graph.
	saved := append([]uint64(nil), args...)
	if f.record(s, func() error { return f.launch(cooperative, c, fn, grid, block, shared, s, saved) }) {
		return nil
	}
	f.mu.Lock()
	name, ok := f.functions[fn]
	if ok && int(shared) > f.dynamicLimit(fn) {
		f.mu.Unlock()
		return newError(call, 1, "") // CUDA_ERROR_INVALID_VALUE
	}
	if ok {
		f.launches = append(f.launches, fakeLaunch{name: name, grid: grid, block: block, shared: shared, cooperative: cooperative,
			args: append([]uint64(nil), args...), stream: s})
	}
	hook := f.onLaunch
	f.mu.Unlock()
	if !ok {
		return newError(call, 400, "")
	}
	if name == "gc_embedding_f32" || name == "gc_embedding_f64" {
		// table, ids, out, n, dim, vocab, status (ABI.md)
		if err := f.checkIDs(alloc.Ptr(args[1]), int64(args[3]), int64(args[5]), alloc.Ptr(args[6]), statusEmbedding); err != nil {
			return err
		}
	}
	if hook != nil {
		hook(name)
	}
	return nil
}

// fakeSharedOptin is the fake GPU's opt-in shared memory a block, an
// H100's 227 KiB.
const fakeSharedOptin = 227 << 10

// dynamicLimit is the most dynamic shared memory a launch of fn may ask
// for: 48 KiB until FuncSetAttribute says otherwise. f.mu is held.
func (f *fakeAPI) dynamicLimit(fn cuFunction) int {
	if n, ok := f.maxDynamic[fn]; ok {
		return n
	}
	return 48 << 10
}

func (f *fakeAPI) FuncSetAttribute(_ cuContext, fn cuFunction, attr, value int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.functions[fn]; !ok {
		return newError("cuFuncSetAttribute", 400, "")
	}
	if attr != funcMaxDynamicShared || value < 0 || value > fakeSharedOptin {
		return newError("cuFuncSetAttribute", 1, "")
	}
	if f.maxDynamic == nil {
		f.maxDynamic = map[cuFunction]int{}
	}
	f.maxDynamic[fn] = value
	return nil
}

// Occupancy counts as the emulator does (internal/cudaemu's
// emu_occupancy): 2048 threads, 32 blocks and 228 KiB of shared memory a
// multiprocessor, 1 KiB of it reserved a block; none past the function's
// dynamic limit.
func (f *fakeAPI) Occupancy(_ cuContext, fn cuFunction, threads int, shared uint32) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.functions[fn]; !ok {
		return 0, newError("cuOccupancyMaxActiveBlocksPerMultiprocessor", 400, "")
	}
	if threads <= 0 || threads > 1024 {
		return 0, newError("cuOccupancyMaxActiveBlocksPerMultiprocessor", 1, "")
	}
	if int(shared) > f.dynamicLimit(fn) {
		return 0, nil
	}
	return min(32, 2048/threads, (228<<10)/(int(shared)+1024)), nil
}

// checkIDs ors bit into the status word at status if one of the n int32
// ids at p is outside [0, vocab).
func (f *fakeAPI) checkIDs(p alloc.Ptr, n, vocab int64, status alloc.Ptr, bit uint32) error {
	ids, err := f.devBytes(p, 4*n)
	if err != nil {
		return err
	}
	for i := range n {
		if id := int32(binary.LittleEndian.Uint32(ids[4*i:])); id < 0 || int64(id) >= vocab {
			w, err := f.devBytes(status, 4)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint32(w, binary.LittleEndian.Uint32(w)|bit)
			return nil
		}
	}
	return nil
}

func (f *fakeAPI) BLASVersion() (int, error) {
	if f.blasErr != nil {
		return 0, f.blasErr
	}
	return 120804, nil
}

func (f *fakeAPI) BLASLibrary() string { return "libcublas.so.fake" }

func (f *fakeAPI) BLASCreate(cuContext) (blasHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blasCreateErr != nil {
		return 0, f.blasCreateErr
	}
	f.blasHandles++
	return blasHandle(f.handle()), nil
}

func (f *fakeAPI) BLASDestroy(_ cuContext, h blasHandle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blasHandles--
	delete(f.blasStream, h)
	delete(f.blasWorkspace, h)
	return nil
}

// BLASSetStream binds h to s and, as cuBLAS does, resets its workspace.
func (f *fakeAPI) BLASSetStream(_ cuContext, h blasHandle, s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blasStream[h] = s
	delete(f.blasWorkspace, h)
	return nil
}

func (f *fakeAPI) BLASSetMathMode(cuContext, blasHandle, int) error { return nil }
func (f *fakeAPI) BLASSetWorkspace(_ cuContext, h blasHandle, p alloc.Ptr, _ int64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workspace = p
	f.blasWorkspace[h] = p
	return true, nil
}

// BLASGemm computes the column-major GEMM with a naive loop, as cuBLAS's
// reference documentation defines it.
func (f *fakeAPI) BLASGemm(c cuContext, h blasHandle, g blasGemm) error {
	f.mu.Lock()
	s := f.blasStream[h]
	f.mu.Unlock()
	if f.record(s, func() error { return f.BLASGemm(c, h, g) }) {
		return nil
	}
	f.mu.Lock()
	f.gemms = append(f.gemms, g)
	f.gemmStreams = append(f.gemmStreams, f.blasStream[h])
	f.mu.Unlock()
	size := int64(4)
	if g.Double {
		size = 8
	}
	load := func(p alloc.Ptr, i int64) float64 {
		b, err := f.mem.Bytes(p+alloc.Ptr(i*size), size)
		if err != nil {
			panic(fmt.Sprintf("fake cuBLAS: read outside device memory at %v+%d", p, i))
		}
		if g.Double {
			return *(*float64)(unsafe.Pointer(&b[0]))
		}
		return float64(*(*float32)(unsafe.Pointer(&b[0])))
	}
	store := func(p alloc.Ptr, i int64, v float64) {
		b, err := f.mem.Bytes(p+alloc.Ptr(i*size), size)
		if err != nil {
			panic(fmt.Sprintf("fake cuBLAS: write outside device memory at %v+%d", p, i))
		}
		if g.Double {
			*(*float64)(unsafe.Pointer(&b[0])) = v
		} else {
			*(*float32)(unsafe.Pointer(&b[0])) = float32(v)
		}
	}
	batch := max(g.Batch, 1)
	for bi := range int64(batch) {
		for j := range int64(g.N) {
			for i := range int64(g.M) {
				var s float64
				for l := range int64(g.K) {
					// Column-major: element (r, c) of a matrix with leading
					// dimension ld is at r + c·ld.
					var a, b float64
					if g.TransA {
						a = load(g.A, bi*g.StrideA+l+i*int64(g.LdA))
					} else {
						a = load(g.A, bi*g.StrideA+i+l*int64(g.LdA))
					}
					if g.TransB {
						b = load(g.B, bi*g.StrideB+j+l*int64(g.LdB))
					} else {
						b = load(g.B, bi*g.StrideB+l+j*int64(g.LdB))
					}
					s += a * b
				}
				at := bi*g.StrideC + i + j*int64(g.LdC)
				v := g.Alpha * s
				if g.Beta != 0 {
					v += g.Beta * load(g.C, at)
				}
				if math.IsNaN(v) && g.Beta == 0 && !math.IsNaN(s) {
					panic("fake cuBLAS: NaN from C with beta 0")
				}
				store(g.C, at, v)
			}
		}
	}
	return nil
}

// record appends op to the capture s takes part in and reports true when
// s is being captured; false, and nothing recorded, when it is not. The
// ops of all the capture's streams go into one list, in the order they
// were queued, which is an order every fork and join allows.
// refuseInCapture reports whether a cooperative launch on s is refused
// (noCooperativeCapture, s capturing), invalidating the capture if so.
func (f *fakeAPI) refuseInCapture(s cuStream) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.capturing[s]
	if c == nil || !f.noCooperativeCapture {
		return false
	}
	c.invalid = true
	return true
}

func (f *fakeAPI) record(s cuStream, op func() error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.capturing[s]
	if c == nil {
		return false
	}
	c.ops = append(c.ops, op)
	c.last[s] = len(c.ops) - 1
	return true
}

func (f *fakeAPI) Graphs() bool { return !f.noGraphs }

func (f *fakeAPI) StreamBeginCapture(_ cuContext, s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.streams[uintptr(s)] {
		return newError("cuStreamBeginCapture", 400, "")
	}
	if f.capturing[s] != nil {
		return newError("cuStreamBeginCapture", 401, "") // CUDA_ERROR_ILLEGAL_STATE
	}
	f.capturing[s] = &fakeCapture{origin: s, last: map[cuStream]int{s: -1}, joined: map[cuStream]int{}}
	return nil
}

func (f *fakeAPI) StreamEndCapture(_ cuContext, s cuStream) (cuGraph, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.capturing[s]
	if c == nil {
		return 0, newError("cuStreamEndCapture", 401, "")
	}
	if c.origin != s {
		c.invalid = true
		return 0, newError("cuStreamEndCapture", 903, "") // CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
	}
	// Every stream in the capture leaves it, joined or not.
	for st := range c.last {
		delete(f.capturing, st)
	}
	if c.invalid {
		return 0, newError("cuStreamEndCapture", 901, "") // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	}
	for st, last := range c.last {
		if j, ok := c.joined[st]; st != s && last >= 0 && (!ok || last > j) {
			return 0, newError("cuStreamEndCapture", 904, "") // CUDA_ERROR_STREAM_CAPTURE_UNJOINED
		}
	}
	g := cuGraph(f.handle())
	f.graphs[g] = c.ops
	return g, nil
}

func (f *fakeAPI) GraphInstantiate(_ cuContext, g cuGraph) (cuExec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops, ok := f.graphs[g]
	if !ok {
		return 0, newError("cuGraphInstantiateWithFlags", 400, "")
	}
	e := cuExec(f.handle())
	f.execs[e] = ops
	return e, nil
}

// GraphLaunch runs the graph's work at once, in the order it was
// captured (the fake runs all work at enqueue).
func (f *fakeAPI) GraphLaunch(_ cuContext, e cuExec, s cuStream) error {
	f.mu.Lock()
	ops, ok := f.execs[e]
	capturing := f.capturing[s] != nil
	f.mu.Unlock()
	switch {
	case !ok:
		return newError("cuGraphLaunch", 400, "")
	case capturing:
		return newError("cuGraphLaunch", 900, "")
	}
	for _, op := range ops {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeAPI) GraphExecDestroy(_ cuContext, e cuExec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.execs[e]; !ok {
		return newError("cuGraphExecDestroy", 400, "")
	}
	delete(f.execs, e)
	return nil
}

func (f *fakeAPI) GraphDestroy(_ cuContext, g cuGraph) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.graphs[g]; !ok {
		return newError("cuGraphDestroy", 400, "")
	}
	delete(f.graphs, g)
	return nil
}

// checkReleased fails t unless every driver object the fake handed out
// (segments, pinned memory, events, streams, modules, cuBLAS handles,
// context references) was given back: what a closed device must leave.
func (f *fakeAPI) checkReleased(t *testing.T) {
	t.Helper()
	for what, n := range map[string]int{
		"device segments": len(f.sizes), "pinned segments": len(f.pinnedSizes), "events": len(f.events),
		"streams": len(f.streams), "modules": len(f.modules), "cuBLAS handles": f.blasHandles,
		"context references": f.ctxRetained - f.ctxReleased, "graphs": len(f.graphs), "executable graphs": len(f.execs),
		"captures": len(f.capturing),
	} {
		if n != 0 {
			t.Errorf("after Close, %d %s are still held", n, what)
		}
	}
}
