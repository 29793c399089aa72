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
}

// The execution of a stack, and where it will grow.
//
// A stack runs layer by layer. Everything about one layer's walk over a
// window is a layerPass: its parameters, its regions of the pass's memory,
// its input and the rows each step covers. The stack owns what the cells
// share (the initial and final state, the input projection, dropout between
// layers, and in Backward the weight and input gradients, which are a few
// large GEMMs over all steps); a cell (lstmCell, gruCell) owns what differs,
// its per-step forward and backward kernels and the buffers they need.
//
// Two extensions are planned, and each is local to this structure:
//   - A bidirectional stack (PyTorch's bidirectional=True) gives every layer
//     a second layerPass that walks the steps in reverse with its own
//     "_reverse" parameters and writes the second half of a [T, B, 2H]
//     output; the layer above then reads 2H features. The cells' step
//     functions take the step index and the layerPass, so they serve both
//     directions unchanged.
//   - Variable-length sequences, sorted by length, make the active rows of
//     step t a prefix of the batch: layerPass.rows(t) returns that count
//     instead of the batch, and every per-step kernel already takes its row
//     count from it.

// stack is what LSTM and GRU share: the fused execution of L layers.
type stack struct {
	dev    device.Device
	cell   cell
	cfg    Config
	params *Params
	layers []layerParams

	// rec is the saved training forward, nil when there is none; spent
	// says the last one was consumed by Backward.
	rec   *record
	spent bool
	// reserve holds what a training forward saves for Backward; work the
	// temporaries of one pass; grads the gradients flowing between layers
	// in Backward; dx the gradient with respect to the input.
	reserve, work, grads, dx scratch
	lay                      []layerBufs // reused views, one per layer
	dropSeed                 uint64      // the seed of the dropout masks
	drawn                    uint64      // dropout mask elements drawn so far
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
	// turn; planLayer takes a layer's own buffers beyond h and the saved
	// activations; planGrads takes Backward's per-step temporaries.
	planPass(tmp *arena, train bool, T, B, H int, p *pass)
	planLayer(a *arena, train bool, T, B, H int, b *layerBufs)
	planGrads(g *arena, T, B, H int, gb *gradBufs)

	// projection is where the input projection of all steps goes, [T, B,
	// gates·H], for forwardStep to read.
	projection(lp *layerPass) device.Buffer
	// forwardStep queues step t: h(t) (and c(t)) and the step's input
	// projection in, h(t+1) (and c(t+1)) out, plus the activations
	// Backward needs in training.
	forwardStep(q *queue, lp *layerPass, t int)

	// beginBackward prepares a layer's backward walk: it sets lg.dPre and
	// lg.dHPre, and starts any gradient the cell carries between steps.
	beginBackward(q *queue, lp *layerPass, lg *layerGrads)
	// backwardStep queues step t of the walk back: from the gradient with
	// respect to h(t+1), lg.dh's step t, to the pre-activation gradients
	// of step t and the gradient with respect to h(t), added into lg.dh's
	// step t-1 (or written to the state's gradient at t = 0 when tied).
	backwardStep(q *queue, lp *layerPass, lg *layerGrads, t int)
}

// record is one training forward: its shape and the state it read.
type record struct {
	seq, batch int
	state      *State
}

// layerParams are one layer's parameters and gradients, views of the
// stack's Params.
type layerParams struct {
	in                     int // input features of the layer
	wih, whh, bih, bhh     device.Buffer
	gwih, gwhh, gbih, gbhh device.Buffer
}

// layerBufs are one layer's regions of a pass.
type layerBufs struct {
	hseq device.Buffer // [T+1, B, H]: h0, then h1..hT (the layer's output)
	// cseq is the LSTM's cells: [T+1, B, H] in training; two [B, H]
	// slots used in turn without grad.
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
	x    device.Buffer // training: a copy of the input [T, B, I]
	xpre device.Buffer // GRU: the input projection [T, B, 3H]
	hpre device.Buffer // GRU: one step's recurrent product [B, 3H]
	pre  device.Buffer // LSTM without grad: the gate pre-activations [T, B, 4H]
}

// gradBufs are Backward's buffers, shared by the layers in turn.
type gradBufs struct {
	// dh are two [T, B, H] sequences used in turn: the gradient with
	// respect to one layer's output, then the layer below's.
	dh [2]device.Buffer
	// row is one [B, H] row of steps: the LSTM's carried dc, the GRU's
	// scratch for a gradient nobody reads.
	row device.Buffer
	// dxp and dhp are the GRU's gradients with respect to the input-side
	// and recurrent pre-activations, [T, B, 3H].
	dxp, dhp device.Buffer
}

// layerPass is one layer's walk over a window in one direction (the only
// one today): the layer's parameters and buffers, the pass's shared
// temporaries, and the shape of every step.
type layerPass struct {
	k       device.Kernels
	dt      device.DType
	T, B, H int
	train   bool
	w       *layerParams
	b       *layerBufs
	p       *pass
	// in is the layer's input, [T, B, w.in].
	in device.Buffer
	// pre is the input projection of all steps, [T, B, gates·H].
	pre device.Buffer
}

// rows is the number of rows step t covers: the batch. (Sorted
// variable-length sequences will make it the prefix still active at t.)
func (lp *layerPass) rows(int) int { return lp.B }

// step returns step t's [B, width] block of a [T, B, width] sequence.
func (lp *layerPass) step(buf device.Buffer, t, width int) device.Buffer {
	n := lp.B * width
	return buf.Elems(lp.dt, t*n, n)
}

// h is the hidden state entering step t: h(0) is the initial state, h(T)
// the final one.
func (lp *layerPass) h(t int) device.Buffer { return lp.step(lp.b.hseq, t, lp.H) }

// c is the cell state entering step t, as h; none for a cell without one.
// Without grad two slots serve every step in turn.
func (lp *layerPass) c(t int) device.Buffer {
	if lp.b.cseq.IsZero() {
		return device.Buffer{}
	}
	if !lp.train {
		t %= 2
	}
	return lp.step(lp.b.cseq, t, lp.H)
}

// output is the layer's output h1..hT, [T, B, H].
func (lp *layerPass) output() device.Buffer {
	BH := lp.B * lp.H
	return lp.b.hseq.Elems(lp.dt, BH, lp.T*BH)
}

// layerGrads are one layer's gradients in Backward.
type layerGrads struct {
	gradBufs
	// dh is the gradient with respect to the layer's output h1..hT, [T, B,
	// H]; the walk back adds the recurrent part into it step by step.
	dh device.Buffer
	// dPre and dHPre are the gradients with respect to the input-side and
	// recurrent pre-activations, [T, B, G·H] (the same for the LSTM).
	dPre, dHPre device.Buffer
	// tied says the forward's state is still tied to it: stH and stC are
	// then the layer's rows of the state's gradients, the gradient with
	// respect to the final state on entry and the initial one on return.
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
		s.layers = append(s.layers, s.layerParams(l))
	}
	s.lay = make([]layerBufs, c.Layers)
	return s, nil
}

// layerInput is the number of input features of layer l.
func (s *stack) layerInput(l int) int {
	if l > 0 {
		return s.cfg.Hidden
	}
	return s.cfg.Input
}

// paramSpecs lists the parameters in PyTorch's order, layer by layer.
func (s *stack) paramSpecs() []paramSpec {
	c := s.cfg
	gh, bound := s.cell.gates()*c.Hidden, uniformBound(c.Hidden)
	var specs []paramSpec
	for l := range c.Layers {
		specs = append(specs,
			paramSpec{name: fmt.Sprintf("weight_ih_l%d", l), shape: []int{gh, s.layerInput(l)}, bound: bound},
			paramSpec{name: fmt.Sprintf("weight_hh_l%d", l), shape: []int{gh, c.Hidden}, bound: bound})
		if !c.NoBias {
			specs = append(specs,
				paramSpec{name: fmt.Sprintf("bias_ih_l%d", l), shape: []int{gh}, bound: bound},
				paramSpec{name: fmt.Sprintf("bias_hh_l%d", l), shape: []int{gh}, bound: bound})
		}
	}
	return specs
}

// layerParams returns the views of layer l's parameters; the biases are
// zero Buffers without bias.
func (s *stack) layerParams(l int) layerParams {
	lp := layerParams{in: s.layerInput(l)}
	get := func(name string) (v, g device.Buffer) {
		q, _ := s.params.Lookup(fmt.Sprintf("%s_l%d", name, l))
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

// NewState allocates a zero state for batch sequences.
func (s *stack) NewState(batch int) (*State, error) {
	return newState(s.dev, s.cfg.DType, s.cell.carriesC(), s.cfg.Layers, batch, s.cfg.Hidden)
}

// Close frees the parameters and every buffer the stack holds. The stack
// must not be used afterwards.
func (s *stack) Close() error {
	s.rec = nil
	var q queue
	for _, b := range []*scratch{&s.reserve, &s.work, &s.grads, &s.dx} {
		q.add(b.free(s.dev))
	}
	if s.params != nil {
		q.add(s.params.free())
		s.params = nil
	}
	return q.err
}

// plan lays out a forward over T steps of B sequences: what Backward needs
// from res, temporaries from tmp (the same arena without grad).
func (s *stack) plan(res, tmp *arena, train bool, T, B int) pass {
	H, L := s.cfg.Hidden, s.cfg.Layers
	var p pass
	if train {
		p.x = res.take(T * B * s.cfg.Input)
	}
	s.cell.planPass(tmp, train, T, B, H, &p)
	for l := range L {
		b := &s.lay[l]
		if train {
			b.hseq = res.take((T + 1) * B * H)
			s.cell.planLayer(res, train, T, B, H, b)
			b.gates = res.take(T * B * 4 * H)
			if l < L-1 && s.cfg.Dropout > 0 {
				b.mask, b.drop = res.take(T*B*H), res.take(T*B*H)
			}
			continue
		}
		// Without grad two sequences serve every layer in turn.
		if l < 2 {
			b.hseq = tmp.take((T + 1) * B * H)
			s.cell.planLayer(tmp, train, T, B, H, b)
		} else {
			b.hseq, b.cseq = s.lay[l-2].hseq, s.lay[l-2].cseq
		}
		b.gates, b.mask, b.drop = device.Buffer{}, device.Buffer{}, device.Buffer{}
	}
	return p
}

// layout sizes the arenas for a pass, takes their memory from the
// stack's scratch buffers and lays the pass out in it.
func (s *stack) layout(train bool, T, B int) (pass, error) {
	dt := s.cfg.DType
	res, tmp := &arena{dt: dt}, &arena{dt: dt}
	if !train {
		res = tmp
	}
	s.plan(res, tmp, train, T, B)
	var err error
	if train {
		if res.buf, err = s.reserve.get(s.dev, int64(res.off)*dt.Size()); err != nil {
			return pass{}, err
		}
	}
	if tmp.buf, err = s.work.get(s.dev, int64(max(tmp.off, 1))*dt.Size()); err != nil {
		return pass{}, err
	}
	res.off, tmp.off = 0, 0
	return s.plan(res, tmp, train, T, B), nil
}

// layerPass returns layer l's walk over a pass of T steps of B rows that
// reads in.
func (s *stack) layerPass(p *pass, train bool, l, T, B int, in device.Buffer) *layerPass {
	return &layerPass{k: s.dev.Kernels(), dt: s.cfg.DType, T: T, B: B, H: s.cfg.Hidden, train: train,
		w: &s.layers[l], b: &s.lay[l], p: p, in: in}
}

// Forward runs the stack over x, [seq, batch, Input] (PyTorch's layout
// without batch_first), and returns the last layer's output h_1..h_seq,
// [seq, batch, Hidden].
//
// s, when not nil, is the initial state on entry and the final state on
// return (h_n and c_n); nil means a zero initial state and no final state.
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
	op := s.cell.name() + ".Forward"
	if err := s.checkForward(op, mode, x, seq, batch, st); err != nil {
		return device.Buffer{}, err
	}
	train := mode == Train
	if train {
		// The reserve is about to be overwritten.
		s.rec, s.spent = nil, false
	}
	p, err := s.layout(train, seq, batch)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	var q queue
	out := s.forwardLayers(&q, &p, train, x, seq, batch, st)
	if q.err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	if train {
		s.save(&q, seq, batch, st)
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
	if err := st.check(op, s.dev, dt, s.cell.carriesC(), c.Layers, batch, c.Hidden); err != nil {
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
// returns the top layer's output (after no dropout: the top has none).
func (s *stack) forwardLayers(q *queue, p *pass, train bool, x device.Buffer, T, B int, st *State) device.Buffer {
	dt := s.cfg.DType
	in := x.Slice(0, int64(T*B*s.cfg.Input)*dt.Size())
	if train {
		q.add(s.dev.Kernels().Copy(device.Copy{Dst: p.x, Src: in}))
		in = p.x
	}
	for l := range s.cfg.Layers {
		lp := s.layerPass(p, train, l, T, B, in)
		s.forwardLayer(q, lp, l, st)
		in = s.dropout(q, lp)
	}
	return in
}

// forwardLayer queues layer l's walk over the steps: the initial state,
// the input projection of every step at once, the steps, and the final
// state.
func (s *stack) forwardLayer(q *queue, lp *layerPass, l int, st *State) {
	s.initial(q, st, l, lp.h(0), lp.c(0))
	lp.pre = s.cell.projection(lp)
	q.add(lp.k.Gemm(device.Gemm{DType: lp.dt, TransB: true, M: lp.T * lp.B, N: s.cell.gates() * lp.H, K: lp.w.in,
		Alpha: 1, A: lp.in, B: lp.w.wih, C: lp.pre}))
	for t := range lp.T {
		s.cell.forwardStep(q, lp, t)
	}
	s.final(q, st, l, lp.h(lp.T), lp.c(lp.T))
}

// initial queues writing layer l's initial state into h0 and c0 (c0 none
// for a cell without one): the state's values, or zeros without a state.
func (s *stack) initial(q *queue, st *State, l int, h0, c0 device.Buffer) {
	k, dt := s.dev.Kernels(), s.cfg.DType
	n := int(h0.Len() / dt.Size())
	for _, part := range []struct{ dst, src device.Buffer }{{h0, st.layerH(l, n)}, {c0, st.layerC(l, n)}} {
		switch {
		case part.dst.IsZero():
		case st == nil:
			q.add(k.Fill(device.Fill{DType: dt, N: n, X: part.dst}))
		default:
			q.add(k.Copy(device.Copy{Dst: part.dst, Src: part.src}))
		}
	}
}

// final queues copying layer l's final state, hT and cT (cT none for a
// cell without one), into the state, if there is one.
func (s *stack) final(q *queue, st *State, l int, hT, cT device.Buffer) {
	if st == nil {
		return
	}
	k, dt := s.dev.Kernels(), s.cfg.DType
	n := int(hT.Len() / dt.Size())
	q.add(k.Copy(device.Copy{Dst: st.layerH(l, n), Src: hT}))
	if !cT.IsZero() {
		q.add(k.Copy(device.Copy{Dst: st.layerC(l, n), Src: cT}))
	}
}

// dropout queues the dropout of a layer's output, for the layers below the
// top in training, and returns the input of the layer above: the output,
// or its dropped copy.
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
func (s *stack) save(q *queue, T, B int, st *State) {
	s.rec = &record{seq: T, batch: B, state: st}
	if st == nil {
		return
	}
	st.tie = s.rec
	k, dt := s.dev.Kernels(), s.cfg.DType
	for _, g := range []device.Buffer{st.dh, st.dc} {
		if !g.IsZero() {
			q.add(k.Fill(device.Fill{DType: dt, N: s.cfg.Layers * B * s.cfg.Hidden, X: g}))
		}
	}
}

// Backward differentiates the saved training forward, given dy, the
// gradient of the loss with respect to its output, [seq, batch, Hidden]
// (read, not written). It adds the parameter gradients into Params' Grad
// buffers, replaces the gradient in the forward's state, if that state is
// still tied to it, with the gradient with respect to the initial state, and
// returns the gradient with respect to x, [seq, batch, Input], valid until
// the next Backward.
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
	T, B, H, I := rec.seq, rec.batch, c.Hidden, c.Input
	if err := input(op, "dy", s.dev, dy, dt, T*B*H, fmt.Sprintf("seq·batch·hidden = %d·%d·%d", T, B, H)); err != nil {
		return device.Buffer{}, err
	}
	s.rec, s.spent = nil, true
	p, err := s.layout(true, T, B)
	if err == nil {
		err = s.backward(&p, rec, dy)
	}
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	return s.dx.buf.Elems(dt, 0, T*B*I), nil
}

// gradLayout takes Backward's buffers from the stack's scratch: the
// gradients flowing between layers and the gradient with respect to x.
func (s *stack) gradLayout(T, B int) (gradBufs, error) {
	c, dt := s.cfg, s.cfg.DType
	g := &arena{dt: dt}
	take := func() (gb gradBufs) {
		BH := B * c.Hidden
		gb.dh[0], gb.dh[1] = g.take(T*BH), g.take(T*BH)
		gb.row = g.take(BH)
		s.cell.planGrads(g, T, B, c.Hidden, &gb)
		return gb
	}
	take()
	var err error
	if g.buf, err = s.grads.get(s.dev, int64(g.off)*dt.Size()); err != nil {
		return gradBufs{}, err
	}
	g.off = 0
	gb := take()
	if _, err := s.dx.get(s.dev, int64(T*B*c.Input)*dt.Size()); err != nil {
		return gradBufs{}, err
	}
	return gb, nil
}

func (s *stack) backward(p *pass, rec *record, dy device.Buffer) error {
	c, dt := s.cfg, s.cfg.DType
	T, B, H, L := rec.seq, rec.batch, c.Hidden, c.Layers
	gb, err := s.gradLayout(T, B)
	if err != nil {
		return err
	}
	var q queue
	st := rec.state
	tied := st != nil && st.tie == rec
	dh := gb.dh[(L-1)%2]
	q.add(s.dev.Kernels().Copy(device.Copy{Dst: dh, Src: dy.Slice(0, int64(T*B*H)*dt.Size())}))
	for l := L - 1; l >= 0; l-- {
		lp := s.layerPass(p, true, l, T, B, s.layerInputSeq(p, l, T, B))
		lg := &layerGrads{gradBufs: gb, dh: dh, tied: tied}
		if tied {
			lg.stH, lg.stC = st.layerGradH(l, B*H), st.layerGradC(l, B*H)
		}
		s.backwardLayer(&q, lp, lg)
		dst := s.dx.buf
		if l > 0 {
			dst = gb.dh[(l-1)%2]
		}
		s.inputGrad(&q, lp, lg, l, dst)
		dh = dst
	}
	return q.err
}

// layerInputSeq is the input that layer l read in the training forward of
// pass p, over T steps of B rows: x, or the output of the layer below,
// dropped when it was.
func (s *stack) layerInputSeq(p *pass, l, T, B int) device.Buffer {
	if l == 0 {
		return p.x
	}
	below := &s.lay[l-1]
	if !below.drop.IsZero() {
		return below.drop
	}
	BH := B * s.cfg.Hidden
	return below.hseq.Elems(s.cfg.DType, BH, T*BH)
}

// backwardLayer queues the walk back over a layer's steps, then the
// gradients of its weights and biases over all steps at once.
func (s *stack) backwardLayer(q *queue, lp *layerPass, lg *layerGrads) {
	if lg.tied {
		// The gradient with respect to the final state joins that of the
		// last output.
		q.add(lp.k.Axpby(device.Axpby{DType: lp.dt, N: lp.B * lp.H, Alpha: 1, X: lg.stH, Beta: 1, Y: lp.step(lg.dh, lp.T-1, lp.H)}))
	}
	s.cell.beginBackward(q, lp, lg)
	for t := lp.T - 1; t >= 0; t-- {
		s.cell.backwardStep(q, lp, lg, t)
	}
	s.weightGrads(q, lp, lg)
}

// weightGrads queues the gradients of a layer's weights and biases, added
// over all steps by three large products and two row sums.
func (s *stack) weightGrads(q *queue, lp *layerPass, lg *layerGrads) {
	GH, TB, dt, w := s.cell.gates()*lp.H, lp.T*lp.B, lp.dt, lp.w
	dPre, dHPre := lg.dPre.Elems(dt, 0, TB*GH), lg.dHPre.Elems(dt, 0, TB*GH)
	q.add(lp.k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: w.in, K: TB, Alpha: 1, Beta: 1, A: dPre, B: lp.in, C: w.gwih}))
	q.add(lp.k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: lp.H, K: TB, Alpha: 1, Beta: 1, A: dHPre, B: lp.b.hseq, C: w.gwhh}))
	if !s.cfg.NoBias {
		q.add(lp.k.SumRows(device.SumRows{DType: dt, Rows: TB, Cols: GH, X: dPre, Out: w.gbih, Accumulate: true}))
		q.add(lp.k.SumRows(device.SumRows{DType: dt, Rows: TB, Cols: GH, X: dHPre, Out: w.gbhh, Accumulate: true}))
	}
}

// inputGrad queues the gradient with respect to layer l's input into dst,
// [T, B, in]: through the input weights, then through the dropout mask of
// the layer below if it had one.
func (s *stack) inputGrad(q *queue, lp *layerPass, lg *layerGrads, l int, dst device.Buffer) {
	GH, TB, dt, w := s.cell.gates()*lp.H, lp.T*lp.B, lp.dt, lp.w
	dPre := lg.dPre.Elems(dt, 0, TB*GH)
	q.add(lp.k.Gemm(device.Gemm{DType: dt, M: TB, N: w.in, K: GH, Alpha: 1, A: dPre, B: w.wih, C: dst}))
	if l > 0 && !s.lay[l-1].mask.IsZero() {
		q.add(lp.k.Mul(device.Mul{DType: dt, N: TB * lp.H, X: dst, Y: s.lay[l-1].mask, Z: dst}))
	}
}
