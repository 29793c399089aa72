package devicetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// The suite's references are checked here without a device: the backward
// references against central finite differences of the forward ones, the
// optimizers against hand-computed steps, and the comparison helpers
// against failures they must report.

func randSlice(r *rand.Rand, n int, scale float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = scale * (2*r.Float64() - 1)
	}
	return x
}

// fd is the central difference of f with respect to x[i].
func fd(f func() float64, x []float64, i int) float64 {
	const h = 1e-6
	old := x[i]
	x[i] = old + h
	up := f()
	x[i] = old - h
	down := f()
	x[i] = old
	return (up - down) / (2 * h)
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func checkFD(t *testing.T, what string, f func() float64, x, grad []float64) {
	t.Helper()
	for i := range x {
		want := fd(f, x, i)
		if !(math.Abs(grad[i]-want) <= 1e-6*(1+math.Abs(want))) {
			t.Errorf("%s[%d]: reference gradient %v, finite difference %v", what, i, grad[i], want)
		}
	}
}

func TestLSTMReferenceGradient(t *testing.T) {
	const batch, hidden = 2, 3
	r := rand.New(rand.NewPCG(1, 2))
	pre := randSlice(r, 4*batch*hidden, 2)
	cPrev := randSlice(r, batch*hidden, 1.5)
	bih, bhh := randSlice(r, 4*hidden, 1), randSlice(r, 4*hidden, 1)
	dh, dc := randSlice(r, batch*hidden, 1), randSlice(r, batch*hidden, 1)
	loss := func() float64 {
		_, c, h := refLSTMCell(batch, hidden, pre, bih, bhh, cPrev)
		return dot(dh, h) + dot(dc, c)
	}
	act, c, _ := refLSTMCell(batch, hidden, pre, bih, bhh, cPrev)
	dPre, dCPrev := refLSTMCellGrad(batch, hidden, act, cPrev, c, dh, dc)
	checkFD(t, "dPre", loss, pre, dPre)
	checkFD(t, "dCPrev", loss, cPrev, dCPrev)
	// DPre is the gradient of either bias, summed over the batch.
	dBias := make([]float64, 4*hidden)
	for b := 0; b < batch; b++ {
		for j := range dBias {
			dBias[j] += dPre[b*4*hidden+j]
		}
	}
	checkFD(t, "dBiasIH", loss, bih, dBias)
	checkFD(t, "dBiasHH", loss, bhh, dBias)
}

func TestGRUReferenceGradient(t *testing.T) {
	const batch, hidden = 2, 3
	r := rand.New(rand.NewPCG(3, 4))
	xPre, hPre := randSlice(r, 3*batch*hidden, 2), randSlice(r, 3*batch*hidden, 2)
	bih, bhh := randSlice(r, 3*hidden, 1), randSlice(r, 3*hidden, 1)
	hPrev := randSlice(r, batch*hidden, 1)
	dh := randSlice(r, batch*hidden, 1)
	loss := func() float64 {
		_, h := refGRUCell(batch, hidden, xPre, hPre, bih, bhh, hPrev)
		return dot(dh, h)
	}
	act, _ := refGRUCell(batch, hidden, xPre, hPre, bih, bhh, hPrev)
	dx, dhp, dhPrev := refGRUCellGrad(batch, hidden, act, hPrev, dh)
	checkFD(t, "dXPre", loss, xPre, dx)
	checkFD(t, "dHPre", loss, hPre, dhp)
	// With XPre and HPre held fixed, only the direct part remains.
	checkFD(t, "dHPrev", loss, hPrev, dhPrev)
	sum := func(g []float64) []float64 {
		s := make([]float64, 3*hidden)
		for b := 0; b < batch; b++ {
			for j := range s {
				s[j] += g[b*3*hidden+j]
			}
		}
		return s
	}
	checkFD(t, "dBiasIH", loss, bih, sum(dx))
	checkFD(t, "dBiasHH", loss, bhh, sum(dhp))
}

func TestSoftmaxCrossEntropyReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	logits := randSlice(r, 7, 3)
	target := int32(4)
	loss := func() float64 { l, _, _ := ceRow(logits, target); return l }
	_, _, d := ceRow(logits, target)
	checkFD(t, "dLogits", loss, logits, d)
	// Shifting every logit changes nothing; 1000 is as good as 0.
	l0, _, _ := ceRow([]float64{1, 2, 3}, 0)
	l1, _, _ := ceRow([]float64{1001, 1002, 1003}, 0)
	if want := math.Log(math.Exp(1)+math.Exp(2)+math.Exp(3)) - 1; !(math.Abs(l0-want) <= 1e-15) || !(math.Abs(l1-want) <= 1e-12) {
		t.Errorf("cross-entropy of [1 2 3] and [1001 1002 1003] at 0 = %v, %v; want %v", l0, l1, want)
	}
	p := refSoftmax(1, 3, []float64{0, math.Log(2), math.Log(4)}, 0.5)
	// Temperature 0.5 squares the odds 1:2:4 to 1:4:16.
	for i, want := range []float64{1.0 / 21, 4.0 / 21, 16.0 / 21} {
		if !(math.Abs(p[i]-want) <= 1e-15) {
			t.Errorf("softmax at T=0.5 [%d] = %v, want %v", i, p[i], want)
		}
	}
}

func TestOptimizerReferences(t *testing.T) {
	// SGD with momentum 0.9, dampening 0.5, lr 0.1, on one parameter 1
	// with gradients 1 then 2: v1 = 1, p1 = 0.9; v2 = 0.9 + 0.5·2 = 1.9,
	// p2 = 0.9 - 0.19 = 0.71. Nesterov from v1 = 1: g' = 1 + 0.9 = 1.9.
	s := newSGDState([]float64{1})
	s.velocity[0] = math.NaN()
	a := device.SGD{LR: 0.1, Momentum: 0.9, Dampening: 0.5, Step: 1}
	refSGD(a, s, []float64{1})
	a.Step = 2
	refSGD(a, s, []float64{2})
	if !(math.Abs(s.param[0]-0.71) <= 1e-15) || !(math.Abs(s.velocity[0]-1.9) <= 1e-15) {
		t.Errorf("SGD reference: param %v, velocity %v; want 0.71, 1.9", s.param[0], s.velocity[0])
	}
	s = newSGDState([]float64{1})
	refSGD(device.SGD{LR: 0.1, Momentum: 0.9, Nesterov: true, Step: 1}, s, []float64{1})
	if !(math.Abs(s.param[0]-0.81) <= 1e-15) {
		t.Errorf("Nesterov SGD reference: param %v, want 0.81", s.param[0])
	}
	// Adam's first step moves every parameter by lr·sign(g) when Eps is
	// negligible; AdamW first shrinks it by 1 - lr·wd.
	as := newAdamState([]float64{1, 1})
	refAdam(device.Adam{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-12, WeightDecay: 0.5, Decoupled: true, Step: 1}, as, []float64{3, -0.2})
	if want := []float64{0.995 - 0.01, 0.995 + 0.01}; !(math.Abs(as.param[0]-want[0]) <= 1e-12) || !(math.Abs(as.param[1]-want[1]) <= 1e-12) {
		t.Errorf("AdamW reference: params %v, want %v", as.param, want)
	}
	// RMSprop's first step divides g by sqrt(1-alpha)·|g| + eps.
	rs := newRMSpropState([]float64{1})
	refRMSprop(device.RMSprop{LR: 0.01, Alpha: 0.99, Eps: 0.1}, rs, []float64{2})
	if want := 1 - 0.01*2/(0.1*2+0.1); !(math.Abs(rs.param[0]-want) <= 1e-15) {
		t.Errorf("RMSprop reference: param %v, want %v", rs.param[0], want)
	}
	// Centered: sqrt(0.01·4 - 0.02²) = sqrt(0.0396).
	rs = newRMSpropState([]float64{1})
	refRMSprop(device.RMSprop{LR: 0.01, Alpha: 0.99, Eps: 0.1, Centered: true}, rs, []float64{2})
	if want := 1 - 0.01*2/(math.Sqrt(0.0396)+0.1); !(math.Abs(rs.param[0]-want) <= 1e-15) {
		t.Errorf("centered RMSprop reference: param %v, want %v", rs.param[0], want)
	}
}

func TestGemmReference(t *testing.T) {
	// [1 2; 3 4]ᵀ · [5 6; 7 8] = [1·5+3·7 1·6+3·8; 2·5+4·7 2·6+4·8] = [26 30; 38 44],
	// stored with LdC 3 so the third column is a gap that stays.
	g := device.Gemm{TransA: true, M: 2, N: 2, K: 2, Alpha: 1, Beta: 1, LdC: 3}
	c, mag := refGemm(g, []float64{1, 2, 3, 4}, []float64{5, 6, 7, 8}, []float64{1, 1, -9, 1, 1})
	want := []float64{27, 31, -9, 39, 45}
	for i := range want {
		if c[i] != want[i] {
			t.Fatalf("refGemm = %v, want %v", c, want)
		}
	}
	if mag[2] != 0 || mag[0] != 27 {
		t.Errorf("refGemm magnitudes = %v, want 0 in the gap and 27 at 0", mag)
	}
}

func TestGatherSeqReference(t *testing.T) {
	// T = 2, B = 3, one column, X's rows holding 10·t + b. Index (2, 0, 9):
	// sequence 2 of X, sequence 0, and a bad index; lengths (2, 1, 2).
	// Y's rows are LdY = 2 apart in a Y of -1s, the gaps untouched:
	// Y[0] = (x[0,2], x[0,0], 0) = (2, 0, 0) and Y[1] = (x[1,2], 0 (past
	// length 1), 0) = (12, 0, 0).
	x := []float64{0, 1, 2, 10, 11, 12}
	got := refGatherSeq(2, 3, 1, 1, 2, []int32{2, 0, 9}, []int32{2, 1, 2}, x, constant(12, -1))
	checkExact(t, "refGatherSeq", got, []float64{2, -1, 0, -1, 0, -1, 12, -1, 0, -1, 0, -1})
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.failed = append(r.failed, describe(format, args...))
}

func TestComparisons(t *testing.T) {
	tol := PointwiseTolerance(device.Float32)
	cases := []struct {
		name      string
		got, want []float64
		pass      bool
	}{
		{"equal", []float64{1, 2}, []float64{1, 2}, true},
		{"within", []float64{1 + 5e-6, 2}, []float64{1, 2}, true},
		{"beyond", []float64{1, 2.001}, []float64{1, 2}, false},
		{"NaN for a number", []float64{math.NaN()}, []float64{1}, false},
		{"NaN for NaN", []float64{math.NaN()}, []float64{math.NaN()}, true},
		{"number for NaN", []float64{0}, []float64{math.NaN()}, false},
		{"infinity for infinity", []float64{math.Inf(1)}, []float64{math.Inf(1)}, true},
		{"wrong infinity", []float64{math.Inf(-1)}, []float64{math.Inf(1)}, false},
		{"length", []float64{1}, []float64{1, 2}, false},
	}
	for _, c := range cases {
		r := &recorder{TB: t}
		if got := checkClose(r, "x", c.got, c.want, nil, tol); got != c.pass || (len(r.failed) == 0) != c.pass {
			t.Errorf("%s: checkClose = %v with failures %q, want %v", c.name, got, r.failed, c.pass)
		}
	}
	r := &recorder{TB: t}
	checkClose(r, "x", []float64{0, 1.5, 0}, []float64{0, 1, 0}, nil, tol)
	if len(r.failed) != 1 || r.failed[0] != "x[1]: got 1.5, want 1 (difference 0.5, allowed 2e-05 at magnitude 1; 1 of 3 elements out of tolerance)" {
		t.Errorf("failure message = %q", r.failed)
	}
	// A sum's bound is relative to its terms: 1e8 - 1e8 + 1 may be off by
	// far more than 1e-5 · 1 in float32.
	if !checkClose(t, "sum", []float64{1.5}, []float64{1}, []float64{2e8 + 1}, SumTolerance(device.Float32, 3)) {
		t.Errorf("a sum with cancelling terms failed a bound relative to its terms")
	}
	if got := SumTolerance(device.Float64, 1<<20).Rel; got > 1e-12 || got < 1e-14 {
		t.Errorf("SumTolerance(Float64, 2^20).Rel = %v, want between 1e-14 and 1e-12", got)
	}
}

func TestSeqPoolReference(t *testing.T) {
	// T = 3, B = 2, one column, Y's rows holding 10·t + b with ties at
	// sequence 1 (steps 1 and 2 both 11) and Out's rows LdOut = 2 apart in
	// an Out of -1s. Lengths (2, 5): sequence 0 has steps 0 and 1,
	// sequence 1 all three (5 counts as T). Means (0+10)/2 = 5 and
	// (1+11+11)/3; maxima 10 at step 1 and 11 at step 1, the first of the
	// tie.
	y := []float64{0, 1, 10, 11, 20, 11}
	mean, _, _ := refSeqPool(3, 2, 1, 1, 2, false, []int32{2, 5}, y, constant(4, -1))
	checkExact(t, "mean", mean, []float64{5, -1, 23.0 / 3, -1})
	mx, _, arg := refSeqPool(3, 2, 1, 1, 2, true, []int32{2, 5}, y, constant(4, -1))
	checkExact(t, "max", mx, []float64{10, -1, 11, -1})
	checkExact(t, "argmax", int32s(arg), []float64{1, 1})
	// An empty sequence (length 0) pools to 0 at step -1; a NaN wins.
	mx, _, arg = refSeqPool(2, 2, 1, 1, 1, true, []int32{0, 2}, []float64{5, 1, 6, math.NaN()}, constant(2, -1))
	checkExact(t, "max with NaN", mx, []float64{0, math.NaN()})
	checkExact(t, "argmax with NaN", int32s(arg), []float64{-1, 1})

	// The gradients, DOut (3, 6): the mean's 3/2 at sequence 0's two
	// steps and 6/3 at all three of sequence 1's, zero at the padded step
	// (2, 0); the max's at the ArgMax steps (1, 2) alone.
	dy, bad := refSeqPoolGrad(3, 2, 1, 1, 1, false, []int32{2, 5}, []float64{3, 6}, nil, constant(6, -1))
	checkExact(t, "mean grad", dy, []float64{1.5, 2, 1.5, 2, 0, 2})
	if bad {
		t.Error("mean grad: bad step reported")
	}
	dy, bad = refSeqPoolGrad(3, 2, 1, 1, 1, true, []int32{2, 5}, []float64{3, 6}, []int32{1, 2}, constant(6, -1))
	checkExact(t, "max grad", dy, []float64{0, 0, 3, 0, 0, 6})
	if bad {
		t.Error("max grad: bad step reported")
	}
	// Step 2 of a sequence of 2 steps is out of range: no gradient.
	dy, bad = refSeqPoolGrad(3, 2, 1, 1, 1, true, []int32{2, 5}, []float64{3, 6}, []int32{2, 0}, constant(6, -1))
	checkExact(t, "max grad, bad step", dy, []float64{0, 6, 0, 0, 0, 0})
	if !bad {
		t.Error("max grad: a step past the sequence was not reported")
	}
}
