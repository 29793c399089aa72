package device

import (
	"math"
	"math/big"
	"testing"
)

// TestSplitmix64 checks the generator against the published first outputs
// of Vigna's splitmix64.c seeded with 0 (the test vectors other ports,
// Rust's rand_xoshiro among them, check too).
func TestSplitmix64(t *testing.T) {
	for i, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f, 0xf88bb8a8724c81ec} {
		if got := splitmix64(0, uint64(i)); got != want {
			t.Errorf("output %d of splitmix64 seeded with 0: got %#x, want %#x", i+1, got, want)
		}
		if got, want := SampleUniform(0, uint64(i)), float64(want>>11)/(1<<53); got != want {
			t.Errorf("SampleUniform(0, %d) = %v, want %v", i, got, want)
		}
	}
	// Counters are independent of each other: the draw for a counter
	// needs none before it, and seeds give other sequences.
	if SampleUniform(1, 5) == SampleUniform(2, 5) || SampleUniform(1, 5) == SampleUniform(1, 6) {
		t.Error("two seeds or two counters gave the same uniform")
	}
	for _, c := range []uint64{0, 1, math.MaxUint64} {
		if u := SampleUniform(7, c); !(u >= 0 && u < 1) {
			t.Errorf("SampleUniform(7, %d) = %v, outside [0, 1)", c, u)
		}
	}
}

// TestSampleExpConstants checks the constants against their definitions:
// 1/n! and log2(e) correctly rounded (math/big), and ln2Hi + ln2Lo = ln 2
// to float64's precision.
func TestSampleExpConstants(t *testing.T) {
	f := new(big.Int).SetInt64(1)
	for n, c := range sampleExpCoeff {
		if n > 0 {
			f.Mul(f, big.NewInt(int64(n)))
		}
		want, _ := new(big.Rat).SetFrac(big.NewInt(1), f).Float64()
		if c != want {
			t.Errorf("coefficient %d: got %v, want 1/%d! = %v", n, c, n, want)
		}
	}
	// As float64 values: the constants themselves are exact.
	log2e, ln2, hi, lo := float64(sampleLog2E), float64(math.Ln2), float64(sampleLn2Hi), float64(sampleLn2Lo)
	if log2e != math.Log2E {
		t.Errorf("log2(e): got %v, want %v", log2e, math.Log2E)
	}
	if hi+lo != ln2 || hi == ln2 {
		t.Errorf("ln2Hi + ln2Lo = %v + %v, want ln 2 = %v split in two", hi, lo, ln2)
	}
	// k·ln2Hi must be exact for every k the range reduction meets
	// (|k| ≤ 1023): ln2Hi has at most 53 - 11 significant bits.
	if m := math.Float64bits(sampleLn2Hi) & (1<<52 - 1); m&(1<<11-1) != 0 {
		t.Errorf("ln2Hi = %#x has more than 42 significant bits", m)
	}
}

// TestSampleExp checks SampleExp against math.Exp: within 4 units in the
// last place over Sample's range (the Horner sum of 14 terms rounds 13
// times; measured: at most 2), exact at 0, and 0 below -708.
func TestSampleExp(t *testing.T) {
	worst := 0.0
	for i := 0; i <= 200000; i++ {
		x := -708 * float64(i) / 200000
		got, want := SampleExp(x), math.Exp(x)
		ulps := math.Abs(got-want) / (math.Nextafter(want, math.Inf(1)) - want)
		worst = max(worst, ulps)
	}
	t.Logf("worst error over [-708, 0]: %.2f ulp", worst)
	if !(worst <= 4) { // a NaN too
		t.Errorf("SampleExp is %.2f ulp from math.Exp, want at most 4", worst)
	}
	for _, c := range []struct{ x, want float64 }{
		{0, 1}, {math.Copysign(0, -1), 1}, {-708.0001, 0}, {math.Inf(-1), 0}, {math.NaN(), 0}, {710, math.Inf(1)},
	} {
		if got := SampleExp(c.x); got != c.want {
			t.Errorf("SampleExp(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	// Monotone, as a weight must be: a larger logit never weighs less.
	prev := 0.0
	for x := -50.0; x <= 0; x += 1.0 / 1024 {
		if e := SampleExp(x); e < prev {
			t.Fatalf("SampleExp(%v) = %v < SampleExp of the point before, %v", x, e, prev)
		} else {
			prev = e
		}
	}
}
