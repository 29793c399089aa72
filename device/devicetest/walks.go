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
// multiprocessors); the largest hidden size the CUDA device fuses by
// default and one above it, where its walk is the per-step calls.
var walkSizes = [][3]int{{1, 1, 1}, {3, 5, 4}, {17, 12, 3}, {5, 33, 3}, {9, 70, 2}, {70, 9, 3}, {6, 256, 2}, {2, 257, 2}}

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
		e.run("Misuse", func(e *env) { e.checkWalkMisuse(w) })
	})
}

// lstmWalkRun is one run of an LSTM walk's case: its buffers, filled with
// the same inputs for the walk and for its per-step calls.
type lstmWalkRun struct {
	a                                device.LSTMWalk
	pre, h0, c0, h, c, cLast, act, w vec
	preIn, h0In, c0In, wIn, bih, bhh []float64
	biasIH, biasHH                   vec
	nPre, nState, nSeq               int
}

func (e *env) lstmWalkRun(c walkCase, pre, h0, c0, w, bih, bhh []float64) *lstmWalkRun {
	B, H, T := c.batch, c.hidden, c.steps
	r := &lstmWalkRun{preIn: pre, h0In: h0, c0In: c0, wIn: w, bih: bih, bhh: bhh,
		nPre: 4 * T * B * H, nState: B * H, nSeq: T * B * H}
	r.pre, r.h0, r.c0, r.w = e.vec(pre), e.vec(h0), e.vec(c0), e.vec(w)
	r.biasIH, r.biasHH = e.vec(bih), e.vec(bhh)
	r.h = e.vec(nans(r.nSeq))
	r.a = device.LSTMWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, Pre: r.pre.buf, W: r.w.buf,
		BiasIH: r.biasIH.buf, BiasHH: r.biasHH.buf, H0: r.h0.buf, C0: r.c0.buf, H: r.h.buf}
	switch {
	case c.cLastIsC0:
		r.cLast = r.c0
		r.a.CLast = r.c0.buf
	case c.cLast:
		r.cLast = e.vec(nans(r.nState))
		r.a.CLast = r.cLast.buf
	default:
		r.c = e.vec(nans(r.nSeq))
		r.a.C = r.c.buf
	}
	switch c.act {
	case separateAct:
		r.act = e.vec(nans(r.nPre))
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
	var last, mags []float64
	for i := range T {
		t := i
		if c.reverse {
			t = T - 1 - i
		}
		full, mag := recProduct(B, H, 4, pre[4*t*bh:4*(t+1)*bh], hp, wts)
		act, cn, hn := refLSTMCell(B, H, full, bih, bhh, cp)
		tol := walkTolerance(e.dt, H, i, mag)
		got := e.get("H", walk.h)[t*bh : (t+1)*bh]
		checkClose(e.t, fmt.Sprintf("H at step %d (visited %d)", t, i), got, hn, nil, tol)
		copy(refC[t*bh:], cn)
		copy(refAct[4*t*bh:], act)
		copy(refPre[4*t*bh:], full)
		hp, cp, last, mags = hn, cn, cn, append(mags, mag...)
	}
	// Whole outputs: the last step's tolerance, the largest.
	tol := walkTolerance(e.dt, H, T-1, mags)
	// The walk against its per-step calls: every output, to the bit.
	checkExact(e.t, "H (walk against its steps)", e.get("H", walk.h), e.get("H", steps.h))
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
	var lastHPre, mags []float64
	for i := range T {
		t := i
		if c.reverse {
			t = T - 1 - i
		}
		hpre, mag := recProduct(B, H, 3, nil, hp, wts)
		act, hn := refGRUCell(B, H, xpre[3*t*bh:3*(t+1)*bh], hpre, bih, bhh, hp)
		got := e.get("H", walk.h)[t*bh : (t+1)*bh]
		checkClose(e.t, fmt.Sprintf("H at step %d (visited %d)", t, i), got, hn, nil, walkTolerance(e.dt, H, i, mag))
		copy(refAct[4*t*bh:], act)
		hp, lastHPre, mags = hn, hpre, append(mags, mag...)
	}
	tol := walkTolerance(e.dt, H, T-1, mags)
	checkExact(e.t, "H (walk against its steps)", e.get("H", walk.h), e.get("H", steps.h))
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
