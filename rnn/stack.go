package rnn

import (
	"fmt"

	"github.com/gocurrent/gocurrent/device"
)

// Config describes a stack of recurrent layers with the arguments of
// PyTorch's nn.LSTM and nn.GRU. The zero value of every optional field
// works.
type Config struct {
	// Input is the number of features of the input at each step
	// (input_size); Hidden is the size of h and c (hidden_size).
	Input, Hidden int
	// Layers is the number of stacked layers (num_layers); 0 means 1.
	Layers int
	// Dropout is the probability of zeroing each output of every layer
	// but the last during Train forwards, in [0, 1). It has no effect on
	// a single layer, as in PyTorch.
	Dropout float64
	// NoBias leaves out both biases of every layer (bias=False).
	NoBias bool
	// DType is Float32 (the default) or Float64 (for gradient checks).
	DType device.DType
	// Seed draws the initial parameters, U(-1/sqrt(Hidden),
	// 1/sqrt(Hidden)) as PyTorch's, and the dropout masks.
	Seed uint64
	// Bidirectional adds to every layer a reverse direction with its own
	// parameters (PyTorch's bidirectional=True, names ending in
	// "_reverse"): the output is [T, B, 2·Hidden], the forward direction's
	// features first, a layer above the first reads 2·Hidden features, and
	// the state holds Layers·2 rows, layer l's direction d at l·2 + d.
	Bidirectional bool
}

// The execution of a stack.
//
// A stack runs layer by layer, and within a layer direction by direction
// (forward, then with Bidirectional the reverse). Everything about one
// direction's walk over a window is a layerPass: its parameters, its
// regions of the pass's memory, its input and the rows each step covers.
// The stack owns what the cells share (the initial and final state, the
// input projection, dropout between layers, the order of the sequences,
// and in Backward the weight and input gradients, which are a few large
// GEMMs over all steps); a cell (lstmCell, gruCell) owns what differs,
// its per-step forward and backward kernels and the buffers they need.
//
// The reverse direction walks the steps from the last to the first with
// its own "_reverse" parameters; its states are stored in time order too
// (the state after step t at position t, its initial state at position
// T), so both directions' outputs are [T, B, H] sequences, and the layer
// above reads the two as its 2H input features, through the two column
// halves of its input weights.
//
// With variable lengths the sequences are sorted by length, longest first,
// once per forward (batchShape): the rows still running at step t are then
// a prefix of the step's rows, and every per-step kernel covers that
// prefix only. A sequence's reverse walk starts at its own last step, with
// its initial state (copied into the padded position the step reads); its
// forward walk's final state is taken after its own last step. Padded
// positions of the stack's own sequences are never read: the input
// projection computes rows nobody reads, Backward's GEMMs over all steps
// run on the running rows packed, and the caller's output and input
// gradient are gathered with zeros at padded positions. Only the gradients
// flowing into a layer's outputs (dh) start at zero there, where the
// reverse walk adds up the gradients of the initial states.

// stack is what LSTM and GRU share: the fused execution of L layers.
type stack struct {
	dev    device.Device
	cell   cell
	cfg    Config
	params *Params
	// layers are the parameters of every layer and direction, layer l's
	// direction d at l·dirs + d.
	layers []layerParams

	// rec is the saved training forward, nil when there is none; spent
	// says the last one was consumed by Backward.
	rec   *record
	spent bool
	// reserve holds what a training forward saves for Backward; work the
	// temporaries of one pass; grads the gradients flowing between layers
	// in Backward; dx the gradient with respect to the input; idx the
	// device copy of a training forward's order and lengths, idxWork a
	// no-grad forward's.
	reserve, work, grads, dx, idx, idxWork scratch
	lay                                    []layerBufs // reused views, as layers
	dropSeed                               uint64      // the seed of the dropout masks
	drawn                                  uint64      // dropout mask elements drawn so far
}

// cell is what differs between the LSTM and the GRU: the size of a layer,
// the buffers a pass needs beyond the stack's, and the kernels of one time
// step in each direction of the gradient. The stack's time loops call the
// step functions and hold no per-cell branch.
type cell interface {
	// name is "LSTM" or "GRU", for messages.
	name() string
	// gates is the number of gate blocks of H rows in the weights.
	gates() int
	// carriesC reports whether the state holds a cell state c besides h.
	carriesC() bool

	// planPass takes the temporaries that the layers of a pass share in
	// turn; planLayer takes the buffers of a layer's direction dir beyond
	// h and the saved activations; planGrads takes Backward's per-step
	// temporaries.
	planPass(tmp *arena, train bool, T, B, H int, p *pass)
	planLayer(a *arena, train bool, dir, T, B, H int, b *layerBufs)
	planGrads(g *arena, T, B, H int, gb *gradBufs)

	// projection is where the input projection of all steps goes, [T, B,
	// gates·H], for forwardStep to read.
	projection(lp *layerPass) device.Buffer
	// forwardStep queues step t over lp.rows(t) rows: h and c entering the
	// step (hIn, cIn) and the step's input projection in, h and c leaving
	// it (hOut, cOut) out, plus the activations Backward needs in
	// training.
	forwardStep(q *queue, lp *layerPass, t int)

	// beginBackward prepares a direction's backward walk: it sets lg.dPre
	// and lg.dHPre, and starts any gradient the cell carries between
	// steps; endBackward finishes it.
	beginBackward(q *queue, lp *layerPass, lg *layerGrads)
	endBackward(q *queue, lp *layerPass, lg *layerGrads)
	// backwardStep queues step t of the walk back: from the gradient with
	// respect to the step's output, lg.dh's step t, to the pre-activation
	// gradients of step t and the gradient with respect to the state
	// entering it, added into lg.dh's step lp.prev(t) (or, for the first
	// step of a walk, written to the state's gradient when tied).
	backwardStep(q *queue, lp *layerPass, lg *layerGrads, t int)
}

// record is one training forward: its shape and the state it read.
type record struct {
	sh    batchShape
	state *State
}

// layerParams are one layer's parameters and gradients in one direction,
// views of the stack's Params.
type layerParams struct {
	in                     int // input features of the layer
	wih, whh, bih, bhh     device.Buffer
	gwih, gwhh, gbih, gbhh device.Buffer
}

// layerBufs are one layer's regions of a pass in one direction.
type layerBufs struct {
	// hseq is [T+1, B, H]: the states in time order, the initial one at
	// position 0 for the forward direction (h0, h1..hT) and at position T
	// for the reverse one; the other T positions are the output.
	hseq device.Buffer
	// cseq is the LSTM's cells, placed as hseq in training; without grad
	// two [B, H] slots used in turn, and a third holding the reverse
	// direction's initial state.
	cseq device.Buffer
	// gates is [T, B, 4H]: the LSTM's pre-activations, then activations
	// in place (and their gradients in Backward); the GRU's activations
	// r, z, n and h_n+bh_n (training only).
	gates device.Buffer
	// mask and drop are the dropout mask and the dropped output [T, B, H],
	// for layers below the top in training with Dropout > 0.
	mask, drop device.Buffer
}

// pass is the layout of one forward.
type pass struct {
	// x is the input [T, B, I] as the stack reads it: in training a copy,
	// with lengths sorted (padding zeroed); nil without grad or lengths.
	x    device.Buffer
	xpre device.Buffer // GRU: the input projection [T, B, 3H]
	hpre device.Buffer // GRU: one step's recurrent product [B, 3H]
	pre  device.Buffer // LSTM without grad: the gate pre-activations [T, B, 4H]
	// out is the output [T, B, dirs·H] in the caller's order, when it is
	// not the top layer's own sequence (bidirectional, or with lengths).
	out device.Buffer
	// hEnd and cEnd are [B, H]: with lengths, the forward direction's final
	// states, each taken after its sequence's last step.
	hEnd, cEnd device.Buffer
}

// gradBufs are Backward's buffers, shared by the layers in turn.
type gradBufs struct {
	// dh are two sets of [T, B, H] sequences, one per direction, used in
	// turn: the gradient with respect to one layer's outputs, then the
	// layer below's.
	dh [2][2]device.Buffer
	// row is one [B, H] row of steps: the LSTM's carried dc, the GRU's
	// scratch for a gradient nobody reads.
	row device.Buffer
	// dxp and dhp are the GRU's gradients with respect to the input-side
	// and recurrent pre-activations, [T, B, 3H].
	dxp, dhp device.Buffer
	// With lengths: stH and stC are [B, H], a direction's state gradients
	// in the sorted order, and dxs is the input's gradient [T, B, I]
	// before it is put back in the caller's order.
	stH, stC, dxs device.Buffer
	// With lengths, the operands of the GEMMs over all steps packed (the
	// running rows of every step, one step after the other, PyTorch's
	// PackedSequence data), so that their work is the sum of the lengths:
	// the pre-activation gradients (pPre, and the GRU's recurrent ones
	// pHPre), the layer's input (pIn, a part's width·T·B elements at
	// part.off·T·B), the states entering the steps (pH), and the input's
	// gradient (pDst, as pIn).
	pPre, pHPre, pIn, pH, pDst device.Buffer
}

// inPart is one part of a layer's input: width features, read through
// columns [off, off+width) of the input weights. A layer reads one part
// (the input, or the layer below's output), or two above a bidirectional
// layer (its two directions' outputs).
type inPart struct {
	buf        device.Buffer // [T, B, width]
	width, off int
}

// layerPass is one layer's walk over a window in one direction: the
// layer's parameters and buffers, the pass's shared temporaries, and the
// shape of every step.
type layerPass struct {
	k       device.Kernels
	dt      device.DType
	T, B, H int
	train   bool
	sh      *batchShape
	dir     int // 0 forward, 1 reverse
	w       *layerParams
	b       *layerBufs
	p       *pass
	in      []inPart
	// pre is the input projection of all steps, [T, B, gates·H].
	pre device.Buffer
}

// rows is the number of rows step t covers: the batch, or the prefix of
// the sorted batch still running at t.
func (lp *layerPass) rows(t int) int { return lp.sh.rows(t) }

// step returns step t's [B, width] block of a [T, B, width] sequence.
func (lp *layerPass) step(buf device.Buffer, t, width int) device.Buffer {
	n := lp.B * width
	return buf.Elems(lp.dt, t*n, n)
}

// span returns rows [r0, r1) of a [B, width] block.
func (lp *layerPass) span(block device.Buffer, r0, r1, width int) device.Buffer {
	return block.Elems(lp.dt, r0*width, (r1-r0)*width)
}

// walk lists the steps in the order the direction visits them, up to the
// longest sequence.
func (lp *layerPass) walk() []int {
	n := lp.sh.maxLen
	ts := make([]int, n)
	for i := range ts {
		ts[i] = i
		if lp.dir == 1 {
			ts[i] = n - 1 - i
		}
	}
	return ts
}

// prev is the step the walk visits before t, -1 for none: the step whose
// output is the state entering t. (For the reverse direction with
// lengths, rows of step t+1 that are padding stand for the initial
// states of the sequences that start at t.)
func (lp *layerPass) prev(t int) int {
	if lp.dir == 0 {
		return t - 1
	}
	if t+1 < lp.T {
		return t + 1
	}
	return -1
}

// hIn and hOut are the hidden states entering and leaving step t.
func (lp *layerPass) hIn(t int) device.Buffer  { return lp.step(lp.b.hseq, t+lp.dir, lp.H) }
func (lp *layerPass) hOut(t int) device.Buffer { return lp.step(lp.b.hseq, t+1-lp.dir, lp.H) }

// hInit is where the initial state goes: the state entering the first
// step of the walk.
func (lp *layerPass) hInit() device.Buffer { return lp.step(lp.b.hseq, lp.dir*lp.T, lp.H) }

// cIn, cOut and cInit are hIn, hOut and hInit for the cell state; none
// for a cell without one. Without grad two slots serve every step in turn,
// and a third holds the reverse direction's initial state.
func (lp *layerPass) cIn(t int) device.Buffer  { return lp.cAt(t + lp.dir) }
func (lp *layerPass) cOut(t int) device.Buffer { return lp.cAt(t + 1 - lp.dir) }
func (lp *layerPass) cInit() device.Buffer {
	if !lp.train && lp.dir == 1 && !lp.b.cseq.IsZero() {
		return lp.step(lp.b.cseq, 2, lp.H)
	}
	return lp.cAt(lp.dir * lp.T)
}

func (lp *layerPass) cAt(pos int) device.Buffer {
	if lp.b.cseq.IsZero() {
		return device.Buffer{}
	}
	if !lp.train {
		pos %= 2
	}
	return lp.step(lp.b.cseq, pos, lp.H)
}

// output is the direction's output, [T, B, H] in time order.
func (lp *layerPass) output() device.Buffer {
	BH := lp.B * lp.H
	return lp.b.hseq.Elems(lp.dt, (1-lp.dir)*BH, lp.T*BH)
}

// hIns is the states entering every step, [T, B, H] in time order: what
// the recurrent weights multiplied.
func (lp *layerPass) hIns() device.Buffer {
	BH := lp.B * lp.H
	return lp.b.hseq.Elems(lp.dt, lp.dir*BH, lp.T*BH)
}

// layerGrads are one layer's gradients in Backward, in one direction.
type layerGrads struct {
	gradBufs
	// dh is the gradient with respect to the direction's output, [T, B,
	// H]; the walk back adds the recurrent part into it step by step.
	dh device.Buffer
	// dPre and dHPre are the gradients with respect to the input-side and
	// recurrent pre-activations, [T, B, G·H] (the same for the LSTM).
	dPre, dHPre device.Buffer
	// tied says the forward's state is still tied to it: stH and stC are
	// then the direction's rows of the state's gradients (in the sorted
	// order with lengths), the gradient with respect to the final state on
	// entry and the initial one on return.
	tied     bool
	stH, stC device.Buffer
}

func newStack(d device.Device, c Config, kind cell) (*stack, error) {
	s := &stack{dev: d, cell: kind, dropSeed: c.Seed}
	name := kind.name()
	if d == nil {
		return nil, fmt.Errorf("rnn: New%s: no device", name)
	}
	if c.Layers == 0 {
		c.Layers = 1
	}
	dt, err := floatType(c.DType)
	if err != nil {
		return nil, err
	}
	c.DType = dt
	switch {
	case c.Input <= 0 || c.Hidden <= 0 || c.Layers < 0:
		return nil, fmt.Errorf("rnn: New%s: input %d, hidden %d, layers %d: each must be positive: %w",
			name, c.Input, c.Hidden, c.Layers, device.ErrShape)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return nil, fmt.Errorf("rnn: New%s: dropout %v, want [0, 1)", name, c.Dropout)
	}
	s.cfg = c
	if s.params, err = newParams(d, dt, c.Seed, s.paramSpecs()); err != nil {
		return nil, err
	}
	for l := range c.Layers {
		for dir := range s.dirs() {
			s.layers = append(s.layers, s.layerParams(l, dir))
		}
	}
	s.lay = make([]layerBufs, c.Layers*s.dirs())
	return s, nil
}

// dirs is the number of directions: 2 for a bidirectional stack, else 1.
func (s *stack) dirs() int {
	if s.cfg.Bidirectional {
		return 2
	}
	return 1
}

// layerInput is the number of input features of layer l.
func (s *stack) layerInput(l int) int {
	if l > 0 {
		return s.dirs() * s.cfg.Hidden
	}
	return s.cfg.Input
}

// suffix is PyTorch's suffix of direction dir's parameter names.
func suffix(dir int) string {
	if dir == 1 {
		return "_reverse"
	}
	return ""
}

// paramSpecs lists the parameters in PyTorch's order: layer by layer, in
// each the forward direction's, then the reverse one's.
func (s *stack) paramSpecs() []paramSpec {
	c := s.cfg
	gh, bound := s.cell.gates()*c.Hidden, uniformBound(c.Hidden)
	var specs []paramSpec
	for l := range c.Layers {
		for dir := range s.dirs() {
			sfx := suffix(dir)
			specs = append(specs,
				paramSpec{name: fmt.Sprintf("weight_ih_l%d%s", l, sfx), shape: []int{gh, s.layerInput(l)}, bound: bound},
				paramSpec{name: fmt.Sprintf("weight_hh_l%d%s", l, sfx), shape: []int{gh, c.Hidden}, bound: bound})
			if !c.NoBias {
				specs = append(specs,
					paramSpec{name: fmt.Sprintf("bias_ih_l%d%s", l, sfx), shape: []int{gh}, bound: bound},
					paramSpec{name: fmt.Sprintf("bias_hh_l%d%s", l, sfx), shape: []int{gh}, bound: bound})
			}
		}
	}
	return specs
}

// layerParams returns the views of layer l's parameters in direction dir;
// the biases are zero Buffers without bias.
func (s *stack) layerParams(l, dir int) layerParams {
	lp := layerParams{in: s.layerInput(l)}
	get := func(name string) (v, g device.Buffer) {
		q, _ := s.params.Lookup(fmt.Sprintf("%s_l%d%s", name, l, suffix(dir)))
		return q.Value, q.Grad
	}
	lp.wih, lp.gwih = get("weight_ih")
	lp.whh, lp.gwhh = get("weight_hh")
	lp.bih, lp.gbih = get("bias_ih")
	lp.bhh, lp.gbhh = get("bias_hh")
	return lp
}

// Config returns the configuration, with defaults filled in.
func (s *stack) Config() Config { return s.cfg }

// Params returns the parameters.
func (s *stack) Params() *Params { return s.params }

// DropoutState is where the stack's dropout masks come from: the seed they
// are drawn with (Config.Seed at first) and how many mask elements have
// been drawn so far, so where the next training forward's masks start.
// Only training forwards with Dropout > 0 advance it. A checkpoint records
// it so that a resumed run draws the masks an uninterrupted one would.
func (s *stack) DropoutState() (seed, offset uint64) { return s.dropSeed, s.drawn }

// SetDropoutState sets the seed and offset of the next training forward's
// dropout masks (values DropoutState returned).
func (s *stack) SetDropoutState(seed, offset uint64) { s.dropSeed, s.drawn = seed, offset }

// NewState allocates a zero state for batch sequences: Layers·2 rows of
// each for a bidirectional stack, layer l's direction d at l·2 + d, as
// PyTorch's h_n.
func (s *stack) NewState(batch int) (*State, error) {
	return newState(s.dev, s.cfg.DType, s.cell.carriesC(), s.cfg.Layers*s.dirs(), batch, s.cfg.Hidden)
}

// Close frees the parameters and every buffer the stack holds. The stack
// must not be used afterwards.
func (s *stack) Close() error {
	s.rec = nil
	var q queue
	for _, b := range []*scratch{&s.reserve, &s.work, &s.grads, &s.dx, &s.idx, &s.idxWork} {
		q.add(b.free(s.dev))
	}
	if s.params != nil {
		q.add(s.params.free())
		s.params = nil
	}
	return q.err
}

// plan lays out a forward of shape sh: what Backward needs from res,
// temporaries from tmp (the same arena without grad).
func (s *stack) plan(res, tmp *arena, train bool, sh *batchShape) pass {
	T, B, H, L, D := sh.T, sh.B, s.cfg.Hidden, s.cfg.Layers, s.dirs()
	var p pass
	switch {
	case train:
		p.x = res.take(T * B * s.cfg.Input)
	case sh.varlen:
		p.x = tmp.take(T * B * s.cfg.Input)
	}
	s.cell.planPass(tmp, train, T, B, H, &p)
	if D == 2 || sh.varlen {
		p.out = res.take(T * B * D * H)
	}
	if sh.varlen {
		p.hEnd = tmp.take(B * H)
		if s.cell.carriesC() {
			p.cEnd = tmp.take(B * H)
		}
	}
	for l := range L {
		for dir := range D {
			b := &s.lay[l*D+dir]
			if train {
				b.hseq = res.take((T + 1) * B * H)
				s.cell.planLayer(res, train, dir, T, B, H, b)
				b.gates = res.take(T * B * 4 * H)
				if l < L-1 && s.cfg.Dropout > 0 {
					b.mask, b.drop = res.take(T*B*H), res.take(T*B*H)
				}
				continue
			}
			// Without grad two layers' sequences serve every layer in turn.
			if l < 2 {
				b.hseq = tmp.take((T + 1) * B * H)
				s.cell.planLayer(tmp, train, dir, T, B, H, b)
			} else {
				b.hseq, b.cseq = s.lay[(l-2)*D+dir].hseq, s.lay[(l-2)*D+dir].cseq
			}
			b.gates, b.mask, b.drop = device.Buffer{}, device.Buffer{}, device.Buffer{}
		}
	}
	return p
}

// layout sizes the arenas for a pass, takes their memory from the
// stack's scratch buffers and lays the pass out in it; with lengths it
// also puts their order on the device.
func (s *stack) layout(train bool, sh *batchShape) (pass, error) {
	dt := s.cfg.DType
	res, tmp := &arena{dt: dt}, &arena{dt: dt}
	if !train {
		res = tmp
	}
	s.plan(res, tmp, train, sh)
	var err error
	if train {
		if res.buf, err = s.reserve.get(s.dev, device.Activations, int64(res.off)*dt.Size()); err != nil {
			return pass{}, err
		}
	}
	if tmp.buf, err = s.work.get(s.dev, device.Workspace, int64(max(tmp.off, 1))*dt.Size()); err != nil {
		return pass{}, err
	}
	if sh.varlen {
		idx, cat := &s.idxWork, device.Workspace
		if train {
			idx, cat = &s.idx, device.Activations
		}
		buf, err := idx.get(s.dev, cat, sh.idxBytes())
		if err == nil {
			err = sh.upload(s.dev, buf)
		}
		if err != nil {
			return pass{}, err
		}
	}
	res.off, tmp.off = 0, 0
	return s.plan(res, tmp, train, sh), nil
}

// layerPass returns the walk of layer l in direction dir over a pass of
// shape sh that reads in.
func (s *stack) layerPass(p *pass, sh *batchShape, train bool, l, dir int, in []inPart) *layerPass {
	D := s.dirs()
	return &layerPass{k: s.dev.Kernels(), dt: s.cfg.DType, T: sh.T, B: sh.B, H: s.cfg.Hidden, train: train, sh: sh, dir: dir,
		w: &s.layers[l*D+dir], b: &s.lay[l*D+dir], p: p, in: in}
}

// Forward runs the stack over x, [seq, batch, Input] (PyTorch's layout
// without batch_first), every sequence of length seq, and returns the last
// layer's output h_1..h_seq, [seq, batch, Hidden], or [seq, batch,
// 2·Hidden] for a bidirectional stack (the forward direction's Hidden
// features first, then the reverse direction's).
//
// s, when not nil, is the initial state on entry and the final state on
// return (h_n and c_n, [Layers·dirs, batch, Hidden]); nil means a zero
// initial state and no final state. The reverse direction's final state is
// the one after its last step, at the first position.
//
// In Train mode the forward saves what Backward needs (x is copied, so the
// caller may reuse it) and ties s to itself; a state still tied to an
// earlier training forward is refused: call State.Detach between windows.
// In NoGrad mode nothing is saved and the saved training forward, if any,
// is left for Backward.
//
// The output belongs to the stack: it is valid until the stack's next
// Forward, and must not be written while a training forward waits for its
// Backward. The work is queued on the compute stream.
func (s *stack) Forward(mode Mode, x device.Buffer, seq, batch int, st *State) (device.Buffer, error) {
	return s.ForwardLengths(mode, x, seq, batch, nil, st)
}

// ForwardLengths is Forward over sequences of different lengths, PyTorch's
// packed sequences: sequence b (the batch's row b) has lengths[b] steps, 1
// ≤ lengths[b] ≤ seq, in any order, and x's positions past its end are
// padding, never read. Each sequence's final state (in s) is the state
// after its own last step; the reverse direction starts it at its own last
// step, from its initial state; the output at padded positions is zero,
// and Backward sends no gradient there (the gradient it returns is zero at
// padded positions, and dy is not read there). Nil lengths is Forward.
//
// The sequences run sorted by length, so every step's kernels cover only
// the sequences still running: the work is the sum of the lengths, not
// seq·batch. Putting the order on the device waits for the work queued
// before (one host synchronisation per call).
func (s *stack) ForwardLengths(mode Mode, x device.Buffer, seq, batch int, lengths []int32, st *State) (device.Buffer, error) {
	op := s.cell.name() + ".Forward"
	if err := s.checkForward(op, mode, x, seq, batch, st); err != nil {
		return device.Buffer{}, err
	}
	sh, err := newShape(op, seq, batch, lengths)
	if err != nil {
		return device.Buffer{}, err
	}
	train := mode == Train
	if train {
		// The reserve is about to be overwritten.
		s.rec, s.spent = nil, false
	}
	p, err := s.layout(train, &sh)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	var q queue
	out := s.forwardLayers(&q, &p, &sh, train, x, st)
	if q.err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	if train {
		s.save(&q, sh, st)
	}
	if q.err != nil {
		s.rec = nil
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	return out, nil
}

// checkForward validates a Forward's arguments.
func (s *stack) checkForward(op string, mode Mode, x device.Buffer, seq, batch int, st *State) error {
	if err := checkMode(op, mode); err != nil {
		return err
	}
	if err := positive(op, []string{"seq", "batch"}, seq, batch); err != nil {
		return err
	}
	c, dt := s.cfg, s.cfg.DType
	if err := input(op, "x", s.dev, x, dt, seq*batch*c.Input, fmt.Sprintf("seq·batch·input = %d·%d·%d", seq, batch, c.Input)); err != nil {
		return err
	}
	if st == nil {
		return nil
	}
	if err := st.check(op, s.dev, dt, s.cell.carriesC(), c.Layers*s.dirs(), batch, c.Hidden); err != nil {
		return err
	}
	if mode == Train && st.tie != nil {
		return fmt.Errorf("rnn: %s: the state still carries the gradient path of an earlier training forward, "+
			"whose saved activations this forward replaces; call State.Detach between windows "+
			"(truncated backpropagation through time, like PyTorch's h.detach())", op)
	}
	return nil
}

// forwardLayers queues the layers' forwards over x, [T, B, Input], and
// returns the output: the top layer's (which has no dropout), in the
// caller's order and with both directions interleaved.
func (s *stack) forwardLayers(q *queue, p *pass, sh *batchShape, train bool, x device.Buffer, st *State) device.Buffer {
	dt, T, B, I, H, D := s.cfg.DType, sh.T, sh.B, s.cfg.Input, s.cfg.Hidden, s.dirs()
	k := s.dev.Kernels()
	in := x.Slice(0, int64(T*B*I)*dt.Size())
	switch {
	case sh.varlen:
		q.add(k.GatherSeq(sh.toSorted(dt, T, I, in, p.x)))
		in = p.x
	case train:
		q.add(k.Copy(device.Copy{Dst: p.x, Src: in}))
		in = p.x
	}
	parts := []inPart{{buf: in, width: I}}
	var outs [2]device.Buffer
	for l := range s.cfg.Layers {
		for dir := range D {
			lp := s.layerPass(p, sh, train, l, dir, parts)
			s.forwardLayer(q, lp, l, st)
			outs[dir] = s.dropout(q, lp)
		}
		parts = parts[:0:0]
		for dir := range D {
			parts = append(parts, inPart{buf: outs[dir], width: H, off: dir * H})
		}
	}
	if D == 1 && !sh.varlen {
		return outs[0]
	}
	for dir := range D {
		g := sh.fromSorted(dt, T, H, outs[dir], p.out.Elems(dt, dir*H, T*B*D*H-dir*H))
		g.LdY = D * H
		q.add(k.GatherSeq(g))
	}
	return p.out.Elems(dt, 0, T*B*D*H)
}

// forwardLayer queues layer l's walk over the steps in one direction: the
// initial state, the input projection of every step at once, the steps,
// and the final state.
func (s *stack) forwardLayer(q *queue, lp *layerPass, l int, st *State) {
	sh, H := lp.sh, lp.H
	s.initial(q, lp, st, l)
	lp.pre = s.cell.projection(lp)
	for j, part := range lp.in {
		q.add(lp.k.Gemm(device.Gemm{DType: lp.dt, TransB: true, M: lp.T * lp.B, N: s.cell.gates() * H, K: part.width,
			Alpha: 1, Beta: float64(min(j, 1)), A: part.buf, B: weightCols(lp.dt, lp.w.wih, part.off), LdB: lp.w.in, C: lp.pre}))
	}
	ends := lp.dir == 0 && sh.varlen && st != nil
	for _, t := range lp.walk() {
		if lp.dir == 1 {
			s.enter(q, lp, t)
		}
		s.cell.forwardStep(q, lp, t)
		if e0, e1 := lp.rows(t+1), lp.rows(t); ends && e1 > e0 {
			// Sequences of length t+1 end here: keep their final states.
			q.add(lp.k.Copy(device.Copy{Dst: lp.span(lp.p.hEnd, e0, e1, H), Src: lp.span(lp.hOut(t), e0, e1, H)}))
			if !lp.p.cEnd.IsZero() {
				q.add(lp.k.Copy(device.Copy{Dst: lp.span(lp.p.cEnd, e0, e1, H), Src: lp.span(lp.cOut(t), e0, e1, H)}))
			}
		}
	}
	s.final(q, lp, st, l)
}

// weightCols is the view of a [rows, in] weight that starts at column off:
// with LdB = in, the columns [off, off+width) of every row.
func weightCols(dt device.DType, w device.Buffer, off int) device.Buffer {
	return w.Slice(int64(off)*dt.Size(), w.Len()-int64(off)*dt.Size())
}

// enter queues, before step t of the reverse walk, the initial states of
// the sequences whose walk starts at t (those of length t+1, rows
// [rows(t+1), rows(t)) of the sorted batch) into the state entering t,
// unless that is where they are.
func (s *stack) enter(q *queue, lp *layerPass, t int) {
	e0, e1 := lp.rows(t+1), lp.rows(t)
	if e1 <= e0 {
		return
	}
	for _, c := range [][2]device.Buffer{{lp.hIn(t), lp.hInit()}, {lp.cIn(t), lp.cInit()}} {
		if !c[0].IsZero() && c[0] != c[1] {
			q.add(lp.k.Copy(device.Copy{Dst: lp.span(c[0], e0, e1, lp.H), Src: lp.span(c[1], e0, e1, lp.H)}))
		}
	}
}

// initial queues writing the initial state of layer l's direction into
// its place: the state's values (sorted with lengths), or zeros without a
// state.
func (s *stack) initial(q *queue, lp *layerPass, st *State, l int) {
	n, idx := lp.B*lp.H, l*s.dirs()+lp.dir
	for _, part := range []struct{ dst, src device.Buffer }{{lp.hInit(), st.layerH(idx, n)}, {lp.cInit(), st.layerC(idx, n)}} {
		switch {
		case part.dst.IsZero():
		case st == nil:
			q.add(lp.k.Fill(device.Fill{DType: lp.dt, N: n, X: part.dst}))
		case lp.sh.varlen:
			q.add(lp.k.GatherSeq(lp.sh.toSorted(lp.dt, 1, lp.H, part.src, part.dst)))
		default:
			q.add(lp.k.Copy(device.Copy{Dst: part.dst, Src: part.src}))
		}
	}
}

// final queues copying the final state of layer l's direction into the
// state, if there is one: the state leaving the walk's last step (the
// forward direction's with lengths, each sequence's, kept in hEnd and
// cEnd), in the caller's order.
func (s *stack) final(q *queue, lp *layerPass, st *State, l int) {
	if st == nil {
		return
	}
	n, idx := lp.B*lp.H, l*s.dirs()+lp.dir
	hT, cT := lp.hOut(lp.T-1), lp.cOut(lp.T-1)
	switch {
	case lp.dir == 1:
		hT, cT = lp.hOut(0), lp.cOut(0)
	case lp.sh.varlen:
		hT, cT = lp.p.hEnd, lp.p.cEnd
	}
	for _, part := range []struct{ dst, src device.Buffer }{{st.layerH(idx, n), hT}, {st.layerC(idx, n), cT}} {
		switch {
		case part.dst.IsZero():
		case lp.sh.varlen:
			q.add(lp.k.GatherSeq(lp.sh.fromSorted(lp.dt, 1, lp.H, part.src, part.dst)))
		default:
			q.add(lp.k.Copy(device.Copy{Dst: part.dst, Src: part.src.Elems(lp.dt, 0, n)}))
		}
	}
}

// dropout queues the dropout of a direction's output, for the layers
// below the top in training, and returns the input of the layer above:
// the output, or its dropped copy.
func (s *stack) dropout(q *queue, lp *layerPass) device.Buffer {
	out := lp.output()
	if lp.b.drop.IsZero() {
		return out
	}
	n := lp.T * lp.B * lp.H
	q.add(lp.k.Dropout(device.Dropout{DType: lp.dt, N: n, P: s.cfg.Dropout, Seed: s.dropSeed, Offset: s.drawn,
		X: out, Y: lp.b.drop, Mask: lp.b.mask}))
	s.drawn += uint64(n)
	return lp.b.drop
}

// save records a training forward for Backward and ties the state to it,
// zeroing the state's gradients for the caller to write into.
func (s *stack) save(q *queue, sh batchShape, st *State) {
	s.rec = &record{sh: sh, state: st}
	if st == nil {
		return
	}
	st.tie = s.rec
	k, dt := s.dev.Kernels(), s.cfg.DType
	for _, g := range []device.Buffer{st.dh, st.dc} {
		if !g.IsZero() {
			q.add(k.Fill(device.Fill{DType: dt, N: s.cfg.Layers * s.dirs() * sh.B * s.cfg.Hidden, X: g}))
		}
	}
}

// Backward differentiates the saved training forward, given dy, the
// gradient of the loss with respect to its output, [seq, batch, dirs·Hidden]
// (read, not written; with lengths, not read at padded positions). It adds
// the parameter gradients into Params' Grad buffers, replaces the gradient
// in the forward's state, if that state is still tied to it, with the
// gradient with respect to the initial state, and returns the gradient with
// respect to x, [seq, batch, Input] (zero at padded positions), valid
// until the next Backward.
//
// Backward consumes what the forward saved: calling it without a training
// forward, or twice for one, returns ErrNoForward.
func (s *stack) Backward(dy device.Buffer) (device.Buffer, error) {
	op := s.cell.name() + ".Backward"
	rec := s.rec
	if rec == nil {
		return device.Buffer{}, noForward(op, s.spent)
	}
	c, dt := s.cfg, s.cfg.DType
	T, B, H, I, D := rec.sh.T, rec.sh.B, c.Hidden, c.Input, s.dirs()
	if err := input(op, "dy", s.dev, dy, dt, T*B*D*H, fmt.Sprintf("seq·batch·%shidden = %d·%d·%d", map[bool]string{true: "2·"}[D == 2], T, B, D*H)); err != nil {
		return device.Buffer{}, err
	}
	s.rec, s.spent = nil, true
	sh := rec.sh
	p, err := s.layoutSaved(&sh)
	if err == nil {
		err = s.backward(&p, &sh, rec, dy)
	}
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	return s.dx.buf.Elems(dt, 0, T*B*I), nil
}

// layoutSaved lays out the saved training forward of shape sh again, in
// the memory that holds it.
func (s *stack) layoutSaved(sh *batchShape) (pass, error) {
	dt := s.cfg.DType
	res, tmp := &arena{dt: dt}, &arena{dt: dt}
	s.plan(res, tmp, true, sh)
	var err error
	if res.buf, err = s.reserve.get(s.dev, device.Activations, int64(res.off)*dt.Size()); err != nil {
		return pass{}, err
	}
	if tmp.buf, err = s.work.get(s.dev, device.Workspace, int64(max(tmp.off, 1))*dt.Size()); err != nil {
		return pass{}, err
	}
	res.off, tmp.off = 0, 0
	return s.plan(res, tmp, true, sh), nil
}

// gradLayout takes Backward's buffers from the stack's scratch: the
// gradients flowing between layers and the gradient with respect to x.
func (s *stack) gradLayout(sh *batchShape) (gradBufs, error) {
	c, dt := s.cfg, s.cfg.DType
	T, B, D := sh.T, sh.B, s.dirs()
	g := &arena{dt: dt}
	take := func() (gb gradBufs) {
		BH := B * c.Hidden
		for slot := range 2 {
			for dir := range D {
				gb.dh[slot][dir] = g.take(T * BH)
			}
		}
		gb.row = g.take(BH)
		s.cell.planGrads(g, T, B, c.Hidden, &gb)
		if sh.varlen {
			gb.stH, gb.dxs = g.take(BH), g.take(T*B*c.Input)
			GH, in := s.cell.gates()*c.Hidden, max(c.Input, D*c.Hidden)
			gb.pPre, gb.pIn, gb.pH, gb.pDst = g.take(T*B*GH), g.take(T*B*in), g.take(T*BH), g.take(T*B*in)
			if !s.cell.carriesC() {
				gb.pHPre = g.take(T * B * GH)
			}
			if s.cell.carriesC() {
				gb.stC = g.take(BH)
			}
		}
		return gb
	}
	take()
	var err error
	if g.buf, err = s.grads.get(s.dev, device.Workspace, int64(g.off)*dt.Size()); err != nil {
		return gradBufs{}, err
	}
	g.off = 0
	gb := take()
	if _, err := s.dx.get(s.dev, device.Workspace, int64(T*B*c.Input)*dt.Size()); err != nil {
		return gradBufs{}, err
	}
	return gb, nil
}

func (s *stack) backward(p *pass, sh *batchShape, rec *record, dy device.Buffer) error {
	c, dt := s.cfg, s.cfg.DType
	T, B, H, I, L, D := sh.T, sh.B, c.Hidden, c.Input, c.Layers, s.dirs()
	gb, err := s.gradLayout(sh)
	if err != nil {
		return err
	}
	k := s.dev.Kernels()
	var q queue
	st := rec.state
	tied := st != nil && st.tie == rec
	// The gradient with respect to the top layer's output, in the stack's
	// order, one sequence per direction.
	top := gb.dh[(L-1)%2]
	if D == 1 && !sh.varlen {
		q.add(k.Copy(device.Copy{Dst: top[0], Src: dy.Slice(0, int64(T*B*H)*dt.Size())}))
	} else {
		for dir := range D {
			g := sh.toSorted(dt, T, H, dy.Elems(dt, dir*H, T*B*D*H-dir*H), top[dir])
			g.LdX = D * H
			q.add(k.GatherSeq(g))
		}
	}
	for l := L - 1; l >= 0; l-- {
		in := s.layerInputs(p, sh, l)
		// dst receives the gradient with respect to each part of the input.
		dst := []device.Buffer{s.dx.buf}
		if sh.varlen {
			dst[0] = gb.dxs
		}
		if l > 0 {
			dst = gb.dh[(l-1)%2][:D]
		}
		var packed []inPart // with lengths, the input packed, and its gradient
		var pdst []device.Buffer
		if sh.varlen {
			for _, part := range in {
				pp := part
				pp.buf = gb.pIn.Elems(dt, T*B*part.off, T*B*part.width)
				s.pack(&q, sh, part.buf, pp.buf, part.width)
				packed = append(packed, pp)
				pdst = append(pdst, gb.pDst.Elems(dt, T*B*part.off, T*B*part.width))
			}
		}
		for dir := range D {
			lp := s.layerPass(p, sh, true, l, dir, in)
			lg := &layerGrads{gradBufs: gb, dh: gb.dh[l%2][dir], tied: tied}
			idx := l*D + dir
			if tied {
				lg.stH, lg.stC = st.layerGradH(idx, B*H), st.layerGradC(idx, B*H)
				if sh.varlen {
					lg.stH, lg.stC = s.sortedGrads(&q, sh, lg, gb)
				}
			}
			s.backwardLayer(&q, lp, lg)
			if tied && sh.varlen {
				q.add(k.GatherSeq(sh.fromSorted(dt, 1, H, lg.stH, st.layerGradH(idx, B*H))))
				if !lg.stC.IsZero() {
					q.add(k.GatherSeq(sh.fromSorted(dt, 1, H, lg.stC, st.layerGradC(idx, B*H))))
				}
			}
			if sh.varlen {
				s.packedGrads(&q, lp, lg, packed, pdst, dir > 0)
			} else {
				s.weightGrads(&q, lp, lg)
				s.inputGrads(&q, lp, lg, dst, dir > 0)
			}
		}
		if sh.varlen {
			for j, part := range in {
				q.add(k.Fill(device.Fill{DType: dt, N: T * B * part.width, X: dst[j]}))
				s.unpack(&q, sh, pdst[j], dst[j], part.width)
			}
		}
		if l > 0 {
			for dir := range D {
				if m := s.lay[(l-1)*D+dir].mask; !m.IsZero() {
					q.add(k.Mul(device.Mul{DType: dt, N: T * B * H, X: dst[dir], Y: m, Z: dst[dir]}))
				}
			}
		}
	}
	if sh.varlen {
		q.add(k.GatherSeq(sh.fromSorted(dt, T, I, gb.dxs, s.dx.buf)))
	}
	return q.err
}

// sortedGrads queues gathering a direction's state gradients (lg.stH,
// lg.stC, in the caller's order) into the sorted order, and returns the
// sorted buffers.
func (s *stack) sortedGrads(q *queue, sh *batchShape, lg *layerGrads, gb gradBufs) (h, c device.Buffer) {
	k, dt, H := s.dev.Kernels(), s.cfg.DType, s.cfg.Hidden
	q.add(k.GatherSeq(sh.toSorted(dt, 1, H, lg.stH, gb.stH)))
	if !lg.stC.IsZero() {
		q.add(k.GatherSeq(sh.toSorted(dt, 1, H, lg.stC, gb.stC)))
		c = gb.stC
	}
	return gb.stH, c
}

// layerInputs is the input that layer l read in the training forward of
// pass p: x, or the outputs of the layer below, dropped when they were.
func (s *stack) layerInputs(p *pass, sh *batchShape, l int) []inPart {
	if l == 0 {
		return []inPart{{buf: p.x, width: s.cfg.Input}}
	}
	var parts []inPart
	for dir := range s.dirs() {
		below := s.layerPass(p, sh, true, l-1, dir, nil)
		buf := below.b.drop
		if buf.IsZero() {
			buf = below.output()
		}
		parts = append(parts, inPart{buf: buf, width: s.cfg.Hidden, off: dir * s.cfg.Hidden})
	}
	return parts
}

// backwardLayer queues the walk back over a direction's steps.
func (s *stack) backwardLayer(q *queue, lp *layerPass, lg *layerGrads) {
	H := lp.H
	if lg.tied {
		// The gradient with respect to a final state joins that of the
		// output of the step that produced it.
		for _, t := range lp.walk() {
			e0, e1 := lp.rows(t+1), lp.rows(t)
			if lp.dir == 1 {
				if t != 0 {
					continue
				}
				e0 = 0
			}
			if e1 > e0 {
				q.add(lp.k.Axpby(device.Axpby{DType: lp.dt, N: (e1 - e0) * H, Alpha: 1, X: lp.span(lg.stH, e0, e1, H), Beta: 1,
					Y: lp.span(lp.step(lg.dh, t, H), e0, e1, H)}))
			}
		}
	}
	s.cell.beginBackward(q, lp, lg)
	walk := lp.walk()
	for i := len(walk) - 1; i >= 0; i-- {
		t := walk[i]
		s.cell.backwardStep(q, lp, lg, t)
		if p := lp.prev(t); lg.tied && lp.dir == 1 && p >= 0 {
			// The sequences whose reverse walk started at t: the gradient
			// with respect to their initial state is in padded rows of p.
			if e0, e1 := lp.rows(t+1), lp.rows(t); e1 > e0 {
				q.add(lp.k.Copy(device.Copy{Dst: lp.span(lg.stH, e0, e1, H), Src: lp.span(lp.step(lg.dh, p, H), e0, e1, H)}))
			}
		}
	}
	s.cell.endBackward(q, lp, lg)
}

// weightGrads queues the gradients of a direction's weights and biases,
// added over all steps by a few large products and two row sums.
func (s *stack) weightGrads(q *queue, lp *layerPass, lg *layerGrads) {
	GH, TB, dt, w := s.cell.gates()*lp.H, lp.T*lp.B, lp.dt, lp.w
	dPre, dHPre := lg.dPre.Elems(dt, 0, TB*GH), lg.dHPre.Elems(dt, 0, TB*GH)
	for _, part := range lp.in {
		q.add(lp.k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: part.width, K: TB, Alpha: 1, Beta: 1, A: dPre, B: part.buf,
			C: weightCols(dt, w.gwih, part.off), LdC: w.in}))
	}
	q.add(lp.k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: lp.H, K: TB, Alpha: 1, Beta: 1, A: dHPre, B: lp.hIns(), C: w.gwhh}))
	if !s.cfg.NoBias {
		q.add(lp.k.SumRows(device.SumRows{DType: dt, Rows: TB, Cols: GH, X: dPre, Out: w.gbih, Accumulate: true}))
		q.add(lp.k.SumRows(device.SumRows{DType: dt, Rows: TB, Cols: GH, X: dHPre, Out: w.gbhh, Accumulate: true}))
	}
}

// inputGrads queues the gradient with respect to each part of a
// direction's input into dst (one buffer per part, [T, B, width]): through
// the input weights' columns of the part, added to what dst holds with
// accumulate (the other direction's).
func (s *stack) inputGrads(q *queue, lp *layerPass, lg *layerGrads, dst []device.Buffer, accumulate bool) {
	GH, TB, dt, w := s.cell.gates()*lp.H, lp.T*lp.B, lp.dt, lp.w
	dPre := lg.dPre.Elems(dt, 0, TB*GH)
	beta := 0.0
	if accumulate {
		beta = 1
	}
	for j, part := range lp.in {
		q.add(lp.k.Gemm(device.Gemm{DType: dt, M: TB, N: part.width, K: GH, Alpha: 1, Beta: beta, A: dPre,
			B: weightCols(dt, w.wih, part.off), LdB: w.in, C: dst[j]}))
	}
}

// pack queues copying the running rows of every step of src, a [T, B,
// width] sequence in the sorted order, into dst one step after the other:
// sum-of-lengths rows.
func (s *stack) pack(q *queue, sh *batchShape, src, dst device.Buffer, width int) {
	s.packing(q, sh, src, dst, width, true)
}

// unpack is pack's inverse; dst's padded rows are left as they are.
func (s *stack) unpack(q *queue, sh *batchShape, src, dst device.Buffer, width int) {
	s.packing(q, sh, dst, src, width, false)
}

func (s *stack) packing(q *queue, sh *batchShape, seq, packed device.Buffer, width int, pack bool) {
	k, dt, off := s.dev.Kernels(), s.cfg.DType, 0
	for t := range sh.maxLen {
		n := sh.rows(t)
		a, b := seq.Elems(dt, t*sh.B*width, n*width), packed.Elems(dt, off*width, n*width)
		if pack {
			q.add(k.Copy(device.Copy{Dst: b, Src: a}))
		} else {
			q.add(k.Copy(device.Copy{Dst: a, Src: b}))
		}
		off += n
	}
}

// tokens is the sum of the lengths.
func (sh *batchShape) tokens() int {
	n := 0
	for t := range sh.maxLen {
		n += sh.rows(t)
	}
	return n
}

// packedGrads is weightGrads and inputGrads with lengths: the same
// products over the packed running rows (in, the layer's input packed,
// and dst, its gradient packed, added into with accumulate).
func (s *stack) packedGrads(q *queue, lp *layerPass, lg *layerGrads, in []inPart, dst []device.Buffer, accumulate bool) {
	GH, TB, dt, w, n := s.cell.gates()*lp.H, lp.T*lp.B, lp.dt, lp.w, lp.sh.tokens()
	dPre, dHPre := lg.pPre, lg.pPre
	s.pack(q, lp.sh, lg.dPre.Elems(dt, 0, TB*GH), dPre, GH)
	if lg.dHPre != lg.dPre {
		dHPre = lg.pHPre
		s.pack(q, lp.sh, lg.dHPre.Elems(dt, 0, TB*GH), dHPre, GH)
	}
	s.pack(q, lp.sh, lp.hIns(), lg.pH, lp.H)
	beta := 0.0
	if accumulate {
		beta = 1
	}
	for j, part := range in {
		q.add(lp.k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: part.width, K: n, Alpha: 1, Beta: 1, A: dPre, B: part.buf,
			C: weightCols(dt, w.gwih, part.off), LdC: w.in}))
		q.add(lp.k.Gemm(device.Gemm{DType: dt, M: n, N: part.width, K: GH, Alpha: 1, Beta: beta, A: dPre,
			B: weightCols(dt, w.wih, part.off), LdB: w.in, C: dst[j]}))
	}
	q.add(lp.k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: lp.H, K: n, Alpha: 1, Beta: 1, A: dHPre, B: lg.pH, C: w.gwhh}))
	if !s.cfg.NoBias {
		q.add(lp.k.SumRows(device.SumRows{DType: dt, Rows: n, Cols: GH, X: dPre, Out: w.gbih, Accumulate: true}))
		q.add(lp.k.SumRows(device.SumRows{DType: dt, Rows: n, Cols: GH, X: dHPre, Out: w.gbhh, Accumulate: true}))
	}
}
