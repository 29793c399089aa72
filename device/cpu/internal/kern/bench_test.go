package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The benchmarks run one part on one core, as one thread of the CPU
// device's pool would. GB/s counts the bytes a kernel must read and write
// (each input and output element once, biases once per call), divided by
// the time per call; it compares kernels with memory bandwidth, not with
// each other's flops.

func randSlice[T Float](rng *rand.Rand, n int, scale float64) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = T(scale * (2*rng.Float64() - 1))
	}
	return s
}

func reportGBs(b *testing.B, bytes int) {
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// cellShapes are the benchmark shapes: a batch of 32 rows, hidden 256 and
// 512 (the sizes of the char-RNN examples).
var cellShapes = []struct{ rows, hidden int }{{32, 256}, {32, 512}}

func BenchmarkLSTMCell(b *testing.B) {
	for _, s := range cellShapes {
		b.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			bh := s.rows * s.hidden
			pre := randSlice[float32](rng, 4*bh, 3)
			bih := randSlice[float32](rng, 4*s.hidden, 0.1)
			bhh := randSlice[float32](rng, 4*s.hidden, 0.1)
			cPrev := randSlice[float32](rng, bh, 2)
			c, h, act := make([]float32, bh), make([]float32, bh), make([]float32, 4*bh)
			b.ReportAllocs()
			for b.Loop() {
				LSTMCell(s.hidden, pre, bih, bhh, cPrev, c, h, act)
			}
			// read pre, cPrev, biases; write c, h, act
			reportGBs(b, 4*(4*bh+bh+8*s.hidden+bh+bh+4*bh))
		})
	}
}

func BenchmarkLSTMCellGrad(b *testing.B) {
	for _, s := range cellShapes {
		b.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			bh := s.rows * s.hidden
			act := make([]float32, 4*bh)
			for i := range act {
				act[i] = float32(rng.Float64()) // gates in (0, 1); g would be in (-1, 1)
			}
			cPrev, c := randSlice[float32](rng, bh, 2), randSlice[float32](rng, bh, 2)
			dh, dc := randSlice[float32](rng, bh, 1), randSlice[float32](rng, bh, 1)
			dPre, dcPrev := make([]float32, 4*bh), make([]float32, bh)
			b.ReportAllocs()
			for b.Loop() {
				LSTMCellGrad(s.hidden, act, cPrev, c, dh, dc, dPre, dcPrev)
			}
			// read act, cPrev, c, dh, dc; write dPre, dcPrev
			reportGBs(b, 4*(4*bh+4*bh+4*bh+4*bh))
		})
	}
}

func BenchmarkGRUCell(b *testing.B) {
	for _, s := range cellShapes {
		b.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			bh := s.rows * s.hidden
			xPre, hPre := randSlice[float32](rng, 3*bh, 3), randSlice[float32](rng, 3*bh, 3)
			bih, bhh := randSlice[float32](rng, 3*s.hidden, 0.1), randSlice[float32](rng, 3*s.hidden, 0.1)
			hPrev := randSlice[float32](rng, bh, 1)
			h, act := make([]float32, bh), make([]float32, 4*bh)
			b.ReportAllocs()
			for b.Loop() {
				GRUCell(s.hidden, xPre, hPre, bih, bhh, hPrev, h, act)
			}
			// read xPre, hPre, hPrev, biases; write h, act
			reportGBs(b, 4*(3*bh+3*bh+bh+6*s.hidden+bh+4*bh))
		})
	}
}

func BenchmarkGRUCellGrad(b *testing.B) {
	for _, s := range cellShapes {
		b.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			bh := s.rows * s.hidden
			act := randSlice[float32](rng, 4*bh, 1)
			hPrev, dh := randSlice[float32](rng, bh, 1), randSlice[float32](rng, bh, 1)
			dxPre, dhPre, dhPrev := make([]float32, 3*bh), make([]float32, 3*bh), make([]float32, bh)
			b.ReportAllocs()
			for b.Loop() {
				GRUCellGrad(s.hidden, act, hPrev, dh, dxPre, dhPre, dhPrev, false)
			}
			// read act, hPrev, dh; write dxPre, dhPre, dhPrev
			reportGBs(b, 4*(4*bh+bh+bh+3*bh+3*bh+bh))
		})
	}
}

// BenchmarkSoftmaxCrossEntropy uses 2048 rows of 65 classes: a char-RNN
// batch of 32 sequences × 64 steps over a 65-character vocabulary (tiny
// Shakespeare).
func BenchmarkSoftmaxCrossEntropy(b *testing.B) {
	const rows, classes = 2048, 65
	rng := rand.New(rand.NewPCG(1, 2))
	logits := randSlice[float32](rng, rows*classes, 5)
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(rng.IntN(classes))
	}
	dLogits := make([]float32, rows*classes)
	b.ReportAllocs()
	for b.Loop() {
		SoftmaxCrossEntropy(classes, logits, targets, 1.0/rows, dLogits, false, 0, nil)
	}
	reportGBs(b, 4*(2*rows*classes+rows))
	b.ReportMetric(float64(rows*classes)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Melem/s")
}

func BenchmarkAdam(b *testing.B) {
	const n = 1_000_000
	rng := rand.New(rand.NewPCG(1, 2))
	param, grad := randSlice[float32](rng, n, 1), randSlice[float32](rng, n, 1)
	m, v := make([]float32, n), make([]float32, n)
	b.ReportAllocs()
	step := 0
	for b.Loop() {
		step++
		t := float64(step)
		Adam(1e-3, 0.9, 0.999, 1e-8, 0, false, math.Pow(0.9, t), math.Pow(0.999, t), NoClip[float32](), param, grad, m, v)
	}
	// read param, grad, m, v; write param, m, v
	reportGBs(b, 4*7*n)
}

// BenchmarkEmbeddingGrad scatters 2048 rows of dim 64 into a 65-row table
// (the char-RNN batch above), all columns in one part.
func BenchmarkEmbeddingGrad(b *testing.B) {
	const rows, dim, vocab = 2048, 64, 65
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	dOut := randSlice[float32](rng, rows*dim, 1)
	dTable := make([]float32, vocab*dim)
	b.ReportAllocs()
	for b.Loop() {
		EmbeddingGrad(dim, vocab, 0, dim, ids, dOut, dTable)
	}
	// read ids, dOut, and the table row; write the table row
	reportGBs(b, 4*rows+4*3*rows*dim)
}

// BenchmarkActivations compares the fast activations with the math
// package over 4096 arguments in [-8, 8] (each call first copies them into
// the work slice, 4096 float64s, which is part of the time).
func BenchmarkActivations(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, 4096)
	for i := range x {
		x[i] = 16*rng.Float64() - 8
	}
	w := make([]float64, len(x))
	fns := []struct {
		name string
		fast bool
		f    func(bool, []float64)
	}{
		{"sigmoid/fast", true, sigmoidSlice},
		{"sigmoid/math", false, sigmoidSlice},
		{"tanh/fast", true, tanhSlice},
		{"tanh/math", false, tanhSlice},
		{"exp/fast", true, expSlice},
		{"exp/math", false, expSlice},
	}
	for _, fn := range fns {
		b.Run(fn.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				copy(w, x)
				fn.f(fn.fast, w)
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/float64(len(x)), "ns/elem")
		})
	}
}
