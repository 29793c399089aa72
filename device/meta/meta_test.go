package meta_test

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/devicetest"
	"github.com/gocurrent/gocurrent/device/meta"
)

func open(t testing.TB, cfg meta.Config) *meta.Device {
	t.Helper()
	d, err := meta.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestConformance runs the part of the device suite that does not read
// values back: the memory figures. (A meta device holds no values, so the
// suite's maths and misuse groups, which check that data survives, do not
// apply; TestClosed checks what Misuse would of closing.)
func TestConformance(t *testing.T) {
	devicetest.RunGroups(t, func(t testing.TB) device.Device { return open(t, meta.Config{}) },
		func(g string) bool { return g == "MemStats" })
}

func TestClosed(t *testing.T) {
	d := open(t, meta.Config{})
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Alloc(64, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Staging(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Upload":             d.Upload(b, make([]byte, 8)),
		"Download":           d.Download(make([]byte, 8), b.Slice(0, 8)),
		"NewStream":          func() error { _, err := d.NewStream(); return err }(),
		"Staging":            func() error { _, err := d.Staging(64); return err }(),
		"FreeStaging":        d.FreeStaging(h),
		"CopyToDevice":       func() error { _, err := d.CopyToDevice(b, h, d.Stream()); return err }(),
		"CopyToHost":         func() error { _, err := d.CopyToHost(h, b, d.Stream()); return err }(),
		"Capture":            func() error { _, err := d.Capture(func() error { return nil }); return err }(),
		"Branch":             func() error { _, err := device.NewBranch(d); return err }(),
		"Alloc":              func() error { _, err := d.Alloc(64, device.Workspace); return err }(),
		"Free":               d.Free(b),
		"Synchronize":        d.Synchronize(),
		"Stream().Record":    func() error { _, err := d.Stream().Record(); return err }(),
		"Stream().Sync":      d.Stream().Synchronize(),
		"NewStream().Record": func() error { _, err := s.Record(); return err }(),
		"Kernels().Fill":     d.Kernels().Fill(device.Fill{DType: device.Float32, N: 1, X: b}),
	} {
		if !errors.Is(err, device.ErrClosed) {
			t.Errorf("%s after Close = %v, want device.ErrClosed", name, err)
		}
	}
	if _, err := d.Alloc(1<<60, device.Workspace); err == nil {
		t.Error("Alloc(1<<60) after Close succeeded")
	}
}

// TestHuge checks that an unlimited meta device still refuses what no
// device has, with the typed error.
func TestHuge(t *testing.T) {
	d := open(t, meta.Config{})
	if _, err := d.Alloc(1<<60, device.Workspace); !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Errorf("Alloc(1<<60) = %v, want alloc.ErrOutOfMemory", err)
	}
}

// TestCapacity checks that the capacity binds with the allocator's typed
// error, as on a real device.
func TestCapacity(t *testing.T) {
	d := open(t, meta.Config{Capacity: 64 << 20})
	b, err := d.Alloc(40<<20, device.Activations)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Alloc(40<<20, device.Activations)
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) || oom.Categories[alloc.Activations] != 40<<20 {
		t.Fatalf("second 40 MiB on a 64 MiB device: %v, want an *alloc.OutOfMemoryError with 40 MiB of activations", err)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Alloc(60<<20, device.Parameters); err != nil {
		t.Fatalf("60 MiB after freeing: %v", err)
	}
}

// TestCUDALike checks the allocations a CUDA device makes for itself: the
// cuBLAS workspace at open, the loss kernel's temporary.
func TestCUDALike(t *testing.T) {
	d := open(t, meta.CUDA("cuda:0", 1<<30, alloc.Config{}, 32<<20))
	st := d.MemStats()
	if got := st.CategoryBytes[alloc.Workspace].Current; got != 32<<20 {
		t.Fatalf("workspace at open = %d, want 32 MiB", got)
	}
	const rows, classes = 1000, 65
	logits, _ := d.Alloc(rows*classes*4, device.Workspace)
	targets, _ := d.Alloc(rows*4, device.Batches)
	loss, _ := d.Alloc(4, device.Workspace)
	d.MemStats()
	d.Memory().ResetPeak()
	before := d.MemStats().AllocatedBytes[alloc.AllPools].Current
	err := d.Kernels().SoftmaxCrossEntropy(device.SoftmaxCrossEntropy{DType: device.Float32, N: rows, Classes: classes,
		Logits: logits, Targets: targets, Loss: loss})
	if err != nil {
		t.Fatal(err)
	}
	st = d.MemStats()
	// rows doubles, rounded to the allocator's 512 bytes.
	if peak, want := st.AllocatedBytes[alloc.AllPools].Peak-before, int64(8192); peak != want || st.AllocatedBytes[alloc.AllPools].Current != before {
		t.Errorf("the loss kernel's temporary: peak +%d, current %+d; want +%d, +0", peak, st.AllocatedBytes[alloc.AllPools].Current-before, want)
	}
	// Arguments are checked as on every device.
	err = d.Kernels().SoftmaxCrossEntropy(device.SoftmaxCrossEntropy{DType: device.Float32, N: rows + 1, Classes: classes,
		Logits: logits, Targets: targets, Loss: loss})
	if !errors.Is(err, device.ErrShape) {
		t.Errorf("a short buffer: %v, want ErrShape", err)
	}
}

// TestFailAlloc fails the k-th allocation with the out-of-memory error,
// and only it.
func TestFailAlloc(t *testing.T) {
	d := open(t, meta.Config{})
	d.FailAlloc(2)
	if _, err := d.Alloc(64, device.Workspace); err != nil {
		t.Fatalf("allocation 1: %v", err)
	}
	if _, err := d.Alloc(64, device.Workspace); !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("allocation 2: %v, want out of memory", err)
	}
	if _, err := d.Alloc(64, device.Workspace); err != nil {
		t.Fatalf("allocation 3: %v", err)
	}
	if d.Allocs() != 3 {
		t.Errorf("Allocs() = %d, want 3", d.Allocs())
	}
}

// TestFusedCells checks that the planner's device takes the cells' fused
// form (their recurrent product given) as the CUDA device does, whichever
// path that takes: no temporary either way (the fused kernel needs none,
// and cuBLAS's workspace is taken at Open), and a half-given product
// refused with device.ErrShape.
func TestFusedCells(t *testing.T) {
	d := open(t, meta.Config{KernelTemporaries: true})
	buf := func(n int) device.Buffer {
		b, err := d.Alloc(int64(n)*4, device.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const B, H = 2, 3
	hPrev, w := buf(B*H), buf(4*H*H)
	lstm := device.LSTMCell{DType: device.Float32, Batch: B, Hidden: H, Pre: buf(4 * B * H), CPrev: buf(B * H), C: buf(B * H),
		H: buf(B * H), HPrev: hPrev, W: w}
	gru := device.GRUCell{DType: device.Float32, Batch: B, Hidden: H, XPre: buf(3 * B * H), HPre: buf(3 * B * H), HPrev: hPrev,
		H: buf(B * H), W: w}
	before := d.MemStats()
	k := d.Kernels()
	if err := k.LSTMCell(lstm); err != nil {
		t.Errorf("fused LSTMCell: %v", err)
	}
	if err := k.GRUCell(gru); err != nil {
		t.Errorf("fused GRUCell: %v", err)
	}
	if got, was := d.MemStats().AllocatedBytes[alloc.AllPools].Allocated, before.AllocatedBytes[alloc.AllPools].Allocated; got != was {
		t.Errorf("the fused cells allocated %d bytes, want none", got-was)
	}
	half := lstm
	half.W = device.Buffer{}
	if err := k.LSTMCell(half); !errors.Is(err, device.ErrShape) {
		t.Errorf("LSTMCell with HPrev and no W = %v, want device.ErrShape", err)
	}
}

// TestGraphMemory: the meta device keeps a graph's memory as the CPU and
// CUDA devices do (device/devicetest's Graphs group checks those): a
// temporary freed during the capture, and a buffer allocated before it and
// freed after, stay allocated until the graph closes; waits on the compute
// stream are refused while it records.
func TestGraphMemory(t *testing.T) {
	d := open(t, meta.Config{KernelTemporaries: true})
	allocated := func() int64 { return d.MemStats().AllocatedBytes[alloc.AllPools].Current }
	pre, err := d.Alloc(4096, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	base := allocated()
	var syncErr error
	g, err := d.Capture(func() error {
		tmp, err := d.Alloc(4096, device.Workspace)
		if err != nil {
			return err
		}
		syncErr = d.Synchronize()
		return d.Free(tmp)
	})
	if !errors.Is(syncErr, device.ErrNotCapturable) {
		t.Errorf("Synchronize while capturing: %v, want ErrNotCapturable", syncErr)
	}
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if err := d.Free(pre); err != nil {
		t.Fatal(err)
	}
	if got := allocated(); got != base+4096 {
		t.Errorf("allocated %d with the graph open, want %d: the temporary and the buffer freed after the capture stay", got, base+4096)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := allocated(); got != base-4096 {
		t.Errorf("allocated %d after Close, want %d", got, base-4096)
	}
}

// TestFusedCellGrads is TestFusedCells for the cell gradients given the
// next step's recurrent product: no temporary, DH sized for the rows of
// either step, a half-given product or a NextBatch without one refused
// with device.ErrShape.
func TestFusedCellGrads(t *testing.T) {
	d := open(t, meta.Config{KernelTemporaries: true})
	buf := func(n int) device.Buffer {
		b, err := d.Alloc(int64(n)*4, device.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const B, H, next = 2, 3, 4
	lstm := device.LSTMCellGrad{DType: device.Float32, Batch: B, Hidden: H, Act: buf(4 * B * H), CPrev: buf(B * H), C: buf(B * H),
		DH: buf(next * H), DC: buf(B * H), DPre: buf(4 * B * H), DCPrev: buf(B * H), DPreNext: buf(4 * next * H), W: buf(4 * H * H),
		NextBatch: next}
	gru := device.GRUCellGrad{DType: device.Float32, Batch: B, Hidden: H, Act: buf(4 * B * H), HPrev: buf(B * H), DH: buf(next * H),
		DXPre: buf(3 * B * H), DHPre: buf(3 * B * H), DHPrev: buf(B * H), DHPreNext: buf(3 * next * H), W: buf(3 * H * H), NextBatch: next}
	before := d.MemStats()
	k := d.Kernels()
	if err := k.LSTMCellGrad(lstm); err != nil {
		t.Errorf("fused LSTMCellGrad: %v", err)
	}
	if err := k.GRUCellGrad(gru); err != nil {
		t.Errorf("fused GRUCellGrad: %v", err)
	}
	if got, was := d.MemStats().AllocatedBytes[alloc.AllPools].Allocated, before.AllocatedBytes[alloc.AllPools].Allocated; got != was {
		t.Errorf("the fused cell gradients allocated %d bytes, want none", got-was)
	}
	short := lstm
	short.DH = short.DH.Slice(0, B*H*4)
	half := gru
	half.DHPreNext = device.Buffer{}
	stray := gru
	stray.DHPreNext, stray.W = device.Buffer{}, device.Buffer{}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"LSTMCellGrad with DH of Batch rows, NextBatch more", k.LSTMCellGrad(short)},
		{"GRUCellGrad with W and no DHPreNext", k.GRUCellGrad(half)},
		{"GRUCellGrad with NextBatch and no product", k.GRUCellGrad(stray)},
	} {
		if !errors.Is(c.err, device.ErrShape) {
			t.Errorf("%s = %v, want device.ErrShape", c.name, c.err)
		}
	}
}

// TestBranches: a meta device's branch holds a workspace as large as the
// device's (meta.CUDA: a CUDA branch's cuBLAS workspace) until its Close,
// checks its kernels' arguments, and a capture ends refused when a branch
// forked in it was not joined, as on the CPU and CUDA devices.
func TestBranches(t *testing.T) {
	const ws = 32 << 20
	d := open(t, meta.CUDA("cuda:0", 1<<30, alloc.Config{}, ws))
	workspace := func() int64 { return d.MemStats().CategoryBytes[alloc.Workspace].Current }
	b, err := device.NewBranch(d)
	if err != nil {
		t.Fatal(err)
	}
	if got := workspace(); got != 2*ws {
		t.Errorf("workspace with a branch open: %d, want %d (the device's and the branch's)", got, 2*ws)
	}
	x, _ := d.Alloc(64, device.Workspace)
	if err := b.Kernels().Fill(device.Fill{DType: device.Float32, N: 17, X: x}); !errors.Is(err, device.ErrShape) {
		t.Errorf("a branch's Fill past its buffer: %v, want ErrShape", err)
	}
	_, err = d.Capture(func() error { return b.Fork() })
	if !errors.Is(err, device.ErrNotCapturable) {
		t.Errorf("a capture that forks a branch and does not join it: %v, want ErrNotCapturable", err)
	}
	g, err := d.Capture(func() error { return errors.Join(b.Fork(), b.Join()) })
	if err != nil {
		t.Fatalf("a capture that forks and joins a branch: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := workspace(); got != ws+512 {
		t.Errorf("workspace after the branch's Close: %d, want %d (the device's and x)", got, ws+512)
	}
	if err := b.Fork(); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Fork after Close: %v, want ErrClosed", err)
	}
}

// TestBranchTemporaries: a kernel's temporary on a branch comes from the
// branch's own allocator stream, as on the CUDA device (whose branch
// queues take a stream id of their own), so its block is cached apart
// from the compute stream's: a segment of the small pool each (2 MiB,
// alloc.SmallBuffer); a branch opened after one closed takes the closed
// one's stream, and reuses what it left cached. (With the compute
// stream's, the plan of a tagger's step reserved 2 MiB less than the
// CUDA device over the emulator did.)
func TestBranchTemporaries(t *testing.T) {
	d := open(t, meta.Config{KernelTemporaries: true})
	reserved := func() int64 { return d.MemStats().ReservedBytes[alloc.AllPools].Current }
	const rows, cols = 1024, 32 // past one pass (512 rows): a temporary
	x, err := d.Alloc(rows*cols*4, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.Alloc(cols*4, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(k device.Kernels) {
		t.Helper()
		if err := k.SumRows(device.SumRows{DType: device.Float32, Rows: rows, Cols: cols, X: x, Out: out}); err != nil {
			t.Fatal(err)
		}
	}
	sum(d.Kernels())
	base := reserved()
	for i := range 2 {
		b, err := device.NewBranch(d)
		if err != nil {
			t.Fatal(err)
		}
		sum(b.Kernels())
		if got, want := reserved(), base+alloc.SmallBuffer; got != want {
			t.Errorf("branch %d: reserved %d after a SumRows on it, want %d: the compute stream's segment and one of the branch's stream", i, got, want)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
