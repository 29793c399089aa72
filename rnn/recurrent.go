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

// LSTM is a stack of LSTM layers with PyTorch's equations, gate order
// (i, f, g, o), parameter names and shapes: weight_ih_l{k} [4·Hidden, in],
// weight_hh_l{k} [4·Hidden, Hidden], bias_ih_l{k} and bias_hh_l{k}
// [4·Hidden]. It is not safe for concurrent use.
type LSTM struct{ *stack }

// GRU is a stack of GRU layers with PyTorch's (and cuDNN's) equations, in
// which the reset gate multiplies the recurrent product plus its bias; gate
// order (r, z, n); parameters as LSTM's with 3·Hidden rows. It is not safe
// for concurrent use.
type GRU struct{ *stack }

// NewLSTM allocates an LSTM stack on d and initialises its parameters.
func NewLSTM(d device.Device, c Config) (*LSTM, error) {
	s, err := newStack(d, c, true)
	if err != nil {
		return nil, err
	}
	return &LSTM{s}, nil
}

// NewGRU allocates a GRU stack on d and initialises its parameters.
func NewGRU(d device.Device, c Config) (*GRU, error) {
	s, err := newStack(d, c, false)
	if err != nil {
		return nil, err
	}
	return &GRU{s}, nil
}

// stack is what LSTM and GRU share: the fused execution of L layers.
type stack struct {
	dev    device.Device
	name   string // "LSTM" or "GRU"
	lstm   bool
	cfg    Config
	gates  int // 4 for LSTM, 3 for GRU
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

// record is one training forward: its shape and the state it read.
type record struct {
	seq, batch int
	state      *State
}

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

func newStack(d device.Device, c Config, lstm bool) (*stack, error) {
	s := &stack{dev: d, lstm: lstm, name: "GRU", gates: 3, dropSeed: c.Seed}
	if lstm {
		s.name, s.gates = "LSTM", 4
	}
	if d == nil {
		return nil, fmt.Errorf("rnn: New%s: no device", s.name)
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
			s.name, c.Input, c.Hidden, c.Layers, device.ErrShape)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return nil, fmt.Errorf("rnn: New%s: dropout %v, want [0, 1)", s.name, c.Dropout)
	}
	s.cfg = c
	gh, bound := s.gates*c.Hidden, uniformBound(c.Hidden)
	var specs []paramSpec
	for l := range c.Layers {
		in := c.Input
		if l > 0 {
			in = c.Hidden
		}
		specs = append(specs,
			paramSpec{name: fmt.Sprintf("weight_ih_l%d", l), shape: []int{gh, in}, bound: bound},
			paramSpec{name: fmt.Sprintf("weight_hh_l%d", l), shape: []int{gh, c.Hidden}, bound: bound})
		if !c.NoBias {
			specs = append(specs,
				paramSpec{name: fmt.Sprintf("bias_ih_l%d", l), shape: []int{gh}, bound: bound},
				paramSpec{name: fmt.Sprintf("bias_hh_l%d", l), shape: []int{gh}, bound: bound})
		}
	}
	if s.params, err = newParams(d, dt, c.Seed, specs); err != nil {
		return nil, err
	}
	for l := range c.Layers {
		lp := layerParams{in: c.Input}
		if l > 0 {
			lp.in = c.Hidden
		}
		get := func(name string) (v, g device.Buffer) {
			q, _ := s.params.Lookup(fmt.Sprintf("%s_l%d", name, l))
			return q.Value, q.Grad
		}
		lp.wih, lp.gwih = get("weight_ih")
		lp.whh, lp.gwhh = get("weight_hh")
		lp.bih, lp.gbih = get("bias_ih")
		lp.bhh, lp.gbhh = get("bias_hh")
		s.layers = append(s.layers, lp)
	}
	s.lay = make([]layerBufs, c.Layers)
	return s, nil
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
	return newState(s.dev, s.cfg.DType, s.lstm, s.cfg.Layers, batch, s.cfg.Hidden)
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
	if s.lstm && !train {
		p.pre = tmp.take(T * B * 4 * H)
	}
	if !s.lstm {
		p.xpre, p.hpre = tmp.take(T*B*3*H), tmp.take(B*3*H)
	}
	for l := range L {
		b := &s.lay[l]
		if train {
			b.hseq = res.take((T + 1) * B * H)
			if s.lstm {
				b.cseq = res.take((T + 1) * B * H)
			}
			b.gates = res.take(T * B * 4 * H)
			if l < L-1 && s.cfg.Dropout > 0 {
				b.mask, b.drop = res.take(T*B*H), res.take(T*B*H)
			}
			continue
		}
		// Without grad two sequences serve every layer in turn.
		if l < 2 {
			b.hseq = tmp.take((T + 1) * B * H)
			if s.lstm {
				b.cseq = tmp.take(2 * B * H)
			}
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
	op := s.name + ".Forward"
	if err := checkMode(op, mode); err != nil {
		return device.Buffer{}, err
	}
	if err := positive(op, []string{"seq", "batch"}, seq, batch); err != nil {
		return device.Buffer{}, err
	}
	c, dt := s.cfg, s.cfg.DType
	if err := input(op, "x", s.dev, x, dt, seq*batch*c.Input, fmt.Sprintf("seq·batch·input = %d·%d·%d", seq, batch, c.Input)); err != nil {
		return device.Buffer{}, err
	}
	if st != nil {
		if err := st.check(op, s.dev, dt, s.lstm, c.Layers, batch, c.Hidden); err != nil {
			return device.Buffer{}, err
		}
	}
	train := mode == Train
	if train {
		if st != nil && st.tie != nil {
			return device.Buffer{}, fmt.Errorf("rnn: %s: the state still carries the gradient path of an earlier training forward, "+
				"whose saved activations this forward replaces; call State.Detach between windows "+
				"(truncated backpropagation through time, like PyTorch's h.detach())", op)
		}
		// The reserve is about to be overwritten.
		s.rec, s.spent = nil, false
	}
	p, err := s.layout(train, seq, batch)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	T, B, H, L, G := seq, batch, c.Hidden, c.Layers, s.gates
	BH := B * H
	k := s.dev.Kernels()
	var q queue
	in, inW := x.Slice(0, int64(T*B*c.Input)*dt.Size()), c.Input
	if train {
		q.add(k.Copy(device.Copy{Dst: p.x, Src: in}))
		in = p.x
	}
	for l := range L {
		w, b := &s.layers[l], &s.lay[l]
		h := func(t int) device.Buffer { return b.hseq.Elems(dt, t*BH, BH) }
		cell := func(t int) device.Buffer {
			if !s.lstm {
				return device.Buffer{}
			}
			if !train {
				t %= 2
			}
			return b.cseq.Elems(dt, t*BH, BH)
		}
		s.initial(&q, st, l, h(0), cell(0))
		pre := b.gates
		switch {
		case !s.lstm:
			pre = p.xpre
		case !train:
			pre = p.pre
		}
		q.add(k.Gemm(device.Gemm{DType: dt, TransB: true, M: T * B, N: G * H, K: inW, Alpha: 1, A: in, B: w.wih, C: pre}))
		for t := range T {
			if s.lstm {
				pt := pre.Elems(dt, t*4*BH, 4*BH)
				q.add(k.Gemm(device.Gemm{DType: dt, TransB: true, M: B, N: 4 * H, K: H, Alpha: 1, Beta: 1, A: h(t), B: w.whh, C: pt}))
				var act device.Buffer
				if train {
					act = pt
				}
				q.add(k.LSTMCell(device.LSTMCell{DType: dt, Batch: B, Hidden: H, Pre: pt, BiasIH: w.bih, BiasHH: w.bhh,
					CPrev: cell(t), C: cell(t + 1), H: h(t + 1), Act: act}))
				continue
			}
			q.add(k.Gemm(device.Gemm{DType: dt, TransB: true, M: B, N: 3 * H, K: H, Alpha: 1, A: h(t), B: w.whh, C: p.hpre}))
			var act device.Buffer
			if train {
				act = b.gates.Elems(dt, t*4*BH, 4*BH)
			}
			q.add(k.GRUCell(device.GRUCell{DType: dt, Batch: B, Hidden: H, XPre: pre.Elems(dt, t*3*BH, 3*BH), HPre: p.hpre,
				BiasIH: w.bih, BiasHH: w.bhh, HPrev: h(t), H: h(t + 1), Act: act}))
		}
		if st != nil {
			q.add(k.Copy(device.Copy{Dst: st.h.Elems(dt, l*BH, BH), Src: h(T)}))
			if s.lstm {
				q.add(k.Copy(device.Copy{Dst: st.c.Elems(dt, l*BH, BH), Src: cell(T)}))
			}
		}
		in, inW = b.hseq.Elems(dt, BH, T*BH), H
		if !b.drop.IsZero() {
			q.add(k.Dropout(device.Dropout{DType: dt, N: T * BH, P: c.Dropout, Seed: s.dropSeed, Offset: s.drawn,
				X: in, Y: b.drop, Mask: b.mask}))
			s.drawn += uint64(T * BH)
			in = b.drop
		}
	}
	if q.err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	if train {
		s.rec = &record{seq: T, batch: B, state: st}
		if st != nil {
			st.tie = s.rec
			for _, g := range []device.Buffer{st.dh, st.dc} {
				if !g.IsZero() {
					q.add(k.Fill(device.Fill{DType: dt, N: L * BH, X: g}))
				}
			}
		}
	}
	if q.err != nil {
		s.rec = nil
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	return in, nil
}

// initial queues writing layer l's initial state into h0 and c0 (c0 none
// for a GRU): the state's values, or zeros without a state.
func (s *stack) initial(q *queue, st *State, l int, h0, c0 device.Buffer) {
	k, dt := s.dev.Kernels(), s.cfg.DType
	n := int(h0.Len() / dt.Size())
	for i, dst := range []device.Buffer{h0, c0} {
		switch {
		case !s.lstm && i == 1:
		case st == nil:
			q.add(k.Fill(device.Fill{DType: dt, N: n, X: dst}))
		case i == 0:
			q.add(k.Copy(device.Copy{Dst: dst, Src: st.h.Elems(dt, l*n, n)}))
		default:
			q.add(k.Copy(device.Copy{Dst: dst, Src: st.c.Elems(dt, l*n, n)}))
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
	op := s.name + ".Backward"
	rec := s.rec
	if rec == nil {
		return device.Buffer{}, noForward(op, s.spent)
	}
	c, dt := s.cfg, s.cfg.DType
	T, B, H, I := rec.seq, rec.batch, c.Hidden, c.Input
	BH := B * H
	if err := input(op, "dy", s.dev, dy, dt, T*BH, fmt.Sprintf("seq·batch·hidden = %d·%d·%d", T, B, H)); err != nil {
		return device.Buffer{}, err
	}
	s.rec, s.spent = nil, true
	p, err := s.layout(true, T, B)
	if err == nil {
		err = s.backward(p, rec, dy)
	}
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	return s.dx.buf.Elems(dt, 0, T*B*I), nil
}

func (s *stack) backward(p pass, rec *record, dy device.Buffer) error {
	c, dt := s.cfg, s.cfg.DType
	T, B, H, L, G := rec.seq, rec.batch, c.Hidden, c.Layers, s.gates
	BH := B * H
	// Gradient buffers: two [T, B, H] sequences used in turn (the
	// gradient with respect to one layer's output, then the layer
	// below's), and per-step temporaries.
	g := &arena{dt: dt}
	take := func() (dh [2]device.Buffer, dc, dxp, dhp device.Buffer) {
		dh[0], dh[1] = g.take(T*BH), g.take(T*BH)
		dc = g.take(BH)
		if !s.lstm {
			dxp, dhp = g.take(T*3*BH), g.take(T*3*BH)
		}
		return
	}
	take()
	var err error
	if g.buf, err = s.grads.get(s.dev, int64(g.off)*dt.Size()); err != nil {
		return err
	}
	g.off = 0
	dhs, dc, dxp, dhp := take()
	if _, err := s.dx.get(s.dev, int64(T*B*c.Input)*dt.Size()); err != nil {
		return err
	}

	k := s.dev.Kernels()
	var q queue
	st := rec.state
	tied := st != nil && st.tie == rec
	cur := dhs[(L-1)%2]
	q.add(k.Copy(device.Copy{Dst: cur, Src: dy.Slice(0, int64(T*BH)*dt.Size())}))
	for l := L - 1; l >= 0; l-- {
		w, b := &s.layers[l], &s.lay[l]
		at := func(buf device.Buffer, t, n int) device.Buffer { return buf.Elems(dt, t*n, n) }
		in := p.x
		if l > 0 {
			in = s.lay[l-1].hseq.Elems(dt, BH, T*BH)
			if !s.lay[l-1].drop.IsZero() {
				in = s.lay[l-1].drop
			}
		}
		var stH, stC device.Buffer
		if tied {
			stH = at(st.dh, l, BH)
			q.add(k.Axpby(device.Axpby{DType: dt, N: BH, Alpha: 1, X: stH, Beta: 1, Y: at(cur, T-1, BH)}))
		}
		// dPre and dHPre: the gradients with respect to the input-side and
		// recurrent pre-activations, [T, B, G·H]. For the LSTM they are one
		// and replace the saved activations in place.
		dPre, dHPre := b.gates, b.gates
		if s.lstm {
			if tied {
				stC = at(st.dc, l, BH)
				q.add(k.Copy(device.Copy{Dst: dc, Src: stC}))
			} else {
				q.add(k.Fill(device.Fill{DType: dt, N: BH, X: dc}))
			}
			for t := T - 1; t >= 0; t-- {
				a := at(b.gates, t, 4*BH)
				q.add(k.LSTMCellGrad(device.LSTMCellGrad{DType: dt, Batch: B, Hidden: H, Act: a,
					CPrev: at(b.cseq, t, BH), C: at(b.cseq, t+1, BH), DH: at(cur, t, BH), DC: dc, DPre: a, DCPrev: dc}))
				switch {
				case t > 0:
					q.add(k.Gemm(device.Gemm{DType: dt, M: B, N: H, K: 4 * H, Alpha: 1, Beta: 1, A: a, B: w.whh, C: at(cur, t-1, BH)}))
				case tied:
					q.add(k.Gemm(device.Gemm{DType: dt, M: B, N: H, K: 4 * H, Alpha: 1, A: a, B: w.whh, C: stH}))
					q.add(k.Copy(device.Copy{Dst: stC, Src: dc}))
				}
			}
		} else {
			dPre, dHPre = dxp, dhp
			for t := T - 1; t >= 0; t-- {
				dPrev, acc := dc, false // dc serves as a scratch row here
				switch {
				case t > 0:
					dPrev, acc = at(cur, t-1, BH), true
				case tied:
					dPrev = stH
				}
				hp := at(dhp, t, 3*BH)
				q.add(k.GRUCellGrad(device.GRUCellGrad{DType: dt, Batch: B, Hidden: H, Act: at(b.gates, t, 4*BH),
					HPrev: at(b.hseq, t, BH), DH: at(cur, t, BH), DXPre: at(dxp, t, 3*BH), DHPre: hp, DHPrev: dPrev, Accumulate: acc}))
				if t > 0 || tied {
					q.add(k.Gemm(device.Gemm{DType: dt, M: B, N: H, K: 3 * H, Alpha: 1, Beta: 1, A: hp, B: w.whh, C: dPrev}))
				}
			}
		}
		// The three large products: weight gradients over all steps at
		// once, then the gradient with respect to the layer's input.
		GH := G * H
		dPre, dHPre = dPre.Elems(dt, 0, T*B*GH), dHPre.Elems(dt, 0, T*B*GH)
		q.add(k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: w.in, K: T * B, Alpha: 1, Beta: 1, A: dPre, B: in, C: w.gwih}))
		q.add(k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: H, K: T * B, Alpha: 1, Beta: 1, A: dHPre, B: b.hseq, C: w.gwhh}))
		if !c.NoBias {
			q.add(k.SumRows(device.SumRows{DType: dt, Rows: T * B, Cols: GH, X: dPre, Out: w.gbih, Accumulate: true}))
			q.add(k.SumRows(device.SumRows{DType: dt, Rows: T * B, Cols: GH, X: dHPre, Out: w.gbhh, Accumulate: true}))
		}
		dst := s.dx.buf
		if l > 0 {
			dst = dhs[(l-1)%2]
		}
		q.add(k.Gemm(device.Gemm{DType: dt, M: T * B, N: w.in, K: GH, Alpha: 1, A: dPre, B: w.wih, C: dst}))
		if l > 0 && !s.lay[l-1].mask.IsZero() {
			q.add(k.Mul(device.Mul{DType: dt, N: T * BH, X: dst, Y: s.lay[l-1].mask, Z: dst}))
		}
		cur = dst
	}
	return q.err
}
