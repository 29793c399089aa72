package rnn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/internal/testfull"
	"github.com/gocurrent/gocurrent/rnn"
)

// stepResult is everything a training step of a stack gives back, as
// float32 values: the output and final state of the forward, and the
// input, parameter and initial-state gradients of the backward.
type stepResult struct {
	names []string
	vals  [][]float32
}

func (r *stepResult) add(name string, v []float32) {
	r.names = append(r.names, name)
	r.vals = append(r.vals, v)
}

// recomputeCase is one stack and one batch of the recomputation tests.
type recomputeCase struct {
	cell       string
	T, B, I, H int
	layers     int
	dropout    float64
	bidir      bool
	lengths    []int32 // nil: every sequence of length T
	tied       bool    // a state carried in, and a gradient of the final state
}

// config is the case's stack with Recompute recompute. Its forwards run
// layer after layer (WaveWindows 1), as those with Recompute do: the
// wavefront's input projection is cut at its windows, which on the CPU
// device changes the bits where a chunk is longer than a window (the
// third shape's; TestWaveSameBits).
func (c recomputeCase) config(recompute int) rnn.Config {
	return rnn.Config{Input: c.I, Hidden: c.H, Layers: c.layers, Dropout: c.dropout, Bidirectional: c.bidir, Seed: 11, Recompute: recompute,
		WaveWindows: 1}
}

// trainSteps runs two training steps of a new stack over the case's
// batch, the state carried (detached) from the first to the second, and
// returns what each gave back. Every input comes from one seed, so two
// stacks that differ only in Recompute get the same inputs.
func trainSteps(t *testing.T, d device.Device, c recomputeCase, recompute int) []stepResult {
	t.Helper()
	m := newRecurrent(t, d, c.cell, c.config(recompute))
	D := 1
	if c.bidir {
		D = 2
	}
	LD, T, B, H := c.layers*D, c.T, c.B, c.H
	r := rand.New(rand.NewPCG(3, 4))
	var st *rnn.State
	if c.tied {
		var err error
		st, err = m.NewState(B)
		ok(t, err)
		defer st.Free()
		put32(t, d, st.H(), random32(r, LD*B*H))
		if c.cell == "lstm" {
			put32(t, d, st.C(), random32(r, LD*B*H))
		}
	}
	var results []stepResult
	for range 2 {
		x := upload32(t, d, random32(r, T*B*c.I))
		dy := upload32(t, d, random32(r, T*B*D*H))
		ok(t, m.Params().ZeroGrad())
		if st != nil {
			st.Detach()
		}
		y, err := m.ForwardLengths(rnn.Train, x, T, B, c.lengths, st)
		ok(t, err)
		var res stepResult
		res.add("output", download32(t, d, y, T*B*D*H))
		if st != nil {
			res.add("h_n", download32(t, d, st.H(), LD*B*H))
			put32(t, d, st.GradH(), random32(r, LD*B*H))
			if c.cell == "lstm" {
				res.add("c_n", download32(t, d, st.C(), LD*B*H))
				put32(t, d, st.GradC(), random32(r, LD*B*H))
			}
		}
		dx, err := m.Backward(dy)
		ok(t, err)
		res.add("dx", download32(t, d, dx, T*B*c.I))
		for p := range m.Params().All() {
			res.add("grad "+p.Name, download32(t, d, p.Grad, p.Len()))
		}
		if st != nil {
			res.add("dh_0", download32(t, d, st.GradH(), LD*B*H))
			if c.cell == "lstm" {
				res.add("dc_0", download32(t, d, st.GradC(), LD*B*H))
			}
		}
		results = append(results, res)
		ok(t, d.Free(x))
		ok(t, d.Free(dy))
	}
	return results
}

// TestRecomputeMatchesPlain: with Recompute the stack runs the same
// kernels on the same values as without, in the same order (the products
// over steps chunk by chunk in both), except the products of the input
// gradient, one per segment instead of one over all steps, whose rows do
// not depend on the number of rows on the CPU device (its matrix product
// computes every row of C with the same kernel and the same blocking of
// the inner dimension whatever the number of rows, for the untransposed
// operands of this product). So on the CPU device every output, final
// state and gradient is the same bits as without Recompute, for LSTM and
// GRU stacks of 1 to 3 layers, uni- and bidirectional, with and without
// dropout, lengths, and a state carried in with gradients of the final
// state, over two steps (the state and the dropout offsets carried), with
// segments of one step, of a length dividing T (5) and not (RecomputeAuto:
// 4 of 10), at least T, and automatic. On another device the segment
// products may block their sums otherwise (cuBLAS chooses its algorithm by
// shape), so there each value is held within recomputeTol of the plain
// one; the CUDA emulator's products are row-stable too and give the same
// bits.
//
// Three batch shapes: 256 sequences, where a chunk of the stack's products
// over steps is one step, so Recompute k means segments of exactly k
// steps; 64 sequences over 42 steps, chunks of 4 steps (k rounded up to 4,
// 8), whose longest length, 32, falls on a segment boundary, where the
// reverse walk's edge and the windows past the longest length meet; and 3
// sequences over 100 steps, chunks of 86, whose second segment's input
// gradient (42 rows) runs on the CPU product's unpacked path while the
// whole window's (300 rows) is packed.
func TestRecomputeMatchesPlain(t *testing.T) {
	d := testdevice.Open(t)
	r := rand.New(rand.NewPCG(9, 9))
	lengths := func(B, lo, hi int) []int32 {
		l := make([]int32, B)
		for i := range l {
			l[i] = int32(lo + r.IntN(hi-lo+1))
		}
		l[r.IntN(B)] = int32(hi)
		return l
	}
	shapes := []struct {
		T, B, I, H int
		lengths    []int32
		ks         []int
		part       bool // run a part of the grid
	}{
		{T: 10, B: 256, I: 5, H: 12, lengths: lengths(256, 1, 10), ks: []int{1, 5, 10, rnn.RecomputeAuto}},
		{T: 42, B: 64, I: 3, H: 20, lengths: lengths(64, 1, 32), ks: []int{1, 6, rnn.RecomputeAuto}, part: true},
		{T: 100, B: 3, I: 4, H: 36, lengths: lengths(3, 40, 100), ks: []int{1}, part: true},
	}
	stacks := []struct {
		layers  int
		dropout float64
	}{{1, 0}, {2, 0.3}, {3, 0.3}}
	// The CUDA emulator runs every kernel thread by thread on the CPU (the
	// fused cells' blocks with their barriers): there the first shape too
	// takes the part of the grid, a third of it, which the GPU kit's
	// layers stage can run within its time.
	emulated := testdevice.Emulated(d)
	// The quick run takes the first shape's part; the full suites all.
	for _, sh := range testfull.Cases(shapes, 1) {
		sh.part = sh.part || emulated || !testfull.On() // the whole grid is the full suites'
		for _, cell := range []string{"lstm", "gru"} {
			for _, stk := range stacks {
				for _, bidir := range []bool{false, true} {
					for _, varlen := range []bool{false, true} {
						for _, tied := range []bool{false, true} {
							if sh.part && (stk.layers == 3 || !tied) {
								continue
							}
							c := recomputeCase{cell: cell, T: sh.T, B: sh.B, I: sh.I, H: sh.H, layers: stk.layers, dropout: stk.dropout,
								bidir: bidir, tied: tied}
							if varlen {
								c.lengths = sh.lengths
							}
							name := fmt.Sprintf("T%d/B%d/%s/layers%d/dropout%v/bidirectional=%v/lengths=%v/tied=%v",
								sh.T, sh.B, cell, stk.layers, stk.dropout, bidir, varlen, tied)
							t.Run(name, func(t *testing.T) {
								plain := trainSteps(t, d, c, 0)
								for _, k := range sh.ks {
									compareSteps(t, fmt.Sprintf("recompute %d", k), trainSteps(t, d, c, k), plain)
								}
							})
						}
					}
				}
			}
		}
	}
}

// recomputeTol bounds, off the CPU device, the difference between a value
// with and without Recompute, relative to the largest magnitude of its
// tensor (at least 1). The only difference is the blocking of the sums of
// the input gradient's products (over G·H ≤ 144 terms here), whose float32
// rounding is at most 144·2⁻²⁴ ≈ 8.6e-6 of the sum of the terms'
// magnitudes; it flows into the layers below and, through their weight
// gradients, into sums over up to T·B = 3072 rows, which add such errors
// of either sign. 1e-4 leaves a margin of ten over the single sum and is
// far below what a wrong step, mask or segment boundary gives (order 1).
const recomputeTol = 1e-4

// compareSteps checks that got equals want: bit for bit on the CPU
// device, within recomputeTol elsewhere.
func compareSteps(t *testing.T, what string, got, want []stepResult) {
	t.Helper()
	exact := testdevice.IsCPU()
	for step := range want {
		for i, name := range want[step].names {
			g, w := got[step].vals[i], want[step].vals[i]
			scale := 1.0
			for _, v := range w {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			for j := range w {
				same := math.Float32bits(g[j]) == math.Float32bits(w[j])
				if !exact {
					same = math.Abs(float64(g[j])-float64(w[j])) <= recomputeTol*scale
				}
				if !same {
					t.Errorf("%s, step %d: %s[%d] = %v (bits %#x), want %v (bits %#x) as without Recompute",
						what, step+1, name, j, g[j], math.Float32bits(g[j]), w[j], math.Float32bits(w[j]))
					return
				}
			}
		}
	}
}

func random32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(2*r.Float64() - 1)
	}
	return v
}

func upload32(t testing.TB, d device.Device, v []float32) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(v))*4, device.Workspace)
	ok(t, err)
	ok(t, device.UploadSlice(d, b, v))
	return b
}

func put32(t testing.TB, d device.Device, b device.Buffer, v []float32) {
	t.Helper()
	ok(t, device.UploadSlice(d, b.Slice(0, int64(len(v))*4), v))
}

func download32(t testing.TB, d device.Device, b device.Buffer, n int) []float32 {
	t.Helper()
	v := make([]float32, n)
	ok(t, device.DownloadSlice(d, v, b.Slice(0, int64(n)*4)))
	return v
}

// TestRecomputeMemory measures the activation memory (the allocator's
// peak of device.Activations: the stack's reserve, all it keeps from a
// training forward for Backward) of a training step of a 2-layer LSTM over
// T = 64, 256 and 1024 steps, with RecomputeAuto and without, and checks
// it against the layout, derived here: without Recompute per layer h and
// c at T+1 positions and the gates of T steps; with it per layer h and c
// at the S+1 segment boundaries, S = ⌈T/k⌉, k = ⌈√T⌉ rounded up to the
// chunk, ⌈R/B⌉ steps for the device's device.ProductRows R (each region
// aligned to 64 elements, the reserve rounded as the allocator rounds it),
// and a k that reaches T keeps all, as without Recompute. The input is not
// in it: the stack keeps a reference to the caller's (Forward). So on the
// CPU (R = 256: chunks of 16 steps) the reserve with Recompute grows as
// √T: ×2 for T ×4, where without it grows ×4. On a GPU (R = 2048: chunks
// of 128 steps) the chunk decides the segments at these T, and only the
// layout is checked.
func TestRecomputeMemory(t *testing.T) {
	const B, I, H, L = 16, 1, 32, 2
	d := testdevice.Open(t)
	mem, isCaching := d.(device.Allocator)
	if !isCaching {
		t.Skipf("device %s does not expose its allocator, whose figures this test reads", d.Name())
	}
	align := func(n int) int64 { return int64((n + 63) / 64 * 64) }
	chunk := (device.ProductRows(d) + B - 1) / B
	segment := func(T int) int {
		k := int(math.Ceil(math.Sqrt(float64(T))))
		return (k + chunk - 1) / chunk * chunk
	}
	// expect is the reserve's elements, all of them states (and gates).
	expect := func(T int, recompute bool) (all, states int64) {
		per := 2*align((T+1)*B*H) + align(4*T*B*H)
		if recompute && segment(T) < T {
			per = 2 * align(((T+segment(T)-1)/segment(T)+1)*B*H)
		}
		return L * per, L * per
	}
	peak := func(T, recompute int) int64 {
		m := newRecurrent(t, d, "lstm", rnn.Config{Input: I, Hidden: H, Layers: L, Recompute: recompute})
		r := rand.New(rand.NewPCG(1, uint64(T)))
		x, dy := upload32(t, d, random32(r, T*B*I)), upload32(t, d, random32(r, T*B*H))
		defer d.Free(x)
		defer d.Free(dy)
		ok(t, d.Synchronize())
		mem.Memory().ResetPeak()
		_, err := m.Forward(rnn.Train, x, T, B, nil)
		ok(t, err)
		_, err = m.Backward(dy)
		ok(t, err)
		ok(t, d.Synchronize())
		p := d.MemStats().CategoryBytes[device.Activations].Peak
		ok(t, m.Close())
		return p
	}
	round := mem.Memory().Config()
	var got, states [3]int64
	for i, T := range []int{64, 256, 1024} {
		for _, recompute := range []int{0, rnn.RecomputeAuto} {
			all, part := expect(T, recompute != 0)
			want := round.RoundSize(all * 4)
			p := peak(T, recompute)
			t.Logf("T = %4d, recompute %2d: activations peak %9d bytes", T, recompute, p)
			if p != want {
				t.Errorf("T = %d, recompute %d: activations peak %d bytes, want %d (%d elements)", T, recompute, p, want, all)
			}
			if recompute != 0 {
				got[i], states[i] = p, part
			}
		}
	}
	if chunk > 16 {
		t.Logf("chunks of %d steps decide the segments: the growth as √T is not checked", chunk)
		return
	}
	if r := float64(states[2]) / float64(states[1]); r < 1.8 || r > 2.2 {
		t.Errorf("boundary states at T = 1024 are %.2f× those at T = 256, want about 2 (√4)", r)
	}
	if r := float64(got[2]) / float64(got[1]); r > 2.5 {
		t.Errorf("activations peak at T = 1024 is %.2f× that at T = 256, want about 2, far from 4", r)
	}
	_, plain := expect(1024, false)
	if r := float64(plain) / float64(states[2]); r < 20 {
		t.Errorf("at T = 1024 the states kept without Recompute are only %.1f× those kept with it", r)
	}
}
