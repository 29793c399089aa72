package rnn

import (
	"context"

	"github.com/gocurrent/gocurrent/device"
)

// GRU is a stack of GRU layers with PyTorch's (and cuDNN's) equations, in
// which the reset gate multiplies the recurrent product plus its bias; gate
// order (r, z, n); parameters as LSTM's with 3·Hidden rows. It is used by
// one goroutine at a time, as LSTM is.
type GRU struct{ *stack }

// NewGRU allocates a GRU stack on d and initialises its parameters, as
// NewLSTM does.
func NewGRU(ctx context.Context, d device.Device, c Config) (*GRU, error) {
	s, err := newStack(ctx, d, c, gruCell{})
	if err != nil {
		return nil, err
	}
	return &GRU{s}, nil
}

// gruCell is the GRU's step: one device.GRUCell given the recurrent
// weights (its fused form), which computes the recurrent product into a
// buffer of its own (the reset gate multiplies it, so it cannot be added
// into the input projection), adds the biases, applies the gates and
// writes h; the device runs it as one kernel or as a GEMM and the cell.
// In training it saves r, z, n and the recurrent product plus its bias,
// four blocks of H, in the layer's gates. Backward keeps the input-side
// and recurrent pre-activation gradients apart; each step's GRUCellGrad
// is given the recurrent ones of the step after it (its fused form), whose
// product with W_hh it adds into the step's dh before it reads it.
type gruCell struct{}

var _ cell = gruCell{}

func (gruCell) name() string   { return "GRU" }
func (gruCell) gates() int     { return GRUGates }
func (gruCell) carriesC() bool { return false }

// planPass: the input projection of a window's steps and one step's
// recurrent product.
func (gruCell) planPass(tmp *arena, _ bool, steps, B, H int, p *pass) {
	p.xpre, p.hpre = tmp.take(steps*B*3*H), tmp.take(B*3*H)
}

func (gruCell) planLayer(*arena, bool, int, int, int, int, *layerBufs) {}

// planGrads: the two pre-activation gradients of a window's steps, sets
// times.
func (gruCell) planGrads(g *arena, steps, B, H, sets int, gb *gradBufs) {
	for i := range 2 {
		if i < sets {
			gb.dxp[i], gb.dhp[i] = g.take(steps*3*B*H), g.take(steps*3*B*H)
		} else {
			gb.dxp[i], gb.dhp[i] = gb.dxp[0], gb.dhp[0]
		}
	}
}

func (gruCell) projection(lp *layerPass) device.Buffer { return lp.p.xpre }

func (gruCell) forwardStep(q *queue, lp *layerPass, t int) {
	H, rows, w := lp.H, lp.rows(t), lp.w
	var act device.Buffer
	if lp.train {
		act = lp.step(lp.b.gates, t, 4*H)
	}
	q.add(lp.k.GRUCell(device.GRUCell{DType: lp.dt, Batch: rows, Hidden: H, XPre: lp.step(lp.pre, t, 3*H), HPre: lp.p.hpre,
		BiasIH: w.bih, BiasHH: w.bhh, HPrev: lp.hIn(t), H: lp.hOut(t), Act: act, W: w.whh}))
}

// forwardWalk: forwardStep's calls as one device.GRUWalk.
func (gruCell) forwardWalk(q *queue, lp *layerPass, k device.Walker) {
	tEnd := lp.walkEnd()
	H, w, first := lp.H, lp.w, lp.t0
	if lp.dir == 1 {
		first = tEnd - 1
	}
	a := device.GRUWalk{DType: lp.dt, Steps: tEnd - lp.t0, Batch: lp.B, Hidden: H, Reverse: lp.dir == 1,
		XPre: lp.steps(lp.pre, lp.t0, tEnd, 3*H), HPre: lp.p.hpre, W: w.whh, BiasIH: w.bih, BiasHH: w.bhh,
		H0: lp.hIn(first), H: lp.output()}
	a.Rows, a.RowsAt = lp.walkRows()
	if lp.train {
		a.Act = lp.steps(lp.b.gates, lp.t0, tEnd, 4*H)
	}
	q.add(k.GRUWalk(a))
}

// gradViews: the walk's set of the pre-activation gradients.
func (gruCell) gradViews(_ *layerPass, lg *layerGrads) {
	lg.dPre, lg.dHPre = lg.dxp[lg.set], lg.dhp[lg.set]
}

func (gruCell) beginBackward(*queue, *layerPass, *layerGrads) {}
func (gruCell) endBackward(*queue, *layerPass, *layerGrads)   {}

// backwardStep writes the direct part of the gradient with respect to the
// state entering step t from the cell, adding it into that of the step
// before when the window holds it (whose recurrent product the walk then
// hands to that step's cell gradient); for the walk's first step it goes
// to the state's gradient when tied, recurrent product added, and to the
// scratch row, unread, when not, as for a step whose predecessor is in the
// next window (the edge does its part there).
func (gruCell) backwardStep(q *queue, lp *layerPass, lg *layerGrads, t int, in product) {
	H, rows, dt := lp.H, lp.rows(t), lp.dt
	dPrev, acc, toState := lg.row, false, false
	switch p := lp.prev(t); {
	case p >= 0 && lp.holds(p):
		dPrev, acc = lp.step(lg.dh, p, H), true
	case p < 0 && lg.tied:
		dPrev, toState = lg.stH, true
	}
	hp := lp.step(lg.dHPre, t, 3*H)
	g := device.GRUCellGrad{DType: dt, Batch: rows, Hidden: H, Act: lp.step(lp.b.gates, t, 4*H), HPrev: lp.hIn(t),
		DH: lp.step(lg.dh, t, H), DXPre: lp.step(lg.dPre, t, 3*H), DHPre: hp, DHPrev: dPrev, Accumulate: acc}
	if in.from >= 0 {
		g.DHPreNext, g.W, g.NextBatch = in.dHPre, lp.w.whh, in.rows
	}
	q.add(lp.k.GRUCellGrad(g))
	if toState {
		q.add(lp.k.Gemm(device.Gemm{DType: dt, M: rows, N: H, K: 3 * H, Alpha: 1, Beta: 1, A: hp, B: lp.w.whh, C: dPrev}))
	}
}

// backwardWalk: backwardStep's calls as one device.GRUGradWalk, the
// forward's first step's direct part into the scratch row, or, for a
// tied walk's first step, into the state's gradient, then its recurrent
// product there too.
func (gruCell) backwardWalk(q *queue, lp *layerPass, lg *layerGrads, k device.Walker, in product) {
	tEnd := lp.walkEnd()
	H, dt, first := lp.H, lp.dt, lp.t0
	if lp.dir == 1 {
		first = tEnd - 1
	}
	toState := lp.prev(first) < 0 && lg.tied
	a := device.GRUGradWalk{DType: dt, Steps: tEnd - lp.t0, Batch: lp.B, Hidden: H, Reverse: lp.dir == 1,
		Act: lp.steps(lp.b.gates, lp.t0, tEnd, 4*H), H: lp.output(), H0: lp.hIn(first), DH: lp.steps(lg.dh, lp.t0, tEnd, H),
		DH0: lg.row, DXPre: lp.steps(lg.dPre, lp.t0, tEnd, 3*H), DHPre: lp.steps(lg.dHPre, lp.t0, tEnd, 3*H), W: lp.w.whh}
	a.Rows, a.RowsAt = lp.walkRows()
	if toState {
		a.DH0 = lg.stH
	}
	if in.from >= 0 {
		a.DHPreIn, a.NextBatch = in.dHPre, in.rows
	}
	q.add(k.GRUGradWalk(a))
	if p := lp.prev(first); lg.tied && p >= 0 && lp.holds(p) {
		// A tied reverse walk with lengths, the forward's first step
		// walked before the window's last: its direct part, which the
		// walk wrote to the scratch row, into the gradient entering it
		// (the step past the longest sequence), where backwardStep adds
		// it, for initialGrads to read.
		n := lp.rows(first) * H
		y := lp.step(lg.dh, p, H).Elems(dt, 0, n)
		q.add(lp.k.Axpby(device.Axpby{DType: dt, N: n, Alpha: 1, X: lg.row.Elems(dt, 0, n), Beta: 1, Y: y}))
	}
	if toState {
		q.add(lp.k.Gemm(device.Gemm{DType: dt, M: lp.rows(first), N: H, K: 3 * H, Alpha: 1, Beta: 1, A: lp.step(lg.dHPre, first, 3*H),
			B: lp.w.whh, C: lg.stH}))
	}
}

// The edge is what the step's cell gradient reads (activations, the
// gradient with respect to its output) and its recurrent pre-activation
// gradients: applyEdge runs the cell gradient again to add its direct part
// into the gradient already there, as the walk in one window does, and
// hands the walk the recurrent pre-activation gradients, whose product the
// next step's cell gradient adds. Its layout, in blocks of B·H: 6 for the
// pre-activation gradients the second run writes, unread, then act 4, dh 1
// and dhp 3. With lg.kept those three are views of the step's own buffers,
// and the edge holds the second run's output alone.
func (gruCell) edgeSize(B, H int, kept bool) int {
	if kept {
		return 6 * B * H
	}
	return 14 * B * H
}

func (gruCell) edgeReadsDH() bool { return true }

func (gruCell) saveEdge(q *queue, lp *layerPass, lg *layerGrads, t int) {
	BH, n := lp.B*lp.H, lp.rows(t)*lp.H
	for i, part := range []struct {
		off, width int
		src        device.Buffer
	}{{6, 4, lp.b.gates}, {10, 1, lg.dh}, {11, 3, lg.dHPre}} {
		src := lp.step(part.src, t, part.width*lp.H).Elems(lp.dt, 0, part.width*n)
		if lg.kept {
			lg.own[i] = src
			continue
		}
		q.add(lp.k.Copy(device.Copy{Dst: lg.edge.Elems(lp.dt, part.off*BH, part.width*n), Src: src}))
	}
}

func (gruCell) applyEdge(q *queue, lp *layerPass, lg *layerGrads, t int) device.Buffer {
	H, rows, dt, BH := lp.H, lp.rows(t), lp.dt, lp.B*lp.H
	e := func(off, blocks int) device.Buffer { return lg.edge.Elems(dt, off*BH, blocks*BH) }
	act, dh, dhp := lg.own[0], lg.own[1], lg.own[2]
	if !lg.kept {
		act, dh, dhp = e(6, 4), e(10, 1), e(11, 3)
	}
	q.add(lp.k.GRUCellGrad(device.GRUCellGrad{DType: dt, Batch: rows, Hidden: H, Act: act, HPrev: lp.hIn(t), DH: dh,
		DXPre: e(0, 3), DHPre: e(3, 3), DHPrev: lp.step(lg.dh, lp.prev(t), H), Accumulate: true}))
	return dhp
}
