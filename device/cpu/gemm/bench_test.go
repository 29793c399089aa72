package gemm

import (
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// BenchmarkSgemm times the char-RNN products (lstmShapes) and a 1024³
// square product with this package's Sgemm ("ours"), with its pure-Go
// kernels ("ours-purego": what CPUs without AVX2/FMA and other
// architectures get) and with gonum's Sgemm ("gonum", tensor's default
// BLAS), reporting GFLOP/s = 2·m·n·k per product. Compare the rows of one
// run; the machine's load moves all of them.
//
//	go test -run '^$' -bench Sgemm -count 3 ./device/cpu/gemm/
func BenchmarkSgemm(b *testing.B) {
	tr := func(t bool) blas.Transpose {
		if t {
			return blas.Trans
		}
		return blas.NoTrans
	}
	impls := []struct {
		name   string
		purego bool // run our pure-Go kernels even where the assembly ones run
		gemm   func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	}{
		{"ours", false, Sgemm},
		{"ours-purego", true, Sgemm},
		{"gonum", false, func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
			gonum.Implementation{}.Sgemm(tr(tA), tr(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		}},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			saved := useAsm
			useAsm = useAsm && !impl.purego
			b.Cleanup(func() { useAsm = saved })
			if impl.name == "ours" && !useAsm {
				b.Log("no AVX2/FMA here: ours runs the pure-Go kernels")
			}
			for _, s := range benchShapes() {
				b.Run(s.name, func(b *testing.B) {
					p := benchProblem(s)
					b.ReportAllocs()
					for b.Loop() {
						impl.gemm(s.transA, s.transB, s.m, s.n, s.k, 1, p.a, p.lda, p.b, p.ldb, 0, p.c, p.ldc)
					}
					flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
					b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		})
	}
}

// BenchmarkSgemmSerial times the same products on one goroutine (no
// worker pool): the efficiency of the blocking and kernels per core.
func BenchmarkSgemmSerial(b *testing.B) {
	for _, s := range benchShapes() {
		b.Run(s.name, func(b *testing.B) {
			p := benchProblem(s)
			ws := new(workspace)
			b.ReportAllocs()
			for b.Loop() {
				ws.compute(&p)
			}
			flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// benchShapes are lstmShapes, named "lstm-...", and a 1024³ square.
func benchShapes() []shape {
	var shapes []shape
	for _, s := range lstmShapes {
		s.name = "lstm-" + s.name
		shapes = append(shapes, s)
	}
	return append(shapes, shape{"square-1024", false, false, 1024, 1024, 1024})
}

// benchProblem returns s with random operands, alpha 1 and beta 0, and
// leading dimensions equal to the stored widths.
func benchProblem(s shape) problem {
	rng := rand.New(rand.NewPCG(1, 2))
	lda, ldb := s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	// m·k and k·n values whichever way A and B are stored.
	return problem{transA: s.transA, transB: s.transB, m: s.m, n: s.n, k: s.k, alpha: 1,
		a: matrix(rng, s.m, s.k, s.k), b: matrix(rng, s.k, s.n, s.n), c: make([]float32, s.m*s.n),
		lda: lda, ldb: ldb, ldc: s.n}
}

// BenchmarkKernel times the register-tile kernels alone on operands in L1
// (the dot kernels in whichever form this CPU runs):
// the ceiling for one core that the blocked products approach.
func BenchmarkKernel(b *testing.B) {
	const k = 256
	rng := rand.New(rand.NewPCG(1, 2))
	a, bp, c := matrix(rng, 1, mr*k, mr*k), matrix(rng, 1, nr*k, nr*k), make([]float32, mr*nr)
	for _, asm := range []bool{true, false} {
		name := "6x16/asm"
		if !asm {
			name = "6x16/go"
		}
		b.Run(name, func(b *testing.B) {
			saved := useAsm
			useAsm = asm && useAsm
			b.Cleanup(func() { useAsm = saved })
			for b.Loop() {
				microKernel(k, a, bp, nr, c, nr, 1, 0)
			}
			b.ReportMetric(2*mr*nr*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	b.Run("3x4", func(b *testing.B) {
		for b.Loop() {
			dot3x4(k, a, k, bp, k, c, 4, 1, 0)
		}
		b.ReportMetric(2*3*4*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("1x8", func(b *testing.B) {
		for b.Loop() {
			dot1x8(k, a, bp, k, c, 1, 0)
		}
		b.ReportMetric(2*8*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
