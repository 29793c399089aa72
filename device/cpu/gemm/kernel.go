package gemm

// Register tile of the packed path: the micro-kernel computes mr rows by nr
// columns of C. 6×16 float32 is twelve 8-lane accumulators, leaving four of
// the sixteen AVX2 registers for two vectors of B and one broadcast of A;
// twelve independent FMA chains cover the FMA latency (4 cycles) times the
// two FMA pipes with room to spare.
const (
	mr = 6
	nr = 16
)

// useAsm selects the assembly kernels. It is set once from the CPU's
// features; tests flip it to run the pure-Go kernels on the same inputs.
// It must not change while a product is running.
var useAsm = hasAVX2FMA()

// microKernel computes C[mr×nr] = alpha·A·B + beta·C (beta == 0: C is not
// read) where a holds k steps of mr packed A values (a[p*mr+i]) and b holds k
// rows of nr values at stride ldb: a packed panel (ldb = nr) or, for an
// untransposed B, the matrix itself.
func microKernel(k int, a, b []float32, ldb int, c []float32, ldc int, alpha, beta float32) {
	// Bounds: every element the kernel touches, so the assembly is memory safe.
	_ = a[k*mr-1]
	_ = b[(k-1)*ldb+nr-1]
	_ = c[(mr-1)*ldc+nr-1]
	if useAsm {
		kernel6x16(k, &a[0], &b[0], ldb, &c[0], ldc, alpha, beta)
		return
	}
	kernel6x16Go(k, a, b, ldb, c, ldc, alpha, beta)
}

// dot3x4 computes C[3×4] = alpha·A·Bᵀ + beta·C where A is 3 rows and B is 4
// rows of k contiguous values, at strides lda and ldb.
func dot3x4(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32) {
	_ = a[2*lda+k-1]
	_ = b[3*ldb+k-1]
	_ = c[2*ldc+3]
	if useAsm {
		dotNT3x4(k, &a[0], lda, &b[0], ldb, &c[0], ldc, alpha, beta)
		return
	}
	dot3x4Go(k, a, lda, b, ldb, c, ldc, alpha, beta)
}

// dot1x8 computes c[0:8] = alpha·(a·b_j for the 8 rows b_j of B) + beta·c
// where a and each row of B hold k contiguous values and B's rows are ldb
// apart.
func dot1x8(k int, a []float32, b []float32, ldb int, c []float32, alpha, beta float32) {
	_ = a[k-1]
	_ = b[7*ldb+k-1]
	_ = c[7]
	if useAsm {
		dotNT1x8(k, &a[0], &b[0], ldb, &c[0], alpha, beta)
		return
	}
	dot1x8Go(k, a, b, ldb, c, alpha, beta)
}

// kernel6x16Go is the portable micro-kernel: the same contract as
// microKernel, used on CPUs without AVX2 and FMA and on other architectures.
// It walks the tile in 2×4 blocks whose eight sums the compiler keeps in
// registers (a whole 6×16 tile in an array would live in memory).
func kernel6x16Go(k int, a, b []float32, ldb int, c []float32, ldc int, alpha, beta float32) {
	a = a[:k*mr]
	b = b[:(k-1)*ldb+nr]
	var acc [mr * nr]float32
	for i := 0; i < mr; i += 2 {
		for j := 0; j < nr; j += 4 {
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			for p := range k {
				a0, a1 := a[p*mr+i], a[p*mr+i+1]
				bp := (*[4]float32)(b[p*ldb+j : p*ldb+j+4])
				c00 += a0 * bp[0]
				c01 += a0 * bp[1]
				c02 += a0 * bp[2]
				c03 += a0 * bp[3]
				c10 += a1 * bp[0]
				c11 += a1 * bp[1]
				c12 += a1 * bp[2]
				c13 += a1 * bp[3]
			}
			r0 := (*[4]float32)(acc[i*nr+j:])
			r1 := (*[4]float32)(acc[(i+1)*nr+j:])
			r0[0], r0[1], r0[2], r0[3] = c00, c01, c02, c03
			r1[0], r1[1], r1[2], r1[3] = c10, c11, c12, c13
		}
	}
	for i := range mr {
		store(c[i*ldc:i*ldc+nr], acc[i*nr:(i+1)*nr], alpha, beta)
	}
}

// dot3x4Go is the portable form of dot3x4.
func dot3x4Go(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32) {
	var acc [3][4]float32
	for i := range 3 {
		ai := a[i*lda : i*lda+k]
		for j := range 4 {
			acc[i][j] = dot(ai, b[j*ldb:j*ldb+k])
		}
	}
	for i := range acc {
		store(c[i*ldc:i*ldc+4], acc[i][:], alpha, beta)
	}
}

// dot1x8Go is the portable form of dot1x8.
func dot1x8Go(k int, a []float32, b []float32, ldb int, c []float32, alpha, beta float32) {
	var acc [8]float32
	a = a[:k]
	for j := range acc {
		acc[j] = dot(a, b[j*ldb:j*ldb+k])
	}
	store(c[:8], acc[:], alpha, beta)
}

// dot returns x·y over len(x) elements, in four partial sums so that the
// additions do not form one long dependency chain.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	p := 0
	for ; p+4 <= len(x); p += 4 {
		s0 += x[p] * y[p]
		s1 += x[p+1] * y[p+1]
		s2 += x[p+2] * y[p+2]
		s3 += x[p+3] * y[p+3]
	}
	for ; p < len(x); p++ {
		s0 += x[p] * y[p]
	}
	return (s0 + s1) + (s2 + s3)
}

// store writes c = alpha·acc + beta·c, without reading c when beta == 0.
func store(c, acc []float32, alpha, beta float32) {
	c = c[:len(acc)]
	if beta == 0 {
		for j, v := range acc {
			c[j] = alpha * v
		}
		return
	}
	for j, v := range acc {
		c[j] = alpha*v + beta*c[j]
	}
}
