package kern

import (
	"math"
	"testing"
)

func TestEmbedding(t *testing.T) {
	t.Run("float64", testEmbedding[float64])
	t.Run("float32", testEmbedding[float32])
}

// testEmbedding checks what Embedding returns, the index of the first bad
// id or -1, which the device turns into device.ErrIndex; the gathered rows
// are checked by the conformance suite (Conformance/Embedding).
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
			if bad := Embedding(dim, vocab, table, tt.ids, out); bad != tt.bad {
				t.Errorf("bad = %d, want %d", bad, tt.bad)
			}
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

	// The sums are checked by the conformance suite
	// (Conformance/EmbeddingGrad); here, that the column parts the CPU
	// device splits the work into give the bits of one call over all
	// columns, and each reports the first bad id.
	want := append([]T(nil), table0...)
	if bad := EmbeddingGrad(dim, vocab, 0, dim, ids, dOut, want); bad != 2 {
		t.Errorf("all columns: bad = %d, want 2", bad)
	}
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

// TestSoftmaxCrossEntropy checks what the conformance suite
// (Conformance/SoftmaxCrossEntropy) cannot see: the float32 instance
// against the float64 one on the same inputs (Numerics: two roundings of
// the fast exp), the index of the first bad target, and that the loss
// without dLogits and with dLogits = logits has the same bits.
func TestSoftmaxCrossEntropy(t *testing.T) {
	const rows, classes = 6, 70 // 70 = one chunk of 64 and a remainder
	rng := newRand(22)
	logits := uniform(rng, rows*classes, 8)
	for k := range classes {
		logits[3*classes+k] += 1000 // a row that overflows without the max subtracted
	}
	logits = f32(logits)
	targets := []int32{3, 69, -1, 0, 70, 12}
	const scale = 1.0 / 4 // the mean over the 4 valid rows
	wantD := make([]float64, len(logits))
	wantLoss, _ := SoftmaxCrossEntropy(classes, logits, targets, scale, wantD, false, 0, nil)
	t.Run("float64", func(t *testing.T) {
		d := make([]float64, len(logits))
		loss, bad := SoftmaxCrossEntropy(classes, logits, targets, scale, d, false, 0, nil)
		if bad != 2 {
			t.Errorf("bad = %d, want 2", bad)
		}
		lossOnly, bad2 := SoftmaxCrossEntropy(classes, logits, targets, scale, nil, false, 0, nil)
		if lossOnly != loss || bad2 != bad {
			t.Errorf("without dLogits: loss %v, bad %d; want %v, %d", lossOnly, bad2, loss, bad)
		}
		alias := append([]float64(nil), logits...)
		lossAlias, _ := SoftmaxCrossEntropy(classes, alias, targets, scale, alias, false, 0, nil)
		if lossAlias != loss {
			t.Errorf("dLogits = logits: loss %v, want %v", lossAlias, loss)
		}
		checkEqual(t, "dLogits (aliased)", alias, d)
	})
	t.Run("float32", func(t *testing.T) {
		l32 := to[float32](logits)
		d := make([]float32, len(l32))
		loss, bad := SoftmaxCrossEntropy(classes, l32, targets, scale, d, false, 0, nil)
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
		lossAlias, _ := SoftmaxCrossEntropy(classes, alias, targets, scale, alias, false, 0, nil)
		if lossAlias != loss {
			t.Errorf("dLogits = logits: loss %v, want %v", lossAlias, loss)
		}
		checkEqual(t, "dLogits (aliased)", alias, d)
	})
}

// TestSoftmax checks the float32 instance against the float64 one (two
// roundings, as in SoftmaxCrossEntropy) and that probs = logits gives the
// same bits; the equation is checked by Conformance/Softmax.
func TestSoftmax(t *testing.T) {
	const rows, classes = 3, 70
	rng := newRand(23)
	logits := f32(uniform(rng, rows*classes, 10))
	for _, temp := range []float64{0, 1, 2.5, 0.3} {
		p := make([]float64, len(logits))
		Softmax(classes, logits, p, temp)
		alias := append([]float64(nil), logits...)
		Softmax(classes, alias, alias, temp)
		checkEqual(t, "probs (aliased)", alias, p)
		p32 := make([]float32, len(logits))
		Softmax(classes, to[float32](logits), p32, temp)
		checkULP32(t, "probs float32", p32, p, 1.5, 0)
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

// TestSeqPoolParts checks what the conformance suite (Conformance/SeqPool)
// cannot see: that the parts the CPU device splits SeqPool (by sequence)
// and SeqPoolGrad (by row of DY) into give the bits of one call over
// everything, and that each part of SeqPoolGrad reports the first bad
// ArgMax step among its rows, as an index into argmax.
func TestSeqPoolParts(t *testing.T) {
	t.Run("float64", testSeqPoolParts[float64])
	t.Run("float32", testSeqPoolParts[float32])
}

func testSeqPoolParts[T Float](t *testing.T) {
	const steps, batch, cols = 4, 5, 70 // 70 = one chunk of 64 and a remainder
	rng := newRand(24)
	y := to[T](uniform(rng, steps*batch*cols, 1))
	dOut := to[T](uniform(rng, batch*cols, 1))
	lengths := []int32{4, 1, 0, 3, 9}
	for _, takeMax := range []bool{false, true} {
		out, arg := make([]T, batch*cols), make([]int32, batch*cols)
		SeqPool(steps, batch, cols, cols, cols, 0, batch, takeMax, lengths, y, out, arg)
		parts, partArg := make([]T, batch*cols), make([]int32, batch*cols)
		for _, p := range [][2]int{{0, 2}, {2, 2}, {2, 5}} {
			SeqPool(steps, batch, cols, cols, cols, p[0], p[1], takeMax, lengths, y, parts, partArg)
		}
		checkEqual(t, "out in parts", parts, out)
		if takeMax {
			for i := range arg {
				if partArg[i] != arg[i] {
					t.Fatalf("argmax[%d] in parts = %d, want %d", i, partArg[i], arg[i])
				}
			}
			// Sequence 3 (3 steps) column 5 sent to step 3: bad, at
			// index 3·cols + 5, found by every part that holds one of
			// its rows (t < 3, rows t·batch + 3).
			arg[3*cols+5] = 3
		}
		dy := make([]T, steps*batch*cols)
		bad := SeqPoolGrad(steps, batch, cols, cols, cols, 0, steps*batch, takeMax, lengths, dOut, arg, dy)
		wantBad := -1
		if takeMax {
			wantBad = 3*cols + 5
		}
		if bad != wantBad {
			t.Errorf("max %v: bad = %d, want %d", takeMax, bad, wantBad)
		}
		partDY := make([]T, len(dy))
		for _, p := range [][2]int{{0, 4}, {4, 9}, {9, 20}} {
			b := SeqPoolGrad(steps, batch, cols, cols, cols, p[0], p[1], takeMax, lengths, dOut, arg, partDY)
			// Rows 3 and 8 are sequence 3's steps 0 and 1; row 13 its step 2.
			want := -1
			if takeMax {
				want = wantBad
			}
			if b != want {
				t.Errorf("max %v, rows %v: bad = %d, want %d", takeMax, p, b, want)
			}
		}
		checkEqual(t, "dy in parts", partDY, dy)
	}
}
