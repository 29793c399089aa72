//go:build !amd64 || purego

package gemm

// Without the assembly kernels, useAsm is always false and these are never
// called; they exist so that kernel.go compiles the same on every
// architecture.

func kernel6x16(k int, a *float32, b *float32, ldb int, c *float32, ldc int, alpha float32, beta float32) {
	panic("gemm: assembly kernel called without assembly support")
}

func dotNT3x4(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha float32, beta float32) {
	panic("gemm: assembly kernel called without assembly support")
}

func dotNT1x8(k int, a *float32, b *float32, ldb int, c *float32, alpha float32, beta float32) {
	panic("gemm: assembly kernel called without assembly support")
}

func hasAVX2FMA() bool { return false }
