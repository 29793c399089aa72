//go:build amd64 && !purego

package gemm

// The assembly kernels in kernel_amd64.s. They read and write through raw
// pointers: callers (kernel.go) check with slice indexing that every element
// a kernel touches is inside its slice before calling.

//go:noescape
func kernel6x16(k int, a *float32, b *float32, ldb int, c *float32, ldc int, alpha float32, beta float32)

//go:noescape
func dotNT3x4(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha float32, beta float32)

//go:noescape
func dotNT1x8(k int, a *float32, b *float32, ldb int, c *float32, alpha float32, beta float32)

func cpuid(eaxArg uint32, ecxArg uint32) (eax uint32, ebx uint32, ecx uint32, edx uint32)

func xgetbv() (eax uint32, edx uint32)

// hasAVX2FMA reports whether the CPU and the operating system support the
// AVX2 and FMA instructions the kernels use: CPUID.1:ECX has FMA (bit 12),
// OSXSAVE (27) and AVX (28), XCR0 has the XMM and YMM state enabled (bits 1
// and 2), and CPUID.(7,0):EBX has AVX2 (bit 5).
func hasAVX2FMA() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&0b110 != 0b110 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const avx2 = 1 << 5
	return ebx7&avx2 != 0
}
