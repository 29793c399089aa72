package kern

import (
	"fmt"
	"testing"
)

// The cells' equations are checked on the CPU device by the conformance
// suite (device/devicetest, run by device/cpu's TestConformance), in
// float64 to 1e-12 and float32 to 1e-5, and their gradients here by finite
// differences (gradcheck_test.go) and against gorgonia (gorgonia_test.go).
// What the suite cannot see, these tests check without restating the
// equations: that a float32 cell computes in float64 and rounds once
// (package doc, Numerics), against the float64 instance on the same
// float32 inputs; and that aliased outputs and no-grad mode give the same
// bits as separate buffers.

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

// f32 rounds s to float32 values, kept as float64: the float32 instance's
// inputs, seen exactly by the float64 instance.
func f32(s []float64) []float64 { return from(to[float32](s)) }

// The tolerances below are in float32 ulps of the float64 instance's
// result, which math.Exp and math.Tanh give to about 1e-16 relative: the
// float32 instance's fast activations are accurate to 1e-10 relative
// (Numerics), so one rounding of its float64 value is within 0.502 ulp.
// Where a result is computed with cancellation (c = f·cPrev + i·g, a
// gradient's dc + …), 1e-9 absolute allows for it.

func TestLSTMCellRoundsOnce(t *testing.T) {
	for _, s := range cellShapesTest {
		for _, bc := range biasCases {
			t.Run(fmt.Sprintf("rows=%d/hidden=%d/bias=%s", s.rows, s.hidden, bc.name), func(t *testing.T) {
				rng := newRand(uint64(s.hidden))
				bh := s.rows * s.hidden
				// Pre-activations up to ±6 reach the saturating tails.
				pre := f32(uniform(rng, 4*bh, 6))
				bih, bhh := pick(bc.ih, f32(uniform(rng, 4*s.hidden, 1))), pick(bc.hh, f32(uniform(rng, 4*s.hidden, 1)))
				cPrev := f32(uniform(rng, bh, 3))
				wc, wh, wact := make([]float64, bh), make([]float64, bh), make([]float64, 4*bh)
				LSTMCell(s.hidden, pre, bih, bhh, cPrev, wc, wh, wact)
				c, h, act := make([]float32, bh), make([]float32, bh), make([]float32, 4*bh)
				LSTMCell(s.hidden, to[float32](pre), to[float32](bih), to[float32](bhh), to[float32](cPrev), c, h, act)
				// h is o·tanh of the rounded c: another 0.5 ulp of c through
				// tanh, and its own rounding.
				checkULP32(t, "act", act, wact, 0.502, 0)
				checkULP32(t, "c", c, wc, 0.502, 1e-9)
				checkULP32(t, "h", h, wh, 1.5, 1e-9)
			})
		}
	}
}

func TestLSTMCellGradRoundsOnce(t *testing.T) {
	for _, s := range cellShapesTest {
		t.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(t *testing.T) {
			rng := newRand(uint64(s.hidden) + 1)
			bh := s.rows * s.hidden
			act := make([]float64, 4*bh)
			LSTMCell(s.hidden, uniform(rng, 4*bh, 4), nil, nil, make([]float64, bh), make([]float64, bh), make([]float64, bh), act)
			act = f32(act)
			cPrev, c := f32(uniform(rng, bh, 3)), f32(uniform(rng, bh, 3))
			dh, dc := f32(uniform(rng, bh, 1)), f32(uniform(rng, bh, 1))
			wdPre, wdcPrev := make([]float64, 4*bh), make([]float64, bh)
			LSTMCellGrad(s.hidden, act, cPrev, c, dh, dc, wdPre, wdcPrev)
			dPre, dcPrev := make([]float32, 4*bh), make([]float32, bh)
			LSTMCellGrad(s.hidden, to[float32](act), to[float32](cPrev), to[float32](c), to[float32](dh), to[float32](dc), dPre, dcPrev)
			checkULP32(t, "dPre", dPre, wdPre, 0.502, 1e-9)
			checkULP32(t, "dcPrev", dcPrev, wdcPrev, 0.502, 1e-9)
		})
	}
}

func TestGRUCellRoundsOnce(t *testing.T) {
	for _, s := range cellShapesTest {
		for _, bc := range biasCases {
			t.Run(fmt.Sprintf("rows=%d/hidden=%d/bias=%s", s.rows, s.hidden, bc.name), func(t *testing.T) {
				rng := newRand(uint64(s.hidden) + 2)
				bh := s.rows * s.hidden
				xPre, hPre := f32(uniform(rng, 3*bh, 4)), f32(uniform(rng, 3*bh, 4))
				bih, bhh := pick(bc.ih, f32(uniform(rng, 3*s.hidden, 1))), pick(bc.hh, f32(uniform(rng, 3*s.hidden, 1)))
				hPrev := f32(uniform(rng, bh, 1))
				wh, wact := make([]float64, bh), make([]float64, 4*bh)
				GRUCell(s.hidden, xPre, hPre, bih, bhh, hPrev, wh, wact)
				h, act := make([]float32, bh), make([]float32, 4*bh)
				GRUCell(s.hidden, to[float32](xPre), to[float32](hPre), to[float32](bih), to[float32](bhh), to[float32](hPrev), h, act)
				// h_n + bh_n and h = (1-z)·n + z·hPrev may cancel.
				checkULP32(t, "act", act, wact, 0.502, 1e-9)
				checkULP32(t, "h", h, wh, 0.502, 1e-9)
			})
		}
	}
}

func TestGRUCellGradRoundsOnce(t *testing.T) {
	for _, s := range cellShapesTest {
		t.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(t *testing.T) {
			rng := newRand(uint64(s.hidden) + 3)
			bh := s.rows * s.hidden
			hPrev := f32(uniform(rng, bh, 1))
			act := make([]float64, 4*bh)
			GRUCell(s.hidden, uniform(rng, 3*bh, 3), uniform(rng, 3*bh, 3), nil, nil, hPrev, make([]float64, bh), act)
			act = f32(act)
			dh := f32(uniform(rng, bh, 1))
			wdx, wdh, wdhp := make([]float64, 3*bh), make([]float64, 3*bh), make([]float64, bh)
			GRUCellGrad(s.hidden, act, hPrev, dh, wdx, wdh, wdhp, false)
			dxPre, dhPre, dhPrev := make([]float32, 3*bh), make([]float32, 3*bh), make([]float32, bh)
			GRUCellGrad(s.hidden, to[float32](act), to[float32](hPrev), to[float32](dh), dxPre, dhPre, dhPrev, false)
			// Exact float32 inputs, float64 arithmetic, one rounding.
			checkULP32(t, "dxPre", dxPre, wdx, 0.5, 1e-12)
			checkULP32(t, "dhPre", dhPre, wdh, 0.5, 1e-12)
			checkULP32(t, "dhPrev", dhPrev, wdhp, 0.5, 0)
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
	t.Run("LSTMCell c=cPrev", func(t *testing.T) {
		pre := to[T](uniform(rng, 4*bh, 4))
		bih, bhh, cPrev := to[T](uniform(rng, 4*hidden, 1)), to[T](uniform(rng, 4*hidden, 1)), to[T](uniform(rng, bh, 2))
		c, h, act := make([]T, bh), make([]T, bh), make([]T, 4*bh)
		LSTMCell(hidden, pre, bih, bhh, cPrev, c, h, act)
		h2, act2 := make([]T, bh), make([]T, 4*bh)
		LSTMCell(hidden, pre, bih, bhh, cPrev, cPrev, h2, act2)
		checkEqual(t, "c", cPrev, c)
		checkEqual(t, "h", h2, h)
		checkEqual(t, "act", act2, act)
	})
	t.Run("LSTMCellGrad dPre=act dcPrev=dc", func(t *testing.T) {
		act := make([]T, 4*bh)
		LSTMCell(hidden, to[T](uniform(rng, 4*bh, 4)), nil, nil, make([]T, bh), make([]T, bh), make([]T, bh), act)
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
		hp := to[T](uniform(rng, bh, 1))
		act := make([]T, 4*bh)
		GRUCell(hidden, to[T](uniform(rng, 3*bh, 3)), to[T](uniform(rng, 3*bh, 3)), nil, nil, hp, make([]T, bh), act)
		dh := to[T](uniform(rng, bh, 1))
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
