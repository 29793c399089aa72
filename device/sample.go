package device

import "math"

// SampleChunks is the number of chunks the Sample kernel sums its weights
// in (see Sample): the threads of one GPU block, each summing a chunk of
// consecutive classes, so the order of the sum, and every bit of it, is
// the same on every device.
const SampleChunks = 256

// maxInt32 is the largest id an Int32 holds.
const maxInt32 = math.MaxInt32

// validTemperature reports whether t is a temperature Sample takes: a
// finite number >= 0.
func validTemperature(t float64) bool { return t >= 0 && !math.IsInf(t, 1) }

// SampleUniform is the uniform number in [0, 1) that Sample draws row i
// of a call with, for counter = Counter + i: the (counter+1)-th output of
// the splitmix64 generator seeded with seed (Steele, Lea and Flood 2014;
// Vigna's splitmix64.c: the state advances by 0x9E3779B97F4A7C15 and is
// mixed by two xor-shift-multiplies), whose top 53 bits are read as a
// multiple of 2^-53. It is a counter-based generator: any draw can be made
// without the ones before it, so a device computes it where it samples.
func SampleUniform(seed, counter uint64) float64 {
	return float64(splitmix64(seed, counter)>>11) * 0x1p-53
}

// splitmix64 is the (counter+1)-th output of splitmix64 seeded with seed.
func splitmix64(seed, counter uint64) uint64 {
	z := seed + (counter+1)*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// The constants of SampleExp, as hexadecimal literals so that the CUDA
// source (cuda/kernels/nn.cu, gc_sample_exp) spells the same doubles:
// log2(e), ln 2 split in a high part with 32 significant bits (k·ln2Hi is
// exact for |k| < 2^21) and the rest (fdlibm's ln2_hi and ln2_lo), and the
// Taylor coefficients 1/n! rounded to float64.
const (
	sampleLog2E = 0x1.71547652b82fep+00
	sampleLn2Hi = 0x1.62e42feep-01
	sampleLn2Lo = 0x1.a39ef35793c76p-33
)

var sampleExpCoeff = [14]float64{
	0x1p+00, 0x1p+00, 0x1p-01, 0x1.5555555555555p-03, 0x1.5555555555555p-05,
	0x1.1111111111111p-07, 0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13, 0x1.a01a01a01a01ap-16,
	0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22, 0x1.ae64567f544e4p-26, 0x1.1eed8eff8d898p-29,
	0x1.6124613a86d09p-33,
}

// SampleExp is the exponential Sample weighs classes with: e^x to within
// a few units in the last place, computed by operations that every device
// rounds alike, so that its bits are the same on every device (a
// library's exp, on the host or on a GPU, may differ in the last bit, and
// a draw that falls between two such results would pick different
// tokens). With k = round-half-even(x·log2 e) and r = (x − k·ln2Hi) −
// k·ln2Lo, |r| ≤ 0.35, it is the Horner sum of the Taylor series of e^r to
// degree 13 (truncation error below 2^-56) times 2^k, every product and
// sum rounded to float64 on its own (no fused multiply-add). x < -708,
// where e^x is below the smallest normal float64, gives 0, as does NaN;
// x > 709 gives +Inf. Sample calls it with x ≤ 0 only.
func SampleExp(x float64) float64 {
	if !(x >= -708) {
		return 0
	}
	if x > 709 {
		return math.Inf(1)
	}
	// Each conversion to float64 rounds the product before the sum: the
	// Go specification lets a compiler fuse x*y + z otherwise.
	k := math.RoundToEven(float64(x * sampleLog2E))
	r := float64(x-float64(k*sampleLn2Hi)) - float64(k*sampleLn2Lo)
	p := sampleExpCoeff[13]
	for n := 12; n >= 0; n-- {
		p = float64(p*r) + sampleExpCoeff[n]
	}
	return float64(p * math.Float64frombits(uint64(int64(k)+1023)<<52))
}
