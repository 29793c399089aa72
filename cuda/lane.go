package cuda

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	devdriver "github.com/gocurrent/gocurrent/device/driver"
)

// lane is where one job's work runs on the GPU: the device's own (scope
// 0) or a Scope's. Each lane has what makes a job independent of the
// others in the one context: a compute stream, a status word that its
// kernels raise index errors in (with its host copy and the stream that
// reads it), a cuBLAS handle bound to its compute stream with a workspace
// of its own, the NewStream streams it made, and an allocation scope of
// the device's caching allocator. Its buffers, staging buffers, streams
// and events belong to owner, the Device or the Scope, and to no other
// lane. The Device and Scope embed it for the methods they share.
type lane struct {
	d      *Device
	owner  device.Device // the Device or the Scope: its buffers' Device
	name   string        // owner.Name()
	label  string        // "the device" or "the scope", in messages
	scope  alloc.Scope   // its allocation scope, 0 for the device's own
	closed atomic.Bool   // a Scope's Close began (the device's lane closes with d)

	// compute runs the lane's kernels, cuBLAS, Upload and Download. Its
	// allocator stream id is the one the lane allocates on: a cached block
	// is reused only by later work of the same stream (and scope).
	compute *stream

	// statusDev is the word in device memory that the lane's kernels raise
	// index errors in (status* bits, with a device-scope atomicOr). The
	// host learns it at the synchronisation points: a 4-byte copy into
	// statusHost, pinned, queued before the wait (see readStatus). Device
	// memory rather than mapped host memory, because atomics from the GPU
	// into host memory over PCIe are not something every platform offers.
	//
	// After the word, in the same allocation, come the grid barriers of
	// the lane's persistent walks (walkSlots of them, two words each): one
	// for each stream that may run a walk while another does, the compute
	// stream's first (barrier).
	statusDev    alloc.Ptr
	statusHost   unsafe.Pointer
	statusStream cuStream   // reads the word without waiting for the compute stream
	statusMu     sync.Mutex // one status read at a time: they share statusHost

	// queue queues the lane's kernels and cuBLAS calls on the compute
	// stream: its cuBLAS handle and workspace, its launch arguments.
	queue

	graphs graphs // its CUDA graphs (graph.go)

	// Guarded by d.mu: the NewStream streams still open, by allocator
	// stream id, the branches still open (branch.go), and (for a scope)
	// the staging buffers it still holds, which its Close gives back.
	streams  map[alloc.Stream]*stream
	branches map[*branch]struct{}
	// bars is how many of the walks' barriers the compute stream and the
	// branches' allocator stream ids have taken (barrier).
	bars    int
	staging map[alloc.Ptr]struct{}
	// idle are the allocator stream ids of closed branches, for the next
	// branch to take, each with an event recorded after the closed
	// branch's work (guarded by d.mu).
	idle []idleID
}

// queue is what queues a lane's kernels on one of its streams, the compute
// stream or a branch's (branch.go): the stream, a cuBLAS handle bound to it
// with a workspace of its own (one handle must not serve two streams at
// once, and cublasSetStream resets the workspace), the buffer its launches'
// arguments pass through, and the allocator stream id its kernels'
// temporaries come from, so that a temporary freed by its work is reused
// only by work queued after it on the same stream.
type queue struct {
	ln    *lane
	on    cuStream     // the stream it queues on
	temps alloc.Stream // the allocator stream its temporaries come from
	br    *branch      // the branch it queues for, nil for the compute stream
	bar   alloc.Ptr    // its persistent walks' grid barrier, 0 for none (barrier)

	blasMu    sync.Mutex // a cuBLAS handle must not be used by two threads at once
	blas      blasHandle
	workspace alloc.Ptr
	wsBytes   int64 // the workspace's size
	wsWant    int64 // the workspace's size to be, while workspace is 0

	launchMu sync.Mutex // guards args
	args     [32]uint64
}

// checkOpen is the check every kernel call begins with: an open lane and,
// on a branch, an open branch that may queue work now (branch.check).
func (q *queue) checkOpen(what string) error {
	if err := q.ln.checkOpen(what); err != nil {
		return err
	}
	if q.br != nil {
		return q.br.check(what)
	}
	return nil
}

func (l *lane) checkOpen(what string) error {
	if l.d.closed.Load() {
		return fmt.Errorf("%s: %s: the device is %w", l.name, what, device.ErrClosed)
	}
	if l.closed.Load() {
		return fmt.Errorf("%s: %s: %s is %w", l.name, what, l.label, device.ErrClosed)
	}
	return nil
}

// isClosed reports whether the lane or its device is closed.
func (l *lane) isClosed() bool { return l.closed.Load() || l.d.closed.Load() }

// allocStream is the allocator stream the lane allocates on.
func (l *lane) allocStream() alloc.Stream { return l.compute.id }

// start makes the lane's compute stream, with allocator stream id id, and
// its status word; startBLAS then makes its cuBLAS handle. On error,
// releaseStreams undoes whatever it made.
func (l *lane) start(id alloc.Stream) error {
	a, c := l.d.api, l.d.ctx
	s, err := a.StreamCreate(c)
	if err != nil {
		return fmt.Errorf("creating the compute stream: %w", err)
	}
	l.compute = &stream{ln: l, s: s, id: id, compute: true}
	l.queue.ln, l.queue.on, l.queue.temps = l, s, id
	return l.startStatus()
}

// startBLAS makes the queue's cuBLAS handle, on its stream, with a
// workspace of ws bytes (none for 0) from its lane's allocation scope:
// allocated now, or by the first Gemm when lazy is set.
func (q *queue) startBLAS(ws int64, lazy bool) error {
	d := q.ln.d
	a, c := d.api, d.ctx
	var err error
	if q.blas, err = a.BLASCreate(c); err != nil {
		return fmt.Errorf("creating the cuBLAS handle: %w", err)
	}
	if err := a.BLASSetStream(c, q.blas, q.on); err != nil {
		return err
	}
	mode := blasDefaultMath
	if d.cfg.TF32 {
		mode = blasTF32Math
	}
	if err := a.BLASSetMathMode(c, q.blas, mode); err != nil {
		return err
	}
	q.wsWant = ws
	if lazy {
		return nil
	}
	return q.setWorkspace()
}

// setWorkspace gives the cuBLAS handle its workspace, q.wsWant bytes from
// the lane's allocation scope on the lane's allocator stream (a branch's
// too: its Close frees it after the compute stream's wait for its work), if
// it has none yet; it is set after the stream, because cublasSetStream
// resets it. When this cuBLAS takes no workspace (before 11.4) none is
// kept, and cuBLAS uses its own. At Open (the device), Branch, or under
// blasMu (a scope's first Gemm).
func (q *queue) setWorkspace() error {
	if q.workspace != 0 || q.wsWant == 0 {
		return nil
	}
	l := q.ln
	ws := q.wsWant
	p, err := l.d.mem.AllocIn(ws, l.allocStream(), alloc.Workspace, l.scope)
	if err != nil {
		return fmt.Errorf("allocating the cuBLAS workspace: %w", err)
	}
	ok, err := l.d.api.BLASSetWorkspace(l.d.ctx, q.blas, p, ws)
	if err != nil || !ok {
		_ = l.d.mem.Free(p)
		if err == nil {
			q.wsWant = 0 // this cuBLAS has no cublasSetWorkspace
		}
		return err
	}
	q.workspace, q.wsBytes = p, ws
	return nil
}

// releaseBLAS destroys the cuBLAS handle and frees its workspace,
// tolerating a partial start.
func (q *queue) releaseBLAS() error {
	d := q.ln.d
	var errs []error
	if q.blas != 0 {
		errs = append(errs, d.api.BLASDestroy(d.ctx, q.blas))
		q.blas = 0
	}
	if q.workspace != 0 {
		errs = append(errs, d.mem.Free(q.workspace))
		q.workspace, q.wsBytes = 0, 0
	}
	q.wsWant = 0
	return errors.Join(errs...)
}

// releaseStreams destroys the status word and the compute stream,
// tolerating a partial start.
func (l *lane) releaseStreams() error {
	err := l.releaseStatus()
	if l.compute != nil {
		l.compute.markClosed()
		err = errors.Join(err, l.d.api.StreamDestroy(l.d.ctx, l.compute.s))
	}
	return err
}

// takeStreams marks the lane's NewStream streams closed, forgets them and
// returns them, for Close to destroy.
func (l *lane) takeStreams() []*stream {
	d := l.d
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*stream, 0, len(l.streams))
	for id, s := range l.streams {
		s.markClosed()
		delete(d.streams, id)
		out = append(out, s)
	}
	l.streams = nil
	slices.SortFunc(out, func(a, b *stream) int { return int(a.id) - int(b.id) })
	return out
}

// Alloc returns a buffer from the caching allocator, 512-byte aligned,
// counted in category cat (and in the scope's figures, for a scope).
func (l *lane) Alloc(bytes int64, cat device.Category) (device.Buffer, error) {
	if err := l.checkOpen("Alloc"); err != nil {
		return device.Buffer{}, err
	}
	if bytes < 0 {
		return device.Buffer{}, fmt.Errorf("%s: Alloc of %d bytes: %w", l.name, bytes, device.ErrShape)
	}
	p, err := l.d.mem.AllocIn(bytes, l.allocStream(), cat, l.scope)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("%s: %w", l.name, err)
	}
	l.allocated(p)
	return devdriver.NewBuffer(l.owner, p, bytes, nil), nil
}

// Free returns b to the cache. The cache serves the compute stream, so
// kernels queued before the Free still see valid memory. A block a live
// graph may write stays out of the cache until the graph closes.
func (l *lane) Free(b device.Buffer) error {
	if err := l.checkOpen("Free"); err != nil {
		return err
	}
	if err := devdriver.CheckOwner(l.owner, "Free", "the buffer", b.Device()); err != nil {
		return err
	}
	if b.Len() > 0 && l.graphs.mem.Keep(b.Addr()) {
		return nil
	}
	return devdriver.Free(l.owner, l.d.mem, b)
}

// Upload copies src into dst after the work queued on the compute stream
// and waits for it. From pageable Go memory the driver stages the copy
// itself; the loader's path is Staging and CopyToDevice.
func (l *lane) Upload(dst device.Buffer, src []byte) error {
	if err := l.checkOpen("Upload"); err != nil {
		return err
	}
	if err := devdriver.CheckUpload(l.owner, dst, src); err != nil {
		return err
	}
	if err := l.inCapture("Upload"); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	d := l.d
	if err := d.api.MemcpyHtoDAsync(d.ctx, dst.Addr(), unsafe.Pointer(unsafe.SliceData(src)), int64(len(src)), l.compute.s); err != nil {
		return err
	}
	d.counts.syncs.Add(1)
	return d.api.StreamSynchronize(d.ctx, l.compute.s)
}

// Download copies the first len(dst) bytes of src into dst after the work
// queued on the compute stream, waits for it, and reports the compute
// stream's pending error.
func (l *lane) Download(dst []byte, src device.Buffer) error {
	if err := l.checkOpen("Download"); err != nil {
		return err
	}
	if err := devdriver.CheckDownload(l.owner, dst, src); err != nil {
		return err
	}
	if err := l.inCapture("Download"); err != nil {
		return err
	}
	if len(dst) > 0 {
		d := l.d
		if err := d.api.MemcpyDtoHAsync(d.ctx, unsafe.Pointer(unsafe.SliceData(dst)), src.Addr(), int64(len(dst)), l.compute.s); err != nil {
			return err
		}
	}
	return l.compute.Synchronize()
}

// Stream is the compute stream.
func (l *lane) Stream() device.Stream { return l.compute }

// NewStream creates another stream, for copies that overlap the compute
// stream's kernels.
func (l *lane) NewStream() (device.Stream, error) {
	d := l.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := l.checkOpen("NewStream"); err != nil {
		return nil, err
	}
	s, err := d.api.StreamCreate(d.ctx)
	if err != nil {
		return nil, err
	}
	st := &stream{ln: l, s: s, id: d.newStreamID()}
	if l.streams == nil {
		l.streams = map[alloc.Stream]*stream{}
	}
	l.streams[st.id] = st
	d.streams[st.id] = st
	return st, nil
}

// streamOf resolves a device.Stream of this lane.
func (l *lane) streamOf(what string, s device.Stream) (*stream, error) {
	cs, ok := s.(*stream)
	if !ok || cs.ln != l {
		return nil, fmt.Errorf("%s: %s: stream %T is not from this %s: %w", l.name, what, s, strings.TrimPrefix(l.label, "the "), device.ErrForeignBuffer)
	}
	if cs.isClosed() {
		return nil, fmt.Errorf("%s: %s: the stream is %w", l.name, what, device.ErrClosed)
	}
	return cs, nil
}

// Staging returns pinned host memory, mapped into the device's address
// space, from the device's cache.
func (l *lane) Staging(bytes int64) (device.HostBuffer, error) {
	if err := l.checkOpen("Staging"); err != nil {
		return device.HostBuffer{}, err
	}
	h, err := devdriver.AllocStaging(l.owner, l.d.staging, bytes)
	if err == nil && l.scope != 0 {
		l.d.mu.Lock()
		if l.staging == nil {
			l.staging = map[alloc.Ptr]struct{}{}
		}
		l.staging[h.Addr()] = struct{}{}
		l.d.mu.Unlock()
	}
	return h, err
}

// FreeStaging returns a staging buffer.
func (l *lane) FreeStaging(h device.HostBuffer) error {
	if err := l.checkOpen("FreeStaging"); err != nil {
		return err
	}
	if err := devdriver.FreeStaging(l.owner, l.d.staging, h); err != nil {
		return err
	}
	if l.scope != 0 {
		l.d.mu.Lock()
		delete(l.staging, h.Addr())
		l.d.mu.Unlock()
	}
	return nil
}

// CopyToDevice queues an asynchronous copy of src into dst on s.
func (l *lane) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	if err := l.checkOpen("CopyToDevice"); err != nil {
		return nil, err
	}
	if err := devdriver.CheckCopyToDevice(l.owner, dst, src); err != nil {
		return nil, err
	}
	st, err := l.streamOf("CopyToDevice", s)
	if err != nil {
		return nil, err
	}
	if err := st.inCapture("CopyToDevice"); err != nil {
		return nil, err
	}
	if src.Len() > 0 {
		d := l.d
		if err := d.api.MemcpyHtoDAsync(d.ctx, dst.Addr(), unsafe.Pointer(unsafe.SliceData(src.Bytes())), src.Len(), st.s); err != nil {
			return nil, err
		}
	}
	return st.Record()
}

// CopyToHost queues an asynchronous copy of the first dst.Len() bytes of
// src into dst on s.
func (l *lane) CopyToHost(dst device.HostBuffer, src device.Buffer, s device.Stream) (device.Event, error) {
	if err := l.checkOpen("CopyToHost"); err != nil {
		return nil, err
	}
	if err := devdriver.CheckCopyToHost(l.owner, dst, src); err != nil {
		return nil, err
	}
	st, err := l.streamOf("CopyToHost", s)
	if err != nil {
		return nil, err
	}
	if err := st.inCapture("CopyToHost"); err != nil {
		return nil, err
	}
	if dst.Len() > 0 {
		d := l.d
		if err := d.api.MemcpyDtoHAsync(d.ctx, unsafe.Pointer(unsafe.SliceData(dst.Bytes())), src.Addr(), dst.Len(), st.s); err != nil {
			return nil, err
		}
	}
	return st.Record()
}

// Synchronize waits for every stream of the lane, its branches' included,
// and returns the first error their work raised. Other lanes' streams are neither waited for
// nor reported.
func (l *lane) Synchronize() error {
	if err := l.checkOpen("Synchronize"); err != nil {
		return err
	}
	if err := l.inCapture("Synchronize"); err != nil {
		return err
	}
	var first error
	for _, s := range l.allStreams() {
		if err := s.Synchronize(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// allStreams returns the compute stream, the open NewStream streams and
// the open branches' streams, in order of their ids.
func (l *lane) allStreams() []*stream {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	all := []*stream{l.compute}
	for _, s := range l.streams {
		all = append(all, s)
	}
	for b := range l.branches {
		all = append(all, b.st)
	}
	slices.SortFunc(all, func(a, b *stream) int { return int(a.id) - int(b.id) })
	return all
}

// Kernels returns the kernels; they and cuBLAS run on the compute stream.
func (l *lane) Kernels() device.Kernels { return kernels{&l.queue} }

// Status bits the kernels raise (cuda/kernels/ABI.md).
const (
	statusEmbedding           = 1
	statusEmbeddingGrad       = 2
	statusSoftmaxCrossEntropy = 4
	statusGatherSeq           = 8
	statusSeqPoolGrad         = 16
	statusRepeatedID          = 32
)

// startStatus makes the status word, zeroed, and what reads it back.
func (l *lane) startStatus() error {
	a, c := l.d.api, l.d.ctx
	var err error
	if l.statusDev, err = a.MemAlloc(c, 4*statusWords); err != nil {
		return fmt.Errorf("allocating the status word: %w", err)
	}
	if l.statusHost, err = a.MemHostAlloc(c, 4); err != nil {
		return fmt.Errorf("allocating the status word's host copy: %w", err)
	}
	if l.statusStream, err = a.StreamCreate(c); err != nil {
		return fmt.Errorf("creating the status stream: %w", err)
	}
	if err := a.MemsetD32Async(c, l.statusDev, 0, statusWords, l.compute.s); err != nil {
		return fmt.Errorf("zeroing the status word: %w", err)
	}
	l.queue.bar = l.barrier()
	return a.StreamSynchronize(c, l.compute.s)
}

// walkSlots is how many of its streams' persistent walks a lane can run
// at once (its compute stream's and its branches'); statusWords the words
// of its status allocation: the status word, a word of padding, and two
// per barrier.
const (
	walkSlots   = 64
	statusWords = 2 + 2*walkSlots
)

// barrier takes the next of the lane's walk barriers, for the compute
// stream or a new allocator stream id of a branch (which keeps it while
// closed and idle, for the next branch that takes the id: the barrier is
// used by one stream at a time, in order), or 0 when all are taken (the
// stream's walks then run step by step). Each is two zero words that a
// walk leaves zero: the barrier's count of arrivals and its generation
// (cuda/kernels/common.cuh's gc_grid_sync; only the count must start
// zero). Under d.mu, or before the lane is shared.
func (l *lane) barrier() alloc.Ptr {
	if l.bars >= walkSlots {
		return 0
	}
	l.bars++
	return l.statusDev + alloc.Ptr(4*(2*l.bars))
}

// releaseStatus frees what startStatus made, tolerating a partial start.
func (l *lane) releaseStatus() error {
	a, c := l.d.api, l.d.ctx
	var errs []error
	if l.statusStream != 0 {
		errs = append(errs, a.StreamDestroy(c, l.statusStream))
		l.statusStream = 0
	}
	if l.statusHost != nil {
		errs = append(errs, a.MemFreeHost(c, l.statusHost))
		l.statusHost = nil
	}
	if l.statusDev != 0 {
		errs = append(errs, a.MemFree(c, l.statusDev))
		l.statusDev = 0
	}
	return errors.Join(errs...)
}

// readStatus copies the status word to the host on stream s, waits for
// s, and returns the index errors it holds; clear also resets the word,
// in order on s, after the copy.
//
// On the compute stream (Synchronize, Download: clear set) the copy and
// the reset come after the work being waited for and before any queued
// later, so a bit is reported exactly once, by the first synchronisation
// after the kernel that raised it. On the status stream (Event.Wait,
// Close: clear unset) it waits for nothing queued on the compute stream
// and leaves the bits for the next synchronisation; call it once the work
// whose errors it should see has completed.
func (l *lane) readStatus(s cuStream, clear bool) error {
	a, c := l.d.raw, l.d.ctx
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	if err := a.MemcpyDtoHAsync(c, l.statusHost, l.statusDev, 4, s); err != nil {
		return err
	}
	if clear {
		if err := a.MemsetD32Async(c, l.statusDev, 0, 1, s); err != nil {
			return err
		}
	}
	if err := a.StreamSynchronize(c, s); err != nil {
		return err
	}
	return l.indexError(atomic.LoadUint32((*uint32)(l.statusHost)))
}

// indexError names the kernels whose bits are set, as an error matching
// device.ErrIndex; nil when none is.
func (l *lane) indexError(bits uint32) error {
	if bits == 0 {
		return nil
	}
	var names []string
	for _, k := range []struct {
		bit  uint32
		name string
	}{{statusEmbedding, "Embedding: a token id out of range"}, {statusEmbeddingGrad, "EmbeddingGrad: a token id out of range"},
		{statusSoftmaxCrossEntropy, "SoftmaxCrossEntropy: a target class out of range"},
		{statusGatherSeq, "GatherSeq: a sequence index out of range"}, {statusSeqPoolGrad, "SeqPoolGrad: an ArgMax step out of range"},
		{statusRepeatedID, "EmbeddingGrad: an id given as Distinct repeated"}} {
		if bits&k.bit != 0 {
			names = append(names, k.name)
		}
	}
	return fmt.Errorf("%s: %s: %w", l.name, strings.Join(names, ", "), device.ErrIndex)
}
