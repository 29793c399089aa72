package devicetest

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// walkSizes are the (Batch, Hidden, Steps) shapes the walks
// (device.LSTMWalk and GRUWalk) are checked at: one step; the fused
// cells' tile and chunk tails (fusedCellSizes) over a few steps; more rows
// than a tile, so that a device's walk whose blocks take several tiles of
// rows in turn does (the CUDA device's, on a grid cut to the GPU's
// multiprocessors); a hidden size whose walk takes narrow tiles of units
// (the CUDA device's keep their slice of W on chip: 8 or 4 units by 16 or
// 32 rows at hidden 203), with a tail of units and several tiles of rows;
// the largest hidden size the CUDA device fuses by default and one above
// it, where its walk is the per-step calls; a hidden size whose walk's
// slice of W passes the 48 KiB of shared memory a CUDA block has without
// opting into more (400 in float64: 4 units, 4·4·402·8 = 51456 bytes),
// where the device fuses it (cuda.Config.FuseCellsUpTo raised).
var walkSizes = [][3]int{{1, 1, 1}, {3, 5, 4}, {17, 12, 3}, {5, 33, 3}, {9, 70, 2}, {70, 9, 3}, {33, 203, 2}, {6, 256, 2}, {2, 257, 2}, {2, 400, 2}}

// walkTolerance is the tolerance of a walk's i-th step visited against the
// float64 reference walk: the fused cell's (fusedTolerance, whose absolute
// floor already bounds how far a cell moves its outputs for a change of
// its pre-activations), 4 times more per step before it, as each step
// carries the error of the state it reads on (|∂h/∂hprev| ≤ Σ|w| ≤ 4 with
// W uniform in ±1/√H over H terms, and the cell's 4).
func walkTolerance(dt device.DType, hidden, i int, mag []float64) Tolerance {
	tol := fusedTolerance(dt, hidden, mag)
	tol.Abs *= math.Pow(4, float64(i))
	return tol
}

// gradWalkTolerance is walkTolerance for a walk back's i-th step, from
// the fused cell gradients' tolerance of a product of terms terms.
func gradWalkTolerance(dt device.DType, terms, i int, mag []float64) Tolerance {
	tol := fusedGradTolerance(dt, terms, mag)
	tol.Abs *= math.Pow(4, float64(i))
	return tol
}

// walkCase is one walk to check: LSTM or GRU, its shape and direction,
// where its activations go and (LSTM) its cell states.
type walkCase struct {
	gru                  bool
	batch, hidden, steps int
	reverse              bool
	act                  actMode
	cLast, cLastIsC0     bool // LSTM: c carried in CLast (which may be C0), not in C
}

func (c walkCase) String() string {
	s := fmt.Sprintf("%dx%dx%d", c.batch, c.hidden, c.steps)
	if c.reverse {
		s += "/Reverse"
	}
	s += "/" + c.act.String()
	switch {
	case c.cLastIsC0:
		s += "/CLastIsC0"
	case c.cLast:
		s += "/CLast"
	}
	return s
}

// testWalks checks that a walk gives the per-step calls it stands for
// (LSTMWalk.Queue, GRUWalk.Queue) on the same device to the bit, every
// output, and that both agree with a float64 reference walk; that the
// inputs are left as they were; and that a walk's arguments are checked.
func testWalks(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		w, ok := e.k.(device.Walker)
		if !ok {
			e.t.Skipf("%s's Kernels take no walks (device.Walker)", e.dev.Name())
		}
		var cs []walkCase
		for _, s := range walkSizes {
			b, h, n := s[0], s[1], s[2]
			cs = append(cs,
				walkCase{batch: b, hidden: h, steps: n, act: actIsInput},
				walkCase{batch: b, hidden: h, steps: n, reverse: true, act: noAct, cLast: true, cLastIsC0: true},
				walkCase{gru: true, batch: b, hidden: h, steps: n, act: separateAct},
				walkCase{gru: true, batch: b, hidden: h, steps: n, reverse: true, act: noAct})
		}
		cs = append(cs, walkCase{batch: 5, hidden: 33, steps: 3, reverse: true, act: separateAct, cLast: true},
			walkCase{batch: 9, hidden: 70, steps: 2, act: noAct})
		for _, c := range cs {
			cell := "LSTM"
			if c.gru {
				cell = "GRU"
			}
			e.run(cell+"/"+c.String(), func(e *env) {
				if c.gru {
					e.checkGRUWalk(w, c)
				} else {
					e.checkLSTMWalk(w, c)
				}
			})
		}
		// The walks back: each shape both ways, with and without the
		// product of a step beyond the walk for the first walked back.
		for _, sz := range walkSizes {
			b, h, n := sz[0], sz[1], sz[2]
			for _, c := range []gradWalkCase{{b, h, n, false, true}, {b, h, n, true, false}} {
				e.run("LSTMGrad/"+c.String(), func(e *env) { e.checkLSTMGradWalk(w, c) })
				e.run("GRUGrad/"+c.String(), func(e *env) { e.checkGRUGradWalk(w, c) })
			}
		}
		e.run("Misuse", func(e *env) { e.checkWalkMisuse(w) })
	})
}

// lstmWalkRun is one run of an LSTM walk's case: its buffers, filled with
// the same inputs for the walk and for its per-step calls.
type lstmWalkRun struct {
	a                                device.LSTMWalk
	pre, h0, c0, h, c, cLast, act, w vec
}

func (e *env) lstmWalkRun(c walkCase, pre, h0, c0, w, bih, bhh []float64) *lstmWalkRun {
	B, H, T := c.batch, c.hidden, c.steps
	r := &lstmWalkRun{pre: e.vec(pre), h0: e.vec(h0), c0: e.vec(c0), w: e.vec(w), h: e.vec(nans(T * B * H))}
	r.a = device.LSTMWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, Pre: r.pre.buf, W: r.w.buf,
		BiasIH: e.vec(bih).buf, BiasHH: e.vec(bhh).buf, H0: r.h0.buf, C0: r.c0.buf, H: r.h.buf}
	switch {
	case c.cLastIsC0:
		r.cLast = r.c0
		r.a.CLast = r.c0.buf
	case c.cLast:
		r.cLast = e.vec(nans(B * H))
		r.a.CLast = r.cLast.buf
	default:
		r.c = e.vec(nans(T * B * H))
		r.a.C = r.c.buf
	}
	switch c.act {
	case separateAct:
		r.act = e.vec(nans(4 * T * B * H))
		r.a.Act = r.act.buf
	case actIsInput:
		r.act, r.a.Act = r.pre, r.pre.buf
	}
	return r
}

func (e *env) checkLSTMWalk(w device.Walker, c walkCase) {
	B, H, T := c.batch, c.hidden, c.steps
	bh := B * H
	s := 1 / math.Sqrt(float64(H)) // as testLSTMCellFused's
	pre := e.uniform(4*T*bh, -2, 2)
	h0, c0 := e.uniform(bh, -1, 1), e.uniform(bh, -2, 2)
	wts := e.uniform(4*H*H, -s, s)
	bih, bhh := e.uniform(4*H, -1, 1), e.uniform(4*H, -1, 1)
	walk := e.lstmWalkRun(c, pre, h0, c0, wts, bih, bhh)
	steps := e.lstmWalkRun(c, pre, h0, c0, wts, bih, bhh)
	if err := call(e.t, "LSTMWalk", func() error { return w.LSTMWalk(walk.a) }); err != nil {
		e.t.Fatalf("LSTMWalk: %v", err)
	}
	if err := call(e.t, "LSTMWalk.Queue", func() error { return steps.a.Queue(e.k) }); err != nil {
		e.t.Fatalf("LSTMWalk.Queue: %v", err)
	}
	// The reference walk, in float64, each step's output kept at its time.
	refC := make([]float64, T*bh)
	refAct, refPre := make([]float64, 4*T*bh), make([]float64, 4*T*bh)
	hp, cp := h0, c0
	gotH := e.get("H", walk.h)
	var last, mags []float64
	for i := range T {
		t := i
		if c.reverse {
			t = T - 1 - i
		}
		full, mag := recProduct(B, H, 4, pre[4*t*bh:4*(t+1)*bh], hp, wts)
		act, cn, hn := refLSTMCell(B, H, full, bih, bhh, cp)
		tol := walkTolerance(e.dt, H, i, mag)
		checkClose(e.t, fmt.Sprintf("H at step %d (visited %d)", t, i), gotH[t*bh:(t+1)*bh], hn, nil, tol)
		copy(refC[t*bh:], cn)
		copy(refAct[4*t*bh:], act)
		copy(refPre[4*t*bh:], full)
		hp, cp, last, mags = hn, cn, cn, append(mags, mag...)
	}
	// Whole outputs: the last step's tolerance, the largest.
	tol := walkTolerance(e.dt, H, T-1, mags)
	// The walk against its per-step calls: every output, to the bit.
	checkExact(e.t, "H (walk against its steps)", gotH, e.get("H", steps.h))
	if c.cLast {
		checkExact(e.t, "CLast (walk against its steps)", e.get("CLast", walk.cLast), e.get("CLast", steps.cLast))
		checkClose(e.t, "CLast", e.get("CLast", walk.cLast), last, nil, tol)
	} else {
		checkExact(e.t, "C (walk against its steps)", e.get("C", walk.c), e.get("C", steps.c))
		checkClose(e.t, "C", e.get("C", walk.c), refC, nil, tol)
	}
	checkExact(e.t, "Pre (walk against its steps)", e.get("Pre", walk.pre), e.get("Pre", steps.pre))
	if c.act == separateAct {
		checkExact(e.t, "Act (walk against its steps)", e.get("Act", walk.act), e.get("Act", steps.act))
	}
	if c.act != noAct {
		checkClose(e.t, "Act", e.get("Act", walk.act), refAct, nil, tol)
	} else {
		// Pre holds each step's full pre-activations, as after its Gemm.
		checkClose(e.t, "Pre", e.get("Pre", walk.pre), refPre, nil, tol)
	}
	checkExact(e.t, "H0 (an input)", e.get("H0", walk.h0), h0)
	if !c.cLastIsC0 {
		checkExact(e.t, "C0 (an input)", e.get("C0", walk.c0), c0)
	}
	checkExact(e.t, "W (an input)", e.get("W", walk.w), wts)
}

func (e *env) checkGRUWalk(w device.Walker, c walkCase) {
	B, H, T := c.batch, c.hidden, c.steps
	bh := B * H
	s := 1 / math.Sqrt(float64(H))
	xpre := e.uniform(3*T*bh, -2, 2)
	h0 := e.uniform(bh, -1, 1)
	wts := e.uniform(3*H*H, -s, s)
	bih, bhh := e.uniform(3*H, -1, 1), e.uniform(3*H, -1, 1)
	type run struct {
		a                 device.GRUWalk
		xpre, hpre, h0, h vec
		act, w            vec
	}
	mk := func() *run {
		r := &run{xpre: e.vec(xpre), hpre: e.vec(nans(3 * bh)), h0: e.vec(h0), h: e.vec(nans(T * bh)), w: e.vec(wts)}
		r.a = device.GRUWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, XPre: r.xpre.buf, HPre: r.hpre.buf,
			W: r.w.buf, BiasIH: e.vec(bih).buf, BiasHH: e.vec(bhh).buf, H0: r.h0.buf, H: r.h.buf}
		if c.act == separateAct {
			r.act = e.vec(nans(4 * T * bh))
			r.a.Act = r.act.buf
		}
		return r
	}
	walk, steps := mk(), mk()
	if err := call(e.t, "GRUWalk", func() error { return w.GRUWalk(walk.a) }); err != nil {
		e.t.Fatalf("GRUWalk: %v", err)
	}
	if err := call(e.t, "GRUWalk.Queue", func() error { return steps.a.Queue(e.k) }); err != nil {
		e.t.Fatalf("GRUWalk.Queue: %v", err)
	}
	refAct := make([]float64, 4*T*bh)
	hp := h0
	gotH := e.get("H", walk.h)
	var lastHPre, mags []float64
	for i := range T {
		t := i
		if c.reverse {
			t = T - 1 - i
		}
		hpre, mag := recProduct(B, H, 3, nil, hp, wts)
		act, hn := refGRUCell(B, H, xpre[3*t*bh:3*(t+1)*bh], hpre, bih, bhh, hp)
		checkClose(e.t, fmt.Sprintf("H at step %d (visited %d)", t, i), gotH[t*bh:(t+1)*bh], hn, nil, walkTolerance(e.dt, H, i, mag))
		copy(refAct[4*t*bh:], act)
		hp, lastHPre, mags = hn, hpre, append(mags, mag...)
	}
	tol := walkTolerance(e.dt, H, T-1, mags)
	checkExact(e.t, "H (walk against its steps)", gotH, e.get("H", steps.h))
	checkExact(e.t, "HPre (walk against its steps)", e.get("HPre", walk.hpre), e.get("HPre", steps.hpre))
	checkClose(e.t, "HPre (the last step's)", e.get("HPre", walk.hpre), lastHPre, nil, tol)
	if c.act == separateAct {
		checkExact(e.t, "Act (walk against its steps)", e.get("Act", walk.act), e.get("Act", steps.act))
		checkClose(e.t, "Act", e.get("Act", walk.act), refAct, nil, tol)
	}
	checkExact(e.t, "XPre (an input)", e.get("XPre", walk.xpre), xpre)
	checkExact(e.t, "H0 (an input)", e.get("H0", walk.h0), h0)
	checkExact(e.t, "W (an input)", e.get("W", walk.w), wts)
}

// checkWalkMisuse checks that a walk's bad arguments are errors matching
// device.ErrShape (device.ErrForeignBuffer for a missing one): no steps,
// a state overlapping the outputs, both or neither of C and CLast, a short
// buffer.
func (e *env) checkWalkMisuse(w device.Walker) {
	B, H, T := 2, 3, 4
	bh := B * H
	buf := func(n int) device.Buffer { return e.alloc(e.dt, n) }
	h := buf(T * bh)
	good := device.LSTMWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Pre: buf(4 * T * bh), W: buf(4 * H * H),
		H0: buf(bh), C0: buf(bh), H: h, C: buf(T * bh)}
	gru := device.GRUWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, XPre: buf(3 * T * bh), HPre: buf(3 * bh),
		W: buf(3 * H * H), H0: buf(bh), H: h}
	bad := map[string]func() error{
		"LSTM/NoSteps":     func() error { a := good; a.Steps = 0; return w.LSTMWalk(a) },
		"LSTM/H0OverlapsH": func() error { a := good; a.H0 = h.Elems(e.dt, bh, bh); return w.LSTMWalk(a) },
		"LSTM/CAndCLast":   func() error { a := good; a.CLast = buf(bh); return w.LSTMWalk(a) },
		"LSTM/NoC":         func() error { a := good; a.C = device.Buffer{}; return w.LSTMWalk(a) },
		"LSTM/ShortPre":    func() error { a := good; a.Pre = buf(4*T*bh - 1); return w.LSTMWalk(a) },
		"GRU/NoSteps":      func() error { a := gru; a.Steps = 0; return w.GRUWalk(a) },
		"GRU/H0OverlapsH":  func() error { a := gru; a.H0 = h.Elems(e.dt, (T-1)*bh, bh); return w.GRUWalk(a) },
		"GRU/ShortHPre":    func() error { a := gru; a.HPre = buf(3*bh - 1); return w.GRUWalk(a) },
		"GRU/ShortAct":     func() error { a := gru; a.Act = buf(4*T*bh - 1); return w.GRUWalk(a) },
	}
	for name, f := range bad {
		if err := call(e.t, name, f); !errors.Is(err, device.ErrShape) {
			e.t.Errorf("%s: got %v, want an error matching device.ErrShape", name, err)
		}
	}
	if err := call(e.t, "LSTM/NoW", func() error { a := good; a.W = device.Buffer{}; return w.LSTMWalk(a) }); !errors.Is(err, device.ErrForeignBuffer) {
		e.t.Errorf("LSTM/NoW: got %v, want an error matching device.ErrForeignBuffer", err)
	}
	for name, f := range map[string]func() error{
		"LSTM": func() error { return w.LSTMWalk(good) },
		"GRU":  func() error { return w.GRUWalk(gru) },
	} {
		if err := call(e.t, name, f); err != nil {
			e.t.Errorf("%s with good arguments: %v", name, err)
		}
	}
	e.sync()
}

// gradWalkCase is one walk back to check: its shape, the forward's
// direction, and whether the first step walked back gets a product.
type gradWalkCase struct {
	batch, hidden, steps int
	reverse, in          bool
}

func (c gradWalkCase) String() string {
	s := fmt.Sprintf("%dx%dx%d", c.batch, c.hidden, c.steps)
	if c.reverse {
		s += "/Reverse"
	}
	if c.in {
		s += "/In"
	}
	return s
}

// gates returns n gate activations for G gates of [rows, H] blocks: σ of
// uniforms, but tanh for the LSTM's g (gate 2 of 4) and the GRU's n (gate
// 2 of 4), and the GRU's h_n + bh_n (gate 3 of 4) uniform in ±2.
func (e *env) gates(rows, hidden int, gru bool) []float64 {
	x := e.uniform(rows*4*hidden, -3, 3)
	for i := range x {
		switch g := i / hidden % 4; {
		case g == 2:
			x[i] = math.Tanh(x[i])
		case g == 3 && gru:
			x[i] = x[i] * 2 / 3
		default:
			x[i] = sigmoid(x[i])
		}
	}
	roundAll(e.dt, x)
	return x
}

// gradWalkOrder lists the steps of a walk back in the order it visits
// them, with the step walked back before each (-1 for none) and the step
// the forward visited before each (-1 for none): the seam's definition,
// restated.
func gradWalkOrder(steps int, reverse bool) (ts, next, fprev []int) {
	for i := range steps {
		t, n, p := steps-1-i, steps-i, steps-2-i
		if reverse {
			t, n, p = i, i-1, i+1
			if p == steps {
				p = -1
			}
		}
		if i == 0 {
			n = -1
		}
		ts, next, fprev = append(ts, t), append(next, n), append(fprev, p)
	}
	return ts, next, fprev
}

func (e *env) checkLSTMGradWalk(w device.Walker, c gradWalkCase) {
	B, H, T := c.batch, c.hidden, c.steps
	bh := B * H
	s := 1 / math.Sqrt(float64(H))
	act := e.gates(T*B, H, false)
	cs, c0 := e.uniform(T*bh, -2, 2), e.uniform(bh, -2, 2)
	dh, dc := e.uniform(T*bh, -1, 1), e.uniform(bh, -1, 1)
	wts := e.uniform(4*H*H, -s, s)
	var in []float64
	if c.in {
		in = e.uniform(4*bh, -1, 1)
	}
	type run struct {
		a                          device.LSTMGradWalk
		act, dh, dc, dpre, cs, wIn vec
	}
	mk := func(separate bool) *run {
		r := &run{act: e.vec(act), dh: e.vec(dh), dc: e.vec(dc), cs: e.vec(cs), wIn: e.vec(wts)}
		r.dpre = r.act
		if separate {
			r.dpre = e.vec(nans(4 * T * bh))
		}
		r.a = device.LSTMGradWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, Act: r.act.buf, C: r.cs.buf,
			C0: e.vec(c0).buf, DH: r.dh.buf, DC: r.dc.buf, DPre: r.dpre.buf, W: r.wIn.buf}
		if c.in {
			r.a.DPreIn = e.vec(in).buf
		}
		return r
	}
	// The walk's DPre over its Act (as the layers run it), its steps' in a
	// buffer of their own: the same values either way.
	walk, steps := mk(false), mk(true)
	if err := call(e.t, "LSTMGradWalk", func() error { return w.LSTMGradWalk(walk.a) }); err != nil {
		e.t.Fatalf("LSTMGradWalk: %v", err)
	}
	if err := call(e.t, "LSTMGradWalk.Queue", func() error { return steps.a.Queue(e.k) }); err != nil {
		e.t.Fatalf("LSTMGradWalk.Queue: %v", err)
	}
	checkExact(e.t, "DPre (walk against its steps)", e.get("DPre", walk.dpre), e.get("DPre", steps.dpre))
	checkExact(e.t, "DH (walk against its steps)", e.get("DH", walk.dh), e.get("DH", steps.dh))
	checkExact(e.t, "DC (walk against its steps)", e.get("DC", walk.dc), e.get("DC", steps.dc))
	// The reference walk back in float64.
	ts, next, fprev := gradWalkOrder(T, c.reverse)
	wantDPre, wantDH, d := make([]float64, 4*T*bh), clone(dh), clone(dc)
	gotDPre := e.get("DPre", walk.dpre)
	var mags []float64
	for i, t := range ts {
		dnext := in
		if next[i] >= 0 {
			dnext = wantDPre[4*next[i]*bh : 4*(next[i]+1)*bh]
		}
		full, mag := clone(dh[t*bh:(t+1)*bh]), make([]float64, bh)
		if dnext != nil {
			full, mag = gradProduct(B, H, 4, full, dnext, wts)
		}
		cp := c0
		if fprev[i] >= 0 {
			cp = cs[fprev[i]*bh : (fprev[i]+1)*bh]
		}
		dp, dcp := refLSTMCellGrad(B, H, act[4*t*bh:4*(t+1)*bh], cp, cs[t*bh:(t+1)*bh], full, d)
		mags = append(mags, mag...)
		tol := gradWalkTolerance(e.dt, 4*H, i, mags)
		checkClose(e.t, fmt.Sprintf("DPre at step %d (walked back %d)", t, i), gotDPre[4*t*bh:4*(t+1)*bh], dp, nil, tol)
		copy(wantDPre[4*t*bh:], dp)
		copy(wantDH[t*bh:], full)
		d = dcp
	}
	tol := gradWalkTolerance(e.dt, 4*H, T, mags)
	checkClose(e.t, "DH", e.get("DH", walk.dh), wantDH, nil, tol)
	checkClose(e.t, "DC", e.get("DC", walk.dc), d, nil, tol)
	checkExact(e.t, "C (an input)", e.get("C", walk.cs), cs)
	checkExact(e.t, "W (an input)", e.get("W", walk.wIn), wts)
}

func (e *env) checkGRUGradWalk(w device.Walker, c gradWalkCase) {
	B, H, T := c.batch, c.hidden, c.steps
	bh := B * H
	s := 1 / math.Sqrt(float64(H))
	act := e.gates(T*B, H, true)
	hs, h0 := e.uniform(T*bh, -1, 1), e.uniform(bh, -1, 1)
	dh := e.uniform(T*bh, -1, 1)
	wts := e.uniform(3*H*H, -s, s)
	var in []float64
	if c.in {
		in = e.uniform(3*bh, -1, 1)
	}
	type run struct {
		a                     device.GRUGradWalk
		dh, dh0, dxpre, dhpre vec
	}
	mk := func() *run {
		r := &run{dh: e.vec(dh), dh0: e.vec(nans(bh)), dxpre: e.vec(nans(3 * T * bh)), dhpre: e.vec(nans(3 * T * bh))}
		r.a = device.GRUGradWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, Act: e.vec(act).buf,
			H: e.vec(hs).buf, H0: e.vec(h0).buf, DH: r.dh.buf, DH0: r.dh0.buf, DXPre: r.dxpre.buf, DHPre: r.dhpre.buf,
			W: e.vec(wts).buf}
		if c.in {
			r.a.DHPreIn = e.vec(in).buf
		}
		return r
	}
	walk, steps := mk(), mk()
	if err := call(e.t, "GRUGradWalk", func() error { return w.GRUGradWalk(walk.a) }); err != nil {
		e.t.Fatalf("GRUGradWalk: %v", err)
	}
	if err := call(e.t, "GRUGradWalk.Queue", func() error { return steps.a.Queue(e.k) }); err != nil {
		e.t.Fatalf("GRUGradWalk.Queue: %v", err)
	}
	for _, o := range []struct {
		name        string
		walk, steps vec
	}{{"DH", walk.dh, steps.dh}, {"DH0", walk.dh0, steps.dh0}, {"DXPre", walk.dxpre, steps.dxpre}, {"DHPre", walk.dhpre, steps.dhpre}} {
		checkExact(e.t, o.name+" (walk against its steps)", e.get(o.name, o.walk), e.get(o.name, o.steps))
	}
	ts, next, fprev := gradWalkOrder(T, c.reverse)
	wantDH, wantDH0 := clone(dh), make([]float64, bh)
	wantDHPre := make([]float64, 3*T*bh)
	gotDXPre := e.get("DXPre", walk.dxpre)
	var mags []float64
	for i, t := range ts {
		dnext := in
		if next[i] >= 0 {
			dnext = wantDHPre[3*next[i]*bh : 3*(next[i]+1)*bh]
		}
		full, mag := clone(wantDH[t*bh:(t+1)*bh]), make([]float64, bh)
		if dnext != nil {
			full, mag = gradProduct(B, H, 3, full, dnext, wts)
		}
		hp := h0
		if fprev[i] >= 0 {
			hp = hs[fprev[i]*bh : (fprev[i]+1)*bh]
		}
		dx, dhp, direct := refGRUCellGrad(B, H, act[4*t*bh:4*(t+1)*bh], hp, full)
		mags = append(mags, mag...)
		tol := gradWalkTolerance(e.dt, 3*H, i, mags)
		checkClose(e.t, fmt.Sprintf("DXPre at step %d (walked back %d)", t, i), gotDXPre[3*t*bh:3*(t+1)*bh], dx, nil, tol)
		copy(wantDH[t*bh:], full)
		copy(wantDHPre[3*t*bh:], dhp)
		if fprev[i] >= 0 {
			for k, v := range direct {
				wantDH[fprev[i]*bh+k] += v
			}
		} else {
			copy(wantDH0, direct)
		}
	}
	tol := gradWalkTolerance(e.dt, 3*H, T, mags)
	checkClose(e.t, "DH", e.get("DH", walk.dh), wantDH, nil, tol)
	checkClose(e.t, "DH0", e.get("DH0", walk.dh0), wantDH0, nil, tol)
	checkClose(e.t, "DHPre", e.get("DHPre", walk.dhpre), wantDHPre, nil, tol)
}
