package gemm

// Cache blocking. The packed path keeps one kc×nr panel of B in L1 while the
// micro-kernel walks the mc×kc block of A from L2, and the kc×nc block of B
// in L2/L3 while the mc blocks go by. kc = 256 makes the B panel 16 KiB of
// the 48 KiB L1 and an A panel 6 KiB; mc = 144 makes the A block 144 KiB.
// The values were chosen by measurement on the 2-core AMD EPYC (Zen 5, 48 KiB
// L1d and 1 MiB L2 per core) this package was tuned on; see doc.go.
var (
	kc = 256
	mc = 144
	nc = 3072
)

// The unpacked paths. Products with at most smallM rows skip packing B,
// which they would amortise over too few rows: with transB (and A not
// transposed) they take dot products of rows of A and rows of B directly
// (dot3x4, dot1x8); without transB the micro-kernel reads B in place. The
// dot path also serves transB products with at most smallN columns, where
// packing A is amortised over few columns and a last partial 16-column
// panel wastes most of its work (the 65-wide output head runs 40% faster).
// It blocks k by kcDot and rows of A by mcDot so the A block (mcDot×kcDot
// floats, 24 KiB) stays in L1 while rows of B stream by.
var (
	smallM = 64
	smallN = 128
	kcDot  = 256
	mcDot  = 24
)

// Threading: a product is split in parts of at least minPartFlops
// floating-point operations (2 µs of one core, ten times what handing a
// part to a polling worker costs): one part per goroutine when the parts
// pack (each part repacks the operand the parts share, which at four parts
// per goroutine cost 12% of a 1024³ product), dotPartsPerThread per
// goroutine on the dot path, which packs nothing. More parts than
// goroutines balance the load when a core is slowed by other work, which
// on a shared machine is the common case.
//
// The dot path's parts are sized by the reads of B as well as by the
// arithmetic: dotReadFlops operations' time for each element of B read
// (dotPasses times each). A product of one row reads each element of B
// for two operations; on a 2-core Intel Xeon (2 MiB of L2 a core,
// 2026-11-29) one of 768×256 took 9 µs on one goroutine with B in L2,
// the time of about 6 operations an element at minPartFlops' rate, and
// about twice that from L3 in the char-RNN's sampling, whose 2.6 MB of
// GRU weights do not fit one core's L2. Counted by its arithmetic alone
// (0.4 MFLOP) that product ran on one goroutine; counted with its reads
// it runs on all of them, and the char-RNN's GRU sampling went from
// 8,338-8,930 to 12,341-13,416 tokens/s (BenchmarkCharRNN/gru/sample,
// 3 rounds alternated; the LSTM's, already split, unchanged within the
// noise).
var (
	minPartFlops      = 2.5e5
	dotPartsPerThread = 4
	dotReadFlops      = 8.0
)

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major float32
// matrices, where op(A) is m×k, op(B) is k×n and C is m×n. A is stored m×k
// with row stride lda (transA false) or k×m (transA true); B is stored k×n
// with row stride ldb (transB false) or n×k (transB true); C has row stride
// ldc. With beta == 0, C is written without being read, so NaN or Inf in C
// do not propagate; with k == 0 or alpha == 0, C = beta·C.
//
// Sgemm panics, with a message starting "gemm: ", when a size is negative, a
// stride is smaller than the row it strides, or a slice is too short: the
// same preconditions as gonum's Sgemm.
//
// Large products run on the package's worker goroutines (see doc.go). Sgemm
// is safe for concurrent use; concurrent calls must not write to
// overlapping parts of C. In steady state it allocates nothing.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if alpha == 0 || k == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	run(problem{
		transA: transA, transB: transB,
		m: m, n: n, k: k,
		alpha: alpha, beta: beta,
		a: a, b: b, c: c,
		lda: lda, ldb: ldb, ldc: ldc,
	})
}

// checkArgs panics unless the arguments describe valid matrices.
func checkArgs(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	switch {
	case m < 0:
		panic("gemm: m < 0")
	case n < 0:
		panic("gemm: n < 0")
	case k < 0:
		panic("gemm: k < 0")
	}
	// Stored shapes: rows × columns of A and B as they lie in memory.
	aRows, aCols := m, k
	if transA {
		aRows, aCols = k, m
	}
	bRows, bCols := k, n
	if transB {
		bRows, bCols = n, k
	}
	if lda < max(1, aCols) {
		panic("gemm: bad lda")
	}
	if ldb < max(1, bCols) {
		panic("gemm: bad ldb")
	}
	if ldc < max(1, n) {
		panic("gemm: bad ldc")
	}
	if m == 0 || n == 0 {
		return
	}
	if k > 0 {
		if len(a) < (aRows-1)*lda+aCols {
			panic("gemm: short A")
		}
		if len(b) < (bRows-1)*ldb+bCols {
			panic("gemm: short B")
		}
	}
	if len(c) < (m-1)*ldc+n {
		panic("gemm: short C")
	}
}

// scale sets C = beta·C, writing zeros without reading C when beta == 0.
func scale(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// problem is one product C = alpha·op(A)·op(B) + beta·C with validated
// arguments, m, n, k > 0 and alpha != 0.
type problem struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32
	lda, ldb, ldc  int
}

// method is how a problem (or one part of it) is computed.
type method uint8

const (
	packed  method = iota // pack A and B blocks, micro-kernel on the panels
	directB               // pack A only, micro-kernel reads B in place (B not transposed)
	dots                  // no packing, dot products of rows (A not transposed, B transposed)
)

// method chooses how p is computed (see the blocking parameters above).
// Each part of a split product chooses again for its own shape.
func (p *problem) method() method {
	switch {
	case p.transA:
		return packed
	case p.transB && (p.m <= smallM || p.n <= smallN):
		return dots
	case p.m <= smallM:
		return directB
	}
	return packed
}

// dotPasses is how many times the dot path reads B for m rows of A: once
// per block of mcDot rows of the 3-row kernel's, and once more for the 1
// or 2 rows left over.
func dotPasses(m int) int {
	m3 := m / 3 * 3
	passes := (m3 + mcDot - 1) / mcDot
	if m3 < m {
		passes++
	}
	return passes
}

// sub returns the part of p that computes rows [lo, hi) of C (byRows) or
// columns [lo, hi).
func (p *problem) sub(byRows bool, lo, hi int) problem {
	q := *p
	if byRows {
		q.m = hi - lo
		if p.transA {
			q.a = p.a[lo:]
		} else {
			q.a = p.a[lo*p.lda:]
		}
		q.c = p.c[lo*p.ldc:]
		return q
	}
	q.n = hi - lo
	if p.transB {
		q.b = p.b[lo*p.ldb:]
	} else {
		q.b = p.b[lo:]
	}
	q.c = p.c[lo:]
	return q
}

// compute runs p on the calling goroutine with the buffers of ws.
func (ws *workspace) compute(p *problem) {
	switch m := p.method(); m {
	case dots:
		ws.dots(p)
	default:
		ws.packed(p, m == directB)
	}
}

// blocks returns the size of each of the ceil(total/max) nearly equal blocks
// that cover total, rounded up to a multiple of unit: balanced blocks avoid
// a thin last block (k = 300 runs as 2×152, not 256+44).
func blocks(total, max, unit int) int {
	nb := (total + max - 1) / max
	size := (total + nb - 1) / nb
	return (size + unit - 1) / unit * unit
}

// packed computes p with the Goto/BLIS loop nest: blocks of nc columns, kc
// steps and mc rows, then nr×mr register tiles. With direct, B is not packed
// but read in place (only a last partial panel of fewer than nr columns is
// packed, so the kernel never reads past a row of B).
func (ws *workspace) packed(p *problem, direct bool) {
	m, n, k := p.m, p.n, p.k
	kcb := blocks(k, kc, 1)
	mcb := blocks(m, mc, mr)
	ncb := blocks(n, nc, nr)
	bSize := min(ncb, (n+nr-1)/nr*nr) * kcb
	if direct {
		bSize = nr * kcb // only the last partial panel is packed
	}
	ws.grow(mcb*kcb, bSize)
	for jc := 0; jc < n; jc += ncb {
		nb := min(ncb, n-jc)
		for pc := 0; pc < k; pc += kcb {
			kb := min(kcb, k-pc)
			beta := p.beta
			if pc > 0 {
				beta = 1
			}
			full := nb // columns read in place when direct
			if direct {
				full = nb / nr * nr
				if full < nb {
					packB(ws.b, false, p.b, p.ldb, pc, jc+full, nb-full, kb)
				}
			} else {
				packB(ws.b, p.transB, p.b, p.ldb, pc, jc, nb, kb)
			}
			for ic := 0; ic < m; ic += mcb {
				mb := min(mcb, m-ic)
				packA(ws.a, p.transA, p.a, p.lda, ic, pc, mb, kb)
				for jr := 0; jr < nb; jr += nr {
					cols := min(nr, nb-jr)
					var bp []float32
					ldbp := nr
					switch {
					case !direct:
						bp = ws.b[jr*kb:]
					case jr < full:
						bp, ldbp = p.b[pc*p.ldb+jc+jr:], p.ldb
					default:
						bp = ws.b
					}
					for ir := 0; ir < mb; ir += mr {
						rows := min(mr, mb-ir)
						ap := ws.a[ir*kb:]
						off := (ic+ir)*p.ldc + jc + jr
						if rows == mr && cols == nr {
							microKernel(kb, ap, bp, ldbp, p.c[off:], p.ldc, p.alpha, beta)
							continue
						}
						microKernel(kb, ap, bp, ldbp, ws.tile[:], nr, p.alpha, 0)
						for i := range rows {
							store(p.c[off+i*p.ldc:off+i*p.ldc+cols], ws.tile[i*nr:i*nr+cols], 1, beta)
						}
					}
				}
			}
		}
	}
}

// dots computes p (A not transposed, B transposed: C[i][j] = A row i · B
// row j) without packing: 3×4 tiles of dot products, then single rows of A
// against 8 rows of B for the m%3 rows left. Columns left over past a
// multiple of 4 (or 8) use rows of B copied into a zero-padded buffer and a
// temporary tile of C.
func (ws *workspace) dots(p *problem) {
	m, n, k := p.m, p.n, p.k
	a, b, c := p.a, p.b, p.c
	lda, ldb, ldc := p.lda, p.ldb, p.ldc
	kcb := blocks(k, kcDot, 8)
	m3, n4, n8 := m/3*3, n/4*4, n/8*8
	ws.grow(0, 8*kcb)
	for pc := 0; pc < k; pc += kcb {
		kb := min(kcb, k-pc)
		beta := p.beta
		if pc > 0 {
			beta = 1
		}
		if m3 > 0 {
			var pad []float32
			if n4 < n {
				pad = ws.padRows(b[n4*ldb+pc:], ldb, n-n4, 4, kb)
			}
			for ic := 0; ic < m3; ic += mcDot {
				ie := min(ic+mcDot, m3)
				for jr := 0; jr < n4; jr += 4 {
					bj := b[jr*ldb+pc:]
					for ir := ic; ir < ie; ir += 3 {
						dot3x4(kb, a[ir*lda+pc:], lda, bj, ldb, c[ir*ldc+jr:], ldc, p.alpha, beta)
					}
				}
				if n4 < n {
					for ir := ic; ir < ie; ir += 3 {
						dot3x4(kb, a[ir*lda+pc:], lda, pad, kb, ws.tile[:], 4, p.alpha, 0)
						for i := range 3 {
							off := (ir+i)*ldc + n4
							store(c[off:off+n-n4], ws.tile[i*4:i*4+n-n4], 1, beta)
						}
					}
				}
			}
		}
		if m3 < m {
			var pad []float32
			if n8 < n {
				pad = ws.padRows(b[n8*ldb+pc:], ldb, n-n8, 8, kb)
			}
			for i := m3; i < m; i++ {
				ai := a[i*lda+pc:]
				for jr := 0; jr < n8; jr += 8 {
					dot1x8(kb, ai, b[jr*ldb+pc:], ldb, c[i*ldc+jr:], p.alpha, beta)
				}
				if n8 < n {
					dot1x8(kb, ai, pad, kb, ws.tile[:], p.alpha, 0)
					store(c[i*ldc+n8:i*ldc+n], ws.tile[:n-n8], 1, beta)
				}
			}
		}
	}
}

// padRows copies rows rows of kb values (at stride ldb in src) into ws.b as
// a total×kb matrix whose last total-rows rows are zero, and returns it.
func (ws *workspace) padRows(src []float32, ldb, rows, total, kb int) []float32 {
	dst := ws.b[:total*kb]
	for j := range rows {
		copy(dst[j*kb:(j+1)*kb], src[j*ldb:j*ldb+kb])
	}
	clear(dst[rows*kb:])
	return dst
}
