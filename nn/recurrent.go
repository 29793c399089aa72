package nn

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
)

// RecurrentConfig describes a recurrent module: rnn.Config (PyTorch's
// input_size, hidden_size, num_layers, dropout, bias, bidirectional) and
// what the module outputs.
type RecurrentConfig struct {
	rnn.Config
	// Final makes the output the top layer's final states, [B, D·H] for D
	// directions (cat(h_n[-2], h_n[-1]) in PyTorch's terms when
	// bidirectional: the forward direction after each sequence's last
	// real step, the reverse one after its first), without lengths: a
	// sequence's summary, for a classifier or an encoder's head. Without
	// it the output is every step's top-layer output, [T, B, D·H], with
	// the input's lengths (zeros at padded steps).
	Final bool
}

// State is a recurrent module's state for a batch: H, [L·D, B, H] (PyTorch's
// h_0 and h_n layout, layer l's direction d at row l·D + d), and, for an
// LSTM, C of the same shape. A GRU's C is the zero Tensor.
type State struct {
	H, C Tensor
}

// stack is what rnn.LSTM and rnn.GRU share that the module uses.
type stack interface {
	ForwardLengths(mode rnn.Mode, x device.Buffer, seq, batch int, lengths []int32, st *rnn.State) (device.Buffer, error)
	Backward(dy device.Buffer) (device.Buffer, error)
	NewState(batch int) (*rnn.State, error)
	Params() *rnn.Params
	Config() rnn.Config
	DropoutState() (seed, offset uint64)
	SetDropoutState(seed, offset uint64) error
	SetRecompute(k int) error
	Close() error
}

// Recurrent is an LSTM or GRU stack as a module (NewLSTM, NewGRU): input
// [T, B, Input] time-major with optional lengths (PyTorch's packed
// sequences: padded steps never read), output as RecurrentConfig.Final
// says. Its one group holds PyTorch's parameters, named as PyTorch names
// them ("weight_ih_l0", "bias_hh_l1_reverse", ...).
//
// Forward starts every sequence from zeros; ForwardFrom from a given
// state (an encoder's final one, for a decoder). After a forward, Final
// is the final state; after Backward, InitialGrad is the gradient with
// respect to the initial state, and BackwardFinal is Backward with a
// gradient for the final state as well. These make an encoder-decoder a
// few lines: the decoder starts from enc.Final(), and the encoder's
// backward gets dec.InitialGrad().
//
// It is Random when Dropout is set (the masks between layers, rnn's).
type Recurrent struct {
	g     guard
	dev   device.Device
	name  string // "LSTM" or "GRU"
	cfg   RecurrentConfig
	stack stack
	// st and stWork are the training and no-grad forwards' states, so
	// that an evaluation between a training forward and its Backward
	// leaves the training one alone; last is the one the last forward
	// used.
	st, stWork, last *rnn.State
	// The training forward's input and output shapes; in nil when none
	// is saved.
	in, out []int
	lengths []int32
	spent   bool
	// feat and featWork are Final's outputs, of training and no-grad
	// forwards; zero the zero gradient of unused outputs; tmp a
	// direction's gradient of Final's output.
	feat, featWork, zero, tmp scratch
}

// NewLSTM builds PyTorch's nn.LSTM as a module on d.
func NewLSTM(ctx context.Context, d device.Device, c RecurrentConfig) (*Recurrent, error) {
	s, err := rnn.NewLSTM(ctx, d, c.Config)
	if err != nil {
		return nil, err
	}
	return newRecurrent(d, "LSTM", s, c), nil
}

// NewGRU builds PyTorch's nn.GRU as a module on d.
func NewGRU(ctx context.Context, d device.Device, c RecurrentConfig) (*Recurrent, error) {
	s, err := rnn.NewGRU(ctx, d, c.Config)
	if err != nil {
		return nil, err
	}
	return newRecurrent(d, "GRU", s, c), nil
}

func newRecurrent(d device.Device, name string, s stack, c RecurrentConfig) *Recurrent {
	c.Config = s.Config()
	return &Recurrent{dev: d, name: name, cfg: c, stack: s}
}

// Config is the module's configuration, with rnn's defaults filled in.
func (r *Recurrent) Config() RecurrentConfig { return r.cfg }

// Stack is the rnn stack the module runs (*rnn.LSTM or *rnn.GRU).
func (r *Recurrent) Stack() any { return r.stack }

func (r *Recurrent) dirs() int {
	if r.cfg.Bidirectional {
		return 2
	}
	return 1
}

func (r *Recurrent) rows() int { return r.cfg.Layers * r.dirs() }

// Forward implements Module: every sequence starts from zeros.
func (r *Recurrent) Forward(mode Mode, x Tensor) (Tensor, error) {
	if err := r.g.enter(r.name, "Forward"); err != nil {
		return Tensor{}, err
	}
	defer r.g.leave()
	return r.forward(mode, x, nil)
}

// ForwardFrom is Forward from the initial state h0 (copied, so the caller
// may reuse it at once): H [L·D, B, Hidden], and C for an LSTM.
func (r *Recurrent) ForwardFrom(mode Mode, x Tensor, h0 State) (Tensor, error) {
	if err := r.g.enter(r.name, "ForwardFrom"); err != nil {
		return Tensor{}, err
	}
	defer r.g.leave()
	return r.forward(mode, x, &h0)
}

func (r *Recurrent) forward(mode Mode, x Tensor, h0 *State) (Tensor, error) {
	op := r.name + ".Forward"
	if err := checkMode(op, mode); err != nil {
		return Tensor{}, err
	}
	c := r.cfg
	if err := inputOf(op, x, c.DType, c.Input); err != nil {
		return Tensor{}, err
	}
	if x.Rank() != 3 {
		return Tensor{}, fmt.Errorf("nn: %s: the input %v, want [T, B, %d]: %w", op, x, c.Input, device.ErrShape)
	}
	T, B := x.Shape[0], x.Shape[1]
	if mode == Train {
		r.in, r.out, r.lengths, r.spent = nil, nil, nil, false
	}
	st, err := r.state(mode, B)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	if h0 != nil {
		if err := r.setState(op, st, *h0, B); err != nil {
			return Tensor{}, err
		}
	}
	y, err := r.stack.ForwardLengths(mode, x.Data, T, B, x.Lengths, st)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %w", err)
	}
	r.last = st
	D, H := r.dirs(), c.Hidden
	out := Tensor{Data: y, DType: c.DType, Shape: []int{T, B, D * H}, Lengths: x.Lengths}
	if c.Final {
		if out, err = r.final(mode, st, B); err != nil {
			return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
		}
	}
	if mode == Train {
		r.in, r.out, r.lengths = slices.Clone(x.Shape), out.Shape, x.Lengths
	}
	return out, nil
}

// state is a zero, detached state for B sequences, the training forwards'
// or the no-grad ones'; each keeps the memory of its largest batch.
func (r *Recurrent) state(mode Mode, B int) (*rnn.State, error) {
	p := &r.stWork
	if mode == Train {
		p = &r.st
	}
	if *p == nil {
		st, err := r.stack.NewState(B)
		if err != nil {
			return nil, err
		}
		*p = st
		return st, nil
	}
	return *p, (*p).Resize(B)
}

// setState copies h0 into st, after checking its shapes.
func (r *Recurrent) setState(op string, st *rnn.State, h0 State, B int) error {
	want := []int{r.rows(), B, r.cfg.Hidden}
	k := r.dev.Kernels()
	for _, p := range []struct {
		name string
		t    Tensor
		dst  device.Buffer
	}{{"H", h0.H, st.H()}, {"C", h0.C, st.C()}} {
		if p.dst.IsZero() {
			if !p.t.IsZero() {
				return fmt.Errorf("nn: %s: an initial C for a GRU, which has none: %w", op, device.ErrShape)
			}
			continue
		}
		if p.t.DType != r.cfg.DType || !slices.Equal(p.t.Shape, want) || p.t.Data.IsZero() {
			return fmt.Errorf("nn: %s: the initial %s is %v, want %v%v: %w", op, p.name, p.t, r.cfg.DType, want, device.ErrShape)
		}
		if err := p.t.sizes(op); err != nil {
			return err
		}
		if err := k.Copy(device.Copy{Dst: p.dst, Src: p.t.Data.Slice(0, p.t.Bytes())}); err != nil {
			return fmt.Errorf("nn: %s: %w", op, err)
		}
	}
	return nil
}

// final is Final's output: the top layer's final states, one direction
// after the other in each row.
func (r *Recurrent) final(mode Mode, st *rnn.State, B int) (Tensor, error) {
	dt, D, H, L := r.cfg.DType, r.dirs(), r.cfg.Hidden, r.cfg.Layers
	buf, cat := &r.featWork, device.Workspace
	if mode == Train {
		buf, cat = &r.feat, device.Activations
	}
	feat, err := buf.get(r.dev, cat, dt, B*D*H)
	if err != nil {
		return Tensor{}, err
	}
	k := r.dev.Kernels()
	for d := range D {
		top := st.H().Elems(dt, ((L-1)*D+d)*B*H, B*H)
		if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: B, Cols: H, X: top,
			Y: feat.Elems(dt, d*H, B*D*H-d*H), LdY: D * H}); err != nil {
			return Tensor{}, err
		}
	}
	return Tensor{Data: feat, DType: dt, Shape: []int{B, D * H}}, nil
}

// Final is the final state of the last forward, in the module's memory:
// valid until its next forward of the same mode. Before any forward it is
// the zero State.
func (r *Recurrent) Final() State {
	if r.last == nil || r.g.w.Closed() {
		return State{}
	}
	return r.view(r.last.H(), r.last.C(), r.last.Batch())
}

// InitialGrad is the gradient of the loss with respect to the initial
// state of the training forward that the last Backward differentiated
// (zeros' gradient too, for Forward): what an encoder's BackwardFinal
// takes from its decoder. Valid until the next training forward.
func (r *Recurrent) InitialGrad() State {
	if r.st == nil || r.g.w.Closed() {
		return State{}
	}
	return r.view(r.st.GradH(), r.st.GradC(), r.st.Batch())
}

func (r *Recurrent) view(h, c device.Buffer, B int) State {
	shape := []int{r.rows(), B, r.cfg.Hidden}
	s := State{H: Tensor{Data: h, DType: r.cfg.DType, Shape: shape}}
	if !c.IsZero() {
		s.C = Tensor{Data: c, DType: r.cfg.DType, Shape: slices.Clone(shape)}
	}
	return s
}

// Backward implements Module, for dy the gradient with respect to the
// output.
func (r *Recurrent) Backward(dy Tensor) (Tensor, error) {
	if err := r.g.enter(r.name, "Backward"); err != nil {
		return Tensor{}, err
	}
	defer r.g.leave()
	return r.backward(r.name+".Backward", dy, State{})
}

// BackwardFinal is Backward with dFinal, the gradient with respect to the
// final state (H, and C for an LSTM; either may be the zero Tensor for
// none), added to what the output's gradient gives. dy may be the zero
// Tensor when the outputs are not used (an encoder whose only product is
// its final state).
func (r *Recurrent) BackwardFinal(dy Tensor, dFinal State) (Tensor, error) {
	if err := r.g.enter(r.name, "BackwardFinal"); err != nil {
		return Tensor{}, err
	}
	defer r.g.leave()
	return r.backward(r.name+".BackwardFinal", dy, dFinal)
}

func (r *Recurrent) backward(op string, dy Tensor, dFinal State) (Tensor, error) {
	if r.in == nil {
		return Tensor{}, noForward(op, r.spent)
	}
	dt, D, H, L := r.cfg.DType, r.dirs(), r.cfg.Hidden, r.cfg.Layers
	T, B := r.in[0], r.in[1]
	st := r.st
	k := r.dev.Kernels()
	if !dy.IsZero() {
		if err := gradOf(op, dy, r.out, dt); err != nil {
			return Tensor{}, err
		}
	}
	// The forward zeroed the state's gradients; the final state's
	// gradient is added there.
	want := []int{r.rows(), B, H}
	for _, p := range []struct {
		name string
		t    Tensor
		dst  device.Buffer
	}{{"H", dFinal.H, st.GradH()}, {"C", dFinal.C, st.GradC()}} {
		if p.t.IsZero() {
			continue
		}
		if p.dst.IsZero() {
			return Tensor{}, fmt.Errorf("nn: %s: a final C gradient for a GRU, which has none: %w", op, device.ErrShape)
		}
		if err := gradOf(op, p.t, want, dt); err != nil {
			return Tensor{}, fmt.Errorf("%w (the final %s)", err, p.name)
		}
		if err := k.Axpby(device.Axpby{DType: dt, N: r.rows() * B * H, Alpha: 1, Beta: 1, X: p.t.Data, Y: p.dst}); err != nil {
			return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
		}
	}
	dOut := dy.Data
	if r.cfg.Final || dy.IsZero() {
		if r.cfg.Final && !dy.IsZero() {
			tmp, err := r.tmp.get(r.dev, device.Workspace, dt, B*H)
			if err != nil {
				return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
			}
			for d := range D {
				if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: B, Cols: H, X: dy.Data.Elems(dt, d*H, B*D*H-d*H), LdX: D * H, Y: tmp}); err != nil {
					return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
				}
				top := st.GradH().Elems(dt, ((L-1)*D+d)*B*H, B*H)
				if err := k.Axpby(device.Axpby{DType: dt, N: B * H, Alpha: 1, Beta: 1, X: tmp, Y: top}); err != nil {
					return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
				}
			}
		}
		// The outputs at the steps are not used: their gradient is zero.
		zero, err := r.zeros(T * B * D * H)
		if err != nil {
			return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
		}
		dOut = zero
	}
	dx, err := r.stack.Backward(dOut)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %w", err)
	}
	in, lengths := r.in, r.lengths
	r.in, r.out, r.lengths, r.spent = nil, nil, nil, true
	return Tensor{Data: dx, DType: dt, Shape: in, Lengths: lengths}, nil
}

// zeros is n zeros of the module's type, filled when first grown.
func (r *Recurrent) zeros(n int) (device.Buffer, error) {
	dt := r.cfg.DType
	grown := r.zero.buf.IsZero() || r.zero.buf.Len() < int64(n)*dt.Size()
	b, err := r.zero.get(r.dev, device.Workspace, dt, n)
	if err != nil || !grown {
		return b, err
	}
	return b, r.dev.Kernels().Fill(device.Fill{DType: dt, N: n, X: b})
}

// Groups implements Module: the stack's parameters, one group.
func (r *Recurrent) Groups() []Group { return []Group{{Params: r.stack.Params()}} }

// RandomState implements Random: the seed and offset of the stack's
// dropout masks.
func (r *Recurrent) RandomState() []uint64 {
	seed, off := r.stack.DropoutState()
	return []uint64{seed, off}
}

// SetRandomState implements Random.
func (r *Recurrent) SetRandomState(v []uint64) error {
	if err := r.g.enter(r.name, "SetRandomState"); err != nil {
		return err
	}
	defer r.g.leave()
	if len(v) != 2 {
		return fmt.Errorf("nn: %s.SetRandomState: %d numbers, want 2 (seed, offset)", r.name, len(v))
	}
	if err := r.stack.SetDropoutState(v[0], v[1]); err != nil {
		return fmt.Errorf("nn: %w", err)
	}
	return nil
}

// SetRecompute sets rnn.Config.Recompute for the training forwards to
// come.
func (r *Recurrent) SetRecompute(k int) error {
	if err := r.g.enter(r.name, "SetRecompute"); err != nil {
		return err
	}
	defer r.g.leave()
	if err := r.stack.SetRecompute(k); err != nil {
		return fmt.Errorf("nn: %w", err)
	}
	r.cfg.Recompute = k
	return nil
}

// Close implements Module.
func (r *Recurrent) Close() error {
	if first, err := r.g.close(r.name); !first {
		return err
	}
	errs := []error{freeAll(r.dev, &r.feat, &r.featWork, &r.zero, &r.tmp)}
	for _, st := range []*rnn.State{r.st, r.stWork} {
		if st != nil {
			errs = append(errs, st.Free())
		}
	}
	r.st, r.stWork, r.last = nil, nil, nil
	errs = append(errs, r.stack.Close())
	return errors.Join(errs...)
}

var (
	_ Module = (*Recurrent)(nil)
	_ Random = (*Recurrent)(nil)
)
