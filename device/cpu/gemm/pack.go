package gemm

// Packing copies a block of op(A) or op(B) into the order the micro-kernel
// reads it, so that the kernel streams both operands contiguously whatever
// the transposition and leading dimensions of the caller's matrices:
//
//	A block mb×kb -> ceil(mb/mr) panels, panel q holds a[p*mr+i] = op(A)[q*mr+i][p]
//	B block kb×nb -> ceil(nb/nr) panels, panel q holds b[p*nr+j] = op(B)[p][q*nr+j]
//
// Rows of a last partial A panel and columns of a last partial B panel are
// zero, so the kernel can always compute a full tile; only the copy-out of
// such edge tiles is partial.

// packA packs op(A)[i0:i0+mb, p0:p0+kb] into dst, which must hold at least
// ceil(mb/mr)*mr*kb values. A is stored m×k (transA false) or k×m (true)
// with row stride lda.
func packA(dst []float32, transA bool, a []float32, lda, i0, p0, mb, kb int) {
	for ir := 0; ir < mb; ir += mr {
		rows := min(mr, mb-ir)
		panel := dst[ir*kb : ir*kb+mr*kb]
		if transA {
			// op(A)[i][p] = a[p*lda+i]: the mr values of one step are
			// contiguous in A.
			src := a[p0*lda+i0+ir:]
			if rows == mr {
				// Element by element: an array assignment would call memmove.
				for p := range kb {
					s := (*[mr]float32)(src[p*lda : p*lda+mr])
					d := (*[mr]float32)(panel[p*mr : p*mr+mr])
					d[0], d[1], d[2], d[3], d[4], d[5] = s[0], s[1], s[2], s[3], s[4], s[5]
				}
				continue
			}
			for p := range kb {
				d := panel[p*mr : p*mr+mr]
				copy(d, src[p*lda:p*lda+rows])
				clear(d[rows:])
			}
			continue
		}
		// op(A)[i][p] = a[i*lda+p]: gather one value from each of mr rows.
		base := (i0+ir)*lda + p0
		if rows == mr {
			r0 := a[base : base+kb]
			r1 := a[base+lda : base+lda+kb]
			r2 := a[base+2*lda : base+2*lda+kb]
			r3 := a[base+3*lda : base+3*lda+kb]
			r4 := a[base+4*lda : base+4*lda+kb]
			r5 := a[base+5*lda : base+5*lda+kb]
			for p := range kb {
				d := (*[mr]float32)(panel[p*mr : p*mr+mr])
				d[0], d[1], d[2], d[3], d[4], d[5] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p]
			}
			continue
		}
		clear(panel)
		for i := range rows {
			r := a[base+i*lda : base+i*lda+kb]
			for p, v := range r {
				panel[p*mr+i] = v
			}
		}
	}
}

// packB packs op(B)[p0:p0+kb, j0:j0+nb] into dst, which must hold at least
// ceil(nb/nr)*nr*kb values. B is stored k×n (transB false) or n×k (true)
// with row stride ldb.
func packB(dst []float32, transB bool, b []float32, ldb, p0, j0, nb, kb int) {
	for jr := 0; jr < nb; jr += nr {
		cols := min(nr, nb-jr)
		panel := dst[jr*kb : jr*kb+nr*kb]
		if !transB {
			// op(B)[p][j] = b[p*ldb+j]: one contiguous run per step.
			src := b[p0*ldb+j0+jr:]
			if cols == nr {
				for p := range kb {
					s := (*[nr]float32)(src[p*ldb : p*ldb+nr])
					d := (*[nr]float32)(panel[p*nr : p*nr+nr])
					for j := range nr {
						d[j] = s[j]
					}
				}
				continue
			}
			for p := range kb {
				d := panel[p*nr : p*nr+nr]
				copy(d, src[p*ldb:p*ldb+cols])
				clear(d[cols:])
			}
			continue
		}
		// op(B)[p][j] = b[j*ldb+p]: a transpose. Four rows of B at a time,
		// each read contiguously, fill four columns of the panel.
		if cols < nr {
			clear(panel)
		}
		base := (j0+jr)*ldb + p0
		j := 0
		for ; j+4 <= cols; j += 4 {
			r0 := b[base+j*ldb : base+j*ldb+kb]
			r1 := b[base+(j+1)*ldb : base+(j+1)*ldb+kb]
			r2 := b[base+(j+2)*ldb : base+(j+2)*ldb+kb]
			r3 := b[base+(j+3)*ldb : base+(j+3)*ldb+kb]
			for p := range kb {
				d := (*[4]float32)(panel[p*nr+j : p*nr+j+4])
				d[0], d[1], d[2], d[3] = r0[p], r1[p], r2[p], r3[p]
			}
		}
		for ; j < cols; j++ {
			r := b[base+j*ldb : base+j*ldb+kb]
			for p, v := range r {
				panel[p*nr+j] = v
			}
		}
	}
}
