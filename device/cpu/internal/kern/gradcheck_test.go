package kern

import (
	"fmt"
	"math"
	"testing"
)

// Finite-difference checks of the cell backward passes in float64.
//
// The scalar loss is L = Σ w·h (+ Σ u·c for the LSTM) with random weights,
// so dL/dh = w and dL/dc = u are the gradients fed to the backward. Each
// input element is moved by ±fdEps and (L+ - L-)/(2·fdEps) is compared with
// the analytic gradient. The central difference is off by fdEps²·L”'/6,
// about 1e-12 here, and loses about 1e-16·|L|/fdEps ≈ 1e-10 to rounding
// (|L| is at most a few units), so fdTol = 1e-7 absolute plus 1e-6
// relative is three orders of magnitude above the expected error and far
// below any error in a formula.
const (
	fdEps = 1e-6
	fdTol = 1e-7
)

// fdCheck compares grad[k] with the central difference of loss in x[k]
// for every k. loss reads x.
func fdCheck(t *testing.T, name string, x, grad []float64, loss func() float64) {
	t.Helper()
	for k := range x {
		v := x[k]
		x[k] = v + fdEps
		lp := loss()
		x[k] = v - fdEps
		lm := loss()
		x[k] = v
		fd := (lp - lm) / (2 * fdEps)
		if d := math.Abs(fd - grad[k]); !(d <= fdTol+1e-6*math.Abs(fd)) {
			t.Errorf("d L/d %s[%d]: analytic %v, finite difference %v (diff %.3g)", name, k, grad[k], fd, d)
		}
	}
}

// sumRows is the column sum of a [rows, cols] matrix: the gradient of a
// bias added to every row.
func sumRows(m []float64, cols int) []float64 {
	s := make([]float64, cols)
	for i, v := range m {
		s[i%cols] += v
	}
	return s
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func TestLSTMCellGradFiniteDifference(t *testing.T) {
	for _, s := range []struct{ rows, hidden int }{{2, 3}, {3, 5}} {
		t.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(t *testing.T) {
			rng := newRand(uint64(10 * s.hidden))
			bh := s.rows * s.hidden
			pre, cPrev := uniform(rng, 4*bh, 2), uniform(rng, bh, 2)
			bih, bhh := uniform(rng, 4*s.hidden, 0.5), uniform(rng, 4*s.hidden, 0.5)
			w, u := uniform(rng, bh, 1), uniform(rng, bh, 1)
			c, h, act := make([]float64, bh), make([]float64, bh), make([]float64, 4*bh)
			loss := func() float64 {
				LSTMCell(s.hidden, pre, bih, bhh, cPrev, c, h, nil)
				return dot(w, h) + dot(u, c)
			}

			LSTMCell(s.hidden, pre, bih, bhh, cPrev, c, h, act)
			dPre, dcPrev := make([]float64, 4*bh), make([]float64, bh)
			LSTMCellGrad(s.hidden, act, cPrev, c, w, u, dPre, dcPrev)
			dBias := sumRows(dPre, 4*s.hidden)

			fdCheck(t, "pre", pre, dPre, loss)
			fdCheck(t, "cPrev", cPrev, dcPrev, loss)
			fdCheck(t, "bih", bih, dBias, loss)
			fdCheck(t, "bhh", bhh, dBias, loss)
		})
	}
}

func TestGRUCellGradFiniteDifference(t *testing.T) {
	for _, s := range []struct{ rows, hidden int }{{2, 3}, {3, 5}} {
		t.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(t *testing.T) {
			rng := newRand(uint64(10*s.hidden) + 1)
			bh := s.rows * s.hidden
			xPre, hPre, hPrev := uniform(rng, 3*bh, 2), uniform(rng, 3*bh, 2), uniform(rng, bh, 1)
			bih, bhh := uniform(rng, 3*s.hidden, 0.5), uniform(rng, 3*s.hidden, 0.5)
			w := uniform(rng, bh, 1)
			h, act := make([]float64, bh), make([]float64, 4*bh)
			loss := func() float64 {
				GRUCell(s.hidden, xPre, hPre, bih, bhh, hPrev, h, nil)
				return dot(w, h)
			}

			GRUCell(s.hidden, xPre, hPre, bih, bhh, hPrev, h, act)
			dxPre, dhPre, dhPrev := make([]float64, 3*bh), make([]float64, 3*bh), make([]float64, bh)
			GRUCellGrad(s.hidden, act, hPrev, w, dxPre, dhPre, dhPrev, false)

			fdCheck(t, "xPre", xPre, dxPre, loss)
			fdCheck(t, "hPre", hPre, dhPre, loss)
			// hPre is an input of its own here, so hPrev reaches h only
			// through z·hPrev: the direct part that GRUCellGrad returns.
			fdCheck(t, "hPrev", hPrev, dhPrev, loss)
			fdCheck(t, "bih", bih, sumRows(dxPre, 3*s.hidden), loss)
			fdCheck(t, "bhh", bhh, sumRows(dhPre, 3*s.hidden), loss)
		})
	}
}

// TestSeqPoolGradFiniteDifference checks SeqPoolGrad against central
// differences of L = Σ w·out for SeqPool's mean and max, over sequences of
// every kind of length (T, 1, padded, past T, empty): the gradient is
// dL/dout = w spread over the real steps or routed to each maximum's step,
// and zero at the padded steps, whose finite differences are exactly zero
// since SeqPool never reads them. Random data has no ties, where the
// maximum is not differentiable.
func TestSeqPoolGradFiniteDifference(t *testing.T) {
	const steps, batch, cols = 4, 5, 3
	lengths := []int32{4, 1, 2, 7, 0}
	for _, takeMax := range []bool{false, true} {
		t.Run(fmt.Sprintf("max=%v", takeMax), func(t *testing.T) {
			rng := newRand(25)
			y, w := uniform(rng, steps*batch*cols, 2), uniform(rng, batch*cols, 1)
			out, argmax := make([]float64, batch*cols), make([]int32, batch*cols)
			loss := func() float64 {
				SeqPool(steps, batch, cols, cols, cols, 0, batch, takeMax, lengths, y, out, nil)
				return dot(w, out)
			}
			SeqPool(steps, batch, cols, cols, cols, 0, batch, takeMax, lengths, y, out, argmax)
			dy := make([]float64, len(y))
			if bad := SeqPoolGrad(steps, batch, cols, cols, cols, 0, steps*batch, takeMax, lengths, w, argmax, dy); bad != -1 {
				t.Fatalf("bad = %d, want -1", bad)
			}
			fdCheck(t, "y", y, dy, loss)
		})
	}
}
