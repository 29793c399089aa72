package gemm

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
	"gorgonia.org/tensor"
)

// BLAS is gonum's pure-Go BLAS with Sgemm replaced by this package's. It
// satisfies tensor.BLAS, so float32 matrix products of gorgonia.org/tensor
// (MatMul, MatVecMul through Sgemm) run on it after
//
//	tensor.Use(gemm.BLAS{})
//
// Every other routine (Dgemm, Sgemv, ...) is gonum's. A user who prefers
// another BLAS (OpenBLAS through gonum's netlib bindings) can still install
// it with tensor.Use.
type BLAS struct {
	gonum.Implementation
}

var _ tensor.BLAS = BLAS{}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C with this package's Sgemm;
// its contract is gonum's (blas.Float32). blas.ConjTrans means blas.Trans
// for real matrices; any other value panics.
func (BLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	Sgemm(isTrans(tA), isTrans(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func isTrans(t blas.Transpose) bool {
	switch t {
	case blas.NoTrans:
		return false
	case blas.Trans, blas.ConjTrans:
		return true
	}
	panic("gemm: bad transpose")
}
