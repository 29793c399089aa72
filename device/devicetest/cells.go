package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// cellSizes are the (Batch, Hidden) shapes the cell kernels are checked at:
// degenerate, odd, and large enough for a multi-threaded path.
var cellSizes = [][2]int{{1, 1}, {3, 5}, {64, 512}}

// Which of a cell's biases are given.
type biasMode int

const (
	noBias biasMode = iota
	bothBiases
	onlyBiasIH
	onlyBiasHH
)

func (m biasMode) String() string {
	return [...]string{"NoBias", "Biases", "OnlyBiasIH", "OnlyBiasHH"}[m]
}

// Where a cell's saved activations go.
type actMode int

const (
	noAct       actMode = iota // no-grad mode
	separateAct                // a buffer of its own
	actIsInput                 // aliasing the pre-activations (LSTMCell only)
)

func (m actMode) String() string {
	return [...]string{"NoAct", "Act", "ActIsPre"}[m]
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// refLSTMCell is LSTMCell's equations in float64; bih and bhh may be nil.
func refLSTMCell(batch, hidden int, pre, bih, bhh, cPrev []float64) (act, c, h []float64) {
	act = make([]float64, 4*batch*hidden)
	c = make([]float64, batch*hidden)
	h = make([]float64, batch*hidden)
	bias := func(k int) float64 {
		var s float64
		if bih != nil {
			s += bih[k]
		}
		if bhh != nil {
			s += bhh[k]
		}
		return s
	}
	for b := 0; b < batch; b++ {
		row := pre[4*hidden*b:]
		ar := act[4*hidden*b:]
		for j := 0; j < hidden; j++ {
			i := sigmoid(row[j] + bias(j))
			f := sigmoid(row[hidden+j] + bias(hidden+j))
			g := math.Tanh(row[2*hidden+j] + bias(2*hidden+j))
			o := sigmoid(row[3*hidden+j] + bias(3*hidden+j))
			at := b*hidden + j
			c[at] = f*cPrev[at] + i*g
			h[at] = o * math.Tanh(c[at])
			ar[j], ar[hidden+j], ar[2*hidden+j], ar[3*hidden+j] = i, f, g, o
		}
	}
	return act, c, h
}

// refLSTMCellGrad is LSTMCellGrad's equations in float64.
func refLSTMCellGrad(batch, hidden int, act, cPrev, c, dh, dc []float64) (dPre, dcPrev []float64) {
	dPre = make([]float64, 4*batch*hidden)
	dcPrev = make([]float64, batch*hidden)
	for b := 0; b < batch; b++ {
		ar := act[4*hidden*b:]
		dr := dPre[4*hidden*b:]
		for j := 0; j < hidden; j++ {
			i, f, g, o := ar[j], ar[hidden+j], ar[2*hidden+j], ar[3*hidden+j]
			at := b*hidden + j
			tc := math.Tanh(c[at])
			dcT := dc[at] + dh[at]*o*(1-tc*tc)
			dr[j] = dcT * g * i * (1 - i)
			dr[hidden+j] = dcT * cPrev[at] * f * (1 - f)
			dr[2*hidden+j] = dcT * i * (1 - g*g)
			dr[3*hidden+j] = dh[at] * tc * o * (1 - o)
			dcPrev[at] = dcT * f
		}
	}
	return dPre, dcPrev
}

// refGRUCell is GRUCell's equations in float64; bih and bhh may be nil.
func refGRUCell(batch, hidden int, xPre, hPre, bih, bhh, hPrev []float64) (act, h []float64) {
	act = make([]float64, 4*batch*hidden)
	h = make([]float64, batch*hidden)
	bi := func(k int) float64 {
		if bih == nil {
			return 0
		}
		return bih[k]
	}
	bh := func(k int) float64 {
		if bhh == nil {
			return 0
		}
		return bhh[k]
	}
	for b := 0; b < batch; b++ {
		x := xPre[3*hidden*b:]
		hp := hPre[3*hidden*b:]
		ar := act[4*hidden*b:]
		for j := 0; j < hidden; j++ {
			r := sigmoid(x[j] + bi(j) + hp[j] + bh(j))
			z := sigmoid(x[hidden+j] + bi(hidden+j) + hp[hidden+j] + bh(hidden+j))
			hn := hp[2*hidden+j] + bh(2*hidden+j)
			n := math.Tanh(x[2*hidden+j] + bi(2*hidden+j) + r*hn)
			at := b*hidden + j
			h[at] = (1-z)*n + z*hPrev[at]
			ar[j], ar[hidden+j], ar[2*hidden+j], ar[3*hidden+j] = r, z, n, hn
		}
	}
	return act, h
}

// refGRUCellGrad is GRUCellGrad's equations in float64.
func refGRUCellGrad(batch, hidden int, act, hPrev, dh []float64) (dxPre, dhPre, dhPrev []float64) {
	dxPre = make([]float64, 3*batch*hidden)
	dhPre = make([]float64, 3*batch*hidden)
	dhPrev = make([]float64, batch*hidden)
	for b := 0; b < batch; b++ {
		ar := act[4*hidden*b:]
		dx := dxPre[3*hidden*b:]
		dhp := dhPre[3*hidden*b:]
		for j := 0; j < hidden; j++ {
			r, z, n, hn := ar[j], ar[hidden+j], ar[2*hidden+j], ar[3*hidden+j]
			at := b*hidden + j
			dz := dh[at] * (hPrev[at] - n) * z * (1 - z)
			dn := dh[at] * (1 - z) * (1 - n*n)
			dr := dn * hn * r * (1 - r)
			dx[j], dx[hidden+j], dx[2*hidden+j] = dr, dz, dn
			dhp[j], dhp[hidden+j], dhp[2*hidden+j] = dr, dz, dn*r
			dhPrev[at] = dh[at] * z
		}
	}
	return dxPre, dhPre, dhPrev
}

// roundAll rounds x to dt in place and returns it: what a device stores.
func roundAll(dt device.DType, x []float64) []float64 {
	for i := range x {
		x[i] = round(dt, x[i])
	}
	return x
}

func testLSTMCell(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		type lstmCase struct {
			batch, hidden int
			bias          biasMode
			act           actMode
			cIsCPrev      bool
		}
		var cs []lstmCase
		for _, s := range cellSizes {
			if s != [2]int{3, 5} { // every variation is run at 3x5 below
				cs = append(cs, lstmCase{s[0], s[1], bothBiases, separateAct, false})
			}
		}
		for _, b := range []biasMode{noBias, bothBiases, onlyBiasIH, onlyBiasHH} {
			for _, a := range []actMode{noAct, separateAct, actIsInput} {
				cs = append(cs, lstmCase{3, 5, b, a, false})
			}
		}
		cs = append(cs, lstmCase{64, 512, noBias, actIsInput, false},
			lstmCase{3, 5, bothBiases, noAct, true}, lstmCase{3, 5, bothBiases, actIsInput, true}, lstmCase{64, 512, bothBiases, noAct, true})
		for _, c := range cs {
			name := fmt.Sprintf("%dx%d/%v/%v", c.batch, c.hidden, c.bias, c.act)
			if c.cIsCPrev {
				name += "/CIsCPrev"
			}
			e.run(name, func(e *env) {
				bh := c.batch * c.hidden
				pre := e.uniform(4*bh, -3, 3)
				cPrev := e.uniform(bh, -2, 2)
				var bih, bhh []float64
				a := device.LSTMCell{DType: e.dt, Batch: c.batch, Hidden: c.hidden}
				vPre, vCPrev := e.vec(pre), e.vec(cPrev)
				a.Pre, a.CPrev = vPre.buf, vCPrev.buf
				if c.bias == bothBiases || c.bias == onlyBiasIH {
					bih = e.uniform(4*c.hidden, -1, 1)
					a.BiasIH = e.vec(bih).buf
				}
				if c.bias == bothBiases || c.bias == onlyBiasHH {
					bhh = e.uniform(4*c.hidden, -1, 1)
					a.BiasHH = e.vec(bhh).buf
				}
				vC, vH := e.vec(nans(bh)), e.vec(nans(bh))
				if c.cIsCPrev {
					vC = vCPrev
				}
				a.C, a.H = vC.buf, vH.buf
				var vAct vec
				switch c.act {
				case separateAct:
					vAct = e.vec(nans(4 * bh))
					a.Act = vAct.buf
				case actIsInput:
					vAct = vPre
					a.Act = vPre.buf
				}
				e.launch(a)
				wantAct, wantC, wantH := refLSTMCell(c.batch, c.hidden, pre, bih, bhh, cPrev)
				tol := PointwiseTolerance(e.dt)
				checkClose(e.t, "C", e.get("C", vC), wantC, nil, tol)
				checkClose(e.t, "H", e.get("H", vH), wantH, nil, tol)
				switch c.act {
				case noAct:
					checkExact(e.t, "Pre (an input)", e.get("Pre", vPre), pre)
				default:
					checkClose(e.t, "Act", e.get("Act", vAct), wantAct, nil, tol)
				}
				if !c.cIsCPrev {
					checkExact(e.t, "CPrev (an input)", e.get("CPrev", vCPrev), cPrev)
				}
			})
		}
	})
}

func testLSTMCellGrad(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		type gradCase struct {
			batch, hidden         int
			dPreIsAct, dCPrevIsDC bool
		}
		var cs []gradCase
		for _, s := range cellSizes {
			cs = append(cs, gradCase{s[0], s[1], false, false})
		}
		cs = append(cs, gradCase{3, 5, true, false}, gradCase{3, 5, false, true}, gradCase{3, 5, true, true},
			gradCase{64, 512, true, true})
		for _, c := range cs {
			name := fmt.Sprintf("%dx%d", c.batch, c.hidden)
			if c.dPreIsAct {
				name += "/DPreIsAct"
			}
			if c.dCPrevIsDC {
				name += "/DCPrevIsDC"
			}
			e.run(name, func(e *env) {
				bh := c.batch * c.hidden
				// The saved state is what a forward step produced, so it
				// is consistent: gates in range and C = f·CPrev + i·g.
				pre := e.uniform(4*bh, -3, 3)
				cPrev := e.uniform(bh, -2, 2)
				act, cur, _ := refLSTMCell(c.batch, c.hidden, pre, nil, nil, cPrev)
				roundAll(e.dt, act)
				roundAll(e.dt, cur)
				dh := e.uniform(bh, -1, 1)
				dc := e.uniform(bh, -1, 1)
				vAct, vCPrev, vC, vDH, vDC := e.vec(act), e.vec(cPrev), e.vec(cur), e.vec(dh), e.vec(dc)
				a := device.LSTMCellGrad{DType: e.dt, Batch: c.batch, Hidden: c.hidden,
					Act: vAct.buf, CPrev: vCPrev.buf, C: vC.buf, DH: vDH.buf, DC: vDC.buf}
				vDPre, vDCPrev := vAct, vDC
				if !c.dPreIsAct {
					vDPre = e.vec(nans(4 * bh))
				}
				if !c.dCPrevIsDC {
					vDCPrev = e.vec(nans(bh))
				}
				a.DPre, a.DCPrev = vDPre.buf, vDCPrev.buf
				e.launch(a)
				wantDPre, wantDCPrev := refLSTMCellGrad(c.batch, c.hidden, act, cPrev, cur, dh, dc)
				tol := PointwiseTolerance(e.dt)
				checkClose(e.t, "DPre", e.get("DPre", vDPre)[:4*bh], wantDPre, nil, tol)
				checkClose(e.t, "DCPrev", e.get("DCPrev", vDCPrev), wantDCPrev, nil, tol)
				checkExact(e.t, "DH (an input)", e.get("DH", vDH), dh)
				checkExact(e.t, "C (an input)", e.get("C", vC), cur)
			})
		}
	})
}

func testGRUCell(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		type gruCase struct {
			batch, hidden int
			bias          biasMode
			act           actMode
			hIsHPrev      bool
		}
		var cs []gruCase
		for _, s := range cellSizes {
			if s != [2]int{3, 5} { // every variation is run at 3x5 below
				cs = append(cs, gruCase{s[0], s[1], bothBiases, separateAct, false})
			}
		}
		for _, b := range []biasMode{noBias, bothBiases, onlyBiasIH, onlyBiasHH} {
			for _, a := range []actMode{noAct, separateAct} {
				cs = append(cs, gruCase{3, 5, b, a, false})
			}
		}
		cs = append(cs, gruCase{3, 5, bothBiases, separateAct, true}, gruCase{3, 5, noBias, noAct, true},
			gruCase{64, 512, bothBiases, noAct, true})
		for _, c := range cs {
			name := fmt.Sprintf("%dx%d/%v/%v", c.batch, c.hidden, c.bias, c.act)
			if c.hIsHPrev {
				name += "/HIsHPrev"
			}
			e.run(name, func(e *env) {
				bh := c.batch * c.hidden
				xPre := e.uniform(3*bh, -2, 2)
				hPre := e.uniform(3*bh, -2, 2)
				hPrev := e.uniform(bh, -1, 1)
				vX, vHP, vHPrev := e.vec(xPre), e.vec(hPre), e.vec(hPrev)
				a := device.GRUCell{DType: e.dt, Batch: c.batch, Hidden: c.hidden, XPre: vX.buf, HPre: vHP.buf, HPrev: vHPrev.buf}
				var bih, bhh []float64
				if c.bias == bothBiases || c.bias == onlyBiasIH {
					bih = e.uniform(3*c.hidden, -1, 1)
					a.BiasIH = e.vec(bih).buf
				}
				if c.bias == bothBiases || c.bias == onlyBiasHH {
					bhh = e.uniform(3*c.hidden, -1, 1)
					a.BiasHH = e.vec(bhh).buf
				}
				vH := vHPrev
				if !c.hIsHPrev {
					vH = e.vec(nans(bh))
				}
				a.H = vH.buf
				var vAct vec
				if c.act == separateAct {
					vAct = e.vec(nans(4 * bh))
					a.Act = vAct.buf
				}
				e.launch(a)
				wantAct, wantH := refGRUCell(c.batch, c.hidden, xPre, hPre, bih, bhh, hPrev)
				tol := PointwiseTolerance(e.dt)
				checkClose(e.t, "H", e.get("H", vH), wantH, nil, tol)
				if c.act == separateAct {
					checkClose(e.t, "Act", e.get("Act", vAct), wantAct, nil, tol)
				}
				checkExact(e.t, "XPre (an input)", e.get("XPre", vX), xPre)
				checkExact(e.t, "HPre (an input)", e.get("HPre", vHP), hPre)
			})
		}
	})
}

func testGRUCellGrad(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		type gradCase struct {
			batch, hidden int
			dhPrevIsDH    bool
			accumulate    bool
		}
		var cs []gradCase
		for _, s := range cellSizes {
			cs = append(cs, gradCase{s[0], s[1], false, false})
		}
		cs = append(cs, gradCase{3, 5, true, false}, gradCase{64, 512, true, false},
			gradCase{3, 5, false, true}, gradCase{64, 512, false, true})
		for _, c := range cs {
			name := fmt.Sprintf("%dx%d", c.batch, c.hidden)
			if c.dhPrevIsDH {
				name += "/DHPrevIsDH"
			}
			if c.accumulate {
				name += "/Accumulate"
			}
			e.run(name, func(e *env) {
				bh := c.batch * c.hidden
				xPre := e.uniform(3*bh, -2, 2)
				hPre := e.uniform(3*bh, -2, 2)
				bhh := e.uniform(3*c.hidden, -1, 1)
				hPrev := e.uniform(bh, -1, 1)
				act, _ := refGRUCell(c.batch, c.hidden, xPre, hPre, nil, bhh, hPrev)
				roundAll(e.dt, act)
				dh := e.uniform(bh, -1, 1)
				vAct, vHPrev, vDH := e.vec(act), e.vec(hPrev), e.vec(dh)
				vDX, vDHP := e.vec(nans(3*bh)), e.vec(nans(3*bh))
				vDHPrev := vDH
				var prior []float64 // what DHPrev holds before an accumulating call
				switch {
				case c.accumulate:
					prior = e.uniform(bh, -1, 1)
					vDHPrev = e.vec(prior)
				case !c.dhPrevIsDH:
					vDHPrev = e.vec(nans(bh))
				}
				e.launch(device.GRUCellGrad{DType: e.dt, Batch: c.batch, Hidden: c.hidden,
					Act: vAct.buf, HPrev: vHPrev.buf, DH: vDH.buf, DXPre: vDX.buf, DHPre: vDHP.buf, DHPrev: vDHPrev.buf,
					Accumulate: c.accumulate})
				wantDX, wantDHP, wantDHPrev := refGRUCellGrad(c.batch, c.hidden, act, hPrev, dh)
				for i, p := range prior {
					wantDHPrev[i] += p
				}
				tol := PointwiseTolerance(e.dt)
				checkClose(e.t, "DXPre", e.get("DXPre", vDX), wantDX, nil, tol)
				checkClose(e.t, "DHPre", e.get("DHPre", vDHP)[:3*bh], wantDHP, nil, tol)
				checkClose(e.t, "DHPrev", e.get("DHPrev", vDHPrev), wantDHPrev, nil, tol)
				checkExact(e.t, "Act (an input)", e.get("Act", vAct), act)
			})
		}
	})
}

// fusedCellSizes are the (Batch, Hidden) shapes the cells' fused form
// (their recurrent product given, device.LSTMCell.Fused) is checked at:
// degenerate; tails of a tile and of a chunk of the product (the CUDA
// kernel's tiles are 4 rows by 32 units, 8 by 16 up to hidden 16 and 16
// by 8 up to 8, its chunks 32 terms: cuda/kernels ABI.md) in both
// dimensions, each tile shape among them; several tiles and chunks; the
// largest hidden size the CUDA device fuses by default (256) and one above
// it, which it runs as a GEMM and the cell, so both of its paths are
// checked.
var fusedCellSizes = [][2]int{{1, 1}, {3, 5}, {17, 12}, {5, 33}, {9, 70}, {6, 256}, {2, 257}}

// recProduct is pre + hPrev·wᵀ (pre nil: zeros) in float64 for a cell of
// gates gates, with each element's magnitude Σ|h||w| + |pre| (Tolerance).
func recProduct(batch, hidden, gates int, pre, hPrev, w []float64) (out, mag []float64) {
	n := gates * hidden
	out = make([]float64, batch*n)
	mag = make([]float64, batch*n)
	for b := 0; b < batch; b++ {
		for c := 0; c < n; c++ {
			var s, m float64
			for k := 0; k < hidden; k++ {
				x := hPrev[b*hidden+k] * w[c*hidden+k]
				s += x
				m += math.Abs(x)
			}
			if pre != nil {
				s += pre[b*n+c]
				m += math.Abs(pre[b*n+c])
			}
			out[b*n+c], mag[b*n+c] = s, m
		}
	}
	return out, mag
}

// fusedTolerance is the tolerance of a cell's outputs computed from
// pre-activations that carry a product's rounding, of magnitude at most
// mag: the pointwise tolerance, plus the product's error (SumTolerance of
// hidden+1 terms) carried through the cell, whose outputs move by at most
// 4 times a change of their pre-activations (σ' ≤ 1/4, tanh' ≤ 1, and
// c = f·cPrev + i·g with |cPrev| ≤ 2 over four gates: 1/4·2 + 1/4 + 1 +
// 1/4 < 4, and the GRU's h less), as an absolute floor.
func fusedTolerance(dt device.DType, hidden int, mag []float64) Tolerance {
	var m float64
	for _, v := range mag {
		m = math.Max(m, v)
	}
	tol := PointwiseTolerance(dt)
	tol.Abs += 4 * SumTolerance(dt, hidden+1).Rel * m
	return tol
}

func testLSTMCellFused(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		type fusedCase struct {
			batch, hidden      int
			bias               biasMode
			act                actMode
			cIsCPrev, hIsHPrev bool
		}
		var cs []fusedCase
		for _, s := range fusedCellSizes {
			cs = append(cs, fusedCase{s[0], s[1], bothBiases, separateAct, false, false})
		}
		for _, a := range []actMode{noAct, actIsInput} {
			cs = append(cs, fusedCase{5, 33, noBias, a, false, false}, fusedCase{9, 70, bothBiases, a, true, false})
		}
		// The new h over the previous one: the layers' single step, whose
		// state is updated in place.
		cs = append(cs, fusedCase{5, 33, bothBiases, noAct, true, true}, fusedCase{9, 70, bothBiases, separateAct, false, true})
		for _, c := range cs {
			name := fmt.Sprintf("%dx%d/%v/%v", c.batch, c.hidden, c.bias, c.act)
			if c.cIsCPrev {
				name += "/CIsCPrev"
			}
			if c.hIsHPrev {
				name += "/HIsHPrev"
			}
			e.run(name, func(e *env) {
				bh, H := c.batch*c.hidden, c.hidden
				// W scaled by 1/√H, as PyTorch initialises it, keeps the
				// product of order 1, in the range the gates respond to.
				s := 1 / math.Sqrt(float64(H))
				pre := e.uniform(4*bh, -2, 2)
				hPrev := e.uniform(bh, -1, 1)
				w := e.uniform(4*H*H, -s, s)
				cPrev := e.uniform(bh, -2, 2)
				vPre, vHPrev, vW, vCPrev := e.vec(pre), e.vec(hPrev), e.vec(w), e.vec(cPrev)
				a := device.LSTMCell{DType: e.dt, Batch: c.batch, Hidden: H, Pre: vPre.buf, HPrev: vHPrev.buf, W: vW.buf, CPrev: vCPrev.buf}
				var bih, bhh []float64
				if c.bias == bothBiases {
					bih, bhh = e.uniform(4*H, -1, 1), e.uniform(4*H, -1, 1)
					a.BiasIH, a.BiasHH = e.vec(bih).buf, e.vec(bhh).buf
				}
				vC, vH := e.vec(nans(bh)), e.vec(nans(bh))
				if c.cIsCPrev {
					vC = vCPrev
				}
				if c.hIsHPrev {
					vH = vHPrev
				}
				a.C, a.H = vC.buf, vH.buf
				var vAct vec
				switch c.act {
				case separateAct:
					vAct = e.vec(nans(4 * bh))
					a.Act = vAct.buf
				case actIsInput:
					vAct, a.Act = vPre, vPre.buf
				}
				e.launch(a)
				full, mag := recProduct(c.batch, H, 4, pre, hPrev, w)
				wantAct, wantC, wantH := refLSTMCell(c.batch, H, full, bih, bhh, cPrev)
				tol := fusedTolerance(e.dt, H, mag)
				checkClose(e.t, "C", e.get("C", vC), wantC, nil, tol)
				checkClose(e.t, "H", e.get("H", vH), wantH, nil, tol)
				if c.act != noAct {
					checkClose(e.t, "Act", e.get("Act", vAct), wantAct, nil, tol)
				}
				if c.act != actIsInput {
					// Pre holds the full pre-activations, as after a Gemm
					// with Beta 1.
					checkClose(e.t, "Pre", e.get("Pre", vPre), full, mag, SumTolerance(e.dt, H+1))
				}
				if !c.hIsHPrev {
					checkExact(e.t, "HPrev (an input)", e.get("HPrev", vHPrev), hPrev)
				}
				checkExact(e.t, "W (an input)", e.get("W", vW), w)
			})
		}
	})
}

func testGRUCellFused(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		type fusedCase struct {
			batch, hidden int
			bias          biasMode
			act           actMode
			hIsHPrev      bool
		}
		var cs []fusedCase
		for _, s := range fusedCellSizes {
			cs = append(cs, fusedCase{s[0], s[1], bothBiases, separateAct, false})
		}
		cs = append(cs, fusedCase{5, 33, noBias, noAct, false}, fusedCase{9, 70, onlyBiasHH, noAct, false},
			fusedCase{5, 33, bothBiases, separateAct, true}, fusedCase{9, 70, onlyBiasIH, noAct, true})
		for _, c := range cs {
			name := fmt.Sprintf("%dx%d/%v/%v", c.batch, c.hidden, c.bias, c.act)
			if c.hIsHPrev {
				name += "/HIsHPrev"
			}
			e.run(name, func(e *env) {
				bh, H := c.batch*c.hidden, c.hidden
				s := 1 / math.Sqrt(float64(H)) // as testLSTMCellFused's
				xPre := e.uniform(3*bh, -2, 2)
				hPrev := e.uniform(bh, -1, 1)
				w := e.uniform(3*H*H, -s, s)
				// HPre is written, not read: NaNs in it must not show.
				vX, vHP, vHPrev, vW := e.vec(xPre), e.vec(nans(3*bh)), e.vec(hPrev), e.vec(w)
				a := device.GRUCell{DType: e.dt, Batch: c.batch, Hidden: H, XPre: vX.buf, HPre: vHP.buf, HPrev: vHPrev.buf, W: vW.buf}
				var bih, bhh []float64
				if c.bias == bothBiases || c.bias == onlyBiasIH {
					bih = e.uniform(3*H, -1, 1)
					a.BiasIH = e.vec(bih).buf
				}
				if c.bias == bothBiases || c.bias == onlyBiasHH {
					bhh = e.uniform(3*H, -1, 1)
					a.BiasHH = e.vec(bhh).buf
				}
				vH := vHPrev
				if !c.hIsHPrev {
					vH = e.vec(nans(bh))
				}
				a.H = vH.buf
				var vAct vec
				if c.act == separateAct {
					vAct = e.vec(nans(4 * bh))
					a.Act = vAct.buf
				}
				e.launch(a)
				hPre, mag := recProduct(c.batch, H, 3, nil, hPrev, w)
				wantAct, wantH := refGRUCell(c.batch, H, xPre, hPre, bih, bhh, hPrev)
				tol := fusedTolerance(e.dt, H, mag)
				checkClose(e.t, "HPre", e.get("HPre", vHP), hPre, mag, SumTolerance(e.dt, H))
				checkClose(e.t, "H", e.get("H", vH), wantH, nil, tol)
				if c.act == separateAct {
					checkClose(e.t, "Act", e.get("Act", vAct), wantAct, nil, tol)
				}
				checkExact(e.t, "XPre (an input)", e.get("XPre", vX), xPre)
				if !c.hIsHPrev {
					checkExact(e.t, "HPrev (an input)", e.get("HPrev", vHPrev), hPrev)
				}
				checkExact(e.t, "W (an input)", e.get("W", vW), w)
			})
		}
	})
}

// fusedGradCase is a shape of the cell gradients' fused form: the cell's
// rows and the next step's (0: as many), and which aliasing the contract
// allows is tried.
type fusedGradCase struct {
	batch, hidden, next int
	// nextIsOut makes the next step's pre-activation gradient the same
	// buffer as the call's own (DPre, DHPre), which the cell gradient
	// overwrites once the product has read it.
	nextIsOut bool
	// LSTM: DPre is Act, DCPrev is DC. GRU: DHPrev is DH (inPlace) or
	// accumulates into what it holds (accumulate).
	inPlace, accumulate bool
}

func (c fusedGradCase) name() string {
	name := fmt.Sprintf("%dx%d", c.batch, c.hidden)
	if c.next != 0 {
		name += fmt.Sprintf("/Next%d", c.next)
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{c.nextIsOut, "NextIsOut"}, {c.inPlace, "InPlace"}, {c.accumulate, "Accumulate"}} {
		if f.on {
			name += "/" + f.name
		}
	}
	return name
}

// fusedGradCases are the shapes the cell gradients' fused form is checked
// at: every fusedCellSizes shape with the next step as wide, then next
// steps of fewer rows (a forward walk with lengths) and of more (a
// reverse walk), across the tiles' rows (4 at 33 units, 8 at 12, 16 at 5),
// and the aliasing the contract allows, both at a size the CUDA device
// fuses and at one it does not.
func fusedGradCases() []fusedGradCase {
	var cs []fusedGradCase
	for _, s := range fusedCellSizes {
		cs = append(cs, fusedGradCase{batch: s[0], hidden: s[1]})
	}
	cs = append(cs, fusedGradCase{batch: 17, hidden: 12, next: 9}, fusedGradCase{batch: 9, hidden: 70, next: 4},
		fusedGradCase{batch: 5, hidden: 33, next: 13}, fusedGradCase{batch: 3, hidden: 5, next: 17},
		fusedGradCase{batch: 1, hidden: 1, next: 2})
	for _, s := range [][2]int{{5, 33}, {2, 257}} {
		cs = append(cs, fusedGradCase{batch: s[0], hidden: s[1], nextIsOut: true},
			fusedGradCase{batch: s[0], hidden: s[1], inPlace: true},
			fusedGradCase{batch: s[0], hidden: s[1], accumulate: true})
	}
	return append(cs, fusedGradCase{batch: 9, hidden: 70, next: 12, inPlace: true},
		fusedGradCase{batch: 9, hidden: 70, next: 5, nextIsOut: true, accumulate: true})
}

// gradProduct is dh + dNext·w over dh's first next rows (and dh below
// them) in float64, for a cell of gates gates: dNext is [next, gates·H], w
// [gates·H, H], dh [rows, H]. mag is each element's magnitude,
// |dh| + Σ|dNext||w| (Tolerance).
func gradProduct(next, hidden, gates int, dh, dNext, w []float64) (out, mag []float64) {
	out, mag = clone(dh), make([]float64, len(dh))
	for i, v := range dh {
		mag[i] = math.Abs(v)
	}
	for b := 0; b < next; b++ {
		for j := 0; j < hidden; j++ {
			var s, m float64
			for k := 0; k < gates*hidden; k++ {
				x := dNext[b*gates*hidden+k] * w[k*hidden+j]
				s += x
				m += math.Abs(x)
			}
			out[b*hidden+j] += s
			mag[b*hidden+j] += m
		}
	}
	return out, mag
}

// fusedGradTolerance is the tolerance of a cell gradient's outputs
// computed from a DH that carries a product's rounding (SumTolerance of
// terms+1 terms relative to its magnitude, at most mag): the pointwise
// tolerance plus that error carried through, as an absolute floor. No
// output moves by more than a change of DH: the LSTM's dcT by at most
// o·(1-tc²) ≤ 1 times it, its gates' gradients by dcT's times i(1-i),
// |cPrev|·f(1-f) ≤ 2/4, i(1-g²) ≤ 1, or tc·o(1-o) ≤ 1/4, dCPrev by f ≤ 1
// times dcT's; the GRU's dz by |hPrev-n|·z(1-z) ≤ 2/4, dn by
// (1-z)(1-n²) ≤ 1, dr by dn's times |h_n+bh_n|·r(1-r) ≤ 3/4 (the suite's
// |HPre| ≤ 2 and |BiasHH| ≤ 1), dHPrev by z ≤ 1.
func fusedGradTolerance(dt device.DType, terms int, mag []float64) Tolerance {
	var m float64
	for _, v := range mag {
		m = math.Max(m, v)
	}
	tol := PointwiseTolerance(dt)
	tol.Abs += SumTolerance(dt, terms+1).Rel * m
	return tol
}

func testLSTMCellGradFused(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		cs := fusedGradCases()
		for _, c := range cs {
			if c.accumulate {
				continue // a GRU case
			}
			e.run(c.name(), func(e *env) {
				B, H := c.batch, c.hidden
				next := nextRows(c.batch, c.next)
				bh, rows := B*H, max(B, next)
				s := 1 / math.Sqrt(float64(H)) // as testLSTMCellFused's
				pre := e.uniform(4*bh, -3, 3)
				cPrev := e.uniform(bh, -2, 2)
				act, cur, _ := refLSTMCell(B, H, pre, nil, nil, cPrev)
				roundAll(e.dt, act)
				roundAll(e.dt, cur)
				dh, dc := e.uniform(rows*H, -1, 1), e.uniform(bh, -1, 1)
				dNext, w := e.uniform(next*4*H, -1, 1), e.uniform(4*H*H, -s, s)
				vAct, vCPrev, vC, vDH, vDC, vW := e.vec(act), e.vec(cPrev), e.vec(cur), e.vec(dh), e.vec(dc), e.vec(w)
				vDPre, vDCPrev, vNext := e.vec(nans(4*bh)), e.vec(nans(bh)), vec{}
				switch {
				case c.nextIsOut:
					vDPre = e.vec(append(clone(dNext), nans(max(0, B-next)*4*H)...))
					vNext = vDPre
				case c.inPlace:
					vDPre, vDCPrev = vAct, vDC
				}
				if !c.nextIsOut {
					vNext = e.vec(dNext)
				}
				a := device.LSTMCellGrad{DType: e.dt, Batch: B, Hidden: H, Act: vAct.buf, CPrev: vCPrev.buf, C: vC.buf,
					DH: vDH.buf, DC: vDC.buf, DPre: vDPre.buf, DCPrev: vDCPrev.buf, DPreNext: vNext.buf, W: vW.buf, NextBatch: c.next}
				e.launch(a)
				full, mag := gradProduct(next, H, 4, dh, dNext, w)
				wantDPre, wantDCPrev := refLSTMCellGrad(B, H, act, cPrev, cur, full[:bh], dc)
				tol := fusedGradTolerance(e.dt, 4*H, mag)
				// DH holds the whole gradient, as after a Gemm with Beta 1.
				checkClose(e.t, "DH", e.get("DH", vDH), full, mag, SumTolerance(e.dt, 4*H+1))
				checkClose(e.t, "DPre", e.get("DPre", vDPre)[:4*bh], wantDPre, nil, tol)
				checkClose(e.t, "DCPrev", e.get("DCPrev", vDCPrev), wantDCPrev, nil, tol)
				if !c.nextIsOut {
					checkExact(e.t, "DPreNext (an input)", e.get("DPreNext", vNext), dNext)
				}
				checkExact(e.t, "W (an input)", e.get("W", vW), w)
				checkExact(e.t, "C (an input)", e.get("C", vC), cur)
			})
		}
	})
}

func testGRUCellGradFused(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		for _, c := range fusedGradCases() {
			e.run(c.name(), func(e *env) {
				B, H := c.batch, c.hidden
				next := nextRows(c.batch, c.next)
				bh, rows := B*H, max(B, next)
				s := 1 / math.Sqrt(float64(H))
				xPre, hPre := e.uniform(3*bh, -2, 2), e.uniform(3*bh, -2, 2)
				bhh := e.uniform(3*H, -1, 1)
				hPrev := e.uniform(bh, -1, 1)
				act, _ := refGRUCell(B, H, xPre, hPre, nil, bhh, hPrev)
				roundAll(e.dt, act)
				dh := e.uniform(rows*H, -1, 1)
				dNext, w := e.uniform(next*3*H, -1, 1), e.uniform(3*H*H, -s, s)
				vAct, vHPrev, vDH, vW := e.vec(act), e.vec(hPrev), e.vec(dh), e.vec(w)
				vDX, vDHP, vDHPrev, vNext := e.vec(nans(3*bh)), e.vec(nans(3*bh)), e.vec(nans(bh)), vec{}
				var prior []float64 // what DHPrev holds before an accumulating call
				switch {
				case c.nextIsOut:
					vDHP = e.vec(append(clone(dNext), nans(max(0, B-next)*3*H)...))
					vNext = vDHP
				case c.inPlace:
					vDHPrev = vDH
				}
				if c.accumulate {
					prior = e.uniform(bh, -1, 1)
					vDHPrev = e.vec(prior)
				}
				if !c.nextIsOut {
					vNext = e.vec(dNext)
				}
				e.launch(device.GRUCellGrad{DType: e.dt, Batch: B, Hidden: H, Act: vAct.buf, HPrev: vHPrev.buf, DH: vDH.buf,
					DXPre: vDX.buf, DHPre: vDHP.buf, DHPrev: vDHPrev.buf, Accumulate: c.accumulate,
					DHPreNext: vNext.buf, W: vW.buf, NextBatch: c.next})
				full, mag := gradProduct(next, H, 3, dh, dNext, w)
				wantDX, wantDHP, wantDHPrev := refGRUCellGrad(B, H, act, hPrev, full[:bh])
				for i, p := range prior {
					wantDHPrev[i] += p
				}
				tol := fusedGradTolerance(e.dt, 3*H, mag)
				if !c.inPlace {
					checkClose(e.t, "DH", e.get("DH", vDH), full, mag, SumTolerance(e.dt, 3*H+1))
				} else if rows > B {
					// DHPrev over DH's first Batch rows; the rows past
					// them hold the product.
					got := e.get("DH", vDH)
					checkClose(e.t, "DH past Batch", got[bh:], full[bh:], mag[bh:], SumTolerance(e.dt, 3*H+1))
				}
				checkClose(e.t, "DXPre", e.get("DXPre", vDX), wantDX, nil, tol)
				checkClose(e.t, "DHPre", e.get("DHPre", vDHP)[:3*bh], wantDHP, nil, tol)
				checkClose(e.t, "DHPrev", e.get("DHPrev", vDHPrev)[:bh], wantDHPrev, nil, tol)
				if !c.nextIsOut {
					checkExact(e.t, "DHPreNext (an input)", e.get("DHPreNext", vNext), dNext)
				}
				checkExact(e.t, "W (an input)", e.get("W", vW), w)
				checkExact(e.t, "Act (an input)", e.get("Act", vAct), act)
			})
		}
	})
}

// nextRows is a fused cell gradient's NextBatch resolved: 0 means batch.
func nextRows(batch, next int) int {
	if next == 0 {
		return batch
	}
	return next
}
