package cuda

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// openScope opens a scope on d, failing the test if it cannot.
func openScope(t *testing.T, d device.Device, cfg device.ScopeConfig) *Scope {
	t.Helper()
	s, err := device.NewScope(d, cfg)
	if err != nil {
		t.Fatalf("NewScope(%s, %+v): %v", d.Name(), cfg, err)
	}
	return s.(*Scope)
}

// uploadF32 allocates a buffer on d holding x.
func uploadF32(t *testing.T, d device.Device, x []float32) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(4*len(x)), device.Activations)
	if err != nil {
		t.Fatal(err)
	}
	if err := device.UploadSlice(d, b, x); err != nil {
		t.Fatal(err)
	}
	return b
}

// uploadI32 allocates a buffer on d holding x.
func uploadI32(t *testing.T, d device.Device, x []int32) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(4*len(x)), device.Batches)
	if err != nil {
		t.Fatal(err)
	}
	if err := device.UploadSlice(d, b, x); err != nil {
		t.Fatal(err)
	}
	return b
}

// embedding queues an Embedding of ids (a vocabulary of 3, rows of 2) on
// d; the caller synchronises.
func embedding(t *testing.T, d device.Device, ids []int32) {
	t.Helper()
	table := uploadF32(t, d, []float32{1, 2, 3, 4, 5, 6})
	out, err := d.Alloc(int64(4*2*len(ids)), device.Activations)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Kernels().Embedding(device.Embedding{DType: device.Float32, N: len(ids), Dim: 2, Vocab: 3,
		Table: table, IDs: uploadI32(t, d, ids), Out: out}); err != nil {
		t.Fatal(err)
	}
}

// TestFakeScopeErrors checks that an index error raised by a scope's
// kernel is reported by that scope only: its Synchronize, Download and
// compute events, never the other scope's nor the device's.
func TestFakeScopeErrors(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	a := openScope(t, d, device.ScopeConfig{Name: "job-a"})
	b := openScope(t, d, device.ScopeConfig{Name: "job-b"})

	f.launches = nil
	embedding(t, b, []int32{0, 7, 1})
	embedding(t, a, []int32{0, 2, 1})
	embedding(t, d, []int32{2, 2})
	if len(f.launches) != 3 {
		t.Fatalf("%d launches, want 3", len(f.launches))
	}
	for i, l := range []*lane{&b.lane, &a.lane, &d.lane} {
		if got := f.launches[i]; got.stream != l.compute.s || got.args[6] != uint64(l.statusDev) {
			t.Errorf("%s's Embedding ran on stream %d with status word %#x, want its own: %d, %#x",
				l.name, got.stream, got.args[6], l.compute.s, uint64(l.statusDev))
		}
	}
	if a.statusDev == b.statusDev || a.statusDev == d.statusDev || a.compute.s == b.compute.s || a.compute.s == d.compute.s {
		t.Errorf("scopes share a status word or compute stream with each other or the device")
	}

	ev, err := b.Stream().Record()
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(); !errors.Is(err, device.ErrIndex) {
		t.Errorf("B's compute event Wait = %v, want ErrIndex", err)
	}
	evA, err := a.Stream().Record()
	if err != nil {
		t.Fatal(err)
	}
	if err := evA.Wait(); err != nil {
		t.Errorf("A's compute event Wait = %v, want nil", err)
	}
	if err := a.Synchronize(); err != nil {
		t.Errorf("A.Synchronize = %v, want nil: B's error is B's", err)
	}
	if err := d.Synchronize(); err != nil {
		t.Errorf("device Synchronize = %v, want nil: B's error is B's", err)
	}
	err = b.Synchronize()
	if !errors.Is(err, device.ErrIndex) || !strings.Contains(err.Error(), "cuda:0/job-b") || !strings.Contains(err.Error(), "Embedding: a token id") {
		t.Errorf("B.Synchronize = %v, want ErrIndex naming cuda:0/job-b and Embedding", err)
	}
	if err := b.Synchronize(); err != nil {
		t.Errorf("second B.Synchronize = %v, want nil: an error is reported once", err)
	}

	// Download reports the error of its own lane only.
	embedding(t, a, []int32{-1})
	buf, err := b.Alloc(4, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Download(make([]byte, 4), buf); err != nil {
		t.Errorf("B.Download = %v, want nil: A's error is A's", err)
	}
	dbuf, err := d.Alloc(4, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Download(make([]byte, 4), dbuf); err != nil {
		t.Errorf("device Download = %v, want nil: A's error is A's", err)
	}
	abuf, err := a.Alloc(4, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Download(make([]byte, 4), abuf); !errors.Is(err, device.ErrIndex) || !strings.Contains(err.Error(), "cuda:0/job-a") {
		t.Errorf("A.Download = %v, want ErrIndex naming cuda:0/job-a", err)
	}

	// An error left unreported is the scope's Close's, not the device's.
	embedding(t, b, []int32{3})
	if err := b.Close(); !errors.Is(err, device.ErrIndex) {
		t.Errorf("B.Close with an unreported index error = %v, want ErrIndex", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("device Close after B's error = %v, want nil", err)
	}
}

// TestFakeScopeLimit checks that a scope's limit fails that scope only,
// with an out-of-memory error that names it, and that the memory the
// scope's allocator frees trying to avoid it is its own.
func TestFakeScopeLimit(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	a := openScope(t, d, device.ScopeConfig{Name: "job-a"})
	const limit = 64 << 20
	b := openScope(t, d, device.ScopeConfig{Name: "job-b", Limit: limit})
	if b.Limit() != limit || a.Limit() != 0 {
		t.Errorf("Limit() = %d and %d, want %d and 0", b.Limit(), a.Limit(), limit)
	}
	// A new scope holds nothing; its first Gemm takes its cuBLAS
	// workspace, in the scope, and B's is cut to a sixteenth of its limit.
	for _, s := range []*Scope{a, b} {
		if got := s.MemStats().ReservedBytes[alloc.AllPools].Current; got != 0 {
			t.Errorf("%s reserves %d bytes when it opens, want 0", s.Name(), got)
		}
		x := uploadF32(t, s, []float32{1})
		if err := s.Kernels().Gemm(device.Gemm{DType: device.Float32, M: 1, N: 1, K: 1, Alpha: 1, A: x, B: x, C: x}); err != nil {
			t.Fatal(err)
		}
		if err := s.Free(x); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.MemStats().CategoryBytes[alloc.Workspace].Current; got != defaultBLASWorkspace {
		t.Errorf("A's workspace bytes = %d, want the device's %d", got, defaultBLASWorkspace)
	}
	if got := b.MemStats().CategoryBytes[alloc.Workspace].Current; got != limit/16 {
		t.Errorf("B's workspace bytes = %d, want a sixteenth of its limit, %d", got, limit/16)
	}

	want := make([]float32, 1<<20)
	for i := range want {
		want[i] = float32(i)
	}
	live := uploadF32(t, a, want) // 4 MiB of A's, live
	cached, err := a.Alloc(100<<20, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(cached); err != nil { // 100 MiB in A's cache
		t.Fatal(err)
	}
	aBefore := a.MemStats()

	held, err := b.Alloc(16<<20, device.Activations)
	if err != nil {
		t.Fatalf("B.Alloc within its limit: %v", err)
	}
	_, err = b.Alloc(limit, device.Activations)
	var oom *alloc.OutOfMemoryError
	if !errors.Is(err, alloc.ErrOutOfMemory) || !errors.As(err, &oom) || !strings.Contains(err.Error(), "job-b") {
		t.Fatalf("B.Alloc past its limit = %v, want an *alloc.OutOfMemoryError naming job-b", err)
	}
	if st := b.MemStats(); st.ReservedBytes[alloc.AllPools].Current > limit {
		t.Errorf("B reserves %d bytes, past its limit %d", st.ReservedBytes[alloc.AllPools].Current, limit)
	}
	aAfter := a.MemStats()
	if aAfter.ReservedBytes != aBefore.ReservedBytes || aAfter.AllocatedBytes != aBefore.AllocatedBytes {
		t.Errorf("A's memory changed when B ran out: reserved %d -> %d bytes, allocated %d -> %d",
			aBefore.ReservedBytes[alloc.AllPools].Current, aAfter.ReservedBytes[alloc.AllPools].Current,
			aBefore.AllocatedBytes[alloc.AllPools].Current, aAfter.AllocatedBytes[alloc.AllPools].Current)
	}
	got := make([]float32, len(want))
	if err := device.DownloadSlice(a, got, live); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("A's buffer after B ran out of memory: [%d] = %v, want %v", i, got[i], want[i])
		}
	}
	// A has no limit; the device and A still allocate, and B within its
	// limit.
	if _, err := a.Alloc(limit, device.Activations); err != nil {
		t.Errorf("A.Alloc of B's limit: %v", err)
	}
	if _, err := d.Alloc(limit, device.Activations); err != nil {
		t.Errorf("device Alloc of B's limit: %v", err)
	}
	if err := b.Free(held); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Alloc(limit/2, device.Activations); err != nil {
		t.Errorf("B.Alloc within its limit after a Free: %v", err)
	}
	if _, err := device.NewScope(d, device.ScopeConfig{Limit: -1}); !errors.Is(err, device.ErrShape) {
		t.Errorf("NewScope with a negative limit = %v, want ErrShape", err)
	}
}

// TestFakeScopeStreamsAndBLAS checks that each scope runs on streams and a
// cuBLAS handle of its own: GEMMs of a scope run on its compute stream,
// with its workspace, and its copies on its own streams.
func TestFakeScopeStreamsAndBLAS(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	streams, handles := len(f.streams), f.blasHandles
	a := openScope(t, d, device.ScopeConfig{})
	b := openScope(t, d, device.ScopeConfig{})
	if a.Name() != "cuda:0/scope-1" || b.Name() != "cuda:0/scope-2" || a.Parent() != d || a.ID() != 1 || b.ID() != 2 {
		t.Errorf("scopes named %q and %q, ids %d and %d, want cuda:0/scope-1 and cuda:0/scope-2, 1 and 2",
			a.Name(), b.Name(), a.ID(), b.ID())
	}
	// A compute stream and a status stream each, and a cuBLAS handle.
	if got := len(f.streams) - streams; got != 4 {
		t.Errorf("two scopes made %d streams, want 4", got)
	}
	if got := f.blasHandles - handles; got != 2 {
		t.Errorf("two scopes made %d cuBLAS handles, want 2", got)
	}
	if a.blas == b.blas || a.blas == d.blas {
		t.Error("scopes share a cuBLAS handle")
	}
	f.gemmStreams = nil
	for _, s := range []device.Device{a, b, d, a} {
		x := uploadF32(t, s, []float32{1, 2, 3, 4})
		if err := s.Kernels().Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 2, Alpha: 1, A: x, B: x, C: x}); err != nil {
			t.Fatal(err)
		}
	}
	want := []cuStream{a.compute.s, b.compute.s, d.compute.s, a.compute.s}
	for i := range want {
		if f.gemmStreams[i] != want[i] {
			t.Errorf("GEMM %d ran on stream %d, want %d", i, f.gemmStreams[i], want[i])
		}
	}
	for _, l := range []*lane{&d.lane, &a.lane, &b.lane} {
		if f.blasStream[l.blas] != l.compute.s || f.blasWorkspace[l.blas] != l.workspace || l.workspace == 0 {
			t.Errorf("%s's cuBLAS handle is on stream %d with workspace %v, want its compute stream %d and its workspace %v",
				l.name, f.blasStream[l.blas], f.blasWorkspace[l.blas], l.compute.s, l.workspace)
		}
	}
	if a.workspace == b.workspace || a.workspace == d.workspace {
		t.Error("scopes share a cuBLAS workspace")
	}
	// The allocator streams differ, so no cached block passes between
	// scopes through the stream key either.
	if a.allocStream() == b.allocStream() || a.allocStream() == d.allocStream() {
		t.Errorf("allocator streams %d, %d, %d: want one per lane", d.allocStream(), a.allocStream(), b.allocStream())
	}
	// A scope's NewStream is its own; the device's Synchronize does not
	// wait for it.
	cs, err := a.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	f.logStatus, f.statusLog = true, nil
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for _, e := range f.statusLog {
		for _, s := range []cuStream{a.compute.s, cs.(*stream).s, b.compute.s} {
			if strings.HasSuffix(e, " "+fmt.Sprint((s))) {
				t.Errorf("device Synchronize did %q on a scope's stream", e)
			}
		}
	}
	f.statusLog = nil
	if err := a.Synchronize(); err != nil {
		t.Fatal(err)
	}
	var sawCopy bool
	for _, e := range f.statusLog {
		sawCopy = sawCopy || e == "sync "+fmt.Sprint((cs.(*stream).s))
		if strings.HasSuffix(e, " "+fmt.Sprint((d.compute.s))) || strings.HasSuffix(e, " "+fmt.Sprint((b.compute.s))) {
			t.Errorf("A's Synchronize did %q on another lane's stream", e)
		}
	}
	if !sawCopy {
		t.Errorf("A's Synchronize did %q, want it to wait for A's NewStream", f.statusLog)
	}
	f.logStatus = false
}

// TestFakeScopeOwnership checks that buffers, staging buffers, streams and
// events of one scope are foreign to the other scopes and the device, and
// the device's to the scopes.
func TestFakeScopeOwnership(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	a := openScope(t, d, device.ScopeConfig{Name: "a"})
	b := openScope(t, d, device.ScopeConfig{Name: "b"})
	ab := uploadF32(t, a, []float32{1, 2})
	db := uploadF32(t, d, []float32{1, 2})
	ah, err := a.Staging(8)
	if err != nil {
		t.Fatal(err)
	}
	as, err := a.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := b.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	bh, err := b.Staging(8)
	if err != nil {
		t.Fatal(err)
	}
	bb := uploadF32(t, b, []float32{1, 2})
	ev, err := as.Record()
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"B.Free(A's)":                     b.Free(ab),
		"device Free(A's)":                d.Free(ab),
		"A.Free(device's)":                a.Free(db),
		"B.Upload(A's)":                   b.Upload(ab, make([]byte, 4)),
		"B.Download(A's)":                 b.Download(make([]byte, 4), ab),
		"B's kernel on A's":               b.Kernels().Fill(device.Fill{DType: device.Float32, N: 2, X: ab}),
		"A's kernel on the device's":      a.Kernels().Axpby(device.Axpby{DType: device.Float32, N: 2, X: ab, Y: db, Alpha: 1}),
		"device kernel on A's":            d.Kernels().Fill(device.Fill{DType: device.Float32, N: 2, X: ab}),
		"B.FreeStaging(A's)":              b.FreeStaging(ah),
		"B.Stream().Wait(A's event)":      b.Stream().Wait(ev),
		"device Stream().Wait(A's event)": d.Stream().Wait(ev),
	} {
		if !errors.Is(err, device.ErrForeignBuffer) {
			t.Errorf("%s = %v, want ErrForeignBuffer", name, err)
		}
	}
	if _, err := b.CopyToDevice(bb, bh, as); !errors.Is(err, device.ErrForeignBuffer) {
		t.Errorf("B.CopyToDevice on A's stream = %v, want ErrForeignBuffer", err)
	}
	if _, err := b.CopyToDevice(bb, ah, bs); !errors.Is(err, device.ErrForeignBuffer) {
		t.Errorf("B.CopyToDevice from A's staging = %v, want ErrForeignBuffer", err)
	}
	if _, err := b.CopyToHost(bh, ab, bs); !errors.Is(err, device.ErrForeignBuffer) {
		t.Errorf("B.CopyToHost from A's buffer = %v, want ErrForeignBuffer", err)
	}
	if _, err := d.CopyToDevice(db, ah, d.Stream()); !errors.Is(err, device.ErrForeignBuffer) {
		t.Errorf("device CopyToDevice from A's staging = %v, want ErrForeignBuffer", err)
	}
	// Their own work goes through.
	if _, err := b.CopyToDevice(bb, bh, bs); err != nil {
		t.Errorf("B.CopyToDevice of its own: %v", err)
	}
	if err := a.Stream().Wait(ev); err != nil {
		t.Errorf("A.Stream().Wait(A's event): %v", err)
	}
}

// TestFakeScopeClose checks that closing a scope that still holds
// buffers, staging buffers and streams gives them all back, with its
// compute stream, status word and cuBLAS handle, and leaves the device and
// the other scope working; and that closing the device closes the scopes
// still open, leaking nothing.
func TestFakeScopeClose(t *testing.T) {
	f := newFakeAPI()
	d, err := open(f, Config{})
	if err != nil {
		t.Fatal(err)
	}
	streams, handles, stagingBefore := len(f.streams), f.blasHandles, d.staging.Stats()

	a := openScope(t, d, device.ScopeConfig{Name: "a"})
	b := openScope(t, d, device.ScopeConfig{Name: "b", Limit: 256 << 20})
	keep := uploadF32(t, a, []float32{1, 2, 3})
	dkeep := uploadF32(t, d, []float32{4, 5, 6})
	for _, n := range []int64{1 << 10, 3 << 20, 30 << 20} { // never freed
		if _, err := b.Alloc(n, device.Parameters); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Staging(1 << 20); err != nil { // never freed
		t.Fatal(err)
	}
	bs, err := b.NewStream() // never closed
	if err != nil {
		t.Fatal(err)
	}
	bb := uploadF32(t, b, []float32{7})
	bev, err := b.Stream().Record()
	if err != nil {
		t.Fatal(err)
	}

	if err := b.Close(); err != nil {
		t.Fatalf("B.Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second B.Close = %v, want nil", err)
	}
	if got := d.mem.ScopeStats(b.ID()); got.ReservedBytes[alloc.AllPools].Current != 0 || got.AllocatedBytes[alloc.AllPools].Current != 0 {
		t.Errorf("after B.Close its scope holds %d bytes reserved, %d allocated; want none",
			got.ReservedBytes[alloc.AllPools].Current, got.AllocatedBytes[alloc.AllPools].Current)
	}
	if got := d.staging.Stats().AllocatedBytes[alloc.AllPools].Current; got != stagingBefore.AllocatedBytes[alloc.AllPools].Current {
		t.Errorf("after B.Close the staging cache has %d bytes in use, want %d as before", got, stagingBefore.AllocatedBytes[alloc.AllPools].Current)
	}
	// A's compute and status streams and cuBLAS handle remain.
	if got := len(f.streams) - streams; got != 2 {
		t.Errorf("after B.Close, %d streams beyond the device's, want A's 2", got)
	}
	if got := f.blasHandles - handles; got != 1 {
		t.Errorf("after B.Close, %d cuBLAS handles beyond the device's, want A's 1", got)
	}
	for name, err := range map[string]error{
		"B.Synchronize": b.Synchronize(),
		"B.Free":        b.Free(bb),
		"B.Upload":      b.Upload(bb, make([]byte, 4)),
		"B's kernel":    b.Kernels().Fill(device.Fill{DType: device.Float32, N: 1, X: bb}),
		"B's stream":    bs.Synchronize(),
		"B's event":     bev.Wait(),
	} {
		if !errors.Is(err, device.ErrClosed) {
			t.Errorf("%s after B.Close = %v, want ErrClosed", name, err)
		}
	}
	if _, err := b.Alloc(8, device.Workspace); !errors.Is(err, device.ErrClosed) || !strings.Contains(err.Error(), "cuda:0/b") {
		t.Errorf("B.Alloc after B.Close = %v, want ErrClosed naming cuda:0/b", err)
	}
	// The device and A go on, their buffers intact.
	for _, c := range []struct {
		dev  device.Device
		buf  device.Buffer
		want []float32
	}{{a, keep, []float32{1, 2, 3}}, {d, dkeep, []float32{4, 5, 6}}} {
		got := make([]float32, 3)
		if err := device.DownloadSlice(c.dev, got, c.buf); err != nil {
			t.Fatalf("%s: Download after B.Close: %v", c.dev.Name(), err)
		}
		if got[0] != c.want[0] || got[2] != c.want[2] {
			t.Errorf("%s: buffer after B.Close = %v, want %v", c.dev.Name(), got, c.want)
		}
		if err := c.dev.Kernels().Axpby(device.Axpby{DType: device.Float32, N: 3, X: c.buf, Y: c.buf, Alpha: 1, Beta: 1}); err != nil {
			t.Errorf("%s: kernel after B.Close: %v", c.dev.Name(), err)
		}
		if err := c.dev.Synchronize(); err != nil {
			t.Errorf("%s: Synchronize after B.Close: %v", c.dev.Name(), err)
		}
	}

	// The device's Close closes A, which still holds a buffer, a stream
	// and a staging buffer, and then gives back everything.
	if _, err := a.NewStream(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Staging(4096); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("device Close: %v", err)
	}
	if _, err := a.Alloc(8, device.Workspace); !errors.Is(err, device.ErrClosed) {
		t.Errorf("A.Alloc after the device closed = %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("A.Close after the device closed it = %v, want nil", err)
	}
	if _, err := device.NewScope(d, device.ScopeConfig{}); !errors.Is(err, device.ErrClosed) {
		t.Errorf("NewScope on a closed device = %v, want ErrClosed", err)
	}
	f.checkReleased(t)
}

// TestFakeScopeOpenFails checks that a scope that cannot be opened says
// why and leaves nothing behind: no stream, status word or allocation
// scope.
func TestFakeScopeOpenFails(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	streams, segs, pinned := len(f.streams), len(f.sizes), len(f.pinnedSizes)
	f.blasCreateErr = newError("cublasCreate", 3, "")
	_, err := device.NewScope(d, device.ScopeConfig{Name: "job"})
	if !errors.Is(err, f.blasCreateErr) || !strings.Contains(err.Error(), "cuda:0/job") {
		t.Errorf("NewScope with cublasCreate failing = %v, want its error, naming cuda:0/job", err)
	}
	if len(f.streams) != streams || len(f.sizes) != segs || len(f.pinnedSizes) != pinned {
		t.Errorf("a scope that failed to open left %d streams, %d device and %d pinned segments behind",
			len(f.streams)-streams, len(f.sizes)-segs, len(f.pinnedSizes)-pinned)
	}
	if sc := d.mem.Scopes(); len(sc) != 0 {
		t.Errorf("a scope that failed to open left allocation scopes %v open", sc)
	}
	f.blasCreateErr = nil
	s := openScope(t, d, device.ScopeConfig{Name: "job"})
	if s.ID() != 2 {
		t.Errorf("the scope opened after a failure has id %d, want 2 (ids are never reused)", s.ID())
	}
}

// TestFakeScopeWorkspaceOutOfMemory checks that a scope whose limit has
// no room left for its cuBLAS workspace gets the out-of-memory error from
// its first Gemm, which then runs nothing, and that a Gemm after room was
// made runs with the workspace.
func TestFakeScopeWorkspaceOutOfMemory(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	const limit = 2 << 20 // one small-pool segment; a workspace of 128 KiB
	s := openScope(t, d, device.ScopeConfig{Name: "tiny", Limit: limit})
	x := uploadF32(t, s, []float32{2})
	// Fill the segment but 64 KiB, less than the workspace: small-pool
	// blocks are at most 1 MiB.
	var fill []device.Buffer
	for _, n := range []int64{1 << 20, 1<<20 - 64<<10 - 512} {
		b, err := s.Alloc(n, device.Activations)
		if err != nil {
			t.Fatal(err)
		}
		fill = append(fill, b)
	}
	gemm := device.Gemm{DType: device.Float32, M: 1, N: 1, K: 1, Alpha: 1, A: x, B: x, C: x}
	f.gemms = nil
	err := s.Kernels().Gemm(gemm)
	if !errors.Is(err, alloc.ErrOutOfMemory) || !strings.Contains(err.Error(), "cuda:0/tiny: Gemm") || len(f.gemms) != 0 {
		t.Errorf("Gemm with no room for the workspace = %v after %d GEMMs, want alloc.ErrOutOfMemory naming cuda:0/tiny's Gemm, and none", err, len(f.gemms))
	}
	if err := s.Free(fill[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Kernels().Gemm(gemm); err != nil || len(f.gemms) != 1 || s.wsBytes != 128<<10 || f.blasWorkspace[s.blas] != s.workspace {
		t.Errorf("Gemm after a Free = %v, %d GEMMs, workspace %d bytes; want nil, 1, 128 KiB set on its handle", err, len(f.gemms), s.wsBytes)
	}
}

// TestFakeScopeCloseRace closes a scope and its device at the same time:
// the device's Close waits for the scope's to finish before it releases
// the context, and between them they give back everything once (run under
// -race too).
func TestFakeScopeCloseRace(t *testing.T) {
	f := newFakeAPI()
	d, err := open(f, Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := openScope(t, d, device.ScopeConfig{})
	x := uploadF32(t, s, make([]float32, 1<<20))
	if err := s.Kernels().Gemm(device.Gemm{DType: device.Float32, M: 1, N: 1, K: 1, Alpha: 1, A: x, B: x, C: x}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	// The scope's Close stops at the synchronisation of its stream until
	// the device's Close has started.
	inScopeClose, deviceClosing := make(chan struct{}), make(chan struct{})
	f.mu.Lock()
	f.logOrder = true
	f.onSync = func(st cuStream) {
		if st == cs.(*stream).s {
			close(inScopeClose)
			<-deviceClosing
			time.Sleep(20 * time.Millisecond) // time for a Close that does not wait to release the context
		}
	}
	f.mu.Unlock()
	scopeStreams := []cuStream{s.statusStream, s.compute.s, cs.(*stream).s}
	errs := make(chan error, 1)
	go func() { errs <- s.Close() }()
	<-inScopeClose
	close(deviceClosing)
	if err := d.Close(); err != nil {
		t.Errorf("device Close beside the scope's: %v", err)
	}
	if err := <-errs; err != nil {
		t.Errorf("scope Close beside the device's: %v", err)
	}
	f.mu.Lock()
	order := f.order
	f.mu.Unlock()
	release := slices.Index(order, "release")
	for _, st := range scopeStreams {
		if i := slices.Index(order, fmt.Sprintf("destroy %d", st)); i < 0 || i > release {
			t.Errorf("the scope's stream %d destroyed at %d, the context released at %d (%q): want the scope closed first", st, i, release, order)
		}
	}
	if n := len(f.sizes) + len(f.pinnedSizes) + len(f.streams) + len(f.events) + f.blasHandles; n != 0 {
		t.Errorf("%d driver objects left after both Closes", n)
	}
}
