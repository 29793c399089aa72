package kern

import (
	"math"
	"testing"
)

// The element-wise kernels and the reductions are checked against their
// equations by the conformance suite (device/devicetest, run by
// device/cpu's TestConformance). Here: what the CPU device's split and
// Numerics promise beyond it.

func TestSumRows(t *testing.T) {
	t.Run("float64", testSumRows[float64])
	t.Run("float32", testSumRows[float32])
}

// testSumRows checks that the column parts the CPU device splits SumRows
// into give the bits of one call over all columns, and that a float32 sum
// is the float64 sum of the same values rounded once.
func testSumRows[T Float](t *testing.T) {
	// 150 columns: two full blocks of 64 and a remainder.
	const rows, cols = 7, 150
	rng := newRand(31)
	x := to[T](uniform(rng, rows*cols, 1))
	old := to[T](uniform(rng, cols, 1))
	want := append([]T(nil), old...)
	SumRows(cols, 0, cols, x, want, true)
	acc := append([]T(nil), old...)
	for _, p := range [][2]int{{0, 10}, {10, 100}, {100, 150}, {150, 150}} {
		SumRows(cols, p[0], p[1], x, acc, true)
	}
	checkEqual(t, "out (accumulate, parts)", acc, want)

	wide := make([]float64, cols)
	SumRows(cols, 0, cols, from(x), wide, false)
	out := make([]T, cols)
	for i := range out {
		out[i] = T(math.NaN()) // not read without accumulate
	}
	SumRows(cols, 0, cols, x, out, false)
	checkEqual(t, "out", out, to[T](wide))
}

// TestSumSquaresAccumulatesInFloat64: 1e20² = 1e40 overflows float32 but
// not the float64 accumulator (Numerics).
func TestSumSquaresAccumulatesInFloat64(t *testing.T) {
	big := float32(1e20)
	if s, want := SumSquares([]float32{big, 1}), float64(big)*float64(big)+1; s != want {
		t.Errorf("SumSquares([1e20, 1] float32): got %v, want %v (accumulated in float64)", s, want)
	}
}
