package cuda

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// TestEmulatedKernelCallsAllocateNothing checks the steady-state promise
// on the CUDA device, through the real cgo bindings: queuing a kernel, a
// GEMM or a copy makes no Go garbage (testing.AllocsPerRun), as on the CPU
// device. Kernels that take a temporary from the caching allocator take it
// from its cache, which allocates nothing either once warm. The same
// holds on a branch (its own launch arguments, cuBLAS handle and
// allocator stream), and for its Fork and Join, and for Kernels itself.
func TestEmulatedKernelCallsAllocateNothing(t *testing.T) {
	d := openEmulated(t, Config{})
	const b, h = 4, 8
	buf := func(n int) device.Buffer {
		t.Helper()
		x, err := d.Alloc(int64(n)*4, device.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Kernels().Fill(device.Fill{DType: device.Float32, N: n, X: x, Value: 0.1}); err != nil {
			t.Fatal(err)
		}
		return x
	}
	pre, act, w := buf(b*4*h), buf(b*4*h), buf(4*h*h)
	cPrev, c, hh := buf(b*h), buf(b*h), buf(b*h)
	loss, ids := buf(1), buf(b)
	// float64s, as buffers of twice as many float32s: two records, a
	// guard, a slot and a step's rates.
	records, guard, slot, rates := buf(2*6), buf(2*2), buf(2), buf(device.RatesSize/4)
	br, err := d.Branch()
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	if err := br.Fork(); err != nil {
		t.Fatal(err)
	}
	// Kernels itself, which the layers call for each kernel they queue.
	if n := testing.AllocsPerRun(20, func() { _, _ = d.Kernels(), br.Kernels() }); n != 0 {
		t.Errorf("Kernels of the device and a branch allocates %v times, want 0", n)
	}
	for _, on := range []struct {
		name string
		k    device.Kernels
	}{{"the compute stream", d.Kernels()}, {"a branch", br.Kernels()}} {
		testCallsAllocateNothing(t, on.name, on.k, br, pre, act, w, cPrev, c, hh, loss, ids, records, guard, slot, rates)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// testCallsAllocateNothing is TestEmulatedKernelCallsAllocateNothing's
// table, on k (on, in messages); br's Fork and Join, which a branch's
// work takes each step, are among the calls.
func testCallsAllocateNothing(t *testing.T, on string, k device.Kernels, br device.Branch, pre, act, w, cPrev, c, hh, loss, ids, records, guard, slot, rates device.Buffer) {
	const b, h = 4, 8
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Gemm", func() error {
			return k.Gemm(device.Gemm{DType: device.Float32, M: b, N: 4 * h, K: h, Alpha: 1, A: hh, B: w, C: pre, TransB: true})
		}},
		{"LSTMCell", func() error {
			return k.LSTMCell(device.LSTMCell{DType: device.Float32, Batch: b, Hidden: h, Pre: pre, CPrev: cPrev, C: c, H: hh, Act: act})
		}},
		{"Fill", func() error { return k.Fill(device.Fill{DType: device.Float32, N: b * h, X: c, Value: 1}) }},
		{"a branch's Fork and Join", func() error { return errors.Join(br.Fork(), br.Join()) }},
		{"Axpby", func() error {
			return k.Axpby(device.Axpby{DType: device.Float32, N: b * h, Alpha: 1, Beta: 1, X: c, Y: hh})
		}},
		{"Copy", func() error { return k.Copy(device.Copy{Src: c, Dst: cPrev}) }},
		{"SumSquares", func() error { return k.SumSquares(device.SumSquares{DType: device.Float32, N: b * h, X: c, Out: loss}) }},
		{"AddBias", func() error {
			return k.AddBias(device.AddBias{DType: device.Float32, Rows: b, Cols: h, Bias: c, Y: hh})
		}},
		{"SumRows", func() error {
			return k.SumRows(device.SumRows{DType: device.Float32, Rows: b, Cols: h, X: hh, Out: c, Accumulate: true})
		}},
		{"Adam", func() error {
			return k.Adam(device.Adam{DType: device.Float32, N: b * h, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 3,
				Param: c, Grad: hh, M: cPrev, V: act})
		}},
		{"StepGuard and Adam, their step's values in memory (a replayed step's)", func() error {
			if err := k.StepGuard(device.StepGuard{DType: device.Float32, Loss: loss, NormSq: loss, Scale: 1, ClipNorm: 5,
				Record: records, Guard: guard, Slot: slot}); err != nil {
				return err
			}
			return k.Adam(device.Adam{DType: device.Float32, N: b * h, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
				Param: c, Grad: hh, M: cPrev, V: act, Guard: guard, Clip: 1, Rates: rates})
		}},
		{"Embedding and its gradient", func() error {
			if err := k.Fill(device.Fill{DType: device.Int32, N: b, X: ids, Value: 2}); err != nil {
				return err
			}
			if err := k.Embedding(device.Embedding{DType: device.Float32, N: b, Dim: h, Vocab: 4, Table: w, IDs: ids, Out: hh}); err != nil {
				return err
			}
			return k.EmbeddingGrad(device.EmbeddingGrad{DType: device.Float32, N: b, Dim: h, Vocab: 4, IDs: ids, DOut: hh, DTable: w})
		}},
		{"SoftmaxCrossEntropy", func() error {
			if err := k.Fill(device.Fill{DType: device.Int32, N: b, X: ids, Value: 1}); err != nil {
				return err
			}
			return k.SoftmaxCrossEntropy(device.SoftmaxCrossEntropy{DType: device.Float32, N: b, Classes: h, Logits: c, Targets: ids, Scale: 1, Loss: loss, DLogits: hh})
		}},
	} {
		if err := tc.call(); err != nil { // warms the cache for any temporary
			t.Fatalf("%s on %s: %v", tc.name, on, err)
		}
		if n := testing.AllocsPerRun(20, func() {
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s on %s: %v Go heap allocations per call, want 0", tc.name, on, n)
		}
	}
}
