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
	lengths              bool // sequences of several lengths (lengthRows)
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
	if c.lengths {
		s += "/Lengths"
	}
	return s
}

// walkLengthSizes are the shapes the walks are checked at with lengths
// too: one step; a tail of units; rows over several tiles (and tiles
// running part of their rows); narrow tiles of units (the CUDA device's
// at hidden 100: 16 units by 8 rows) over several tiles of rows; a hidden
// size past the fused bound (walked where the device fuses it).
var walkLengthSizes = [][3]int{{1, 1, 1}, {5, 33, 3}, {70, 9, 3}, {33, 100, 2}, {2, 257, 2}}

// lengthRows are the rows each of steps steps runs (a walk's Rows) for
// batch sequences sorted longest first, the b-th of length steps -
// ⌊b·steps/(batch+1)⌋: the first runs every step, and fewer run at each
// step after (17 sequences over 3 steps: 17, 12 and 6).
func lengthRows(batch, steps int) []int {
	rows := make([]int, steps)
	for b := range batch {
		for t := range steps - b*steps/(batch+1) {
			rows[t]++
		}
	}
	return rows
}

// rowsAt is rows on the device (a walk's RowsAt), or none for nil rows.
func (e *env) rowsAt(rows []int) device.Buffer {
	if rows == nil {
		return device.Buffer{}
	}
	v := make([]int32, len(rows))
	for i, n := range rows {
		v[i] = int32(n)
	}
	return e.ids(v).buf
}

// walkRowsOf is the rows step t of a walk runs: rows[t], or batch
// without lengths.
func walkRowsOf(rows []int, batch, t int) int {
	if rows == nil {
		return batch
	}
	return rows[t]
}

// enter writes into state, [steps, B, H] (or [B, H] with one slot, at of
// step t+1), what the sequences starting at each step t of a reverse walk
// with lengths read there: init's rows [rows[t+1], rows[t]), the rows the
// step runs and the one visited before it did not. A layer puts its
// initial state there before the walk (rnn's stack does).
func enter(state, init []float64, rows []int, hidden int, slot bool) {
	bh := len(init)
	for t := 0; t+1 < len(rows); t++ {
		at := (t + 1) * bh
		if slot {
			at = 0
		}
		copy(state[at+rows[t+1]*hidden:at+rows[t]*hidden], init[rows[t+1]*hidden:rows[t]*hidden])
	}
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
		// With lengths: each way, c in every step's slot and carried
		// (in C0 itself, and apart), where a reverse walk's sequences
		// starting at a step read the state the caller put there.
		for _, s := range walkLengthSizes {
			b, h, n := s[0], s[1], s[2]
			cs = append(cs,
				walkCase{batch: b, hidden: h, steps: n, act: actIsInput, lengths: true},
				walkCase{batch: b, hidden: h, steps: n, reverse: true, act: separateAct, lengths: true},
				walkCase{batch: b, hidden: h, steps: n, act: noAct, cLast: true, lengths: true},
				walkCase{batch: b, hidden: h, steps: n, reverse: true, act: noAct, cLast: true, cLastIsC0: true, lengths: true},
				walkCase{batch: b, hidden: h, steps: n, reverse: true, act: noAct, cLast: true, lengths: true},
				walkCase{gru: true, batch: b, hidden: h, steps: n, act: separateAct, lengths: true},
				walkCase{gru: true, batch: b, hidden: h, steps: n, reverse: true, act: separateAct, lengths: true})
		}
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
		var gcs []gradWalkCase
		for _, sz := range walkSizes {
			b, h, n := sz[0], sz[1], sz[2]
			gcs = append(gcs, gradWalkCase{b, h, n, false, true, false}, gradWalkCase{b, h, n, true, false, false})
		}
		for _, sz := range walkLengthSizes {
			b, h, n := sz[0], sz[1], sz[2]
			for _, rev := range []bool{false, true} {
				for _, in := range []bool{false, true} {
					gcs = append(gcs, gradWalkCase{b, h, n, rev, in, true})
				}
			}
		}
		for _, c := range gcs {
			e.run("LSTMGrad/"+c.String(), func(e *env) { e.checkLSTMGradWalk(w, c) })
			e.run("GRUGrad/"+c.String(), func(e *env) { e.checkGRUGradWalk(w, c) })
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

// walkStart is what a walk's state buffers hold before it: NaN (never
// read), but, in a reverse walk with lengths, the initial state at the
// rows where sequences start (enter), for H and C, or CLast (which then
// holds C0's rows).
func walkStart(c walkCase, rows []int, h0, c0 []float64) (h, cs, cLast []float64) {
	bh := c.batch * c.hidden
	h, cs, cLast = nans(c.steps*bh), nans(c.steps*bh), nans(bh)
	if c.reverse && rows != nil {
		enter(h, h0, rows, c.hidden, false)
		enter(cs, c0, rows, c.hidden, false)
		enter(cLast, c0, rows, c.hidden, true)
	}
	if c.cLastIsC0 {
		cLast = clone(c0)
	}
	return h, cs, cLast
}

func (e *env) lstmWalkRun(c walkCase, rows []int, pre, h0, c0, w, bih, bhh []float64) *lstmWalkRun {
	B, H, T := c.batch, c.hidden, c.steps
	hStart, cStart, cLastStart := walkStart(c, rows, h0, c0)
	r := &lstmWalkRun{pre: e.vec(pre), h0: e.vec(h0), c0: e.vec(c0), w: e.vec(w), h: e.vec(hStart)}
	r.a = device.LSTMWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, Pre: r.pre.buf, W: r.w.buf,
		BiasIH: e.vec(bih).buf, BiasHH: e.vec(bhh).buf, H0: r.h0.buf, C0: r.c0.buf, H: r.h.buf, Rows: rows, RowsAt: e.rowsAt(rows)}
	switch {
	case c.cLastIsC0:
		r.cLast = r.c0
		r.a.CLast = r.c0.buf
	case c.cLast:
		r.cLast = e.vec(cLastStart)
		r.a.CLast = r.cLast.buf
	default:
		r.c = e.vec(cStart)
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

// walkRowsFor is a case's Rows: lengthRows with lengths, else nil.
func walkRowsFor(lengths bool, batch, steps int) []int {
	if !lengths {
		return nil
	}
	return lengthRows(batch, steps)
}

// setRows copies the first n rows of width elements of src into dst at
// step at's block of [.., B, width] blocks: the rows a step ran.
func setRows(dst []float64, at, n, width int, src []float64) {
	copy(dst[at:at+n*width], src[:n*width])
}

func (e *env) checkLSTMWalk(w device.Walker, c walkCase) {
	B, H, T := c.batch, c.hidden, c.steps
	bh := B * H
	s := 1 / math.Sqrt(float64(H)) // as testLSTMCellFused's
	pre := e.uniform(4*T*bh, -2, 2)
	h0, c0 := e.uniform(bh, -1, 1), e.uniform(bh, -2, 2)
	wts := e.uniform(4*H*H, -s, s)
	bih, bhh := e.uniform(4*H, -1, 1), e.uniform(4*H, -1, 1)
	rows := walkRowsFor(c.lengths, B, T)
	walk := e.lstmWalkRun(c, rows, pre, h0, c0, wts, bih, bhh)
	steps := e.lstmWalkRun(c, rows, pre, h0, c0, wts, bih, bhh)
	if err := call(e.t, "LSTMWalk", func() error { return w.LSTMWalk(walk.a) }); err != nil {
		e.t.Fatalf("LSTMWalk: %v", err)
	}
	if err := call(e.t, "LSTMWalk.Queue", func() error { return steps.a.Queue(e.k) }); err != nil {
		e.t.Fatalf("LSTMWalk.Queue: %v", err)
	}
	// The reference walk, in float64, each step's output kept at its time
	// in the rows it ran; the other rows hold what they held before.
	wantH, wantC, _ := walkStart(c, rows, h0, c0)
	wantAct, wantPre := nans(4*T*bh), clone(pre)
	if c.act == actIsInput {
		wantAct = clone(pre)
	}
	hp, cp := clone(h0), clone(c0)
	gotH := e.get("H", walk.h)
	var mags []float64
	for i := range T {
		t := i
		if c.reverse {
			t = T - 1 - i
			if rows != nil && i > 0 {
				// The sequences starting here read the initial state.
				copy(hp[rows[t+1]*H:rows[t]*H], h0[rows[t+1]*H:rows[t]*H])
				copy(cp[rows[t+1]*H:rows[t]*H], c0[rows[t+1]*H:rows[t]*H])
			}
		}
		n := walkRowsOf(rows, B, t)
		full, mag := recProduct(B, H, 4, pre[4*t*bh:4*(t+1)*bh], hp, wts)
		act, cn, hn := refLSTMCell(B, H, full, bih, bhh, cp)
		tol := walkTolerance(e.dt, H, i, mag)
		checkClose(e.t, fmt.Sprintf("H at step %d (visited %d, %d rows)", t, i, n), gotH[t*bh:t*bh+n*H], hn[:n*H], nil, tol)
		setRows(wantH, t*bh, n, H, hn)
		setRows(wantC, t*bh, n, H, cn)
		setRows(wantAct, 4*t*bh, n, 4*H, act)
		setRows(wantPre, 4*t*bh, n, 4*H, full)
		copy(hp, hn[:n*H])
		copy(cp, cn[:n*H])
		mags = append(mags, mag...)
	}
	// Whole outputs: the last step's tolerance, the largest.
	tol := walkTolerance(e.dt, H, T-1, mags)
	// The walk against its per-step calls: every output, to the bit.
	checkExact(e.t, "H (walk against its steps)", gotH, e.get("H", steps.h))
	checkClose(e.t, "H", gotH, wantH, nil, tol)
	if c.cLast {
		checkExact(e.t, "CLast (walk against its steps)", e.get("CLast", walk.cLast), e.get("CLast", steps.cLast))
		// Each sequence's c at the last step it ran.
		checkClose(e.t, "CLast", e.get("CLast", walk.cLast), cp, nil, tol)
	} else {
		checkExact(e.t, "C (walk against its steps)", e.get("C", walk.c), e.get("C", steps.c))
		checkClose(e.t, "C", e.get("C", walk.c), wantC, nil, tol)
	}
	checkExact(e.t, "Pre (walk against its steps)", e.get("Pre", walk.pre), e.get("Pre", steps.pre))
	if c.act == separateAct {
		checkExact(e.t, "Act (walk against its steps)", e.get("Act", walk.act), e.get("Act", steps.act))
	}
	if c.act != noAct {
		checkClose(e.t, "Act", e.get("Act", walk.act), wantAct, nil, tol)
	} else {
		// Pre holds each step's full pre-activations, as after its Gemm.
		checkClose(e.t, "Pre", e.get("Pre", walk.pre), wantPre, nil, tol)
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
	rows := walkRowsFor(c.lengths, B, T)
	hStart, _, _ := walkStart(c, rows, h0, h0)
	type run struct {
		a                 device.GRUWalk
		xpre, hpre, h0, h vec
		act, w            vec
	}
	mk := func() *run {
		r := &run{xpre: e.vec(xpre), hpre: e.vec(nans(3 * bh)), h0: e.vec(h0), h: e.vec(hStart), w: e.vec(wts)}
		r.a = device.GRUWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, XPre: r.xpre.buf, HPre: r.hpre.buf,
			W: r.w.buf, BiasIH: e.vec(bih).buf, BiasHH: e.vec(bhh).buf, H0: r.h0.buf, H: r.h.buf, Rows: rows, RowsAt: e.rowsAt(rows)}
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
	wantH, wantAct, wantHPre := clone(hStart), nans(4*T*bh), nans(3*bh)
	hp := clone(h0)
	gotH := e.get("H", walk.h)
	var mags []float64
	for i := range T {
		t := i
		if c.reverse {
			t = T - 1 - i
			if rows != nil && i > 0 {
				copy(hp[rows[t+1]*H:rows[t]*H], h0[rows[t+1]*H:rows[t]*H])
			}
		}
		n := walkRowsOf(rows, B, t)
		hpre, mag := recProduct(B, H, 3, nil, hp, wts)
		act, hn := refGRUCell(B, H, xpre[3*t*bh:3*(t+1)*bh], hpre, bih, bhh, hp)
		checkClose(e.t, fmt.Sprintf("H at step %d (visited %d, %d rows)", t, i, n), gotH[t*bh:t*bh+n*H], hn[:n*H], nil, walkTolerance(e.dt, H, i, mag))
		setRows(wantH, t*bh, n, H, hn)
		setRows(wantAct, 4*t*bh, n, 4*H, act)
		setRows(wantHPre, 0, n, 3*H, hpre)
		copy(hp, hn[:n*H])
		mags = append(mags, mag...)
	}
	tol := walkTolerance(e.dt, H, T-1, mags)
	checkExact(e.t, "H (walk against its steps)", gotH, e.get("H", steps.h))
	checkClose(e.t, "H", gotH, wantH, nil, tol)
	checkExact(e.t, "HPre (walk against its steps)", e.get("HPre", walk.hpre), e.get("HPre", steps.hpre))
	// Each row's recurrent product of the last step that ran it.
	checkClose(e.t, "HPre", e.get("HPre", walk.hpre), wantHPre, nil, tol)
	if c.act == separateAct {
		checkExact(e.t, "Act (walk against its steps)", e.get("Act", walk.act), e.get("Act", steps.act))
		checkClose(e.t, "Act", e.get("Act", walk.act), wantAct, nil, tol)
	}
	checkExact(e.t, "XPre (an input)", e.get("XPre", walk.xpre), xpre)
	checkExact(e.t, "H0 (an input)", e.get("H0", walk.h0), h0)
	checkExact(e.t, "W (an input)", e.get("W", walk.w), wts)
}

// checkWalkMisuse checks that a walk's bad arguments are errors matching
// device.ErrShape (device.ErrForeignBuffer for a missing one): no steps,
// a state overlapping the outputs, both or neither of C and CLast, a short
// buffer, rows not given on both sides or out of range, a walk back's
// NextBatch out of range or without its product.
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
		// Lengths: both or neither of Rows and RowsAt, a count a step, each
		// in [1, Batch], and their device copy holding them.
		"LSTM/RowsAlone":   func() error { a := good; a.Rows = []int{2, 2, 1, 1}; return w.LSTMWalk(a) },
		"LSTM/RowsAtAlone": func() error { a := good; a.RowsAt = e.alloc(device.Int32, T); return w.LSTMWalk(a) },
		"LSTM/RowsShort": func() error {
			a := good
			a.Rows, a.RowsAt = []int{2, 2, 1}, e.alloc(device.Int32, T)
			return w.LSTMWalk(a)
		},
		"LSTM/NoRows": func() error {
			a := good
			a.Rows, a.RowsAt = []int{2, 0, 0, 0}, e.alloc(device.Int32, T)
			return w.LSTMWalk(a)
		},
		"GRU/RowsPastBatch": func() error {
			a := gru
			a.Rows, a.RowsAt = []int{3, 2, 1, 1}, e.alloc(device.Int32, T)
			return w.GRUWalk(a)
		},
		"GRU/ShortRowsAt": func() error {
			a := gru
			a.Rows, a.RowsAt = []int{2, 2, 1, 1}, e.alloc(device.Int32, T-1)
			return w.GRUWalk(a)
		},
		"LSTMGrad/NextBatchWithoutIn": func() error {
			a := device.LSTMGradWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Act: buf(4 * T * bh), C: buf(T * bh), C0: buf(bh),
				DH: buf(T * bh), DC: buf(bh), DPre: buf(4 * T * bh), W: buf(4 * H * H), NextBatch: 1}
			return w.LSTMGradWalk(a)
		},
		"GRUGrad/NextBatchPastBatch": func() error {
			a := device.GRUGradWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Act: buf(4 * T * bh), H: buf(T * bh), H0: buf(bh),
				DH: buf(T * bh), DH0: buf(bh), DXPre: buf(3 * T * bh), DHPre: buf(3 * T * bh), W: buf(3 * H * H),
				DHPreIn: buf(3 * bh), NextBatch: B + 1}
			return w.GRUGradWalk(a)
		},
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
	reverse, in, lengths bool
}

// nextRows is the rows of the product a walk back's case gives its first
// step walked back (NextBatch), with lengths: those of the step the
// forward visited after the walk's, all of them before a reverse walk's
// first (its sequences all run at step 0), half of the last step's
// after a walk's last (at least one).
func (c gradWalkCase) nextRows(rows []int) int {
	if rows == nil || !c.in {
		return 0
	}
	if c.reverse {
		return c.batch
	}
	return max(1, rows[c.steps-1]/2)
}

// inRows is the rows of the product a walk back's case hands in: its
// nextRows, or with 0 those of the first step walked back.
func (c gradWalkCase) inRows(rows []int) int {
	ts, _, _ := gradWalkOrder(c.steps, c.reverse)
	return productRows(rows, c.batch, ts[0], -1, c.nextRows(rows))
}

// productRows is the rows of the product step walked back i takes, from
// next (the step walked back before it, -1 for the case's own product,
// in; 0 for none): a step's NextBatch, resolved.
func productRows(rows []int, batch, t, next, in int) int {
	switch {
	case next >= 0:
		return walkRowsOf(rows, batch, next)
	case in > 0:
		return in
	}
	return walkRowsOf(rows, batch, t)
}

func (c gradWalkCase) String() string {
	s := fmt.Sprintf("%dx%dx%d", c.batch, c.hidden, c.steps)
	if c.reverse {
		s += "/Reverse"
	}
	if c.in {
		s += "/In"
	}
	if c.lengths {
		s += "/Lengths"
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
	rows := walkRowsFor(c.lengths, B, T)
	nin := c.nextRows(rows)
	var in []float64
	if c.in {
		// Its rows alone: all a walk reads of it.
		in = e.uniform(4*c.inRows(rows)*H, -1, 1)
	}
	type run struct {
		a                          device.LSTMGradWalk
		act, dh, dc, dpre, cs, wIn vec
	}
	mk := func(separate bool) *run {
		r := &run{act: e.vec(act), dh: e.vec(dh), dc: e.vec(dc), cs: e.vec(cs), wIn: e.vec(wts)}
		r.dpre = r.act
		if separate {
			// NaN where every element is written; with lengths the
			// rows a step does not run keep Act's, as over Act.
			start := nans(4 * T * bh)
			if rows != nil {
				start = act
			}
			r.dpre = e.vec(start)
		}
		r.a = device.LSTMGradWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, Act: r.act.buf, C: r.cs.buf,
			C0: e.vec(c0).buf, DH: r.dh.buf, DC: r.dc.buf, DPre: r.dpre.buf, W: r.wIn.buf,
			Rows: rows, RowsAt: e.rowsAt(rows), NextBatch: nin}
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
	// The reference walk back in float64, each step over the rows it runs,
	// its product over those of the step it comes from (rows past the
	// step's own take the product alone).
	ts, next, fprev := gradWalkOrder(T, c.reverse)
	wantDPre, wantDH, d := clone(act), clone(dh), clone(dc)
	gotDPre := e.get("DPre", walk.dpre)
	var mags []float64
	for i, t := range ts {
		n := walkRowsOf(rows, B, t)
		dnext, nn := in, productRows(rows, B, t, next[i], nin)
		if next[i] >= 0 {
			dnext = wantDPre[4*next[i]*bh : 4*(next[i]+1)*bh]
		}
		full, mag := clone(dh[t*bh:(t+1)*bh]), make([]float64, bh)
		if dnext != nil {
			full, mag = gradProduct(nn, H, 4, full, dnext, wts)
		} else {
			nn = n
		}
		cp := c0
		if fprev[i] >= 0 {
			cp = cs[fprev[i]*bh : (fprev[i]+1)*bh]
		}
		dp, dcp := refLSTMCellGrad(B, H, act[4*t*bh:4*(t+1)*bh], cp, cs[t*bh:(t+1)*bh], full, d)
		mags = append(mags, mag...)
		tol := gradWalkTolerance(e.dt, 4*H, i, mags)
		checkClose(e.t, fmt.Sprintf("DPre at step %d (walked back %d, %d rows)", t, i, n), gotDPre[4*t*bh:4*t*bh+4*n*H], dp[:4*n*H], nil, tol)
		setRows(wantDPre, 4*t*bh, n, 4*H, dp)
		setRows(wantDH, t*bh, max(n, nn), H, full)
		copy(d, dcp[:n*H])
	}
	tol := gradWalkTolerance(e.dt, 4*H, T, mags)
	checkClose(e.t, "DPre", gotDPre, wantDPre, nil, tol)
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
	rows := walkRowsFor(c.lengths, B, T)
	nin := c.nextRows(rows)
	var in []float64
	if c.in {
		// Its rows alone: all a walk reads of it.
		in = e.uniform(3*c.inRows(rows)*H, -1, 1)
	}
	type run struct {
		a                     device.GRUGradWalk
		dh, dh0, dxpre, dhpre vec
	}
	mk := func() *run {
		r := &run{dh: e.vec(dh), dh0: e.vec(nans(bh)), dxpre: e.vec(nans(3 * T * bh)), dhpre: e.vec(nans(3 * T * bh))}
		r.a = device.GRUGradWalk{DType: e.dt, Steps: T, Batch: B, Hidden: H, Reverse: c.reverse, Act: e.vec(act).buf,
			H: e.vec(hs).buf, H0: e.vec(h0).buf, DH: r.dh.buf, DH0: r.dh0.buf, DXPre: r.dxpre.buf, DHPre: r.dhpre.buf,
			W: e.vec(wts).buf, Rows: rows, RowsAt: e.rowsAt(rows), NextBatch: nin}
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
	// The reference, each step over its rows as checkLSTMGradWalk's; the
	// rows a step does not run keep what they held (NaN in the outputs).
	ts, next, fprev := gradWalkOrder(T, c.reverse)
	wantDH, wantDH0 := clone(dh), nans(bh)
	wantDXPre, wantDHPre := nans(3*T*bh), nans(3*T*bh)
	gotDXPre := e.get("DXPre", walk.dxpre)
	var mags []float64
	for i, t := range ts {
		n := walkRowsOf(rows, B, t)
		dnext, nn := in, productRows(rows, B, t, next[i], nin)
		if next[i] >= 0 {
			dnext = wantDHPre[3*next[i]*bh : 3*(next[i]+1)*bh]
		}
		full, mag := clone(wantDH[t*bh:(t+1)*bh]), make([]float64, bh)
		if dnext != nil {
			full, mag = gradProduct(nn, H, 3, full, dnext, wts)
		} else {
			nn = n
		}
		hp := h0
		if fprev[i] >= 0 {
			hp = hs[fprev[i]*bh : (fprev[i]+1)*bh]
		}
		dx, dhp, direct := refGRUCellGrad(B, H, act[4*t*bh:4*(t+1)*bh], hp, full)
		mags = append(mags, mag...)
		tol := gradWalkTolerance(e.dt, 3*H, i, mags)
		checkClose(e.t, fmt.Sprintf("DXPre at step %d (walked back %d, %d rows)", t, i, n), gotDXPre[3*t*bh:3*t*bh+3*n*H], dx[:3*n*H], nil, tol)
		setRows(wantDH, t*bh, max(n, nn), H, full)
		setRows(wantDXPre, 3*t*bh, n, 3*H, dx)
		setRows(wantDHPre, 3*t*bh, n, 3*H, dhp)
		if fprev[i] >= 0 {
			for k, v := range direct[:n*H] {
				wantDH[fprev[i]*bh+k] += v
			}
		} else {
			setRows(wantDH0, 0, n, H, direct)
		}
	}
	tol := gradWalkTolerance(e.dt, 3*H, T, mags)
	checkClose(e.t, "DH", e.get("DH", walk.dh), wantDH, nil, tol)
	checkClose(e.t, "DH0", e.get("DH0", walk.dh0), wantDH0, nil, tol)
	checkClose(e.t, "DXPre", gotDXPre, wantDXPre, nil, tol)
	checkClose(e.t, "DHPre", e.get("DHPre", walk.dhpre), wantDHPre, nil, tol)
}
