package rnn_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// The fixtures come from testdata/make_fixtures.py (PyTorch 1.13, float64);
// see the script for how each case was made.

// torchTol bounds |got-want|/max(1,|want|) against PyTorch, in float64
// on shapes T = 5, B = 3, I = 4, H = 6, L ≤ 3. Both sides evaluate the
// same functions and differ in the order of the GEMMs' sums (OpenBLAS,
// gonum, cuBLAS; on a GPU with FMA contraction, which only removes
// roundings) and in exp and tanh (glibc, PyTorch's vectorised ones,
// CUDA's: each within 1–2 ulps in double). Forward, a pre-activation is a
// sum of at most max(I, H) = 6 products and 2 biases (≲ 8·2⁻⁵³ relative to
// the sum of magnitudes) and the cell adds ~10 roundings: ≲ 20·2⁻⁵³ per
// step, carried by the recurrence with a gain below 1 (weights
// U(±1/√6), gate derivatives ≤ 1), so ≲ T·L·20·2⁻⁵³ ≈ 3e-14 after
// 5 steps of 3 layers. Backward adds sums of 4H = 24 products (dx, dh)
// and of T·B = 15 (the weight gradients) per step and layer:
// ≲ T·L·(24 + 15 + 20)·2⁻⁵³ ≈ 1e-13 relative to the terms' magnitudes.
// 1e-12 leaves a factor 10 for cancellation in those sums; a wrong gate,
// bias, transpose or time step is off by the size of the values. (CPU and
// the emulator measure 5e-16.)
const torchTol = 1e-12

type tensorJSON struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

type fixtureCase struct {
	Cell         string                `json:"cell"`
	Layers       int                   `json:"layers"`
	Bias         bool                  `json:"bias"`
	InitialState bool                  `json:"initial_state"`
	Seq          int                   `json:"seq"`
	Batch        int                   `json:"batch"`
	Input        int                   `json:"input"`
	Hidden       int                   `json:"hidden"`
	X            tensorJSON            `json:"x"`
	Params       map[string]tensorJSON `json:"params"`
	H0           *tensorJSON           `json:"h0"`
	C0           *tensorJSON           `json:"c0"`
	Out          tensorJSON            `json:"out"`
	HN           tensorJSON            `json:"h_n"`
	CN           *tensorJSON           `json:"c_n"`
	WOut         tensorJSON            `json:"w_out"`
	WH           tensorJSON            `json:"w_h"`
	WC           *tensorJSON           `json:"w_c"`
	Loss         float64               `json:"loss"`
	GradX        tensorJSON            `json:"grad_x"`
	GradParams   map[string]tensorJSON `json:"grad_params"`
	GradH0       *tensorJSON           `json:"grad_h0"`
	GradC0       *tensorJSON           `json:"grad_c0"`
}

func (c *fixtureCase) name() string {
	return fmt.Sprintf("%s/layers%d/bias=%v/h0=%v", c.Cell, c.Layers, c.Bias, c.InitialState)
}

// TestKernelsAgreeWithTorchForward runs PyTorch's nn.LSTM and nn.GRU
// forward passes, layer by layer, with the device's kernels alone (one
// input-projection GEMM per layer, then per step a recurrent GEMM and the
// fused cell) and compares the output sequence and final states with
// PyTorch's. It pins the gate orders, the two biases and the GRU's reset
// gate semantics of device.LSTMCell and device.GRUCell to PyTorch before
// the layers are built on them.
func TestKernelsAgreeWithTorchForward(t *testing.T) {
	cases := torchCases(t)
	d := testdevice.Open(t)
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			out, hn, cn := forward(t, d, &c)
			compare(t, "out", out, c.Out.Data, torchTol)
			compare(t, "h_n", hn, c.HN.Data, torchTol)
			if c.CN != nil {
				compare(t, "c_n", cn, c.CN.Data, torchTol)
			}
		})
	}
}

// torchCases reads the PyTorch fixtures.
func torchCases(t *testing.T) []fixtureCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/torch_rnn.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []fixtureCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) != 24 { // 2 cells × 3 depths × bias on/off × initial state on/off
		t.Fatalf("%d fixture cases, want 24", len(fx.Cases))
	}
	return fx.Cases
}

// forward computes the stacked layer's output [T, B, H] and final states
// [L, B, H] with device kernels in float64.
func forward(t *testing.T, d device.Device, c *fixtureCase) (out, hn, cn []float64) {
	k := d.Kernels()
	T, B, H := c.Seq, c.Batch, c.Hidden
	lstm := c.Cell == "lstm"
	g := 3
	if lstm {
		g = 4
	}
	up := func(v []float64) device.Buffer {
		b, err := d.Alloc(int64(len(v))*8, device.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		if err := device.UploadSlice(d, b, v); err != nil {
			t.Fatal(err)
		}
		return b
	}
	zeros := func(n int) device.Buffer { return up(make([]float64, n)) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	step := func(b device.Buffer, i, n int) device.Buffer { return b.Elems(device.Float64, i*n, n) }

	x, in := up(c.X.Data), c.Input
	for l := range c.Layers {
		p := func(name string) device.Buffer {
			v, ok := c.Params[fmt.Sprintf("%s_l%d", name, l)]
			if !ok {
				return device.Buffer{}
			}
			return up(v.Data)
		}
		wih, whh, bih, bhh := p("weight_ih"), p("weight_hh"), p("bias_ih"), p("bias_hh")
		if c.Bias == bih.IsZero() {
			t.Fatalf("layer %d: bias_ih present = %v, want %v", l, !bih.IsZero(), c.Bias)
		}
		pre := zeros(T * B * g * H)
		must(k.Gemm(device.Gemm{DType: device.Float64, TransB: true, M: T * B, N: g * H, K: in, Alpha: 1, A: x, B: wih, C: pre}))
		h, cs := zeros(B*H), zeros(B*H)
		if c.H0 != nil {
			h = up(c.H0.Data[l*B*H : (l+1)*B*H])
		}
		if c.C0 != nil {
			cs = up(c.C0.Data[l*B*H : (l+1)*B*H])
		}
		seq, hp, cNext := zeros(T*B*H), zeros(B*g*H), zeros(B*H)
		for s := range T {
			hs := step(seq, s, B*H)
			if lstm {
				must(k.Gemm(device.Gemm{DType: device.Float64, TransB: true, M: B, N: g * H, K: H, Alpha: 1, Beta: 1, A: h, B: whh, C: step(pre, s, B*g*H)}))
				must(k.LSTMCell(device.LSTMCell{DType: device.Float64, Batch: B, Hidden: H, Pre: step(pre, s, B*g*H), BiasIH: bih, BiasHH: bhh, CPrev: cs, C: cNext, H: hs}))
				cs, cNext = cNext, cs
			} else {
				must(k.Gemm(device.Gemm{DType: device.Float64, TransB: true, M: B, N: g * H, K: H, Alpha: 1, A: h, B: whh, C: hp}))
				must(k.GRUCell(device.GRUCell{DType: device.Float64, Batch: B, Hidden: H, XPre: step(pre, s, B*g*H), HPre: hp, BiasIH: bih, BiasHH: bhh, HPrev: h, H: hs}))
			}
			h = hs
		}
		hn = append(hn, download(t, d, h, B*H)...)
		cn = append(cn, download(t, d, cs, B*H)...)
		x, in = seq, H
	}
	return download(t, d, x, T*B*H), hn, cn
}

func download(t *testing.T, d device.Device, b device.Buffer, n int) []float64 {
	t.Helper()
	v := make([]float64, n)
	if err := device.DownloadSlice(d, v, b); err != nil {
		t.Fatal(err)
	}
	return v
}

func compare(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, 0
	for i := range got {
		if e := math.Abs(got[i]-want[i]) / math.Max(1, math.Abs(want[i])); !(e <= worst) {
			worst, at = e, i
		}
	}
	if !(worst <= tol) { // a NaN error too
		t.Errorf("%s[%d] = %v, want %v (error %.3g > %g)", what, at, got[at], want[at], worst, tol)
	}
}
