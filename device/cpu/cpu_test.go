package cpu

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu/gemm"
)

func open(t testing.TB, cfg Config) *Device {
	t.Helper()
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func alloc32(t testing.TB, d *Device, n int) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(n)*4, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStreamRunsAhead shows that kernels are queued, not run, by the call:
// the compute stream is held behind an event that cannot complete until the
// test says so, and the caller still queues work and gets an event that is
// not done. Releasing the hold lets the queued work run in order.
func TestStreamRunsAhead(t *testing.T) {
	d := open(t, Config{})
	hold := newHold(&d.lane)
	if err := d.compute.Wait(event{s: hold, seq: 1}); err != nil {
		t.Fatal(err)
	}
	x := alloc32(t, d, 4)
	k := d.Kernels()
	for _, v := range []float64{1, 2, 3} {
		if err := k.Fill(device.Fill{DType: device.Float32, N: 4, X: x, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := d.compute.Record()
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := ev.Done(); done {
		t.Fatal("event done while the stream is held: the kernels ran in the caller")
	}
	hold.release()
	if err := ev.Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	if err := device.DownloadSlice(d, got, x); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 3 {
			t.Errorf("x[%d] = %v, want 3 (the last of three fills, in order)", i, v)
		}
	}
}

// TestKernelCallsAllocateNothing checks the steady-state promise: queuing
// and running kernels makes no Go garbage (AllocsPerRun counts the stream
// and pool goroutines' allocations too), Kernels itself included, which
// the layers call for each kernel they queue: on the device, a scope and a
// branch.
func TestKernelCallsAllocateNothing(t *testing.T) {
	const b, h = 32, 256
	d := open(t, Config{})
	sc, err := d.Scope(device.ScopeConfig{})
	check(t, err)
	defer sc.Close()
	br, err := d.Branch()
	check(t, err)
	defer br.Close()
	if n := testing.AllocsPerRun(20, func() { _, _, _ = d.Kernels(), sc.Kernels(), br.Kernels() }); n != 0 {
		t.Errorf("Kernels of the device, a scope and a branch allocates %v times, want 0", n)
	}
	k := d.Kernels()
	pre, act := alloc32(t, d, b*4*h), alloc32(t, d, b*4*h)
	w := alloc32(t, d, 4*h*h)
	cPrev, c, hh := alloc32(t, d, b*h), alloc32(t, d, b*h), alloc32(t, d, b*h)
	loss, tg := alloc32(t, d, 1), alloc32(t, d, b)
	for _, x := range []device.Buffer{pre, act, w, cPrev, c, hh, loss, tg} {
		if err := k.Fill(device.Fill{DType: device.Float32, N: int(x.Len() / 4), X: x, Value: 0.01}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Fill(device.Fill{DType: device.Int32, N: b, X: tg, Value: 3}); err != nil {
		t.Fatal(err)
	}
	step := func() {
		k := d.Kernels()
		check(t, k.Gemm(device.Gemm{DType: device.Float32, TransB: true, M: b, N: 4 * h, K: h, Alpha: 1, Beta: 1, A: hh, B: w, C: pre}))
		check(t, k.LSTMCell(device.LSTMCell{DType: device.Float32, Batch: b, Hidden: h, Pre: pre, CPrev: cPrev, C: c, H: hh, Act: act}))
		check(t, k.LSTMCellGrad(device.LSTMCellGrad{DType: device.Float32, Batch: b, Hidden: h, Act: act, CPrev: cPrev, C: c, DH: hh, DC: cPrev, DPre: act, DCPrev: cPrev}))
		check(t, k.SoftmaxCrossEntropy(device.SoftmaxCrossEntropy{DType: device.Float32, N: b, Classes: 4 * h, Logits: pre, Targets: tg, Scale: 1, Loss: loss, DLogits: pre}))
		check(t, k.SumSquares(device.SumSquares{DType: device.Float32, N: b * h, X: c, Out: loss}))
		check(t, k.Adam(device.Adam{DType: device.Float32, N: b * h, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1, Param: c, Grad: hh, M: cPrev, V: act}))
		check(t, d.compute.Synchronize())
	}
	step()
	if n := testing.AllocsPerRun(20, step); n != 0 {
		t.Errorf("a training-like step of kernels allocates %v times, want 0", n)
	}
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// countingBLAS counts the SGEMMs that reach it.
type countingBLAS struct {
	gonum.Implementation
	mu    sync.Mutex
	calls int
}

func (c *countingBLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, cc []float32, ldc int) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	c.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc)
}

// TestBLASChoice: tensor's default BLAS is replaced by ours, a BLAS the
// program chose with tensor.Use is respected, and Config.BLAS wins.
func TestBLASChoice(t *testing.T) {
	if _, ok := open(t, Config{}).blas.(gemm.BLAS); !ok && isGonumDefault() {
		t.Errorf("with tensor's default BLAS the device uses %T, want gemm.BLAS", open(t, Config{}).blas)
	}
	prev := tensor.WhichBLAS()
	t.Cleanup(func() { tensor.Use(prev) })
	used := &countingBLAS{}
	tensor.Use(used)
	d := open(t, Config{})
	a, b, c := alloc32(t, d, 4), alloc32(t, d, 4), alloc32(t, d, 4)
	check(t, device.UploadSlice(d, a, []float32{1, 2, 3, 4}))
	check(t, device.UploadSlice(d, b, []float32{5, 6, 7, 8}))
	check(t, d.Kernels().Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 2, Alpha: 1, A: a, B: b, C: c}))
	got := make([]float32, 4)
	check(t, device.DownloadSlice(d, got, c))
	if want := []float32{19, 22, 43, 50}; got[0] != want[0] || got[3] != want[3] {
		t.Errorf("C = %v, want %v", got, want)
	}
	if used.calls != 1 {
		t.Errorf("the BLAS chosen with tensor.Use ran %d SGEMMs, want 1", used.calls)
	}
	explicit := &countingBLAS{}
	if _, ok := open(t, Config{BLAS: explicit}).blas.(*countingBLAS); !ok {
		t.Error("Config.BLAS was not used")
	}
}

func isGonumDefault() bool {
	_, ok := tensor.WhichBLAS().(gonum.Implementation)
	return ok
}

// TestCapacity: a capped device runs out of memory with the allocator's
// typed error, and Close returns every byte, freed or not.
func TestCapacity(t *testing.T) {
	const capacity = 64 << 20
	d, err := Open(Config{Capacity: capacity})
	check(t, err)
	_, err = d.Alloc(2*capacity, device.Workspace)
	var oom *alloc.OutOfMemoryError
	if !errors.Is(err, alloc.ErrOutOfMemory) || !errors.As(err, &oom) {
		t.Fatalf("Alloc beyond the capacity: err = %v, want an *alloc.OutOfMemoryError", err)
	}
	if _, err := d.Alloc(1<<20, device.Workspace); err != nil {
		t.Fatalf("Alloc after an OOM: %v", err)
	}
	if free, _, _ := d.host.MemInfo(); free >= capacity {
		t.Fatalf("free = %d with a buffer live, want < %d", free, capacity)
	}
	check(t, d.Close())
	if free, _, _ := d.host.MemInfo(); free != capacity {
		t.Errorf("after Close free = %d, want the whole capacity %d (live buffers released)", free, capacity)
	}
	if _, err := d.Alloc(1, device.Workspace); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Alloc after Close: err = %v, want ErrClosed", err)
	}
}

// TestConcurrentCallers queues kernels from several goroutines at once;
// under -race this also checks the stream's hand-off.
func TestConcurrentCallers(t *testing.T) {
	d := open(t, Config{})
	const n, workers = 1 << 16, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x, err := d.Alloc(n*4, device.Workspace)
			if err != nil {
				errs <- err
				return
			}
			defer d.Free(x)
			k := d.Kernels()
			if err := k.Fill(device.Fill{DType: device.Float32, N: n, X: x, Value: float64(w)}); err != nil {
				errs <- err
				return
			}
			for range 10 {
				if err := k.Axpby(device.Axpby{DType: device.Float32, N: n, Alpha: 1, X: x, Beta: 1, Y: x}); err != nil {
					errs <- err
					return
				}
			}
			got := make([]float32, n)
			if err := device.DownloadSlice(d, got, x); err != nil {
				errs <- err
				return
			}
			want := float32(w) * 1024 // doubled ten times
			for i, v := range got {
				if v != want {
					errs <- errors.New("wrong value")
					t.Errorf("worker %d: x[%d] = %v, want %v", w, i, v, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSumIsDeterministic: reductions add per-part partial sums in part
// order, so the same input gives bit-identical sums on every run.
func TestSumIsDeterministic(t *testing.T) {
	d := open(t, Config{})
	const n = 1 << 20
	x, out := alloc32(t, d, n), alloc32(t, d, 1)
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Sin(float64(i)))
	}
	check(t, device.UploadSlice(d, x, v))
	var first float32
	for i := range 20 {
		check(t, d.Kernels().SumSquares(device.SumSquares{DType: device.Float32, N: n, X: x, Out: out}))
		got := make([]float32, 1)
		check(t, device.DownloadSlice(d, got, out))
		if i == 0 {
			first = got[0]
		} else if got[0] != first {
			t.Fatalf("run %d: sum %v, first run %v", i, got[0], first)
		}
	}
}

// TestCloseLeavesNoGoroutines: Close stops every stream and the thread
// team. (The GEMM's helper pool is process-wide and started before the
// baseline is taken.)
func TestCloseLeavesNoGoroutines(t *testing.T) {
	warm := open(t, Config{})
	a := alloc32(t, warm, 64*64)
	check(t, warm.Kernels().Gemm(device.Gemm{DType: device.Float32, M: 64, N: 64, K: 64, Alpha: 1, A: a, B: a, C: a}))
	check(t, warm.Synchronize())
	before := runtime.NumGoroutine()

	d, err := Open(Config{Threads: 4})
	check(t, err)
	for range 3 {
		if _, err := d.NewStream(); err != nil {
			t.Fatal(err)
		}
	}
	x := alloc32(t, d, 1<<16)
	check(t, d.Kernels().Fill(device.Fill{DType: device.Float32, N: 1 << 16, X: x, Value: 1}))
	check(t, d.Close())
	// Goroutines that returned may take a moment to be counted as gone.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before Open", n, before)
	}
}

// TestReleaseWaitsForWork frees a buffer that queued kernels still read and
// empties the cache at once: the segment goes back to the system only after
// that work ran (before the fix, EmptyCache unmapped it under the running
// kernels, and the process died of a segmentation fault; an allocation
// that runs out of memory releases cached segments the same way).
func TestReleaseWaitsForWork(t *testing.T) {
	d, err := Open(Config{})
	check(t, err)
	defer d.Close()
	const n = 16 << 20 // 64 MiB of float32: a segment of its own
	x, err := d.Alloc(4*n, device.Workspace)
	check(t, err)
	out, err := d.Alloc(4, device.Workspace)
	check(t, err)
	k := d.Kernels()
	check(t, k.Fill(device.Fill{DType: device.Float32, N: n, X: x, Value: 1}))
	for range 20 { // long enough that the host is well ahead
		check(t, k.Axpby(device.Axpby{DType: device.Float32, N: n, Alpha: 1, X: x, Beta: 1, Y: x}))
	}
	check(t, k.SumSquares(device.SumSquares{DType: device.Float32, N: 1 << 10, X: x, Out: out}))
	check(t, d.Free(x))
	check(t, d.Memory().EmptyCache())
	got := make([]float32, 1)
	check(t, device.DownloadSlice(d, got, out))
	// Each element doubled 20 times: 2^20, squared, summed over 2^10.
	if want := float32(1 << 50); got[0] != want {
		t.Errorf("sum of squares = %g, want %g", got[0], want)
	}
	if r := d.MemStats().ReservedBytes[alloc.AllPools].Current; r >= 4*n {
		t.Errorf("reserved %d bytes after EmptyCache, want the 64 MiB segment released", r)
	}
}

// TestScopeStreamsAreIndependent holds one scope's compute stream behind an
// event that cannot complete, and shows that another scope's and the
// device's work still run to the end: no job queues behind another.
func TestScopeStreamsAreIndependent(t *testing.T) {
	d := open(t, Config{})
	sa, err := d.Scope(device.ScopeConfig{Name: "held"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := d.Scope(device.ScopeConfig{Name: "free"})
	if err != nil {
		t.Fatal(err)
	}
	a := sa.(*Scope)
	hold := newHold(&a.lane)
	if _, err := a.compute.enqueue(func(c *cmd) { c.op, c.wait = opWait, event{s: hold, seq: 1} }); err != nil {
		t.Fatal(err)
	}
	xa, err := a.Alloc(16, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Kernels().Fill(device.Fill{DType: device.Float32, N: 4, X: xa, Value: 1}); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []device.Device{sb, d} {
		x, err := dev.Alloc(16, device.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Kernels().Fill(device.Fill{DType: device.Float32, N: 4, X: x, Value: 2}); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 4)
		if err := device.DownloadSlice(dev, got, x); err != nil { // would hang if it queued behind the held scope
			t.Fatal(err)
		}
		if got[3] != 2 {
			t.Errorf("%s: got %v, want 2s", dev.Name(), got)
		}
	}
	ev, err := a.Stream().Record()
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := ev.Done(); done {
		t.Fatal("the held scope's work ran")
	}
	hold.release()
	got := make([]float32, 4)
	if err := device.DownloadSlice(a, got, xa); err != nil {
		t.Fatal(err)
	}
	if got[0] != 1 {
		t.Errorf("the held scope's fill after release: %v, want 1s", got)
	}
}

// newHold returns a stream of l without a worker: its one "command"
// completes only when the test calls release, so a stream that waits for
// event{s: hold, seq: 1} is held until then.
func newHold(l *lane) *stream {
	hold := &stream{dev: l.d, ln: l, exited: make(chan struct{})}
	hold.queued.Store(1)
	hold.notEmpty.L, hold.notFull.L, hold.progress.L = &hold.mu, &hold.mu, &hold.mu
	return hold
}

// release completes a held stream's command.
func (s *stream) release() {
	s.mu.Lock()
	s.done.Store(1)
	s.progress.Broadcast()
	s.mu.Unlock()
}

// TestEmbeddingGradRepeatedDistinct: EmbeddingGrad given Distinct ids that
// repeat one raises ErrIndex on the stream, naming the id and the two
// positions (the conformance suite's Distinct/Repeated holds every device
// to the ErrIndex; the CUDA device's message names no position); the same
// ids without Distinct are a scatter-add like any other.
func TestEmbeddingGradRepeatedDistinct(t *testing.T) {
	d := open(t, Config{})
	ids, err := d.Alloc(3*4, device.Workspace)
	check(t, err)
	check(t, device.UploadSlice(d, ids, []int32{1, 3, 1}))
	dOut, table := alloc32(t, d, 3*2), alloc32(t, d, 4*2)
	check(t, device.UploadSlice(d, dOut, []float32{1, 2, 3, 4, 5, 6}))
	a := device.EmbeddingGrad{DType: device.Float32, N: 3, Dim: 2, Vocab: 4, IDs: ids, DOut: dOut, DTable: table, Distinct: true}
	check(t, d.Kernels().EmbeddingGrad(a))
	err = d.Synchronize()
	if !errors.Is(err, device.ErrIndex) || !strings.Contains(err.Error(), "id 1 at positions 0 and 2") {
		t.Fatalf("repeated distinct ids: %v, want ErrIndex naming id 1 at positions 0 and 2", err)
	}
	check(t, d.Kernels().Fill(device.Fill{DType: device.Float32, N: 8, X: table}))
	a.Distinct = false
	check(t, d.Kernels().EmbeddingGrad(a))
	got := make([]float32, 8)
	check(t, device.DownloadSlice(d, got, table))
	if want := []float32{0, 0, 6, 8, 0, 0, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("without Distinct: %v, want %v", got, want)
	}
}
