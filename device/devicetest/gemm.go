package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// gemmCase is a Gemm without buffers; nanC prefills C with NaN (only with
// Beta = 0, where C must not be read).
type gemmCase struct {
	name string
	g    device.Gemm
	nanC bool
}

func gemmCases() []gemmCase {
	var cs []gemmCase
	trans := []struct {
		name   string
		ta, tb bool
	}{{"NN", false, false}, {"TN", true, false}, {"NT", false, true}, {"TT", true, true}}
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 3, 65}, {65, 33, 17}}
	scalars := [][2]float64{{1, 0}, {0.5, -1.5}, {-2, 1}, {1, 1}}
	for _, tr := range trans {
		for i, s := range sizes {
			cs = append(cs, gemmCase{
				name: fmt.Sprintf("%s/%dx%dx%d/alpha=%v,beta=%v", tr.name, s[0], s[1], s[2], scalars[i][0], scalars[i][1]),
				g:    device.Gemm{TransA: tr.ta, TransB: tr.tb, M: s[0], N: s[1], K: s[2], Alpha: scalars[i][0], Beta: scalars[i][1]},
			})
		}
		cs = append(cs,
			gemmCase{
				name: tr.name + "/Beta0NaN",
				g:    device.Gemm{TransA: tr.ta, TransB: tr.tb, M: 5, N: 7, K: 9, Alpha: 1.25},
				nanC: true,
			},
			gemmCase{
				name: tr.name + "/LeadingDimensions",
				g: device.Gemm{TransA: tr.ta, TransB: tr.tb, M: 7, N: 9, K: 11, Alpha: 1.5, Beta: 0.5,
					LdA: 11 + 3, LdB: 11 + 2, LdC: 9 + 5},
			},
			gemmCase{
				name: tr.name + "/Batch",
				g:    device.Gemm{TransA: tr.ta, TransB: tr.tb, M: 5, N: 6, K: 7, Alpha: 1, Beta: 0.25, Batch: 3},
			},
			gemmCase{
				// Strides larger than packed and leading dimensions larger
				// than the columns: gaps everywhere, which must stay
				// untouched in C.
				name: tr.name + "/BatchStrided",
				g: device.Gemm{TransA: tr.ta, TransB: tr.tb, M: 4, N: 5, K: 6, Alpha: -0.75, Beta: 1, Batch: 4,
					LdA: 9, LdB: 8, LdC: 7, StrideA: 9*6 + 5, StrideB: 8*6 + 3, StrideC: 7*4 + 2},
			},
		)
	}
	cs = append(cs,
		gemmCase{name: "Alpha0", g: device.Gemm{M: 6, N: 4, K: 5, Alpha: 0, Beta: 2}},
		gemmCase{name: "Beta0NaN/Batch", g: device.Gemm{TransB: true, M: 9, N: 3, K: 4, Alpha: 1, Batch: 5}, nanC: true},
		// The shapes of an LSTM layer with batch 32, input 256 and hidden
		// 256 (4·256 = 1024 gate rows): the input and recurrent products
		// (pre = x·Wᵀ, then += h·Wᵀ), the weight gradient (dW += dPreᵀ·x)
		// and the input gradient (dx = dPre·W). Large enough to take a
		// device's multi-threaded or tiled path.
		gemmCase{name: "LSTM/Input", g: device.Gemm{TransB: true, M: 32, N: 1024, K: 256, Alpha: 1}},
		gemmCase{name: "LSTM/Recurrent", g: device.Gemm{TransB: true, M: 32, N: 1024, K: 256, Alpha: 1, Beta: 1}},
		gemmCase{name: "LSTM/WeightGrad", g: device.Gemm{TransA: true, M: 1024, N: 256, K: 32, Alpha: 1, Beta: 1}},
		gemmCase{name: "LSTM/InputGrad", g: device.Gemm{M: 32, N: 256, K: 1024, Alpha: 1}},
	)
	return cs
}

func testGemm(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		for _, c := range gemmCases() {
			e.run(c.name, func(e *env) { e.checkGemm(c) })
		}
	})
}

// gemmExtents returns the number of elements A, B and C span.
func gemmExtents(w device.Gemm) (na, nb, nc int) {
	ra, ca := w.M, w.K
	if w.TransA {
		ra, ca = ca, ra
	}
	rb, cb := w.K, w.N
	if w.TransB {
		rb, cb = cb, rb
	}
	na = (w.Batch-1)*w.StrideA + (ra-1)*w.LdA + ca
	nb = (w.Batch-1)*w.StrideB + (rb-1)*w.LdB + cb
	nc = (w.Batch-1)*w.StrideC + (w.M-1)*w.LdC + w.N
	return na, nb, nc
}

func (e *env) checkGemm(c gemmCase) {
	g := c.g
	g.DType = e.dt
	g.Alpha, g.Beta = e.r(g.Alpha), e.r(g.Beta)
	na, nb, nc := gemmExtents(g.WithDefaults())
	a := e.uniform(na, -1, 1)
	b := e.uniform(nb, -1, 1)
	cIn := e.uniform(nc, -1, 1)
	if c.nanC {
		cIn = nans(nc)
	}
	va, vb, vc := e.vec(a), e.vec(b), e.vec(cIn)
	g.A, g.B, g.C = va.buf, vb.buf, vc.buf
	e.launch(g)
	want, mag := refGemm(g, a, b, cIn)
	got := e.get("C", vc)
	checkClose(e.t, "C", got, want, mag, SumTolerance(e.dt, g.K))
	checkExact(e.t, "A (an input)", e.get("A", va), a)
	checkExact(e.t, "B (an input)", e.get("B", vb), b)
}

// refGemm is C = α·op(A)·op(B) + β·C over g's batches, from the equations
// of device.Gemm, in float64. It returns the new C, with the elements no
// product covers unchanged, and each element's magnitude |α|·Σ|a||b| +
// |β|·|c| (0 where untouched, which makes the comparison exact there).
func refGemm(g device.Gemm, a, b, c []float64) (out, mag []float64) {
	w := g.WithDefaults()
	out = clone(c)
	mag = make([]float64, len(c))
	opA := func(base, i, k int) float64 {
		if w.TransA {
			return a[base+k*w.LdA+i]
		}
		return a[base+i*w.LdA+k]
	}
	opB := func(base, k, j int) float64 {
		if w.TransB {
			return b[base+j*w.LdB+k]
		}
		return b[base+k*w.LdB+j]
	}
	for p := 0; p < w.Batch; p++ {
		ba, bb, bc := p*w.StrideA, p*w.StrideB, p*w.StrideC
		for i := 0; i < w.M; i++ {
			for j := 0; j < w.N; j++ {
				var s, sa float64
				for k := 0; k < w.K; k++ {
					x := opA(ba, i, k) * opB(bb, k, j)
					s += x
					sa += math.Abs(x)
				}
				at := bc + i*w.LdC + j
				v := w.Alpha * s
				m := math.Abs(w.Alpha) * sa
				if w.Beta != 0 {
					v += w.Beta * c[at]
					m += math.Abs(w.Beta * c[at])
				}
				out[at], mag[at] = v, m
				if m == 0 {
					// An exact zero (α = 0 and β = 0, or all-zero terms)
					// still counts as written.
					mag[at] = math.SmallestNonzeroFloat64
				}
			}
		}
	}
	return out, mag
}
