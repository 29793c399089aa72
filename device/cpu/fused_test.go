package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// TestFusedCellsAreTheTwoCalls checks the CPU device's promise for the
// cells' fused form (device.LSTMCell and GRUCell given their recurrent
// product): the results of a Gemm followed by the plain cell, to the bit,
// and their counts, one GEMM and one launch. Float32, at a size the
// device splits across its threads.
func TestFusedCellsAreTheTwoCalls(t *testing.T) {
	d := open(t, Config{})
	const B, H = 17, 40
	rng := rand.New(rand.NewPCG(1, 2))
	buf := func(n int) (device.Buffer, []float32) {
		x := make([]float32, n)
		for i := range x {
			x[i] = rng.Float32()*2 - 1
		}
		b := alloc32(t, d, n)
		if err := device.UploadSlice(d, b, x); err != nil {
			t.Fatal(err)
		}
		return b, x
	}
	// copyOf is a fresh buffer holding x.
	copyOf := func(x []float32) device.Buffer {
		b := alloc32(t, d, len(x))
		if err := device.UploadSlice(d, b, x); err != nil {
			t.Fatal(err)
		}
		return b
	}
	get := func(b device.Buffer, n int) []float32 {
		x := make([]float32, n)
		if err := device.DownloadSlice(d, x, b); err != nil {
			t.Fatal(err)
		}
		return x
	}
	k := d.Kernels()
	for _, gates := range []int{4, 3} {
		hPrev, _ := buf(B * H)
		w, _ := buf(gates * H * H)
		bih, _ := buf(gates * H)
		_, preX := buf(gates * B * H)
		cPrev, _ := buf(B * H)
		var outs [2][]device.Buffer // [fused, two calls]: what each wrote
		var counts [2]device.Counts
		for i := range 2 {
			p, h, c, act := copyOf(preX), alloc32(t, d, B*H), alloc32(t, d, B*H), alloc32(t, d, 4*B*H)
			before := d.Counts()
			var err error
			if gates == 4 {
				a := device.LSTMCell{DType: device.Float32, Batch: B, Hidden: H, Pre: p, BiasIH: bih, CPrev: cPrev, C: c, H: h, Act: act}
				if i == 0 {
					a.HPrev, a.W = hPrev, w
					err = k.LSTMCell(a)
				} else if err = k.Gemm(device.Gemm{DType: device.Float32, TransB: true, M: B, N: 4 * H, K: H, Alpha: 1, Beta: 1,
					A: hPrev, B: w, C: p}); err == nil {
					err = k.LSTMCell(a)
				}
				outs[i] = []device.Buffer{p.Slice(0, int64(4*B*H*4)), h.Slice(0, B*H*4), c.Slice(0, B*H*4), act.Slice(0, int64(4*B*H*4))}
			} else {
				hp := alloc32(t, d, 3*B*H)
				a := device.GRUCell{DType: device.Float32, Batch: B, Hidden: H, XPre: p, HPre: hp, BiasIH: bih, HPrev: hPrev, H: h, Act: act}
				if i == 0 {
					a.W = w
					err = k.GRUCell(a)
				} else if err = k.Gemm(device.Gemm{DType: device.Float32, TransB: true, M: B, N: 3 * H, K: H, Alpha: 1,
					A: hPrev, B: w, C: hp}); err == nil {
					err = k.GRUCell(a)
				}
				outs[i] = []device.Buffer{hp.Slice(0, 3*B*H*4), h.Slice(0, B*H*4), act.Slice(0, 4*B*H*4)}
			}
			if err != nil {
				t.Fatal(err)
			}
			counts[i] = d.Counts().Sub(before)
		}
		if counts[0] != counts[1] || counts[0] != (device.Counts{Launches: 1, GEMMs: 1, Calls: 2}) {
			t.Errorf("%d gates: fused counted %+v, the two calls %+v; want both {Launches: 1, GEMMs: 1, Calls: 2}", gates, counts[0], counts[1])
		}
		for j := range outs[0] {
			n := int(outs[0][j].Len() / 4)
			if f, two := get(outs[0][j], n), get(outs[1][j], n); !slices.Equal(f, two) {
				t.Errorf("%d gates: output %d of the fused call differs from the two calls'", gates, j)
			}
		}
	}
}

// TestFusedCellGradsAreTheTwoCalls is TestFusedCellsAreTheTwoCalls for the
// cell gradients given the next step's recurrent product
// (device.LSTMCellGrad and GRUCellGrad with DPreNext or DHPreNext and W):
// a Gemm into DH followed by the plain cell gradient, to the bit, counted
// as the two calls, with the next step covering as many rows, fewer (a
// forward walk with lengths) and more (a reverse one).
func TestFusedCellGradsAreTheTwoCalls(t *testing.T) {
	d := open(t, Config{})
	const B, H = 17, 40
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = rng.Float32()*2 - 1
		}
		return x
	}
	copyOf := func(x []float32) device.Buffer {
		b := alloc32(t, d, len(x))
		if err := device.UploadSlice(d, b, x); err != nil {
			t.Fatal(err)
		}
		return b
	}
	get := func(b device.Buffer) []float32 {
		x := make([]float32, b.Len()/4)
		if err := device.DownloadSlice(d, x, b); err != nil {
			t.Fatal(err)
		}
		return x
	}
	k := d.Kernels()
	for _, gates := range []int{4, 3} {
		for _, next := range []int{B, B - 6, B + 5} {
			rows := max(B, next)
			act, cPrev, c, hPrev := fill(4*B*H), fill(B*H), fill(B*H), fill(B*H)
			dh, dc, dNext, w, prior := fill(rows*H), fill(B*H), fill(next*gates*H), fill(gates*H*H), fill(B*H)
			var outs [2][]device.Buffer // [fused, two calls]: what each wrote
			var counts [2]device.Counts
			for i := range 2 {
				vDH, vDNext, vW := copyOf(dh), copyOf(dNext), copyOf(w)
				vAct, vCPrev, vC, vHPrev := copyOf(act), copyOf(cPrev), copyOf(c), copyOf(hPrev)
				dPre, dcPrev := alloc32(t, d, 4*B*H), copyOf(dc)
				dx, dhp, dhPrev := alloc32(t, d, 3*B*H), alloc32(t, d, 3*B*H), copyOf(prior)
				before := d.Counts()
				var err error
				if gates == 4 {
					a := device.LSTMCellGrad{DType: device.Float32, Batch: B, Hidden: H, Act: vAct, CPrev: vCPrev,
						C: vC, DH: vDH, DC: dcPrev, DPre: dPre, DCPrev: dcPrev}
					if i == 0 {
						a.DPreNext, a.W, a.NextBatch = vDNext, vW, next
						err = k.LSTMCellGrad(a)
					} else if err = k.Gemm(device.Gemm{DType: device.Float32, M: next, N: H, K: 4 * H, Alpha: 1, Beta: 1,
						A: vDNext, B: vW, C: vDH}); err == nil {
						err = k.LSTMCellGrad(a)
					}
					outs[i] = []device.Buffer{vDH, dPre, dcPrev}
				} else {
					a := device.GRUCellGrad{DType: device.Float32, Batch: B, Hidden: H, Act: vAct, HPrev: vHPrev,
						DH: vDH, DXPre: dx, DHPre: dhp, DHPrev: dhPrev, Accumulate: true}
					if i == 0 {
						a.DHPreNext, a.W, a.NextBatch = vDNext, vW, next
						err = k.GRUCellGrad(a)
					} else if err = k.Gemm(device.Gemm{DType: device.Float32, M: next, N: H, K: 3 * H, Alpha: 1, Beta: 1,
						A: vDNext, B: vW, C: vDH}); err == nil {
						err = k.GRUCellGrad(a)
					}
					outs[i] = []device.Buffer{vDH, dx, dhp, dhPrev}
				}
				if err != nil {
					t.Fatal(err)
				}
				counts[i] = d.Counts().Sub(before)
			}
			if counts[0] != counts[1] || counts[0] != (device.Counts{Launches: 1, GEMMs: 1, Calls: 2}) {
				t.Errorf("%d gates, next %d rows: fused counted %+v, the two calls %+v; want both {Launches: 1, GEMMs: 1, Calls: 2}",
					gates, next, counts[0], counts[1])
			}
			for j := range outs[0] {
				if !slices.Equal(get(outs[0][j]), get(outs[1][j])) {
					t.Errorf("%d gates, next %d rows: output %d of the fused call differs from the two calls'", gates, next, j)
				}
			}
		}
	}
}
