package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// Tolerance bounds the difference between a device's result and the
// suite's float64 reference: a result passes when
//
//	|got − want| ≤ Abs + Rel·mag
//
// where mag is the magnitude of the computation that produced it: |want|
// for a pointwise result, the sum of the absolute values of the terms for
// a sum or a product (|α|·Σ|a||b| + |β|·|c| for an element of a Gemm).
// Measuring sums against the size of their terms rather than of their
// result keeps the bound meaningful when terms cancel. A NaN or infinite
// reference must be matched exactly.
type Tolerance struct {
	Rel float64 // relative to mag
	Abs float64 // an absolute floor
}

// Bound is the largest difference the tolerance allows at magnitude mag.
func (tol Tolerance) Bound(mag float64) float64 { return tol.Abs + tol.Rel*math.Abs(mag) }

// Plus is the tolerance of a computation with both sources of error.
func (tol Tolerance) Plus(o Tolerance) Tolerance {
	return Tolerance{Rel: tol.Rel + o.Rel, Abs: tol.Abs + o.Abs}
}

// Unit is the unit roundoff of t: 2⁻²⁴ for Float32, 2⁻⁵³ for Float64.
func Unit(t device.DType) float64 {
	if t == device.Float32 {
		return 0x1p-24
	}
	return 0x1p-53
}

// PointwiseTolerance is the tolerance of pointwise kernels (the LSTM and
// GRU cells and their gradients, softmax, dropout, the optimizers, Axpby,
// Mul) on the suite's data, whose values are of order 1.
//
// Float32: 1e-5, relative and absolute. Each output is a chain of at most
// about ten roundings and transcendentals; fast float32 exp, tanh and
// division (CUDA's __expf, tanhf, __fdividef) are within 2 ulp plus, for
// exp, about 1.2·|x| ulp, so for arguments up to about 5 the chain
// stays within about 50·2⁻²⁴ ≈ 3e-6 of the exact value. 1e-5 leaves a
// factor of three for that, while a wrong equation, gate order or
// hyperparameter is off by 1e-3 or more. The absolute floor equals the
// relative figure because intermediate values are of order 1 even where
// a result is near zero (c = f·cPrev + i·g, a gradient that cancels).
//
// Float64: 1e-12, relative and absolute: the same chain in double
// precision is within a few times 2⁻⁵³ ≈ 1.1e-16, so 1e-12 only allows
// for a different but sound order of operations, while still checking
// results to far beyond float32 precision (Float64 exists for gradient
// checks by finite differences, which need that).
func PointwiseTolerance(t device.DType) Tolerance {
	if t == device.Float32 {
		return Tolerance{Rel: 1e-5, Abs: 1e-5}
	}
	return Tolerance{Rel: 1e-12, Abs: 1e-12}
}

// SumTolerance is the tolerance of a sum of n products or terms (a dot
// product of length n: an element of a Gemm with K = n, SumRows over n
// rows, SumSquares over n elements), relative to the sum of the absolute
// values of the terms:
//
//	Rel = min(2·(n+4), 8·(√n+2)) · Unit(t)
//
// The first figure is the worst-case bound γₙ ≈ n·u of recursive summation
// in any order (Higham, Accuracy and Stability of Numerical Algorithms,
// 2nd ed., §3.1), with 4 extra roundings for α, β and the final
// accumulation and a factor of 2 to spare; it holds for every summation
// order, blocked, pairwise or parallel, with or without FMA, in float32 or
// better. For large n it is very loose, so the second figure, the
// probabilistic bound λ·√n·u with λ = 8 (Higham and Mary, "A New Approach
// to Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput. 2019),
// takes over: a single float32 accumulator over 2²⁰ squares of uniform
// values measured 6.6·√n·u, blocked or float64 accumulation far less.
// Neither allows TF32 or half-precision products.
func SumTolerance(t device.DType, n int) Tolerance {
	k := float64(n)
	return Tolerance{Rel: math.Min(2*(k+4), 8*(math.Sqrt(k)+2)) * Unit(t)}
}

// checkClose reports, as one failure naming the worst element, the
// elements of got further from want than tol allows. mag holds each
// element's magnitude (see Tolerance); nil means |want|.
func checkClose(t testing.TB, what string, got, want, mag []float64, tol Tolerance) bool {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d elements, want %d", what, len(got), len(want))
		return false
	}
	worst, bad := -1, 0
	worstRatio := 0.0
	for i := range want {
		m := math.Abs(want[i])
		if mag != nil {
			m = mag[i]
		}
		ratio := excess(got[i], want[i], tol.Bound(m))
		if ratio > 1 {
			bad++
			if ratio > worstRatio {
				worst, worstRatio = i, ratio
			}
		}
	}
	if bad == 0 {
		return true
	}
	m := math.Abs(want[worst])
	if mag != nil {
		m = mag[worst]
	}
	t.Errorf("%s[%d]: got %v, want %v (difference %.3g, allowed %.3g at magnitude %.3g; %d of %d elements out of tolerance)",
		what, worst, got[worst], want[worst], math.Abs(got[worst]-want[worst]), tol.Bound(m), m, bad, len(want))
	return false
}

// excess is how many times the allowed bound the difference between got and
// want is: at most 1 passes. Non-finite references must match exactly.
func excess(got, want, bound float64) float64 {
	switch {
	case math.IsNaN(want):
		if math.IsNaN(got) {
			return 0
		}
		return math.Inf(1)
	case math.IsInf(want, 0):
		if got == want {
			return 0
		}
		return math.Inf(1)
	case math.IsNaN(got) || math.IsInf(got, 0):
		return math.Inf(1)
	}
	d := math.Abs(got - want)
	if d == 0 {
		return 0
	}
	if bound == 0 {
		return math.Inf(1)
	}
	return d / bound
}

// checkExact reports elements of got that differ from want (NaN equals
// NaN), naming the first.
func checkExact(t testing.TB, what string, got, want []float64) bool {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d elements, want %d", what, len(got), len(want))
		return false
	}
	first, bad := -1, 0
	for i := range want {
		if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s[%d]: got %v, want exactly %v (%d of %d elements differ)", what, first, got[first], want[first], bad, len(want))
	}
	return bad == 0
}

// checkScalar compares one result.
func checkScalar(t testing.TB, what string, got, want, mag float64, tol Tolerance) bool {
	t.Helper()
	if excess(got, want, tol.Bound(mag)) > 1 {
		t.Errorf("%s: got %v, want %v (difference %.3g, allowed %.3g at magnitude %.3g)",
			what, got, want, math.Abs(got-want), tol.Bound(mag), mag)
		return false
	}
	return true
}

func describe(format string, args ...any) string { return fmt.Sprintf(format, args...) }
