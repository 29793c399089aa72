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
