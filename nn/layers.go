package nn

import (
	"context"
	"fmt"
	"slices"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
)

// Embedding is PyTorch's nn.Embedding(Vocab, Dim) as a module: token ids
// of any shape (device.Int32; [T, B] for a batch of sequences) in, their
// rows of the table out, shape [..., Dim], lengths kept. Its parameter is
// "weight" [Vocab, Dim], drawn from N(0, 1) as PyTorch's. The ids carry
// no gradient: Backward returns the zero Tensor, so an Embedding comes
// first in a chain.
type Embedding struct {
	layer *rnn.Embedding
	shape []int // the training forward's output shape
}

// NewEmbedding builds an embedding on d (rnn.NewEmbedding's table).
func NewEmbedding(ctx context.Context, d device.Device, c rnn.EmbeddingConfig) (*Embedding, error) {
	l, err := rnn.NewEmbedding(ctx, d, c)
	if err != nil {
		return nil, err
	}
	return &Embedding{layer: l}, nil
}

// Layer is the rnn layer the module runs (for Share, Config, Params).
func (e *Embedding) Layer() *rnn.Embedding { return e.layer }

// Forward implements Module.
func (e *Embedding) Forward(mode Mode, x Tensor) (Tensor, error) {
	if x.DType != device.Int32 || x.Rank() == 0 {
		return Tensor{}, fmt.Errorf("nn: Embedding.Forward of %v: want Int32 ids of rank 1 or more: %w", x, device.ErrShape)
	}
	if err := x.sizes("Embedding.Forward"); err != nil {
		return Tensor{}, err
	}
	y, err := e.layer.Forward(mode, x.Data, x.Len())
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %w", err)
	}
	c := e.layer.Config()
	out := Tensor{Data: y, DType: c.DType, Shape: append(slices.Clone(x.Shape), c.Dim), Lengths: x.Lengths}
	if mode == Train {
		e.shape = out.Shape
	}
	return out, nil
}

// Backward implements Module: the table's gradient; no input gradient.
func (e *Embedding) Backward(dy Tensor) (Tensor, error) {
	if err := gradOf("Embedding.Backward", dy, e.shape, e.layer.Config().DType); err != nil {
		return Tensor{}, err
	}
	if err := e.layer.Backward(dy.Data); err != nil {
		return Tensor{}, fmt.Errorf("nn: %w", err)
	}
	return Tensor{}, nil
}

// Groups implements Module: one group, "weight".
func (e *Embedding) Groups() []Group { return []Group{{Params: e.layer.Params()}} }

// Close implements Module.
func (e *Embedding) Close() error { return e.layer.Close() }

// Linear is PyTorch's nn.Linear(In, Out) as a module, applied to the last
// dimension: [..., In] in, [..., Out] out, lengths kept (so a Linear over
// a recurrent module's [T, B, H] output is a head at every step).
// Parameters "weight" [Out, In] and "bias" [Out], U(-1/√In, 1/√In).
type Linear struct {
	layer *rnn.Linear
	shape []int // the training forward's output shape
}

// NewLinear builds a linear layer on d (rnn.NewLinear's).
func NewLinear(ctx context.Context, d device.Device, c rnn.LinearConfig) (*Linear, error) {
	l, err := rnn.NewLinear(ctx, d, c)
	if err != nil {
		return nil, err
	}
	return &Linear{layer: l}, nil
}

// Layer is the rnn layer the module runs.
func (l *Linear) Layer() *rnn.Linear { return l.layer }

// Forward implements Module. In Train mode the layer keeps a reference to
// x for Backward (Module's rule: leave it as it is until then).
func (l *Linear) Forward(mode Mode, x Tensor) (Tensor, error) {
	c := l.layer.Config()
	if err := inputOf("Linear.Forward", x, c.DType, c.In); err != nil {
		return Tensor{}, err
	}
	y, err := l.layer.Forward(mode, x.Data, x.Rows())
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %w", err)
	}
	out := Tensor{Data: y, DType: c.DType, Shape: withLast(x.Shape, c.Out), Lengths: x.Lengths}
	if mode == Train {
		l.shape = out.Shape
	}
	return out, nil
}

// Backward implements Module.
func (l *Linear) Backward(dy Tensor) (Tensor, error) {
	c := l.layer.Config()
	if err := gradOf("Linear.Backward", dy, l.shape, c.DType); err != nil {
		return Tensor{}, err
	}
	dx, err := l.layer.Backward(dy.Data)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %w", err)
	}
	return Tensor{Data: dx, DType: c.DType, Shape: withLast(dy.Shape, c.In), Lengths: dy.Lengths}, nil
}

// Groups implements Module: one group, "weight" and "bias".
func (l *Linear) Groups() []Group { return []Group{{Params: l.layer.Params()}} }

// Close implements Module.
func (l *Linear) Close() error { return l.layer.Close() }

// DropoutConfig describes a Dropout.
type DropoutConfig struct {
	// P is the probability of zeroing an element in a training forward,
	// in [0, 1); kept elements are scaled by 1/(1-P), as PyTorch's.
	P float64
	// Seed draws the masks (device.DropoutKeep of the seed and the
	// element's place in the stream of all the masks drawn so far).
	Seed uint64
}

// Dropout is PyTorch's nn.Dropout(P) as a module: in training, each
// element zeroed with probability P and the others scaled by 1/(1-P); in
// NoGrad mode the input itself. The masks are a function of the seed and
// of how many elements were drawn before, the same on every device, and
// Random: a checkpoint records where the next mask starts.
type Dropout struct {
	g      guard
	dev    device.Device
	cfg    DropoutConfig
	drawn  uint64 // elements drawn so far: the next mask's offset
	mask   scratch
	out    scratch
	dx     scratch
	shape  []int // the training forward's, nil when none is saved
	dtype  device.DType
	spent  bool
	length []int32
}

// NewDropout returns a dropout module on d.
func NewDropout(d device.Device, c DropoutConfig) (*Dropout, error) {
	if d == nil {
		return nil, fmt.Errorf("nn: NewDropout: no device")
	}
	if !(c.P >= 0 && c.P < 1) {
		return nil, fmt.Errorf("nn: NewDropout: p = %v, want [0, 1)", c.P)
	}
	return &Dropout{dev: d, cfg: c}, nil
}

// Forward implements Module.
func (m *Dropout) Forward(mode Mode, x Tensor) (Tensor, error) {
	const op = "Dropout.Forward"
	if err := m.g.enter("Dropout", "Forward"); err != nil {
		return Tensor{}, err
	}
	defer m.g.leave()
	if err := checkMode(op, mode); err != nil {
		return Tensor{}, err
	}
	if err := inputOf(op, x, 0, 0); err != nil {
		return Tensor{}, err
	}
	if mode == NoGrad {
		return x, nil
	}
	m.shape, m.spent = nil, false
	n := x.Len()
	y, err := m.out.get(m.dev, device.Activations, x.DType, n)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	mask, err := m.mask.get(m.dev, device.Activations, x.DType, n)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	if err := m.dev.Kernels().Dropout(device.Dropout{DType: x.DType, N: n, P: m.cfg.P, Seed: m.cfg.Seed, Offset: m.drawn,
		X: x.Data, Y: y, Mask: mask}); err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	m.drawn += uint64(n)
	m.shape, m.dtype, m.length = slices.Clone(x.Shape), x.DType, x.Lengths
	return Tensor{Data: y, DType: x.DType, Shape: m.shape, Lengths: x.Lengths}, nil
}

// Backward implements Module: dy times the mask.
func (m *Dropout) Backward(dy Tensor) (Tensor, error) {
	const op = "Dropout.Backward"
	if err := m.g.enter("Dropout", "Backward"); err != nil {
		return Tensor{}, err
	}
	defer m.g.leave()
	if m.shape == nil {
		return Tensor{}, noForward(op, m.spent)
	}
	if err := gradOf(op, dy, m.shape, m.dtype); err != nil {
		return Tensor{}, err
	}
	n := dy.Len()
	dx, err := m.dx.get(m.dev, device.Workspace, m.dtype, n)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	if err := m.dev.Kernels().Mul(device.Mul{DType: m.dtype, N: n, X: dy.Data, Y: m.mask.buf, Z: dx}); err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	shape := m.shape
	m.shape, m.spent = nil, true
	return Tensor{Data: dx, DType: m.dtype, Shape: shape, Lengths: m.length}, nil
}

// Groups implements Module: none.
func (m *Dropout) Groups() []Group { return nil }

// RandomState implements Random: the seed and the next mask's offset.
func (m *Dropout) RandomState() []uint64 { return []uint64{m.cfg.Seed, m.drawn} }

// SetRandomState implements Random.
func (m *Dropout) SetRandomState(v []uint64) error {
	if err := m.g.enter("Dropout", "SetRandomState"); err != nil {
		return err
	}
	defer m.g.leave()
	if len(v) != 2 {
		return fmt.Errorf("nn: Dropout.SetRandomState: %d numbers, want 2 (seed, offset)", len(v))
	}
	m.cfg.Seed, m.drawn = v[0], v[1]
	return nil
}

// Close implements Module.
func (m *Dropout) Close() error {
	if first, err := m.g.close("Dropout"); !first {
		return err
	}
	return freeAll(m.dev, &m.mask, &m.out, &m.dx)
}

var (
	_ Module = (*Embedding)(nil)
	_ Module = (*Linear)(nil)
	_ Module = (*Dropout)(nil)
	_ Random = (*Dropout)(nil)
)
