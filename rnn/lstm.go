package rnn

import (
	"context"

	"github.com/gocurrent/gocurrent/device"
)

// LSTM is a stack of LSTM layers with PyTorch's equations, gate order
// (i, f, g, o), parameter names and shapes: weight_ih_l{k} [4·Hidden, in],
// weight_hh_l{k} [4·Hidden, Hidden], bias_ih_l{k} and bias_hh_l{k}
// [4·Hidden]. It is used by one goroutine at a time (a call meeting
// another is ErrBusy); goroutines that run it at once each use a share
// (Share).
type LSTM struct{ *stack }

// NewLSTM allocates an LSTM stack on d and initialises its parameters. A
// configuration whose parameters overflow or outnumber what a device can
// hold is refused before anything is allocated (Config: MaxLayers), and
// the initialisation stops with ctx (an error wrapping ctx.Err(), nothing
// left allocated).
func NewLSTM(ctx context.Context, d device.Device, c Config) (*LSTM, error) {
	s, err := newStack(ctx, d, c, lstmCell{})
	if err != nil {
		return nil, err
	}
	return &LSTM{s}, nil
}

// lstmCell is the LSTM's step: one device.LSTMCell given the recurrent
// product (its fused form), which adds hPrev·W_hhᵀ into the step's gate
// pre-activations, adds the biases, applies the gates and writes c and h;
// the device runs it as one kernel or as a GEMM and the cell. In training the activations
// replace the pre-activations in the layer's saved gates, and Backward
// replaces them in turn with the pre-activations' gradients, which serve
// as both dPre and dHPre; each step's LSTMCellGrad is given the step after
// it's (its fused form), whose product with W_hh it adds into the step's
// dh before it reads it.
type lstmCell struct{}

var _ cell = lstmCell{}

func (lstmCell) name() string   { return "LSTM" }
func (lstmCell) gates() int     { return LSTMGates }
func (lstmCell) carriesC() bool { return true }

// planPass: without grad the pre-activations of every step, which in
// training are the saved gates.
func (lstmCell) planPass(tmp *arena, train bool, steps, B, H int, p *pass) {
	if !train {
		p.pre = tmp.take(steps * B * 4 * H)
	}
}

// planLayer: the cells, every step's in training, two slots used in turn
// without grad (and a third for the reverse direction's initial state).
func (lstmCell) planLayer(a *arena, train bool, dir, steps, B, H int, b *layerBufs) {
	if train {
		b.cseq = a.take((steps + 1) * B * H)
	} else {
		b.cseq = a.take((2 + dir) * B * H)
	}
}

func (lstmCell) planGrads(*arena, int, int, int, int, *gradBufs) {}

func (lstmCell) projection(lp *layerPass) device.Buffer {
	if lp.train {
		return lp.b.gates
	}
	return lp.p.pre
}

func (lstmCell) forwardStep(q *queue, lp *layerPass, t int) {
	H, rows, w := lp.H, lp.rows(t), lp.w
	pt := lp.step(lp.pre, t, 4*H)
	var act device.Buffer
	if lp.train {
		act = pt
	}
	q.add(lp.k.LSTMCell(device.LSTMCell{DType: lp.dt, Batch: rows, Hidden: H, Pre: pt, BiasIH: w.bih, BiasHH: w.bhh,
		CPrev: lp.cIn(t), C: lp.cOut(t), H: lp.hOut(t), Act: act, HPrev: lp.hIn(t), W: w.whh}))
}

// forwardWalk: forwardStep's calls as one device.LSTMWalk. In training
// every step's c goes to its position of cseq; without grad the walk
// carries c in the slot the last step leaves it in (cOut), which the
// steps would have reached through the two slots in turn.
func (lstmCell) forwardWalk(q *queue, lp *layerPass, k device.Walker) {
	tEnd := lp.walkEnd()
	H, w, first, last := lp.H, lp.w, lp.t0, tEnd-1
	if lp.dir == 1 {
		first, last = last, first
	}
	a := device.LSTMWalk{DType: lp.dt, Steps: tEnd - lp.t0, Batch: lp.B, Hidden: H, Reverse: lp.dir == 1,
		Pre: lp.steps(lp.pre, lp.t0, tEnd, 4*H), W: w.whh, BiasIH: w.bih, BiasHH: w.bhh,
		H0: lp.hIn(first), C0: lp.cIn(first), H: lp.output()}
	a.Rows, a.RowsAt = lp.walkRows()
	if lp.train {
		a.C, a.Act = lp.steps(lp.b.cseq, lp.t0+1-lp.dir, tEnd+1-lp.dir, H), a.Pre
	} else {
		a.CLast = lp.cOut(last)
	}
	q.add(k.LSTMWalk(a))
}

// gradViews: the gradients replace the activations in the saved gates,
// and serve as both dPre and dHPre.
func (lstmCell) gradViews(lp *layerPass, lg *layerGrads) {
	lg.dPre, lg.dHPre = lp.b.gates, lp.b.gates
}

// beginBackward starts dc, carried in lg.row from step to step, at the
// gradient with respect to the final cell state: zero, or, when the walk
// is tied to the state, the state's own gradient row, which then serves as
// lg.row itself. The walk reads and writes the row in place (each step's
// LSTMCellGrad writes dCPrev over the dC it read), so it starts holding
// the gradient with respect to the final cell state and ends holding the
// one with respect to the initial cell state, which is what the state's
// gradient must hold after Backward: no copy in or out. Nothing else reads
// or writes that row during the walk (the cell's edges carry the gates'
// gradients only). (With lengths a sequence's row is first read at its
// own last step, and still holds the final state's gradient then.)
func (lstmCell) beginBackward(q *queue, lp *layerPass, lg *layerGrads) {
	if lg.tied {
		lg.row = lg.stC
		return
	}
	q.add(lp.k.Fill(device.Fill{DType: lp.dt, N: lp.B * lp.H, X: lg.row}))
}

// endBackward: dc has reached every sequence's initial cell state, in
// place when tied (beginBackward).
func (lstmCell) endBackward(*queue, *layerPass, *layerGrads) {}

func (lstmCell) backwardStep(q *queue, lp *layerPass, lg *layerGrads, t int, in product) {
	H, rows, dt := lp.H, lp.rows(t), lp.dt
	a := lp.step(lp.b.gates, t, 4*H)
	g := device.LSTMCellGrad{DType: dt, Batch: rows, Hidden: H, Act: a, CPrev: lp.cIn(t), C: lp.cOut(t),
		DH: lp.step(lg.dh, t, H), DC: lg.row, DPre: a, DCPrev: lg.row}
	if in.from >= 0 {
		g.DPreNext, g.W, g.NextBatch = in.dHPre, lp.w.whh, in.rows
	}
	q.add(lp.k.LSTMCellGrad(g))
	if lp.prev(t) < 0 && lg.tied {
		q.add(lp.k.Gemm(device.Gemm{DType: dt, M: rows, N: H, K: 4 * H, Alpha: 1, A: a, B: lp.w.whh, C: lg.stH}))
	}
}

// backwardWalk: backwardStep's calls as one device.LSTMGradWalk, then the
// tied walk's product into the initial state's gradient after the
// forward's first step.
func (lstmCell) backwardWalk(q *queue, lp *layerPass, lg *layerGrads, k device.Walker, in product) {
	tEnd := lp.walkEnd()
	H, dt, first := lp.H, lp.dt, lp.t0
	if lp.dir == 1 {
		first = tEnd - 1
	}
	act := lp.steps(lp.b.gates, lp.t0, tEnd, 4*H)
	a := device.LSTMGradWalk{DType: dt, Steps: tEnd - lp.t0, Batch: lp.B, Hidden: H, Reverse: lp.dir == 1, Act: act,
		C: lp.steps(lp.b.cseq, lp.t0+1-lp.dir, tEnd+1-lp.dir, H), C0: lp.cIn(first), DH: lp.steps(lg.dh, lp.t0, tEnd, H),
		DC: lg.row, DPre: act, W: lp.w.whh}
	a.Rows, a.RowsAt = lp.walkRows()
	if in.from >= 0 {
		a.DPreIn, a.NextBatch = in.dHPre, in.rows
	}
	q.add(k.LSTMGradWalk(a))
	if lp.prev(first) < 0 && lg.tied {
		q.add(lp.k.Gemm(device.Gemm{DType: dt, M: lp.rows(first), N: H, K: 4 * H, Alpha: 1, A: lp.step(lp.b.gates, first, 4*H), B: lp.w.whh, C: lg.stH}))
	}
}

// The edge is the step's pre-activation gradients, whose product with the
// recurrent weights is the step's part of the gradient with respect to h
// entering it (dc went on in lg.row already).
// With lg.kept the step's own gradients in the layer's gates serve, and
// the edge takes no memory.
func (lstmCell) edgeSize(B, H int, kept bool) int {
	if kept {
		return 0
	}
	return 4 * B * H
}

func (lstmCell) edgeReadsDH() bool { return false }

func (lstmCell) saveEdge(q *queue, lp *layerPass, lg *layerGrads, t int) {
	n := lp.rows(t) * 4 * lp.H
	src := lp.step(lp.b.gates, t, 4*lp.H).Elems(lp.dt, 0, n)
	if lg.kept {
		lg.own[0] = src
		return
	}
	q.add(lp.k.Copy(device.Copy{Dst: lg.edge.Elems(lp.dt, 0, n), Src: src}))
}

// applyEdge: the LSTM's cell gradient adds nothing into the gradient with
// respect to h entering the step but its recurrent product (dc went on in
// lg.row), so the edge is that product's operand alone.
func (lstmCell) applyEdge(_ *queue, _ *layerPass, lg *layerGrads, _ int) device.Buffer {
	if lg.kept {
		return lg.own[0]
	}
	return lg.edge
}
