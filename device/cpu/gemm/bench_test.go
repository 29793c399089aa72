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
	type shape struct {
		name           string
		transA, transB bool
		m, n, k        int
	}
	var shapes []shape
	for _, s := range lstmShapes {
		shapes = append(shapes, shape{"lstm-" + s.name, s.transA, s.transB, s.m, s.n, s.k})
	}
	shapes = append(shapes, shape{"square-1024", false, false, 1024, 1024, 1024})

	tr := func(t bool) blas.Transpose {
		if t {
			return blas.Trans
		}
		return blas.NoTrans
	}
	impls := []struct {
		name string
		asm  bool
		gemm func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	}{
		{"ours", true, Sgemm},
		{"ours-purego", false, Sgemm},
		{"gonum", true, func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
			gonum.Implementation{}.Sgemm(tr(tA), tr(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		}},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			if impl.asm && !hasAVX2FMA() && impl.name == "ours" {
				b.Log("no AVX2/FMA on this machine: ours runs the pure-Go kernels")
			}
			saved := useAsm
			useAsm = impl.asm && useAsm
			b.Cleanup(func() { useAsm = saved })
			for _, s := range shapes {
				b.Run(s.name, func(b *testing.B) {
					rng := rand.New(rand.NewPCG(1, 2))
					lda, ldb := s.k, s.n
					if s.transA {
						lda = s.m
					}
					if s.transB {
						ldb = s.k
					}
					a, bm := matrix(rng, s.m, s.k, s.k), matrix(rng, s.k, s.n, s.n)
					c := make([]float32, s.m*s.n)
					b.ReportAllocs()
					for b.Loop() {
						impl.gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n)
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
	shapes := append(lstmShapes[:len(lstmShapes):len(lstmShapes)], struct {
		name           string
		transA, transB bool
		m, n, k        int
	}{"square-1024", false, false, 1024, 1024, 1024})
	for _, s := range shapes {
		b.Run(s.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			lda, ldb := s.k, s.n
			if s.transA {
				lda = s.m
			}
			if s.transB {
				ldb = s.k
			}
			p := problem{transA: s.transA, transB: s.transB, m: s.m, n: s.n, k: s.k, alpha: 1,
				a: matrix(rng, s.m, s.k, s.k), b: matrix(rng, s.k, s.n, s.n), c: make([]float32, s.m*s.n),
				lda: lda, ldb: ldb, ldc: s.n}
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
