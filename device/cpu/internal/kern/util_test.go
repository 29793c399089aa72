package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// newRand returns a deterministic generator, so a failure reproduces.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// uniform returns n values uniform in [-scale, scale).
func uniform(rng *rand.Rand, n int, scale float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = scale * (2*rng.Float64() - 1)
	}
	return s
}

// to converts a float64 slice to T (rounding to float32 for T = float32);
// nil stays nil.
func to[T Float](s []float64) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(s))
	for i, v := range s {
		out[i] = T(v)
	}
	return out
}

// from converts back to float64 (exactly); nil stays nil.
func from[T Float](s []T) []float64 {
	if s == nil {
		return nil
	}
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}

// ulp32 is the spacing of float32 values at |w|: 2^(e-23) for a normal
// w in [2^e, 2^(e+1)), 2^-149 in the subnormal range.
func ulp32(w float64) float64 {
	w = math.Abs(w)
	if w < 0x1p-126 {
		return 0x1p-149
	}
	_, e := math.Frexp(w) // w = f·2^e, f in [0.5, 1)
	return math.Ldexp(1, e-1-23)
}

// checkClose fails unless |got[i] - want[i]| ≤ abs + rel·|want[i]| for
// every i; NaN matches only NaN.
func checkClose(t *testing.T, name string, got, want []float64, abs, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d elements, want %d", name, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(w) || math.IsNaN(g) {
			if math.IsNaN(w) != math.IsNaN(g) {
				t.Errorf("%s[%d]: got %v, want %v", name, i, g, w)
				return
			}
			continue
		}
		if d := math.Abs(g - w); !(d <= abs+rel*math.Abs(w)) {
			t.Errorf("%s[%d]: got %v, want %v (diff %.3g, tolerance %.3g + %.3g·|want|)", name, i, g, w, d, abs, rel)
			return
		}
	}
}

// checkULP32 fails unless every got[i] is within ulps float32 ulps of the
// float64 want[i], plus abs (for values computed with cancellation).
func checkULP32(t *testing.T, name string, got []float32, want []float64, ulps, abs float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d elements, want %d", name, len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), want[i]
		if d := math.Abs(g - w); !(d <= ulps*ulp32(w)+abs) {
			t.Errorf("%s[%d]: got %v, want %v (diff %.3g = %.2f ulp, tolerance %v ulp + %.3g)", name, i, g, w, d, d/ulp32(w), ulps, abs)
			return
		}
	}
}

// checkEqual fails unless got and want are identical bit for bit.
func checkEqual[T Float](t *testing.T, name string, got, want []T) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d elements, want %d", name, len(got), len(want))
	}
	for i := range got {
		if math.Float64bits(float64(got[i])) != math.Float64bits(float64(want[i])) {
			t.Errorf("%s[%d]: got %v, want %v (bit for bit)", name, i, got[i], want[i])
			return
		}
	}
}
