package kern

import (
	"math"
	"testing"
)

// float32Grid returns every 1009th positive finite float32 (the prime
// stride reaches every exponent and a spread of mantissas: 2.1 million
// values from the smallest subnormal to MaxFloat32) and their negations.
func float32Grid() []float64 {
	var g []float64
	for b := uint32(1); b < 0x7f800000; b += 1009 {
		v := float64(math.Float32frombits(b))
		g = append(g, v, -v)
	}
	return g
}

// activationCase is a fast activation against its float64 reference.
type activationCase struct {
	name  string
	apply func(bool, []float64)
	ref   func(float64) float64
}

var activationCases = []activationCase{
	{"sigmoid", sigmoidSlice, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }},
	{"tanh", tanhSlice, math.Tanh},
}

// TestFastActivations measures the fast float32 activations on the grid
// against math in float64. Two figures: the relative error of the float64
// result before rounding (the design bound is 1.1e-10, the Taylor
// truncation of expParts; 2e-10 allows for the reference's own rounding),
// and the error of the float32 the kernels store, in float32 ulps of the
// exact value (0.5 is correct rounding; 1.1e-10 relative is 0.002 ulp
// at worst, so the bound is 0.502). An exhaustive run over every finite
// float32 input (a throwaway test, 100 s on 2 cores) measured at most
// 0.50002 ulp for sigmoid and 0.50132 ulp for tanh (at x = 0.00543, where
// the reduced argument r = 2x sits at the edge ln2/64 of the polynomial's
// interval), and relative errors of 1.3e-12 and 1.16e-10 before rounding.
func TestFastActivations(t *testing.T) {
	grid := float32Grid()
	for _, c := range activationCases {
		t.Run(c.name, func(t *testing.T) {
			got := append([]float64(nil), grid...)
			c.apply(true, got)
			var maxRel, maxULP float64
			var atRel, atULP float64
			for i, x := range grid {
				want := c.ref(x)
				// Below exp(-700) (sigmoid of x < -700) the fast forms
				// return a clamped value, 1e-304 or less: 0 in float32,
				// which the ulp figure checks.
				if want != 0 && x >= -700 {
					if rel := math.Abs(got[i]-want) / math.Abs(want); rel > maxRel {
						maxRel, atRel = rel, x
					}
				}
				if u := math.Abs(float64(float32(got[i]))-want) / ulp32(want); u > maxULP {
					maxULP, atULP = u, x
				}
			}
			t.Logf("%d inputs: max relative error %.3g (at x=%v) before rounding, max %.4f float32 ulp (at x=%v) after", len(grid), maxRel, atRel, maxULP, atULP)
			if maxRel > 2e-10 {
				t.Errorf("max relative error %.3g at x=%v, want ≤ 2e-10", maxRel, atRel)
			}
			if maxULP > 0.502 {
				t.Errorf("max error %.4f float32 ulp at x=%v, want ≤ 0.502", maxULP, atULP)
			}
		})
	}
}

// TestFastExp checks expSlice against math.Exp over its documented domain
// [-700, 700], on 1.4 million evenly spaced points.
func TestFastExp(t *testing.T) {
	const n = 1_400_001
	x := make([]float64, n)
	for i := range x {
		x[i] = -700 + 1400*float64(i)/(n-1)
	}
	got := append([]float64(nil), x...)
	expSlice(true, got)
	var maxRel float64
	for i, v := range x {
		want := math.Exp(v)
		if rel := math.Abs(got[i]-want) / want; rel > maxRel {
			maxRel = rel
		}
	}
	t.Logf("max relative error %.3g", maxRel)
	if maxRel > 2e-10 {
		t.Errorf("max relative error %.3g, want ≤ 2e-10", maxRel)
	}
}

// TestActivationSpecialValues checks saturation, the sign of zero and NaN
// for both paths.
func TestActivationSpecialValues(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name  string
		apply func(bool, []float64)
		x     float64
		want  float64
	}{
		{"sigmoid(+Inf)", sigmoidSlice, inf, 1},
		{"sigmoid(-Inf)", sigmoidSlice, -inf, 0},
		{"sigmoid(MaxFloat64)", sigmoidSlice, math.MaxFloat64, 1},
		{"sigmoid(-MaxFloat64)", sigmoidSlice, -math.MaxFloat64, 0},
		{"sigmoid(0)", sigmoidSlice, 0, 0.5},
		{"sigmoid(NaN)", sigmoidSlice, nan, nan},
		{"tanh(+Inf)", tanhSlice, inf, 1},
		{"tanh(-Inf)", tanhSlice, -inf, -1},
		{"tanh(1e30)", tanhSlice, 1e30, 1},
		{"tanh(-1e30)", tanhSlice, -1e30, -1},
		{"tanh(+0)", tanhSlice, 0, 0},
		{"tanh(-0)", tanhSlice, math.Copysign(0, -1), math.Copysign(0, -1)},
		{"tanh(NaN)", tanhSlice, nan, nan},
		{"exp(-Inf)", expSlice, -inf, 0},
		{"exp(NaN)", expSlice, nan, nan},
	}
	for _, tt := range tests {
		for _, fast := range []bool{true, false} {
			x := []float64{tt.x}
			tt.apply(fast, x)
			got := x[0]
			// fast exp(-Inf) is exp(-700), 0 once rounded to float32.
			g32 := float64(float32(got))
			ok := math.Float64bits(g32) == math.Float64bits(tt.want) || (math.IsNaN(g32) && math.IsNaN(tt.want))
			if !ok {
				t.Errorf("%s (fast=%v): got %v (float32 %v), want %v", tt.name, fast, got, g32, tt.want)
			}
		}
	}
}
