package kern

import (
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

func TestEmbedding(t *testing.T) {
	t.Run("float64", testEmbedding[float64])
	t.Run("float32", testEmbedding[float32])
}

func testEmbedding[T Float](t *testing.T) {
	const dim, vocab = 3, 5
	rng := newRand(20)
	table := to[T](uniform(rng, vocab*dim, 1))
	tests := []struct {
		name string
		ids  []int32
		bad  int
	}{
		{"valid", []int32{0, 4, 2, 2}, -1},
		{"negative", []int32{1, -1, 3, 7}, 1},
		{"vocab", []int32{5, 0, -2}, 0},
		{"empty", nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]T, len(tt.ids)*dim)
			for i := range out {
				out[i] = T(math.NaN()) // a bad id must overwrite with zeros
			}
			bad := Embedding(dim, vocab, table, tt.ids, out)
			if bad != tt.bad {
				t.Errorf("bad = %d, want %d", bad, tt.bad)
			}
			want := make([]T, len(tt.ids)*dim)
			for i, id := range tt.ids {
				if id >= 0 && id < vocab {
					for k := range dim {
						want[i*dim+k] = table[int(id)*dim+k]
					}
				}
			}
			checkEqual(t, "out", out, want)
		})
	}
}

func TestEmbeddingGrad(t *testing.T) {
	t.Run("float64", testEmbeddingGrad[float64])
	t.Run("float32", testEmbeddingGrad[float32])
}

func testEmbeddingGrad[T Float](t *testing.T) {
	const dim, vocab = 5, 4
	rng := newRand(21)
	// Repeated ids accumulate; -1 and 4 are out of range.
	ids := []int32{2, 0, -1, 2, 3, 4, 2}
	dOut := to[T](uniform(rng, len(ids)*dim, 1))
	table0 := to[T](uniform(rng, vocab*dim, 1))

	// Reference: dTable[ids[i]] += dOut[i] in index order, in T.
	want := append([]T(nil), table0...)
	for i, id := range ids {
		if id >= 0 && id < vocab {
			for k := range dim {
				want[int(id)*dim+k] += dOut[i*dim+k]
			}
		}
	}

	t.Run("all columns", func(t *testing.T) {
		dTable := append([]T(nil), table0...)
		if bad := EmbeddingGrad(dim, vocab, 0, dim, ids, dOut, dTable); bad != 2 {
			t.Errorf("bad = %d, want 2", bad)
		}
		checkEqual(t, "dTable", dTable, want)
	})
	t.Run("column parts", func(t *testing.T) {
		// Three parts as the CPU device would split dim = 5 over cores,
		// plus an empty one: each reports the bad id, and together they
		// write the same table bit for bit.
		dTable := append([]T(nil), table0...)
		for _, p := range [][2]int{{0, 2}, {2, 3}, {3, 5}, {5, 5}} {
			if bad := EmbeddingGrad(dim, vocab, p[0], p[1], ids, dOut, dTable); bad != 2 {
				t.Errorf("columns %v: bad = %d, want 2", p, bad)
			}
		}
		checkEqual(t, "dTable", dTable, want)
	})
}

// refSoftmaxCE is the float64 reference of device.SoftmaxCrossEntropy:
// -log softmax[t] = log Σ exp(x - m) - (x_t - m) with m the row maximum.
func refSoftmaxCE(classes int, logits []float64, targets []int32, scale float64) (loss float64, dLogits []float64) {
	dLogits = make([]float64, len(logits))
	for r, t := range targets {
		x := logits[r*classes : (r+1)*classes]
		if t < 0 || int(t) >= classes {
			continue
		}
		m := math.Inf(-1)
		for _, v := range x {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range x {
			s += math.Exp(v - m)
		}
		loss += math.Log(s) - (x[t] - m)
		for k, v := range x {
			p := math.Exp(v-m) / s
			if k == int(t) {
				p--
			}
			dLogits[r*classes+k] = scale * p
		}
	}
	return scale * loss, dLogits
}

func TestSoftmaxCrossEntropy(t *testing.T) {
	const rows, classes = 6, 70 // 70 = one chunk of 64 and a remainder
	rng := newRand(22)
	logits := uniform(rng, rows*classes, 8)
	for k := range classes {
		logits[3*classes+k] += 1000 // a row that overflows without the max subtracted
	}
	targets := []int32{3, 69, -1, 0, 70, 12}
	const scale = 1.0 / 4 // the mean over the 4 valid rows
	wantLoss, wantD := refSoftmaxCE(classes, logits, targets, scale)

	t.Run("float64", func(t *testing.T) {
		d := make([]float64, len(logits))
		for i := range d {
			d[i] = math.NaN() // rows with bad targets must be zeroed
		}
		loss, bad := SoftmaxCrossEntropy(classes, logits, targets, scale, d)
		if bad != 2 {
			t.Errorf("bad = %d, want 2", bad)
		}
		// Same formulas; the sums add in another order.
		checkClose(t, "loss", []float64{loss}, []float64{wantLoss}, 0, 1e-14)
		checkClose(t, "dLogits", d, wantD, 1e-16, 1e-13)

		lossOnly, bad2 := SoftmaxCrossEntropy(classes, logits, targets, scale, nil)
		if lossOnly != loss || bad2 != bad {
			t.Errorf("without dLogits: loss %v, bad %d; want %v, %d", lossOnly, bad2, loss, bad)
		}
		alias := append([]float64(nil), logits...)
		lossAlias, _ := SoftmaxCrossEntropy(classes, alias, targets, scale, alias)
		if lossAlias != loss {
			t.Errorf("dLogits = logits: loss %v, want %v", lossAlias, loss)
		}
		checkEqual(t, "dLogits (aliased)", alias, d)
	})
	t.Run("float32", func(t *testing.T) {
		l32 := to[float32](logits)
		wantLoss, wantD := refSoftmaxCE(classes, from(l32), targets, scale)
		d := make([]float32, len(l32))
		loss, bad := SoftmaxCrossEntropy(classes, l32, targets, scale, d)
		if bad != 2 {
			t.Errorf("bad = %d, want 2", bad)
		}
		// float64 sums of the fast exp (1e-10 relative).
		checkClose(t, "loss", []float64{loss}, []float64{wantLoss}, 0, 1e-9)
		// exp(x-m) rounded to float32, then times scale/s and rounded:
		// two roundings of half an ulp (the first relative to e, which
		// can be up to one ulp of the result), so ≤ 1.5 ulp.
		checkULP32(t, "dLogits", d, wantD, 1.5, 0)

		alias := append([]float32(nil), l32...)
		lossAlias, _ := SoftmaxCrossEntropy(classes, alias, targets, scale, alias)
		if lossAlias != loss {
			t.Errorf("dLogits = logits: loss %v, want %v", lossAlias, loss)
		}
		checkEqual(t, "dLogits (aliased)", alias, d)
	})
	t.Run("NaN", func(t *testing.T) {
		x := []float64{1, math.NaN(), 2}
		d := make([]float64, 3)
		loss, _ := SoftmaxCrossEntropy(3, x, []int32{0}, 1, d)
		if !math.IsNaN(loss) || !math.IsNaN(d[0]) {
			t.Errorf("NaN logit: loss %v, dLogits %v; want NaN", loss, d)
		}
	})
}

func refSoftmax(classes int, logits []float64, temperature float64) []float64 {
	p := make([]float64, len(logits))
	for r := 0; r < len(logits)/classes; r++ {
		x := logits[r*classes : (r+1)*classes]
		m := math.Inf(-1)
		for _, v := range x {
			m = math.Max(m, v/temperature)
		}
		var s float64
		for _, v := range x {
			s += math.Exp(v/temperature - m)
		}
		for k, v := range x {
			p[r*classes+k] = math.Exp(v/temperature-m) / s
		}
	}
	return p
}

func TestSoftmax(t *testing.T) {
	const rows, classes = 3, 70
	rng := newRand(23)
	logits := uniform(rng, rows*classes, 10)
	for _, temp := range []float64{0, 1, 2.5, 0.3} {
		refT := temp
		if refT == 0 {
			refT = 1
		}
		want := refSoftmax(classes, logits, refT)

		p := make([]float64, len(logits))
		Softmax(classes, logits, p, temp)
		checkClose(t, "probs", p, want, 1e-17, 1e-13)
		alias := append([]float64(nil), logits...)
		Softmax(classes, alias, alias, temp)
		checkEqual(t, "probs (aliased)", alias, p)

		l32 := to[float32](logits)
		want32 := refSoftmax(classes, from(l32), refT)
		p32 := make([]float32, len(l32))
		Softmax(classes, l32, p32, temp)
		// Two roundings as in SoftmaxCrossEntropy.
		checkULP32(t, "probs float32", p32, want32, 1.5, 0)
	}
}

func TestDropout(t *testing.T) {
	t.Run("float64", testDropout[float64])
	t.Run("float32", testDropout[float32])
}

func testDropout[T Float](t *testing.T) {
	const n = 100_000
	const seed, offset = 12345, 777
	rng := newRand(24)
	x := to[T](uniform(rng, n, 1))
	for _, p := range []float64{0, 0.1, 0.5, 0.9} {
		y, mask := make([]T, n), make([]T, n)
		Dropout(p, seed, offset, x, y, mask)
		keep := T(1 / (1 - p))
		kept := 0
		for i := range mask {
			switch mask[i] {
			case keep:
				kept++
			case 0:
			default:
				t.Fatalf("p=%v: mask[%d] = %v, want 0 or %v", p, i, mask[i], keep)
			}
			if (mask[i] != 0) != device.DropoutKeep(seed, offset+uint64(i), p) {
				t.Fatalf("p=%v: mask[%d] = %v disagrees with device.DropoutKeep", p, i, mask[i])
			}
			if y[i] != x[i]*mask[i] {
				t.Fatalf("p=%v: y[%d] = %v, want x·mask = %v", p, i, y[i], x[i]*mask[i])
			}
		}
		// The kept count is binomial(n, 1-p): within 4 standard deviations
		// sqrt(n·p·(1-p)) of n·(1-p).
		if sd := math.Sqrt(n * p * (1 - p)); math.Abs(float64(kept)-n*(1-p)) > 4*sd {
			t.Errorf("p=%v: kept %d of %d, want %v ± %.0f", p, kept, n, n*(1-p), 4*sd)
		}

		// A part starting at element 10 with offset+10 draws the tail.
		y2, mask2 := make([]T, n-10), make([]T, n-10)
		Dropout(p, seed, offset+10, x[10:], y2, mask2)
		checkEqual(t, "mask (offset)", mask2, mask[10:])
		checkEqual(t, "y (offset)", y2, y[10:])

		// y = x in place.
		xa := append([]T(nil), x...)
		mask3 := make([]T, n)
		Dropout(p, seed, offset, xa, xa, mask3)
		checkEqual(t, "y (aliased)", xa, y)
		checkEqual(t, "mask (aliased)", mask3, mask)
	}
}
