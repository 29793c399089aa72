package rnn_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// gorgTol bounds the error |got-want|/max(1,|want|) between a layer and
// the gorgonia graph. Both sides evaluate the same float64 functions
// (products summed over at most 4H = 20 terms, 4 steps, 2 layers) and
// differ only in summation order (on a GPU cuBLAS's, with FMA
// contraction, which only removes roundings), in how sigmoid is rounded,
// and in exp and tanh (Go's, glibc's in the emulator, CUDA's on a GPU:
// each within 1–2 ulps in double). Each step and layer adds ≲ (20 + 10)
// roundings of 2⁻⁵³ relative to values of order 1, carried with a gain
// below 1, so they agree within ≲ 4·2·30·2⁻⁵³ ≈ 3e-14 (measured: a few
// 1e-16 on the CPU and the emulator); 1e-10 leaves a wide margin while any
// wrong term (a gate, a bias, a transposed weight, a missing path through
// time or between layers) is off by far more than that.
const gorgTol = 1e-10

// gorgLayer is what LSTM and GRU share for this test.
type gorgLayer interface {
	Forward(rnn.Mode, device.Buffer, int, int, *rnn.State) (device.Buffer, error)
	Backward(device.Buffer) (device.Buffer, error)
	NewState(int) (*rnn.State, error)
	Params() *rnn.Params
	Close() error
}

// TestLayersAgreeWithGorgoniaGraph checks the fused LSTM and GRU stacks,
// forward and backward, against an unrolled gorgonia graph of primitive
// ops (Transpose, Mul, BroadcastAdd, Slice, Sigmoid, Tanh, HadamardProd,
// Add, Sub, Sum) built from PyTorch's equations with the layer's own
// initial parameters, and differentiated by gorgonia.Grad. The loss
// L = Σ out⊙Wout + Σ h_n⊙Wh (+ Σ c_n⊙Wc) with fixed random weights makes
// dL/dout = Wout and dL/dh_n = Wh, dL/dc_n = Wc the layer's inputs to
// Backward. It compares out, h_n, c_n, dx, every parameter gradient, dh0
// and dc0.
func TestLayersAgreeWithGorgoniaGraph(t *testing.T) {
	d := testdevice.Open(t)
	const T, B, I, H = 4, 2, 3, 5
	for _, lstm := range []bool{true, false} {
		for _, layers := range []int{1, 2} {
			for _, bias := range []bool{true, false} {
				cell := "GRU"
				if lstm {
					cell = "LSTM"
				}
				name := fmt.Sprintf("%s/layers=%d/bias=%v", cell, layers, bias)
				seed := uint64(7 + 10*layers)
				if bias {
					seed++
				}
				if lstm {
					seed += 100
				}
				t.Run(name, func(t *testing.T) {
					gorgCheck(t, d, lstm, rnn.Config{Input: I, Hidden: H, Layers: layers, DType: device.Float64, Seed: seed, NoBias: !bias}, T, B)
				})
			}
		}
	}
}

func gorgCheck(t *testing.T, d device.Device, lstm bool, cfg rnn.Config, T, B int) {
	I, H, L := cfg.Input, cfg.Hidden, cfg.Layers
	var layer gorgLayer
	var err error
	if lstm {
		layer, err = rnn.NewLSTM(context.Background(), d, cfg)
	} else {
		layer, err = rnn.NewGRU(context.Background(), d, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()

	// The layer's initial parameters, which the graph reads as its own.
	type param struct {
		shape []int
		value []float64
	}
	params := map[string]param{}
	var names []string
	for p := range layer.Params().All() {
		v, err := layer.Params().Value(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		data, ok := v.Data().([]float64)
		if !ok {
			t.Fatalf("%s holds %T, want []float64", p.Name, v.Data())
		}
		params[p.Name] = param{shape: append([]int(nil), p.Shape...), value: append([]float64(nil), data...)}
		names = append(names, p.Name)
	}
	perLayer := 2
	if !cfg.NoBias {
		perLayer = 4
	}
	if len(names) != perLayer*L {
		t.Fatalf("%d parameters %v, want %d", len(names), names, perLayer*L)
	}

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x676f72676f6e6961))
	uniform := func(n int, scale float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = (2*rng.Float64() - 1) * scale
		}
		return v
	}
	x, h0 := uniform(T*B*I, 1), uniform(L*B*H, 1)
	wOut, wH := uniform(T*B*H, 1), uniform(L*B*H, 1)
	var c0, wC []float64
	if lstm {
		c0, wC = uniform(L*B*H, 2), uniform(L*B*H, 1)
	}

	// The unrolled graph.
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	g := G.NewGraph()
	node := func(name string, data []float64, shape ...int) *G.Node {
		v := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), data...)))
		if len(shape) == 1 {
			return G.NewVector(g, tensor.Float64, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
		}
		return G.NewMatrix(g, tensor.Float64, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
	}
	// gate is columns [q·H, (q+1)·H) of a [B, gates·H] node (B, H ≥ 2:
	// gorgonia's Slice drops an axis sliced to width 1).
	gate := func(n *G.Node, q int) *G.Node {
		return must(G.Slice(n, G.S(0, B), G.S(q*H, (q+1)*H)))
	}
	sumProd := func(a, b *G.Node) *G.Node { return must(G.Sum(must(G.HadamardProd(a, b)))) }
	ones := make([]float64, B*H)
	for i := range ones {
		ones[i] = 1
	}
	one := node("ones", ones, B, H)

	pn := map[string]*G.Node{}
	for _, n := range names {
		pn[n] = node(n, params[n].value, params[n].shape...)
	}
	xs := make([]*G.Node, T)
	for s := range T {
		xs[s] = node(fmt.Sprintf("x%d", s), x[s*B*I:(s+1)*B*I], B, I)
	}
	h0s, c0s := make([]*G.Node, L), make([]*G.Node, L)
	hns, cns := make([]*G.Node, L), make([]*G.Node, L)
	in := xs
	var loss *G.Node
	addLoss := func(n *G.Node) {
		if loss == nil {
			loss = n
		} else {
			loss = must(G.Add(loss, n))
		}
	}
	for l := range L {
		blk := l * B * H
		h0s[l] = node(fmt.Sprintf("h0_l%d", l), h0[blk:blk+B*H], B, H)
		h := h0s[l]
		var c *G.Node
		if lstm {
			c0s[l] = node(fmt.Sprintf("c0_l%d", l), c0[blk:blk+B*H], B, H)
			c = c0s[l]
		}
		wihT := must(G.Transpose(pn[fmt.Sprintf("weight_ih_l%d", l)]))
		whhT := must(G.Transpose(pn[fmt.Sprintf("weight_hh_l%d", l)]))
		bih, bhh := pn[fmt.Sprintf("bias_ih_l%d", l)], pn[fmt.Sprintf("bias_hh_l%d", l)]
		if cfg.NoBias != (bih == nil) || cfg.NoBias != (bhh == nil) {
			t.Fatalf("layer %d: biases present %v, %v with NoBias %v", l, bih != nil, bhh != nil, cfg.NoBias)
		}
		outs := make([]*G.Node, T)
		for s := range T {
			xp := must(G.Mul(in[s], wihT)) // [B, gates·H]
			hp := must(G.Mul(h, whhT))
			if !cfg.NoBias {
				xp = must(G.BroadcastAdd(xp, bih, nil, []byte{0}))
				hp = must(G.BroadcastAdd(hp, bhh, nil, []byte{0}))
			}
			if lstm {
				pre := must(G.Add(xp, hp))
				i := must(G.Sigmoid(gate(pre, 0)))
				f := must(G.Sigmoid(gate(pre, 1)))
				gg := must(G.Tanh(gate(pre, 2)))
				o := must(G.Sigmoid(gate(pre, 3)))
				c = must(G.Add(must(G.HadamardProd(f, c)), must(G.HadamardProd(i, gg))))
				h = must(G.HadamardProd(o, must(G.Tanh(c))))
			} else {
				r := must(G.Sigmoid(must(G.Add(gate(xp, 0), gate(hp, 0)))))
				z := must(G.Sigmoid(must(G.Add(gate(xp, 1), gate(hp, 1)))))
				n := must(G.Tanh(must(G.Add(gate(xp, 2), must(G.HadamardProd(r, gate(hp, 2)))))))
				h = must(G.Add(must(G.HadamardProd(must(G.Sub(one, z)), n)), must(G.HadamardProd(z, h))))
			}
			outs[s] = h
		}
		hns[l], cns[l] = h, c
		addLoss(sumProd(node(fmt.Sprintf("wh_l%d", l), wH[blk:blk+B*H], B, H), h))
		if lstm {
			addLoss(sumProd(node(fmt.Sprintf("wc_l%d", l), wC[blk:blk+B*H], B, H), c))
		}
		in = outs
	}
	for s := range T {
		addLoss(sumProd(node(fmt.Sprintf("wout%d", s), wOut[s*B*H:(s+1)*B*H], B, H), in[s]))
	}
	wrt := append([]*G.Node(nil), xs...)
	wrt = append(wrt, h0s...)
	if lstm {
		wrt = append(wrt, c0s...)
	}
	for _, n := range names {
		wrt = append(wrt, pn[n])
	}
	if _, err := G.Grad(loss, wrt...); err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	read := func(grad bool, ns ...*G.Node) []float64 {
		t.Helper()
		var all []float64
		for _, n := range ns {
			v := n.Value()
			if grad {
				var err error
				if v, err = n.Grad(); err != nil {
					t.Fatalf("gradient of %v: %v", n, err)
				}
			}
			data, ok := v.Data().([]float64)
			if !ok {
				t.Fatalf("%v holds %T, want []float64", n, v.Data())
			}
			all = append(all, data...)
		}
		return all
	}

	// The layer.
	ok := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	put := func(b device.Buffer, v []float64) { t.Helper(); ok(device.UploadSlice(d, b, v)) }
	get := func(b device.Buffer, n int) []float64 {
		t.Helper()
		v := make([]float64, n)
		ok(device.DownloadSlice(d, v, b))
		return v
	}
	alloc := func(v []float64) device.Buffer {
		t.Helper()
		b, err := d.Alloc(int64(len(v))*8, device.Workspace)
		ok(err)
		t.Cleanup(func() { d.Free(b) })
		put(b, v)
		return b
	}
	st, err := layer.NewState(B)
	ok(err)
	defer st.Free()
	put(st.H(), h0)
	if lstm {
		put(st.C(), c0)
	}
	out, err := layer.Forward(rnn.Train, alloc(x), T, B, st)
	ok(err)
	gotOut, gotHN := get(out, T*B*H), get(st.H(), L*B*H)
	var gotCN []float64
	if lstm {
		gotCN = get(st.C(), L*B*H)
	}
	put(st.GradH(), wH)
	if lstm {
		put(st.GradC(), wC)
	}
	dx, err := layer.Backward(alloc(wOut))
	ok(err)
	gotDX, gotDH0 := get(dx, T*B*I), get(st.GradH(), L*B*H)

	var worst float64
	check := func(what string, got, want []float64, grad bool) {
		t.Helper()
		if e := gorgCompare(t, what, got, want, grad); e > worst {
			worst = e
		}
	}
	check("out", gotOut, read(false, in...), false)
	check("h_n", gotHN, read(false, hns...), false)
	check("dx", gotDX, read(true, xs...), true)
	check("dh0", gotDH0, read(true, h0s...), true)
	if lstm {
		check("c_n", gotCN, read(false, cns...), false)
		check("dc0", get(st.GradC(), L*B*H), read(true, c0s...), true)
	}
	for _, n := range names {
		gt, err := layer.Params().Grad(n)
		ok(err)
		got, isF64 := gt.Data().([]float64)
		if !isF64 {
			t.Fatalf("gradient of %s holds %T, want []float64", n, gt.Data())
		}
		if len(got) != len(params[n].value) {
			t.Fatalf("gradient of %s: %d values, want %d", n, len(got), len(params[n].value))
		}
		check("d"+n, got, read(true, pn[n]), true)
	}
	t.Logf("worst error %.3g", worst)
}

// gorgCompare fails t unless got and want have the same length and agree
// within gorgTol, and returns the worst error |got-want|/max(1,|want|).
// For a gradient (nonzero set) it also requires that want is not trivially
// zero, so that the comparison could fail.
func gorgCompare(t *testing.T, what string, got, want []float64, nonzero bool) float64 {
	t.Helper()
	if len(got) != len(want) || len(want) == 0 {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return math.Inf(1)
	}
	worst, at, peak := 0.0, 0, 0.0
	for i := range got {
		// !(e <= worst) also catches a NaN.
		if e := math.Abs(got[i]-want[i]) / math.Max(1, math.Abs(want[i])); !(e <= worst) {
			worst, at = e, i
		}
		peak = math.Max(peak, math.Abs(want[i]))
	}
	if !(worst <= gorgTol) {
		t.Errorf("%s[%d]: got %v, want %v (error %.3g > %g)", what, at, got[at], want[at], worst, gorgTol)
	}
	if nonzero && !(peak > 1e-3) {
		t.Errorf("%s: the graph's gradient is at most %g in magnitude, too small for the comparison to mean anything", what, peak)
	}
	return worst
}
