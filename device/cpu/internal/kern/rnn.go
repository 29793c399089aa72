package kern

// LSTMCell is the pointwise part of one LSTM step (device.LSTMCell) over
// rows = len(c)/hidden rows:
//
//	i = σ(pre_i + b_i)   f = σ(pre_f + b_f)   g = tanh(pre_g + b_g)   o = σ(pre_o + b_o)
//	c = f·cPrev + i·g    h = o·tanh(c)        b = bih + bhh
//
// pre and act are [rows, 4·hidden] in gate order i, f, g, o; cPrev, c and h
// are [rows, hidden]; bih and bhh are [4·hidden] or nil for no bias. act
// receives i, f, g, o and is nil in no-grad mode; it may be pre (a chunk
// of pre is read before act is written). Each value is computed in float64
// and rounded once to T; h is computed from the rounded c, the value
// LSTMCellGrad reads back.
func LSTMCell[T Float](hidden int, pre, bih, bhh, cPrev, c, h, act []T) {
	fast := single[T]()
	rows := len(c) / hidden
	g4 := 4 * hidden
	// Columns go in chunks (outer) so that the bias sums are formed once per
	// chunk, then rows (inner).
	var bias [4 * chunk]float64
	var buf [5 * chunk]float64
	for j0 := 0; j0 < hidden; j0 += chunk {
		n := min(chunk, hidden-j0)
		b := bias[:4*n]
		clear(b)
		for gate := range 4 {
			bg := b[gate*n : gate*n+n]
			if bih != nil {
				for k, v := range bih[gate*hidden+j0 : gate*hidden+j0+n] {
					bg[k] = float64(v)
				}
			}
			if bhh != nil {
				for k, v := range bhh[gate*hidden+j0 : gate*hidden+j0+n] {
					bg[k] += float64(v)
				}
			}
		}
		bi, bf, bg, bo := b[:n], b[n:2*n], b[2*n:3*n], b[3*n:4*n]
		// i, f and o side by side for one sigmoid pass; then g; then tanh(c).
		sg := buf[:3*n]
		ui, uf, uo := sg[:n], sg[n:2*n], sg[2*n:3*n]
		ug := buf[3*n : 4*n]
		tc := buf[4*n : 5*n]
		for r := range rows {
			o := r*g4 + j0
			pi, pf, pg, po := pre[o:o+n], pre[o+hidden:o+hidden+n], pre[o+2*hidden:o+2*hidden+n], pre[o+3*hidden:o+3*hidden+n]
			for k := range n {
				ui[k] = float64(pi[k]) + bi[k]
				uf[k] = float64(pf[k]) + bf[k]
				ug[k] = float64(pg[k]) + bg[k]
				uo[k] = float64(po[k]) + bo[k]
			}
			sigmoidSlice(fast, sg)
			tanhSlice(fast, ug)
			e := r*hidden + j0
			cp, cr, hr := cPrev[e:e+n], c[e:e+n], h[e:e+n]
			for k := range n {
				cj := T(uf[k]*float64(cp[k]) + ui[k]*ug[k])
				cr[k] = cj
				tc[k] = float64(cj)
			}
			tanhSlice(fast, tc)
			for k := range n {
				hr[k] = T(uo[k] * tc[k])
			}
			if act != nil {
				ai, af, ag, ao := act[o:o+n], act[o+hidden:o+hidden+n], act[o+2*hidden:o+2*hidden+n], act[o+3*hidden:o+3*hidden+n]
				for k := range n {
					ai[k], af[k], ag[k], ao[k] = T(ui[k]), T(uf[k]), T(ug[k]), T(uo[k])
				}
			}
		}
	}
}

// LSTMCellGrad is the backward of LSTMCell (device.LSTMCellGrad) over
// rows = len(c)/hidden rows. With tc = tanh(c) and
// dcT = dc + dh·o·(1-tc²):
//
//	dPre_i = dcT·g·i(1-i)   dPre_f = dcT·cPrev·f(1-f)
//	dPre_g = dcT·i·(1-g²)   dPre_o = dh·tc·o(1-o)   dcPrev = dcT·f
//
// act and dPre are [rows, 4·hidden]; cPrev, c, dh, dc and dcPrev are
// [rows, hidden]. dPre may be act and dcPrev may be dc. dPre is also the
// gradient of both biases (the caller sums it over rows). Computed in
// float64 from the stored T values and rounded once.
func LSTMCellGrad[T Float](hidden int, act, cPrev, c, dh, dc, dPre, dcPrev []T) {
	fast := single[T]()
	rows := len(c) / hidden
	g4 := 4 * hidden
	var tc [chunk]float64
	for r := range rows {
		for j0 := 0; j0 < hidden; j0 += chunk {
			n := min(chunk, hidden-j0)
			e := r*hidden + j0
			cr := c[e : e+n]
			t := tc[:len(cr)]
			for k, v := range cr {
				t[k] = float64(v)
			}
			tanhSlice(fast, t)
			o := r*g4 + j0
			ai, af, ag, ao := act[o:o+n], act[o+hidden:o+hidden+n], act[o+2*hidden:o+2*hidden+n], act[o+3*hidden:o+3*hidden+n]
			di, df, dg, do := dPre[o:o+n], dPre[o+hidden:o+hidden+n], dPre[o+2*hidden:o+2*hidden+n], dPre[o+3*hidden:o+3*hidden+n]
			cp, dhr, dcr, dcp := cPrev[e:e+n], dh[e:e+n], dc[e:e+n], dcPrev[e:e+n]
			for k, tck := range t {
				i, f, g, og := float64(ai[k]), float64(af[k]), float64(ag[k]), float64(ao[k])
				dhk := float64(dhr[k])
				dcT := float64(dcr[k]) + dhk*og*(1-tck*tck)
				di[k] = T(dcT * g * (i * (1 - i)))
				df[k] = T(dcT * float64(cp[k]) * (f * (1 - f)))
				dg[k] = T(dcT * i * (1 - g*g))
				do[k] = T(dhk * tck * (og * (1 - og)))
				dcp[k] = T(dcT * f)
			}
		}
	}
}

// GRUCell is the pointwise part of one GRU step (device.GRUCell) over
// rows = len(h)/hidden rows, gate order r, z, n:
//
//	r = σ(x_r + bi_r + h_r + bh_r)   z = σ(x_z + bi_z + h_z + bh_z)
//	n = tanh(x_n + bi_n + r·(h_n + bh_n))   h = (1-z)·n + z·hPrev
//
// xPre and hPre are [rows, 3·hidden]; bih and bhh are [3·hidden] or nil;
// hPrev and h are [rows, hidden] and h may be hPrev. act is
// [rows, 4·hidden] and receives r, z, n and h_n + bh_n; nil in no-grad
// mode. Computed in float64 and rounded once to T.
func GRUCell[T Float](hidden int, xPre, hPre, bih, bhh, hPrev, h, act []T) {
	fast := single[T]()
	rows := len(h) / hidden
	g3, g4 := 3*hidden, 4*hidden
	// Columns go in chunks (outer) so that the bias sums are formed once per
	// chunk, then rows (inner). bias holds bi_r + bh_r, bi_z + bh_z, bi_n
	// and bh_n.
	var bias [4 * chunk]float64
	var buf [4 * chunk]float64
	for j0 := 0; j0 < hidden; j0 += chunk {
		n := min(chunk, hidden-j0)
		b := bias[:4*n]
		clear(b)
		// A gate's n biases at a time, as LSTMCell: no index arithmetic
		// per element (at batch 1, a sampled token's, the bias sums are as
		// many operations as the cell's).
		for gate := range 3 {
			bg := b[gate*n : gate*n+n]
			if bih != nil {
				for k, v := range bih[gate*hidden+j0 : gate*hidden+j0+n] {
					bg[k] = float64(v)
				}
			}
			if bhh != nil && gate < 2 {
				for k, v := range bhh[gate*hidden+j0 : gate*hidden+j0+n] {
					bg[k] += float64(v)
				}
			}
		}
		if bhh != nil {
			for k, v := range bhh[2*hidden+j0 : 2*hidden+j0+n] {
				b[3*n+k] = float64(v)
			}
		}
		brz, bin, bhn := b[:2*n], b[2*n:3*n], b[3*n:4*n]
		// r and z side by side for one sigmoid pass; then n; then h_n + bh_n.
		rz := buf[:2*n]
		ur, uz := rz[:n], rz[n:2*n]
		un := buf[2*n : 3*n]
		uh := buf[3*n : 4*n]
		for r := range rows {
			o := r*g3 + j0
			xr, xz, xn := xPre[o:o+n], xPre[o+hidden:o+hidden+n], xPre[o+2*hidden:o+2*hidden+n]
			yr, yz, yn := hPre[o:o+n], hPre[o+hidden:o+hidden+n], hPre[o+2*hidden:o+2*hidden+n]
			for k := range n {
				ur[k] = (float64(xr[k]) + float64(yr[k])) + brz[k]
				uz[k] = (float64(xz[k]) + float64(yz[k])) + brz[n+k]
				uh[k] = float64(yn[k]) + bhn[k]
			}
			sigmoidSlice(fast, rz)
			for k := range n {
				un[k] = (float64(xn[k]) + bin[k]) + ur[k]*uh[k]
			}
			tanhSlice(fast, un)
			e := r*hidden + j0
			hp, hr := hPrev[e:e+n], h[e:e+n]
			for k := range n {
				z := uz[k]
				hr[k] = T((1-z)*un[k] + z*float64(hp[k]))
			}
			if act != nil {
				a := r*g4 + j0
				ar, az, an, ah := act[a:a+n], act[a+hidden:a+hidden+n], act[a+2*hidden:a+2*hidden+n], act[a+3*hidden:a+3*hidden+n]
				for k := range n {
					ar[k], az[k], an[k], ah[k] = T(ur[k]), T(uz[k]), T(un[k]), T(uh[k])
				}
			}
		}
	}
}

// GRUCellGrad is the backward of GRUCell (device.GRUCellGrad) over
// rows = len(dh)/hidden rows:
//
//	dz = dh·(hPrev-n)·z(1-z)   dn = dh·(1-z)·(1-n²)   dr = dn·(h_n+bh_n)·r(1-r)
//	dxPre = [dr, dz, dn]   dhPre = [dr, dz, dn·r]   dhPrev = dh·z
//
// act is [rows, 4·hidden] as GRUCell wrote it; hPrev, dh and dhPrev are
// [rows, hidden]; dxPre and dhPre are [rows, 3·hidden]. dhPrev may be dh
// unless accumulate is set, which adds dh·z into dhPrev instead. dhPrev is
// only the direct part of the gradient with respect to hPrev.
// Computed in float64 and rounded once to T.
func GRUCellGrad[T Float](hidden int, act, hPrev, dh, dxPre, dhPre, dhPrev []T, accumulate bool) {
	rows := len(dh) / hidden
	g3, g4 := 3*hidden, 4*hidden
	for r := range rows {
		e := r * hidden
		hp, dhr, dhp := hPrev[e:e+hidden], dh[e:e+hidden], dhPrev[e:e+hidden]
		a := r * g4
		ar, az, an, ah := act[a:a+hidden], act[a+hidden:a+2*hidden], act[a+2*hidden:a+3*hidden], act[a+3*hidden:a+4*hidden]
		o := r * g3
		dxr, dxz, dxn := dxPre[o:o+hidden], dxPre[o+hidden:o+2*hidden], dxPre[o+2*hidden:o+3*hidden]
		dyr, dyz, dyn := dhPre[o:o+hidden], dhPre[o+hidden:o+2*hidden], dhPre[o+2*hidden:o+3*hidden]
		for k, v := range dhr {
			rg, z, n, hn := float64(ar[k]), float64(az[k]), float64(an[k]), float64(ah[k])
			d := float64(v)
			dz := d * (float64(hp[k]) - n) * (z * (1 - z))
			dn := d * (1 - z) * (1 - n*n)
			dr := dn * hn * (rg * (1 - rg))
			dxr[k], dxz[k], dxn[k] = T(dr), T(dz), T(dn)
			dyr[k], dyz[k], dyn[k] = T(dr), T(dz), T(dn*rg)
			if accumulate {
				dhp[k] = T(float64(dhp[k]) + d*z)
			} else {
				dhp[k] = T(d * z)
			}
		}
	}
}
