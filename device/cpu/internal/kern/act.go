package kern

import "math"

// The fast activations serve the float32 path. They compute in float64
// and are rounded to float32 by the caller, so their own error (at most
// 1.2e-10 relative, see expParts) is far under float32's half ulp
// (3e-8 to 6e-8 relative): over every finite float32 input the stored
// result is within 0.5014 ulp of the exact value (act_test.go). They cost
// less than half of math.Exp and math.Tanh because they skip the
// float64-accurate polynomial and the special-case handling those need,
// and expParts inlines into the loops.
//
// The float64 path uses the math package so that float64 gradient checks
// see library accuracy.

// Exp reduction: t = (32n + j)·ln2/32 + r with |r| ≤ ln2/64, so
// exp(t) = 2^n · 2^(j/32) · exp(r) = s · (1 + q(r)). This is the scheme of
// musl's expf (table of 2^(j/32), shift-constant rounding, exponent added
// to the table entry's bits); the polynomial here is plain Taylor.
const (
	expTableBits = 5
	expN         = 1 << expTableBits // 32
	expInvLn2N   = expN / math.Ln2
	expLn2N      = math.Ln2 / expN
	// expShift rounds z to an integer when added: 1.5·2^52 leaves no
	// fraction bits, and the integer sits in the low mantissa bits.
	expShift = 0x1.8p52
	// expLimit bounds the argument: exp(±700) is finite in float64, and
	// every caller's result has saturated long before (a float32 result
	// saturates by |t| ≈ 104).
	expLimit = 700
)

// exp2Table[j] holds the bits of 2^(j/32) minus j<<47, so that adding k<<47
// for k = 32n + j yields the bits of 2^(k/32): the j bits cancel and n lands
// in the exponent field. Computed once from math.Exp2 (accurate to 1 ulp of
// float64, i.e. 1e-16 relative).
var exp2Table = func() (t [expN]uint64) {
	for j := range t {
		t[j] = math.Float64bits(math.Exp2(float64(j)/expN)) - uint64(j)<<(52-expTableBits)
	}
	return t
}()

// expParts splits exp(t) = s·(1 + q) with s a power 2^(k/32) and q =
// expm1(r), |r| ≤ ln2/64 ≈ 0.0108. q is the Taylor polynomial of degree 4,
// whose truncation error r⁵/120 is at most 1.2e-12 relative to exp(t) and
// 0.0108⁴/120 ≈ 1.1e-10 relative to q ≈ r (what tanh near 0 sees). Keeping q separate lets
// tanh form expm1 = (s-1) + s·q without cancellation near 0. t is clamped
// by the caller to ±expLimit (clampExp), which keeps expParts small
// enough to inline; NaN propagates through q.
func expParts(t float64) (s, q float64) {
	z := t * expInvLn2N
	kd := z + expShift
	ki := math.Float64bits(kd)
	kd -= expShift
	r := (z - kd) * expLn2N
	s = math.Float64frombits(exp2Table[ki%expN] + ki<<(52-expTableBits))
	r2 := r * r
	q = r + r2*(0.5+r*(1.0/6)+r2*(1.0/24))
	return s, q
}

// clampExp limits t to ±expLimit; NaN stays NaN.
func clampExp(t float64) float64 {
	if math.Abs(t) > expLimit {
		t = math.Copysign(expLimit, t)
	}
	return t
}

// chunk is how many elements the cell and softmax kernels gather into
// float64 stack buffers before applying an activation to all of them in
// one tight loop (sigmoidSlice, tanhSlice, expSlice): the loop bodies
// inline, independent elements overlap in the pipeline, and the
// float32-or-float64 choice is made once per loop. The largest user keeps
// 5·chunk float64s, 2.5 KB of stack.
const chunk = 64

// sigmoidSlice replaces every x[k] by 1/(1+exp(-x[k])). The fast form is
// accurate to about 1.3e-12 relative for x ≥ -700; it saturates to exactly 1 for large x
// and to below 1e-300 (0 in float32) for x < -700, and NaN propagates.
func sigmoidSlice(fast bool, x []float64) {
	if !fast {
		for k, v := range x {
			x[k] = 1 / (1 + math.Exp(-v))
		}
		return
	}
	for k, v := range x {
		s, q := expParts(clampExp(-v))
		x[k] = 1 / (1 + (s + s*q))
	}
}

// tanhSlice replaces every x[k] by tanh(x[k]). The fast form is
// em/(em+2) with em = expm1(2x) = (s-1) + s·q, accurate to 1.2e-10
// relative everywhere, including near 0 where em = q keeps relative
// accuracy; it saturates to exactly ±1, keeps the sign of zero and
// propagates NaN.
func tanhSlice(fast bool, x []float64) {
	if !fast {
		for k, v := range x {
			x[k] = math.Tanh(v)
		}
		return
	}
	for k, v := range x {
		s, q := expParts(clampExp(2 * v))
		em := (s - 1) + s*q
		x[k] = math.Copysign(em/(em+2), v)
	}
}

// expSlice replaces every x[k] by exp(x[k]). The fast form is accurate to
// about 1.3e-12 relative for x ≥ -700 (smaller x gives exp(-700) ≈ 1e-304,
// 0 in float32); NaN propagates.
func expSlice(fast bool, x []float64) {
	if !fast {
		for k, v := range x {
			x[k] = math.Exp(v)
		}
		return
	}
	for k, v := range x {
		s, q := expParts(clampExp(v))
		x[k] = s + s*q
	}
}
