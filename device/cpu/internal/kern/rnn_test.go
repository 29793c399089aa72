package kern

import (
	"fmt"
	"math"
	"testing"
)

// The references below are written from the equations of device.LSTMCell,
// device.LSTMCellGrad, device.GRUCell and device.GRUCellGrad, one element
// at a time in float64 with the math package.

func refSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// refLSTM returns c, h and act = [i, f, g, o] per row.
func refLSTM(rows, hidden int, pre, bih, bhh, cPrev []float64) (c, h, act []float64) {
	c, h, act = make([]float64, rows*hidden), make([]float64, rows*hidden), make([]float64, 4*rows*hidden)
	bias := func(b []float64, k int) float64 {
		if b == nil {
			return 0
		}
		return b[k]
	}
	for r := range rows {
		for j := range hidden {
			var gate [4]float64
			for q := range 4 {
				k := q*hidden + j
				gate[q] = pre[r*4*hidden+k] + (bias(bih, k) + bias(bhh, k))
			}
			i, f, g, o := refSigmoid(gate[0]), refSigmoid(gate[1]), math.Tanh(gate[2]), refSigmoid(gate[3])
			cj := f*cPrev[r*hidden+j] + i*g
			c[r*hidden+j] = cj
			h[r*hidden+j] = o * math.Tanh(cj)
			for q, v := range []float64{i, f, g, o} {
				act[r*4*hidden+q*hidden+j] = v
			}
		}
	}
	return c, h, act
}

// refLSTMGrad returns dPre and dcPrev.
func refLSTMGrad(rows, hidden int, act, cPrev, c, dh, dc []float64) (dPre, dcPrev []float64) {
	dPre, dcPrev = make([]float64, 4*rows*hidden), make([]float64, rows*hidden)
	for r := range rows {
		for j := range hidden {
			a := func(q int) float64 { return act[r*4*hidden+q*hidden+j] }
			i, f, g, o := a(0), a(1), a(2), a(3)
			e := r*hidden + j
			tc := math.Tanh(c[e])
			dcT := dc[e] + dh[e]*o*(1-tc*tc)
			dPre[r*4*hidden+j] = dcT * g * i * (1 - i)
			dPre[r*4*hidden+hidden+j] = dcT * cPrev[e] * f * (1 - f)
			dPre[r*4*hidden+2*hidden+j] = dcT * i * (1 - g*g)
			dPre[r*4*hidden+3*hidden+j] = dh[e] * tc * o * (1 - o)
			dcPrev[e] = dcT * f
		}
	}
	return dPre, dcPrev
}

// refGRU returns h and act = [r, z, n, h_n + bh_n] per row.
func refGRU(rows, hidden int, xPre, hPre, bih, bhh, hPrev []float64) (h, act []float64) {
	h, act = make([]float64, rows*hidden), make([]float64, 4*rows*hidden)
	bias := func(b []float64, k int) float64 {
		if b == nil {
			return 0
		}
		return b[k]
	}
	for r := range rows {
		for j := range hidden {
			x := func(q int) float64 { return xPre[r*3*hidden+q*hidden+j] + bias(bih, q*hidden+j) }
			y := func(q int) float64 { return hPre[r*3*hidden+q*hidden+j] + bias(bhh, q*hidden+j) }
			rg := refSigmoid(x(0) + y(0))
			z := refSigmoid(x(1) + y(1))
			hn := y(2)
			n := math.Tanh(x(2) + rg*hn)
			h[r*hidden+j] = (1-z)*n + z*hPrev[r*hidden+j]
			for q, v := range []float64{rg, z, n, hn} {
				act[r*4*hidden+q*hidden+j] = v
			}
		}
	}
	return h, act
}

// refGRUGrad returns dxPre, dhPre and dhPrev.
func refGRUGrad(rows, hidden int, act, hPrev, dh []float64) (dxPre, dhPre, dhPrev []float64) {
	dxPre, dhPre, dhPrev = make([]float64, 3*rows*hidden), make([]float64, 3*rows*hidden), make([]float64, rows*hidden)
	for r := range rows {
		for j := range hidden {
			a := func(q int) float64 { return act[r*4*hidden+q*hidden+j] }
			rg, z, n, hn := a(0), a(1), a(2), a(3)
			e := r*hidden + j
			dz := dh[e] * (hPrev[e] - n) * z * (1 - z)
			dn := dh[e] * (1 - z) * (1 - n*n)
			dr := dn * hn * rg * (1 - rg)
			for q, v := range []float64{dr, dz, dn} {
				dxPre[r*3*hidden+q*hidden+j] = v
			}
			for q, v := range []float64{dr, dz, dn * rg} {
				dhPre[r*3*hidden+q*hidden+j] = v
			}
			dhPrev[e] = dh[e] * z
		}
	}
	return dxPre, dhPre, dhPrev
}

// cellShapesTest cover one partial chunk (hidden 5), a chunk boundary plus
// a remainder (70 = 64 + 6) and two full chunks plus a remainder (130).
var cellShapesTest = []struct{ rows, hidden int }{{3, 5}, {2, 70}, {4, 130}}

// biasCases: both biases, one of each, none.
var biasCases = []struct {
	name   string
	ih, hh bool
}{{"both", true, true}, {"ih", true, false}, {"hh", false, true}, {"none", false, false}}

func pick(b bool, s []float64) []float64 {
	if b {
		return s
	}
	return nil
}

func TestLSTMCell(t *testing.T) {
	for _, s := range cellShapesTest {
		for _, bc := range biasCases {
			t.Run(fmt.Sprintf("rows=%d/hidden=%d/bias=%s", s.rows, s.hidden, bc.name), func(t *testing.T) {
				rng := newRand(uint64(s.hidden))
				bh := s.rows * s.hidden
				// Pre-activations up to ±6 reach the saturating tails.
				pre := uniform(rng, 4*bh, 6)
				bih, bhh := pick(bc.ih, uniform(rng, 4*s.hidden, 1)), pick(bc.hh, uniform(rng, 4*s.hidden, 1))
				cPrev := uniform(rng, bh, 3)

				t.Run("float64", func(t *testing.T) {
					c, h, act := make([]float64, bh), make([]float64, bh), make([]float64, 4*bh)
					LSTMCell(s.hidden, pre, bih, bhh, cPrev, c, h, act)
					wc, wh, wact := refLSTM(s.rows, s.hidden, pre, bih, bhh, cPrev)
					// Same formulas in float64: a few float64 roundings.
					checkClose(t, "c", c, wc, 1e-14, 1e-14)
					checkClose(t, "h", h, wh, 1e-14, 1e-14)
					checkClose(t, "act", act, wact, 1e-14, 1e-14)
				})
				t.Run("float32", func(t *testing.T) {
					p32, bi32, bh32, cp32 := to[float32](pre), to[float32](bih), to[float32](bhh), to[float32](cPrev)
					c, h, act := make([]float32, bh), make([]float32, bh), make([]float32, 4*bh)
					LSTMCell(s.hidden, p32, bi32, bh32, cp32, c, h, act)
					// The reference sees the same float32 inputs, exactly.
					wc, wh, wact := refLSTM(s.rows, s.hidden, from(p32), from(bi32), from(bh32), from(cp32))
					// act and c: one rounding of a value accurate to 1e-10
					// relative (≤ 0.502 ulp); c = f·cPrev + i·g may cancel,
					// hence 1e-9 absolute. h is o·tanh of the rounded c:
					// another 0.5 ulp of c through tanh, and its rounding.
					checkULP32(t, "act", act, wact, 0.502, 0)
					checkULP32(t, "c", c, wc, 0.502, 1e-9)
					checkULP32(t, "h", h, wh, 1.5, 1e-9)
				})
			})
		}
	}
}

func TestLSTMCellGrad(t *testing.T) {
	for _, s := range cellShapesTest {
		t.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(t *testing.T) {
			rng := newRand(uint64(s.hidden) + 1)
			bh := s.rows * s.hidden
			_, _, act := refLSTM(s.rows, s.hidden, uniform(rng, 4*bh, 4), nil, nil, make([]float64, bh))
			cPrev, c := uniform(rng, bh, 3), uniform(rng, bh, 3)
			dh, dc := uniform(rng, bh, 1), uniform(rng, bh, 1)
			wdPre, wdcPrev := refLSTMGrad(s.rows, s.hidden, act, cPrev, c, dh, dc)

			t.Run("float64", func(t *testing.T) {
				dPre, dcPrev := make([]float64, 4*bh), make([]float64, bh)
				LSTMCellGrad(s.hidden, act, cPrev, c, dh, dc, dPre, dcPrev)
				checkClose(t, "dPre", dPre, wdPre, 1e-14, 1e-14)
				checkClose(t, "dcPrev", dcPrev, wdcPrev, 1e-14, 1e-14)
			})
			t.Run("float32", func(t *testing.T) {
				a32, cp32, c32, dh32, dc32 := to[float32](act), to[float32](cPrev), to[float32](c), to[float32](dh), to[float32](dc)
				dPre, dcPrev := make([]float32, 4*bh), make([]float32, bh)
				LSTMCellGrad(s.hidden, a32, cp32, c32, dh32, dc32, dPre, dcPrev)
				wdPre, wdcPrev := refLSTMGrad(s.rows, s.hidden, from(a32), from(cp32), from(c32), from(dh32), from(dc32))
				// float64 arithmetic on exact inputs, fast tanh(c) to 1e-10
				// relative, one rounding; dcT = dc + ... may cancel, hence
				// 1e-9 absolute.
				checkULP32(t, "dPre", dPre, wdPre, 0.502, 1e-9)
				checkULP32(t, "dcPrev", dcPrev, wdcPrev, 0.502, 1e-9)
			})
		})
	}
}

func TestGRUCell(t *testing.T) {
	for _, s := range cellShapesTest {
		for _, bc := range biasCases {
			t.Run(fmt.Sprintf("rows=%d/hidden=%d/bias=%s", s.rows, s.hidden, bc.name), func(t *testing.T) {
				rng := newRand(uint64(s.hidden) + 2)
				bh := s.rows * s.hidden
				xPre, hPre := uniform(rng, 3*bh, 4), uniform(rng, 3*bh, 4)
				bih, bhh := pick(bc.ih, uniform(rng, 3*s.hidden, 1)), pick(bc.hh, uniform(rng, 3*s.hidden, 1))
				hPrev := uniform(rng, bh, 1)

				t.Run("float64", func(t *testing.T) {
					h, act := make([]float64, bh), make([]float64, 4*bh)
					GRUCell(s.hidden, xPre, hPre, bih, bhh, hPrev, h, act)
					wh, wact := refGRU(s.rows, s.hidden, xPre, hPre, bih, bhh, hPrev)
					checkClose(t, "h", h, wh, 1e-14, 1e-14)
					checkClose(t, "act", act, wact, 1e-14, 1e-14)
				})
				t.Run("float32", func(t *testing.T) {
					x32, y32, bi32, bh32, hp32 := to[float32](xPre), to[float32](hPre), to[float32](bih), to[float32](bhh), to[float32](hPrev)
					h, act := make([]float32, bh), make([]float32, 4*bh)
					GRUCell(s.hidden, x32, y32, bi32, bh32, hp32, h, act)
					wh, wact := refGRU(s.rows, s.hidden, from(x32), from(y32), from(bi32), from(bh32), from(hp32))
					// One rounding of values accurate to 1e-10 relative;
					// h_n + bh_n and h = (1-z)·n + z·hPrev may cancel.
					checkULP32(t, "act", act, wact, 0.502, 1e-9)
					checkULP32(t, "h", h, wh, 0.502, 1e-9)
				})
			})
		}
	}
}

func TestGRUCellGrad(t *testing.T) {
	for _, s := range cellShapesTest {
		t.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(t *testing.T) {
			rng := newRand(uint64(s.hidden) + 3)
			bh := s.rows * s.hidden
			hPrev := uniform(rng, bh, 1)
			_, act := refGRU(s.rows, s.hidden, uniform(rng, 3*bh, 3), uniform(rng, 3*bh, 3), nil, nil, hPrev)
			dh := uniform(rng, bh, 1)

			t.Run("float64", func(t *testing.T) {
				dxPre, dhPre, dhPrev := make([]float64, 3*bh), make([]float64, 3*bh), make([]float64, bh)
				GRUCellGrad(s.hidden, act, hPrev, dh, dxPre, dhPre, dhPrev, false)
				wdx, wdh, wdhp := refGRUGrad(s.rows, s.hidden, act, hPrev, dh)
				checkClose(t, "dxPre", dxPre, wdx, 1e-14, 1e-14)
				checkClose(t, "dhPre", dhPre, wdh, 1e-14, 1e-14)
				checkClose(t, "dhPrev", dhPrev, wdhp, 1e-14, 1e-14)
			})
			t.Run("float32", func(t *testing.T) {
				a32, hp32, dh32 := to[float32](act), to[float32](hPrev), to[float32](dh)
				dxPre, dhPre, dhPrev := make([]float32, 3*bh), make([]float32, 3*bh), make([]float32, bh)
				GRUCellGrad(s.hidden, a32, hp32, dh32, dxPre, dhPre, dhPrev, false)
				wdx, wdh, wdhp := refGRUGrad(s.rows, s.hidden, from(a32), from(hp32), from(dh32))
				// Exact float32 inputs, float64 arithmetic, one rounding.
				checkULP32(t, "dxPre", dxPre, wdx, 0.5, 1e-12)
				checkULP32(t, "dhPre", dhPre, wdh, 0.5, 1e-12)
				checkULP32(t, "dhPrev", dhPrev, wdhp, 0.5, 0)
			})
		})
	}
}

// TestCellAliasing runs each cell with the outputs that may alias an input
// aliased, and compares bit for bit with separate buffers, in both types.
func TestCellAliasing(t *testing.T) {
	t.Run("float64", testCellAliasing[float64])
	t.Run("float32", testCellAliasing[float32])
}

func testCellAliasing[T Float](t *testing.T) {
	const rows, hidden = 3, 70
	bh := rows * hidden
	rng := newRand(7)

	t.Run("LSTMCell act=pre", func(t *testing.T) {
		pre := to[T](uniform(rng, 4*bh, 4))
		bih, bhh, cPrev := to[T](uniform(rng, 4*hidden, 1)), to[T](uniform(rng, 4*hidden, 1)), to[T](uniform(rng, bh, 2))
		c, h, act := make([]T, bh), make([]T, bh), make([]T, 4*bh)
		LSTMCell(hidden, pre, bih, bhh, cPrev, c, h, act)
		c2, h2 := make([]T, bh), make([]T, bh)
		LSTMCell(hidden, pre, bih, bhh, cPrev, c2, h2, pre)
		checkEqual(t, "act", pre, act)
		checkEqual(t, "c", c2, c)
		checkEqual(t, "h", h2, h)
	})
	t.Run("LSTMCellGrad dPre=act dcPrev=dc", func(t *testing.T) {
		_, _, a := refLSTM(rows, hidden, uniform(rng, 4*bh, 4), nil, nil, make([]float64, bh))
		act := to[T](a)
		cPrev, c, dh, dc := to[T](uniform(rng, bh, 2)), to[T](uniform(rng, bh, 2)), to[T](uniform(rng, bh, 1)), to[T](uniform(rng, bh, 1))
		dPre, dcPrev := make([]T, 4*bh), make([]T, bh)
		LSTMCellGrad(hidden, act, cPrev, c, dh, dc, dPre, dcPrev)
		LSTMCellGrad(hidden, act, cPrev, c, dh, dc, act, dc)
		checkEqual(t, "dPre", act, dPre)
		checkEqual(t, "dcPrev", dc, dcPrev)
	})
	t.Run("GRUCell h=hPrev", func(t *testing.T) {
		xPre, hPre := to[T](uniform(rng, 3*bh, 3)), to[T](uniform(rng, 3*bh, 3))
		bih, bhh, hPrev := to[T](uniform(rng, 3*hidden, 1)), to[T](uniform(rng, 3*hidden, 1)), to[T](uniform(rng, bh, 1))
		h, act := make([]T, bh), make([]T, 4*bh)
		GRUCell(hidden, xPre, hPre, bih, bhh, hPrev, h, act)
		act2 := make([]T, 4*bh)
		GRUCell(hidden, xPre, hPre, bih, bhh, hPrev, hPrev, act2)
		checkEqual(t, "h", hPrev, h)
		checkEqual(t, "act", act2, act)
	})
	t.Run("GRUCellGrad dhPrev=dh", func(t *testing.T) {
		hPrev := uniform(rng, bh, 1)
		_, a := refGRU(rows, hidden, uniform(rng, 3*bh, 3), uniform(rng, 3*bh, 3), nil, nil, hPrev)
		act, hp, dh := to[T](a), to[T](hPrev), to[T](uniform(rng, bh, 1))
		dx, dy, dhPrev := make([]T, 3*bh), make([]T, 3*bh), make([]T, bh)
		GRUCellGrad(hidden, act, hp, dh, dx, dy, dhPrev, false)
		dx2, dy2 := make([]T, 3*bh), make([]T, 3*bh)
		GRUCellGrad(hidden, act, hp, dh, dx2, dy2, dh, false)
		checkEqual(t, "dhPrev", dh, dhPrev)
		checkEqual(t, "dxPre", dx2, dx)
		checkEqual(t, "dhPre", dy2, dy)
	})
}

// TestCellNoGrad checks that act = nil (no-grad mode) writes the same
// c and h (LSTM) and h (GRU) as with act.
func TestCellNoGrad(t *testing.T) {
	const rows, hidden = 2, 70
	bh := rows * hidden
	rng := newRand(8)
	pre, bih, bhh, cPrev := to[float32](uniform(rng, 4*bh, 4)), to[float32](uniform(rng, 4*hidden, 1)), to[float32](uniform(rng, 4*hidden, 1)), to[float32](uniform(rng, bh, 2))
	c, h, act := make([]float32, bh), make([]float32, bh), make([]float32, 4*bh)
	LSTMCell(hidden, pre, bih, bhh, cPrev, c, h, act)
	c2, h2 := make([]float32, bh), make([]float32, bh)
	LSTMCell(hidden, pre, bih, bhh, cPrev, c2, h2, nil)
	checkEqual(t, "LSTM c", c2, c)
	checkEqual(t, "LSTM h", h2, h)

	xPre, hPre := to[float32](uniform(rng, 3*bh, 3)), to[float32](uniform(rng, 3*bh, 3))
	gbih, gbhh, hPrev := to[float32](uniform(rng, 3*hidden, 1)), to[float32](uniform(rng, 3*hidden, 1)), to[float32](uniform(rng, bh, 1))
	gh, gact := make([]float32, bh), make([]float32, 4*bh)
	GRUCell(hidden, xPre, hPre, gbih, gbhh, hPrev, gh, gact)
	gh2 := make([]float32, bh)
	GRUCell(hidden, xPre, hPre, gbih, gbhh, hPrev, gh2, nil)
	checkEqual(t, "GRU h", gh2, gh)
}
