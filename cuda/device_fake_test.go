package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// openFake opens a device over f and closes it when the test ends.
func openFake(t *testing.T, f *fakeAPI, cfg Config) *Device {
	t.Helper()
	d, err := open(f, cfg)
	if err != nil {
		t.Fatalf("open over the fake driver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestOpenFakeReportsWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fakeAPI, cfg *Config)
		want  string
	}{
		{"no device", func(f *fakeAPI, _ *Config) { f.initErr = newError("cuInit", 100, "") }, "CUDA_ERROR_NO_DEVICE"},
		{"stub driver", func(f *fakeAPI, _ *Config) { f.initErr = newError("cuInit", 34, "") }, "CUDA_ERROR_STUB_LIBRARY"},
		{"ordinal", func(_ *fakeAPI, cfg *Config) { cfg.Ordinal = 1 }, "has 1 GPU(s)"},
		{"old GPU", func(f *fakeAPI, _ *Config) { f.cc = [2]int{7, 5} }, "compute capability 7.5"},
		{"no cuBLAS", func(f *fakeAPI, _ *Config) {
			f.blasErr = errors.New("cuda: no usable cuBLAS (libcublas.so.13: cannot open)")
		}, "libcublas.so.13"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI()
			var cfg Config
			tc.setup(f, &cfg)
			d, err := open(f, cfg)
			if err == nil {
				d.Close()
				t.Fatal("open succeeded")
			}
			if !errors.Is(err, device.ErrUnavailable) {
				t.Errorf("open = %v, want an error matching device.ErrUnavailable", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("open = %q, want it to say %q", err, tc.want)
			}
			if f.ctxRetained != f.ctxReleased {
				t.Errorf("primary context retained %d times, released %d", f.ctxRetained, f.ctxReleased)
			}
		})
	}
}

func TestErrorMatching(t *testing.T) {
	oom := newError("cuMemAlloc", 2, "")
	if !errors.Is(oom, alloc.ErrOutOfMemory) || errors.Is(oom, device.ErrUnavailable) {
		t.Errorf("%v: want it to match alloc.ErrOutOfMemory only", oom)
	}
	if got := oom.Error(); got != "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)" {
		t.Errorf("Error() = %q", got)
	}
	if e := newError("cuInit", 100, ""); !errors.Is(e, device.ErrUnavailable) || errors.Is(e, alloc.ErrOutOfMemory) {
		t.Errorf("%v: want it to match device.ErrUnavailable only", e)
	}
	if e := newError("cuLaunchKernel", 700, ""); errors.Is(e, device.ErrUnavailable) || errors.Is(e, alloc.ErrOutOfMemory) ||
		errors.Is(e, device.ErrNotCapturable) || e.Name != "CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Errorf("%v: want CUDA_ERROR_ILLEGAL_ADDRESS matching no sentinel", e)
	}
	// The driver's refusals during a stream capture (CUDA 11.8's codes 900
	// to 908: a call it will not record, the capture invalidated by one,
	// ...) match device.ErrNotCapturable alone.
	for _, code := range []int{900, 901, 904, 906, 907, 908} {
		e := newError("cuLaunchCooperativeKernel", code, "")
		if !errors.Is(e, device.ErrNotCapturable) || errors.Is(e, device.ErrUnavailable) || errors.Is(e, alloc.ErrOutOfMemory) {
			t.Errorf("%v: want it to match device.ErrNotCapturable only", e)
		}
	}
	if e := newError("cuStreamEndCapture", 909, ""); errors.Is(e, device.ErrNotCapturable) {
		t.Errorf("%v: matches device.ErrNotCapturable", e)
	}
	if e := newError("cuFoo", 12345, ""); e.Name != "CUDA_ERROR_12345" {
		t.Errorf("unknown code named %q, want CUDA_ERROR_12345", e.Name)
	}
	if e := newBLASError("cublasSgemm", 3); !errors.Is(e, alloc.ErrOutOfMemory) || e.Name != "CUBLAS_STATUS_ALLOC_FAILED" {
		t.Errorf("%v: want CUBLAS_STATUS_ALLOC_FAILED matching alloc.ErrOutOfMemory", e)
	}
}

// TestFakeLifecycle runs memory, copies, staging and streams through the
// device over the fake driver, then checks that Close gave back every
// segment, pinned buffer, event, stream, module, cuBLAS handle and the
// context.
func TestFakeLifecycle(t *testing.T) {
	f := newFakeAPI()
	d, err := open(f, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Info().BLASLibrary != "libcublas.so.fake" {
		t.Errorf("Info().BLASLibrary = %q, want the library the driver layer loaded", d.Info().BLASLibrary)
	}
	if d.workspace == 0 || f.workspace != d.workspace {
		t.Errorf("cuBLAS workspace %v, fake saw %v: want the workspace taken from the allocator", d.workspace, f.workspace)
	}
	want := bytes.Repeat([]byte("gocurrent"), 1000)
	b, err := d.Alloc(int64(len(want)), device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(b, want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := d.Download(got, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("Download after Upload differs")
	}

	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Staging(int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	copy(h.Bytes(), bytes.ToUpper(want))
	ev, err := d.CopyToDevice(b, h, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Stream().Wait(ev); err != nil {
		t.Fatal(err)
	}
	clear(h.Bytes())
	ev, err = d.CopyToHost(h, b, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Bytes(), bytes.ToUpper(want)) {
		t.Error("CopyToHost after CopyToDevice differs")
	}
	c, err := d.Alloc(b.Len(), device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Kernels().Copy(device.Copy{Dst: c, Src: b}); err != nil {
		t.Fatal(err)
	}
	if err := d.Download(got, c); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.ToUpper(want)) {
		t.Error("Download after a device-to-device Copy differs")
	}
	if err := d.Free(c); err != nil {
		t.Fatal(err)
	}
	if err := d.FreeStaging(h); err != nil {
		t.Fatal(err)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, device.ErrClosed) {
		t.Errorf("second Stream.Close = %v, want ErrClosed", err)
	}
	if err := d.Stream().Close(); err == nil {
		t.Error("closing the compute stream succeeded")
	}
	if _, err := d.NewStream(); err != nil { // left open: Close must destroy it
		t.Fatal(err)
	}
	if _, err := d.Alloc(3<<20, device.Workspace); err != nil { // left allocated: Close must free it
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := d.Alloc(8, device.Workspace); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Alloc after Close = %v, want ErrClosed", err)
	}
	if err := d.Synchronize(); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Synchronize after Close = %v, want ErrClosed", err)
	}
	f.checkReleased(t)
}

func TestFakeOutOfMemory(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	_, err := d.Alloc(2<<30, device.Workspace) // the fake GPU has 1 GiB
	if !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("Alloc beyond the GPU's memory = %v, want alloc.ErrOutOfMemory", err)
	}
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("Alloc beyond the GPU's memory = %v, want an *alloc.OutOfMemoryError with the figures", err)
	}
	// The ladder: cached blocks are released and the cuMemAlloc retried.
	b, err := d.Alloc(600<<20, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	b, err = d.Alloc(700<<20, device.Workspace) // fits only once the cached 600 MiB segment is given back
	if err != nil {
		t.Fatalf("Alloc that needs the cache emptied = %v", err)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
}

// TestFakeTemporaryFreeError checks that the kernels that take a
// temporary from the allocator (SoftmaxCrossEntropy's row losses,
// SumSquares's partial sums) report a failure to give it back instead of
// dropping it. The failure is made by closing the device while the kernel
// is between its two launches, as a Close on another goroutine could: the
// allocator is released under the kernel, and the temporary's Free fails
// with alloc.ErrClosed.
func TestFakeTemporaryFreeError(t *testing.T) {
	for _, tc := range []struct {
		name, first string // the kernel method, its first launch
		run         func(k device.Kernels, b device.Buffer) error
	}{
		{"SoftmaxCrossEntropy", "softmax_xent", func(k device.Kernels, b device.Buffer) error {
			return k.SoftmaxCrossEntropy(device.SoftmaxCrossEntropy{DType: device.Float32, N: 2, Classes: 2,
				Logits: b, Targets: b, Loss: b, Scale: 0.5})
		}},
		{"SumSquares", "sum_squares_partial", func(k device.Kernels, b device.Buffer) error {
			return k.SumSquares(device.SumSquares{DType: device.Float32, N: 4, X: b, Out: b})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI()
			d := openFake(t, f, Config{})
			b, err := d.Alloc(64, device.Workspace)
			if err != nil {
				t.Fatal(err)
			}
			k := d.Kernels()
			if err := tc.run(k, b); err != nil {
				t.Fatalf("%s on an open device = %v, want nil", tc.name, err)
			}
			var closed bool
			var closeErr error
			f.onLaunch = func(name string) {
				if name == "gc_"+tc.first+"_f32" {
					closed, closeErr = true, d.Close()
				}
			}
			err = tc.run(k, b)
			if !closed || closeErr != nil {
				t.Fatalf("Close from the launch of gc_%s_f32: ran %v, error %v; want it run, without error", tc.first, closed, closeErr)
			}
			if !errors.Is(err, alloc.ErrClosed) || !strings.Contains(err.Error(), tc.name) {
				t.Errorf("%s with its temporary's allocator closed under it = %v, want an error naming %s matching alloc.ErrClosed",
					tc.name, err, tc.name)
			}
		})
	}
}

// TestFakeSteadyState checks the property the trainer relies on: after
// the first step, a step's allocations are served from the cache, with no
// cuMemAlloc (the allocator's policy, seen through the device).
func TestFakeSteadyState(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	sizes := []int64{4 << 10, 1 << 20, 3 << 20, 12 << 10, 25 << 20, 512}
	step := func() {
		var live []device.Buffer
		for _, n := range sizes {
			b, err := d.Alloc(n, device.Workspace)
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, b)
		}
		for _, b := range live {
			if err := d.Free(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	step()
	after := f.memAllocs
	for range 10 {
		step()
	}
	if f.memAllocs != after {
		t.Errorf("cuMemAlloc calls: %d after the first step, %d after 10 more; want none per step", after, f.memAllocs)
	}
}

func TestFakeStatusWord(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	// raise is what a kernel that met a bad id does on the GPU: an
	// atomicOr into the word in device memory.
	raise := func(bit uint32) {
		b, err := f.devBytes(d.statusDev, 4)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint32(b, binary.LittleEndian.Uint32(b)|bit)
	}
	raise(statusSoftmaxCrossEntropy)
	ev, err := d.Stream().Record()
	if err != nil {
		t.Fatal(err)
	}
	f.logStatus = true
	if err := ev.Wait(); !errors.Is(err, device.ErrIndex) || !strings.Contains(err.Error(), "SoftmaxCrossEntropy") {
		t.Errorf("Event.Wait = %v, want ErrIndex naming SoftmaxCrossEntropy", err)
	}
	// Event.Wait reads the word on its own stream (not waiting for the
	// compute stream) and leaves it set.
	want := []string{fmt.Sprintf("copy %d", d.statusStream), fmt.Sprintf("sync %d", d.statusStream)}
	if !slices.Equal(f.statusLog, want) {
		t.Errorf("Event.Wait did %q, want %q", f.statusLog, want)
	}
	f.statusLog = nil
	if err := d.Synchronize(); !errors.Is(err, device.ErrIndex) {
		t.Errorf("Synchronize = %v, want ErrIndex (Event.Wait does not clear it)", err)
	}
	// Synchronize queues the copy and the reset on the compute stream,
	// after the work it waits for, then waits.
	cs := d.compute.s
	want = []string{fmt.Sprintf("copy %d", cs), fmt.Sprintf("zero %d", cs), fmt.Sprintf("sync %d", cs)}
	if !slices.Equal(f.statusLog, want) {
		t.Errorf("Synchronize did %q, want %q", f.statusLog, want)
	}
	if err := d.Synchronize(); err != nil {
		t.Errorf("second Synchronize = %v, want nil: an error is reported once", err)
	}
	raise(statusEmbedding)
	b, err := d.Alloc(4, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Download(make([]byte, 4), b); !errors.Is(err, device.ErrIndex) || !strings.Contains(err.Error(), "Embedding: a token id") {
		t.Errorf("Download = %v, want ErrIndex naming Embedding", err)
	}
	raise(statusGatherSeq)
	if err := d.Synchronize(); !errors.Is(err, device.ErrIndex) || !strings.Contains(err.Error(), "GatherSeq: a sequence index") {
		t.Errorf("Synchronize = %v, want ErrIndex naming GatherSeq", err)
	}
	raise(statusSeqPoolGrad)
	if err := d.Synchronize(); !errors.Is(err, device.ErrIndex) || !strings.Contains(err.Error(), "SeqPoolGrad: an ArgMax step") {
		t.Errorf("Synchronize = %v, want ErrIndex naming SeqPoolGrad", err)
	}
	raise(statusEmbeddingGrad)
	if err := d.Close(); !errors.Is(err, device.ErrIndex) {
		t.Errorf("Close with an unreported index error = %v, want ErrIndex", err)
	}
}

// TestFakeLaunches checks the launch shapes of the kernels whose shape
// the ABI fixes, and that every kernel reaches the driver with the right
// name and number of arguments.
func TestFakeLaunches(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	k := d.Kernels()
	buf := func(n int) device.Buffer {
		b, err := d.Alloc(int64(n)*8, device.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	x, y, z, w := buf(1<<16), buf(1<<16), buf(1<<16), buf(1<<16)
	one := buf(1)
	ids := buf(1 << 16)
	f32, f64 := device.Float32, device.Float64
	for _, tc := range []struct {
		run   func() error
		names []string
		nargs int
		grid  [3]uint32
		block [3]uint32
	}{
		{func() error {
			return k.LSTMCell(device.LSTMCell{DType: f32, Batch: 3, Hidden: 37, Pre: x, CPrev: y, C: z, H: w})
		}, []string{"gc_lstm_cell_f32"}, 9, [3]uint32{1, 1, 1}, block1},
		{func() error {
			return k.GRUCellGrad(device.GRUCellGrad{DType: f64, Batch: 16, Hidden: 512, Act: x, HPrev: y, DH: z, DXPre: w, DHPre: x, DHPrev: y})
		}, []string{"gc_gru_cell_grad_f64"}, 9, [3]uint32{32, 1, 1}, block1},
		{func() error {
			return k.Axpby(device.Axpby{DType: f32, N: 1 << 16 * 2, X: x, Y: y})
		}, []string{"gc_axpby_f32"}, 5, [3]uint32{512, 1, 1}, block1},
		{func() error {
			// 512 rows: one pass (rowSlices), a block per 32 columns.
			return k.SumRows(device.SumRows{DType: f32, Rows: 512, Cols: 200, X: x, Out: y})
		}, []string{"gc_sum_rows_f32"}, 5, [3]uint32{7, 1, 1}, [3]uint32{32, 8, 1}},
		{func() error {
			// 1000 rows: 16 slices of 63, then a thread per column, 100:
			// one block of 256 (the partials' grid is checked below).
			return k.SumRows(device.SumRows{DType: f32, Rows: 1000, Cols: 100, X: x, Out: y})
		}, []string{"gc_sum_rows_partial_f32", "gc_sum_rows_finish_f32"}, 5, [3]uint32{1, 1, 1}, block1},
		{func() error {
			// 5·8·100 = 4,000 elements: 16 blocks of 256.
			return k.GatherSeq(device.GatherSeq{DType: f64, T: 5, B: 8, Cols: 100, Index: ids, X: x, Y: y})
		}, []string{"gc_gather_seq_f64"}, 10, [3]uint32{16, 1, 1}, block1},
		{func() error {
			// A thread per element of Out: 8·100 = 800, 4 blocks of 256.
			return k.SeqPool(device.SeqPool{DType: f32, T: 5, B: 8, Cols: 100, Max: true, Lengths: ids, Y: x, Out: y, ArgMax: ids})
		}, []string{"gc_seq_pool_f32"}, 10, [3]uint32{4, 1, 1}, block1},
		{func() error {
			// A thread per element of DY: 5·8·100 = 4,000, 16 blocks.
			return k.SeqPoolGrad(device.SeqPoolGrad{DType: f64, T: 5, B: 8, Cols: 100, DOut: x, DY: y})
		}, []string{"gc_seq_pool_grad_f64"}, 11, [3]uint32{16, 1, 1}, block1},
		{func() error {
			return k.EmbeddingGrad(device.EmbeddingGrad{DType: f32, N: 512, Dim: 200, Vocab: 97, IDs: ids, DOut: x, DTable: y})
		}, []string{"gc_check_ids", "gc_embedding_grad_scan_f32"}, 6, [3]uint32{2, 97, 1}, [3]uint32{128, 1, 1}},
		{func() error {
			return k.EmbeddingGrad(device.EmbeddingGrad{DType: f32, N: 2048, Dim: 64, Vocab: 70000, IDs: ids, DOut: x, DTable: buf(70000 * 64)})
		}, []string{"gc_check_ids", "gc_embedding_grad_seq_f32"}, 6, [3]uint32{1, 1, 1}, block1},
		{func() error {
			// Distinct ids: a thread per element of DOut, 30·200 = 6,000, 24 blocks.
			return k.EmbeddingGrad(device.EmbeddingGrad{DType: f32, N: 30, Dim: 200, Vocab: 97, IDs: ids, DOut: x, DTable: y, Distinct: true})
		}, []string{"gc_check_ids", "gc_embedding_grad_rows_f32"}, 6, [3]uint32{24, 1, 1}, block1},
		{func() error {
			return k.SoftmaxCrossEntropy(device.SoftmaxCrossEntropy{DType: f32, N: 100, Classes: 97, Logits: x, Targets: ids, Loss: one, Scale: 0.01})
		}, []string{"gc_softmax_xent_f32", "gc_sum_finish_f32"}, 5, [3]uint32{1, 1, 1}, block1},
		{func() error {
			return k.SumSquares(device.SumSquares{DType: f64, N: 1 << 16, X: x, Out: one, Accumulate: true})
		}, []string{"gc_sum_squares_partial_f64", "gc_sum_finish_f64"}, 5, [3]uint32{1, 1, 1}, block1},
		{func() error {
			// 300 elements: 2 blocks of 256; the seed and offset in device memory.
			return k.Dropout(device.Dropout{DType: f32, N: 300, P: 0.5, Offset: 3, StateAt: w.Slice(0, 16), X: x, Y: y, Mask: z})
		}, []string{"gc_dropout_f32"}, 8, [3]uint32{2, 1, 1}, block1},
		{func() error {
			return k.Advance(device.Advance{At: one, Add: 1 << 40, Prev: x.Slice(0, 8)})
		}, []string{"gc_advance"}, 3, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}},
		{func() error {
			return k.Fill(device.Fill{DType: device.Int32, N: 10, X: ids, Value: -3.7})
		}, []string{"gc_fill_i32"}, 3, [3]uint32{1, 1, 1}, block1},
		{func() error {
			return k.Adam(device.Adam{DType: f32, N: 10, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1, Param: x, Grad: y, M: z, V: w})
		}, []string{"gc_adam_f32"}, 17, [3]uint32{1, 1, 1}, block1},
		{func() error {
			return k.StepGuard(device.StepGuard{DType: f32, Loss: one, NormSq: one, Scale: 1, ClipNorm: 5, Record: z.Slice(0, 24), Guard: w.Slice(0, 16)})
		}, []string{"gc_step_guard_f32"}, 9, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}},
		{func() error {
			// 10 words: a block of 256.
			return k.GuardedCopy(device.GuardedCopy{Dst: y, Src: x.Slice(0, 40), Guard: w.Slice(0, 16)})
		}, []string{"gc_guarded_copy"}, 4, [3]uint32{1, 1, 1}, block1},
	} {
		f.launches = nil
		if err := tc.run(); err != nil {
			t.Fatalf("%v: %v", tc.names, err)
		}
		if len(f.launches) != len(tc.names) {
			t.Fatalf("%v: %d launches, want %d", tc.names, len(f.launches), len(tc.names))
		}
		for i, name := range tc.names {
			if f.launches[i].name != name {
				t.Errorf("launch %d = %s, want %s", i, f.launches[i].name, name)
			}
		}
		last := f.launches[len(f.launches)-1]
		if len(last.args) != tc.nargs || last.grid != tc.grid || last.block != tc.block {
			t.Errorf("%s: %d args, grid %v, block %v; want %d, %v, %v",
				last.name, len(last.args), last.grid, last.block, tc.nargs, tc.grid, tc.block)
		}
	}
	// SumRows over 1000 rows of 100 columns in 16 slices (what 1000 rows
	// make of 64; 1024 blocks over 4 column blocks would allow 256): a
	// block per 32 columns and slice, each slice 63 rows (the last
	// argument).
	f.launches = nil
	if err := k.SumRows(device.SumRows{DType: f32, Rows: 1000, Cols: 100, X: x, Out: y}); err != nil {
		t.Fatal(err)
	}
	if p := f.launches[0]; p.grid != [3]uint32{4, 16, 1} || p.block != [3]uint32{32, 8, 1} || len(p.args) != 5 || p.args[4] != 63 {
		t.Errorf("%s: grid %v, block %v, args %v; want grid [4 16 1], block [32 8 1], 5 args, slice 63", p.name, p.grid, p.block, p.args)
	}
	// Adam's scalars are computed on the host in float64 (ABI.md).
	f.launches = nil
	if err := k.Adam(device.Adam{DType: f32, N: 10, LR: 0.1, Beta1: 0.9, Beta2: 0.99, Step: 2, WeightDecay: 0.5, Decoupled: true,
		Param: x, Grad: y, M: z, V: w}); err != nil {
		t.Fatal(err)
	}
	a := f.launches[0].args
	for i, want := range map[int]float64{5: 0.1 / (1 - 0.81), 6: math.Sqrt(1 - 0.99*0.99), 11: 1 - 0.05} {
		if got := math.Float64frombits(a[i]); !(math.Abs(got-want) <= 1e-15) {
			t.Errorf("Adam argument %d = %v, want %v", i, got, want)
		}
	}
	if a[12] != 0 || a[13] != 1 {
		t.Errorf("Adam coupled, shrink = %d, %d; want 0, 1 for AdamW", a[12], a[13])
	}
	// GatherSeq's zero strides reach the kernel as Cols, a given one as
	// given; a missing Lengths as NULL.
	f.launches = nil
	if err := k.GatherSeq(device.GatherSeq{DType: f32, T: 2, B: 3, Cols: 7, LdY: 9, X: x, Y: y}); err != nil {
		t.Fatal(err)
	}
	if a := f.launches[0].args; a[1] != 0 || a[7] != 7 || a[8] != 9 {
		t.Errorf("GatherSeq lengths, ldx, ldy = %#x, %d, %d; want NULL, 7 (Cols), 9", a[1], a[7], a[8])
	}
	// Nothing to copy: no launch.
	f.launches = nil
	if err := k.GatherSeq(device.GatherSeq{DType: f32, T: 0, B: 3, Cols: 7}); err != nil || len(f.launches) != 0 {
		t.Errorf("GatherSeq with T = 0 = %v with %d launches, want nil and none", err, len(f.launches))
	}
	// SeqPool's and SeqPoolGrad's zero strides reach the kernels as Cols,
	// given ones as given; ArgMax only with Max (a mean's is NULL even when
	// set), and the flag as 0 or 1.
	f.launches = nil
	if err := k.SeqPool(device.SeqPool{DType: f32, T: 2, B: 3, Cols: 7, LdOut: 9, Y: x, Out: y, ArgMax: ids}); err != nil {
		t.Fatal(err)
	}
	if a := f.launches[0].args; a[0] != 0 || a[3] != 0 || a[7] != 7 || a[8] != 9 || a[9] != 0 {
		t.Errorf("SeqPool lengths, argmax, ldy, ldout, take_max = %#x, %#x, %d, %d, %d; want NULL, NULL, 7 (Cols), 9, 0", a[0], a[3], a[7], a[8], a[9])
	}
	f.launches = nil
	if err := k.SeqPool(device.SeqPool{DType: f32, T: 2, B: 3, Cols: 7, Max: true, LdY: 8, Y: x, Out: y, ArgMax: ids}); err != nil {
		t.Fatal(err)
	}
	if a := f.launches[0].args; a[3] != uint64(ids.Addr()) || a[7] != 8 || a[8] != 7 || a[9] != 1 {
		t.Errorf("SeqPool argmax, ldy, ldout, take_max = %#x, %d, %d, %d; want ArgMax, 8, 7 (Cols), 1", a[3], a[7], a[8], a[9])
	}
	f.launches = nil
	if err := k.SeqPoolGrad(device.SeqPoolGrad{DType: f64, T: 2, B: 3, Cols: 7, LdDY: 10, DOut: x, ArgMax: ids, DY: y}); err != nil {
		t.Fatal(err)
	}
	if a := f.launches[0].args; a[2] != 0 || a[7] != 7 || a[8] != 10 || a[9] != 0 || a[10] != uint64(d.statusDev) {
		t.Errorf("SeqPoolGrad argmax, lddout, lddy, take_max, status = %#x, %d, %d, %d, %#x; want NULL, 7 (Cols), 10, 0, the status word",
			a[2], a[7], a[8], a[9], a[10])
	}
	// T = 0 pools empty sequences (zeros): a launch, without Y. B = 0, or
	// nothing to differentiate: none.
	f.launches = nil
	if err := k.SeqPool(device.SeqPool{DType: f32, T: 0, B: 3, Cols: 7, Out: y}); err != nil || len(f.launches) != 1 || f.launches[0].args[1] != 0 {
		t.Errorf("SeqPool with T = 0 = %v with %d launches, want nil and one with y NULL", err, len(f.launches))
	}
	f.launches = nil
	if err := k.SeqPool(device.SeqPool{DType: f32, T: 3, B: 0, Cols: 7}); err != nil || len(f.launches) != 0 {
		t.Errorf("SeqPool with B = 0 = %v with %d launches, want nil and none", err, len(f.launches))
	}
	if err := k.SeqPoolGrad(device.SeqPoolGrad{DType: f32, T: 0, B: 3, Cols: 7, Max: true}); err != nil || len(f.launches) != 0 {
		t.Errorf("SeqPoolGrad with T = 0 = %v with %d launches, want nil and none", err, len(f.launches))
	}
}

// TestFakeGemm checks the row-major to column-major mapping of Gemm
// against a row-major reference, through the fake cuBLAS (a naive
// column-major GEMM): transposes, leading dimensions, batches, strides.
func TestFakeGemm(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []device.DType{device.Float32, device.Float64} {
		for _, c := range []device.Gemm{
			{M: 3, N: 5, K: 4},
			{M: 3, N: 5, K: 4, TransA: true},
			{M: 3, N: 5, K: 4, TransB: true},
			{M: 3, N: 5, K: 4, TransA: true, TransB: true, Alpha: -0.5, Beta: 2},
			{M: 2, N: 3, K: 4, LdA: 6, LdB: 5, LdC: 7, Beta: 1},
			{M: 2, N: 3, K: 4, Batch: 3, TransB: true},
			{M: 2, N: 3, K: 4, Batch: 2, StrideA: 0, StrideB: 20, StrideC: 9},
		} {
			c.DType = dt
			if c.Alpha == 0 {
				c.Alpha = 1
			}
			w := c.WithDefaults()
			ra, ca, rb, cb := c.M, c.K, c.K, c.N
			if c.TransA {
				ra, ca = ca, ra
			}
			if c.TransB {
				rb, cb = cb, rb
			}
			na := (w.Batch-1)*w.StrideA + (ra-1)*w.LdA + ca
			nb := (w.Batch-1)*w.StrideB + (rb-1)*w.LdB + cb
			nc := (w.Batch-1)*w.StrideC + (c.M-1)*w.LdC + c.N
			av, bv, cv := randSlice(rng, dt, na), randSlice(rng, dt, nb), randSlice(rng, dt, nc)
			c.A, c.B, c.C = upload(t, d, dt, av), upload(t, d, dt, bv), upload(t, d, dt, cv)
			if err := d.Kernels().Gemm(c); err != nil {
				t.Fatal(err)
			}
			got := download(t, d, dt, c.C, nc)
			want := append([]float64(nil), cv...)
			for bi := range w.Batch {
				for i := range c.M {
					for j := range c.N {
						var s float64
						for l := range c.K {
							var a, b float64
							if c.TransA {
								a = av[bi*w.StrideA+l*w.LdA+i]
							} else {
								a = av[bi*w.StrideA+i*w.LdA+l]
							}
							if c.TransB {
								b = bv[bi*w.StrideB+j*w.LdB+l]
							} else {
								b = bv[bi*w.StrideB+l*w.LdB+j]
							}
							s += a * b
						}
						at := bi*w.StrideC + i*w.LdC + j
						want[at] = c.Alpha*s + c.Beta*cv[at]
					}
				}
			}
			for i := range want {
				if !(math.Abs(got[i]-want[i]) <= 1e-5*(1+math.Abs(want[i]))) {
					t.Errorf("%v %+v: C[%d] = %v, want %v", dt, c, i, got[i], want[i])
					break
				}
			}
		}
	}
}

func randSlice(r *rand.Rand, dt device.DType, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = r.Float64()*2 - 1
		if dt == device.Float32 {
			x[i] = float64(float32(x[i]))
		}
	}
	return x
}

func upload(t *testing.T, d *Device, dt device.DType, x []float64) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(x))*dt.Size(), device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if dt == device.Float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = float32(v)
		}
		err = device.UploadSlice(d, b, y)
	} else {
		err = device.UploadSlice(d, b, x)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func download(t *testing.T, d *Device, dt device.DType, b device.Buffer, n int) []float64 {
	t.Helper()
	x := make([]float64, n)
	if dt == device.Float32 {
		y := make([]float32, n)
		if err := device.DownloadSlice(d, y, b); err != nil {
			t.Fatal(err)
		}
		for i, v := range y {
			x[i] = float64(v)
		}
		return x
	}
	if err := device.DownloadSlice(d, x, b); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestFakeRecordFails: an event the driver fails to record comes back as
// a nil interface with the error, from the stream's Record, the copies and
// the allocators' sources; before, it was a nil *event in a non-nil
// interface, and a caller that kept it (the loader keeps a copy's event,
// and waits on it when not nil) would call Wait on a nil pointer.
func TestFakeRecordFails(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	b, err := d.Alloc(64, device.Batches)
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Staging(64)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.recordErr = newError("cuEventRecord", 700, "CUDA_ERROR_ILLEGAL_ADDRESS")
	f.mu.Unlock()
	for _, c := range []struct {
		name   string
		record func() (any, error)
	}{
		{"Stream.Record", func() (any, error) { return d.Stream().Record() }},
		{"CopyToDevice", func() (any, error) { return d.CopyToDevice(b, h, s) }},
		{"CopyToHost", func() (any, error) { return d.CopyToHost(h, b, s) }},
		{"deviceSource.Record", func() (any, error) { return (&deviceSource{d: d}).Record(0) }},
		{"pinnedSource.Record", func() (any, error) { return (&pinnedSource{d: d}).Record(0) }},
	} {
		ev, err := c.record()
		var ce *Error
		if !errors.As(err, &ce) || ev != nil {
			t.Errorf("%s with cuEventRecord failing: event %#v, error %v; want a nil event and the driver's error", c.name, ev, err)
		}
	}
	f.mu.Lock()
	f.recordErr = nil
	f.mu.Unlock()
}

// TestFakeCloseWithPendingEvent: a block freed after a RecordStream on
// another stream holds an allocator event until a later allocation of
// that stream finds it done; a device closed before then waits for it in
// its Close, after the context's work completed, and must not refuse
// that wait for the device being closed (it did: "Event.Wait on a stream
// of a device that is closed", noticed by the branches' helper).
func TestFakeCloseWithPendingEvent(t *testing.T) {
	f := newFakeAPI()
	d, err := open(f, Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Alloc(4096, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Memory().RecordStream(b.Addr(), s.(*stream).id); err != nil {
		t.Fatal(err)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close with an allocator event pending: %v", err)
	}
}
