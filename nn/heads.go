package nn

import (
	"fmt"
	"slices"

	"github.com/gocurrent/gocurrent/device"
)

// PoolKind says how Pool makes one row of a sequence's steps.
type PoolKind uint8

const (
	// PoolLast takes the output at each sequence's last real step
	// (out[lengths[b]-1, b] in PyTorch's terms).
	PoolLast PoolKind = 1 + iota
	// PoolMean averages the real steps, feature by feature.
	PoolMean
	// PoolMax takes their maximum, feature by feature (torch.max over
	// time: the gradient goes to the first step of a tie, a NaN wins).
	PoolMax
)

func (k PoolKind) String() string {
	switch k {
	case PoolLast:
		return "last"
	case PoolMean:
		return "mean"
	case PoolMax:
		return "max"
	}
	return fmt.Sprintf("PoolKind(%d)", uint8(k))
}

// Pool is a head over a batch of sequences: [T, B, F] in (with lengths,
// or all T steps), [B, F] out, one row a sequence made of its real steps
// only, as Kind says. Padded steps never reach the output, and get no
// gradient. The last step of the whole window is PoolLast over a batch
// without lengths; every step needs no head (a Linear over [T, B, F]
// applies at each step and keeps the lengths, which the loss honours).
// The stack's final state, which for a bidirectional stack differs from
// its output at the last step, is RecurrentConfig.Final.
type Pool struct {
	g    guard
	dev  device.Device
	kind PoolKind
	// lens and lensWork are the lengths of the training and no-grad
	// forwards on the device (Last: the rows taken); argmax Max's steps;
	// out and outWork the outputs; dx the input gradient.
	lens, lensWork, argmax, out, outWork, dx scratch
	// The training forward's input shape (nil when none is saved) and
	// whether it had lengths.
	in      []int
	dtype   device.DType
	lengths []int32
	spent   bool
}

// NewPool returns a pooling head on d.
func NewPool(d device.Device, kind PoolKind) (*Pool, error) {
	if d == nil {
		return nil, fmt.Errorf("nn: NewPool: no device")
	}
	if kind < PoolLast || kind > PoolMax {
		return nil, fmt.Errorf("nn: NewPool: %v, want PoolLast, PoolMean or PoolMax", kind)
	}
	return &Pool{dev: d, kind: kind}, nil
}

// Kind is the pooling.
func (p *Pool) Kind() PoolKind { return p.kind }

// Forward implements Module. Putting the lengths on the device waits for
// the work queued before (one host synchronisation), as a recurrent
// module's forward over lengths does.
func (p *Pool) Forward(mode Mode, x Tensor) (Tensor, error) {
	op := "Pool(" + p.kind.String() + ").Forward"
	if err := p.g.enter("Pool", "Forward"); err != nil {
		return Tensor{}, err
	}
	defer p.g.leave()
	if err := checkMode(op, mode); err != nil {
		return Tensor{}, err
	}
	if err := inputOf(op, x, 0, 0); err != nil {
		return Tensor{}, err
	}
	if x.Rank() != 3 {
		return Tensor{}, fmt.Errorf("nn: %s: the input %v, want [T, B, F]: %w", op, x, device.ErrShape)
	}
	train := mode == Train
	if train {
		p.in, p.lengths, p.spent = nil, nil, false
	}
	T, B, F, dt := x.Shape[0], x.Shape[1], x.Shape[2], x.DType
	lens, outBuf, cat := &p.lensWork, &p.outWork, device.Workspace
	if train {
		lens, outBuf, cat = &p.lens, &p.out, device.Activations
	}
	out, err := outBuf.get(p.dev, cat, dt, B*F)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	k := p.dev.Kernels()
	if p.kind == PoolLast {
		rows := make([]int32, B)
		for b := range rows {
			n := T
			if x.Lengths != nil {
				n = int(x.Lengths[b])
			}
			rows[b] = int32((n-1)*B + b)
		}
		ids, err := lens.get(p.dev, cat, device.Int32, B)
		if err == nil {
			err = device.UploadSlice(p.dev, ids, rows)
		}
		if err == nil {
			err = k.Embedding(device.Embedding{DType: dt, N: B, Dim: F, Vocab: T * B, Table: x.Data, IDs: ids, Out: out})
		}
		if err != nil {
			return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
		}
	} else {
		a := device.SeqPool{DType: dt, T: T, B: B, Cols: F, Max: p.kind == PoolMax, Y: x.Data, Out: out}
		if x.Lengths != nil {
			if a.Lengths, err = lens.get(p.dev, cat, device.Int32, B); err != nil {
				return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
			}
			if err := device.UploadSlice(p.dev, a.Lengths, x.Lengths); err != nil {
				return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
			}
		}
		if a.Max && train {
			if a.ArgMax, err = p.argmax.get(p.dev, device.Activations, device.Int32, B*F); err != nil {
				return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
			}
		}
		if err := k.SeqPool(a); err != nil {
			return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
		}
	}
	if train {
		p.in, p.dtype, p.lengths = slices.Clone(x.Shape), dt, x.Lengths
	}
	return Tensor{Data: out, DType: dt, Shape: []int{B, F}}, nil
}

// Backward implements Module: dy [B, F] spread over the steps it came
// from, zeros elsewhere.
func (p *Pool) Backward(dy Tensor) (Tensor, error) {
	op := "Pool(" + p.kind.String() + ").Backward"
	if err := p.g.enter("Pool", "Backward"); err != nil {
		return Tensor{}, err
	}
	defer p.g.leave()
	if p.in == nil {
		return Tensor{}, noForward(op, p.spent)
	}
	T, B, F, dt := p.in[0], p.in[1], p.in[2], p.dtype
	if err := gradOf(op, dy, []int{B, F}, dt); err != nil {
		return Tensor{}, err
	}
	dx, err := p.dx.get(p.dev, device.Workspace, dt, T*B*F)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	k := p.dev.Kernels()
	if p.kind == PoolLast {
		err = k.Fill(device.Fill{DType: dt, N: T * B * F, X: dx})
		if err == nil {
			err = k.EmbeddingGrad(device.EmbeddingGrad{DType: dt, N: B, Dim: F, Vocab: T * B, IDs: p.lens.buf.Elems(device.Int32, 0, B),
				DOut: dy.Data, DTable: dx, Distinct: true})
		}
	} else {
		a := device.SeqPoolGrad{DType: dt, T: T, B: B, Cols: F, Max: p.kind == PoolMax, DOut: dy.Data, DY: dx}
		if p.lengths != nil {
			a.Lengths = p.lens.buf.Elems(device.Int32, 0, B)
		}
		if a.Max {
			a.ArgMax = p.argmax.buf.Elems(device.Int32, 0, B*F)
		}
		err = k.SeqPoolGrad(a)
	}
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	in, lengths := p.in, p.lengths
	p.in, p.lengths, p.spent = nil, nil, true
	return Tensor{Data: dx, DType: dt, Shape: in, Lengths: lengths}, nil
}

// Groups implements Module: none.
func (p *Pool) Groups() []Group { return nil }

// Close implements Module.
func (p *Pool) Close() error {
	if first, err := p.g.close("Pool"); !first {
		return err
	}
	return freeAll(p.dev, &p.lens, &p.lensWork, &p.argmax, &p.out, &p.outWork, &p.dx)
}

// Concat joins the features of tensors of the same leading shape, [...,
// F1], [..., F2], … into [..., F1+F2+…] (torch.cat on the last
// dimension): the piece a module of the user's own uses where two
// branches meet. Backward splits the gradient back. The output keeps the
// first input's lengths, which the others must share. It is not a Module
// (it takes several inputs); a module's Forward and Backward call it.
type Concat struct {
	g            guard
	dev          device.Device
	out, outWork scratch
	dx           []scratch
	// The training forward's widths and shape; nil when none is saved.
	widths []int
	shape  []int
	dtype  device.DType
	spent  bool
}

// NewConcat returns a concatenation on d.
func NewConcat(d device.Device) (*Concat, error) {
	if d == nil {
		return nil, fmt.Errorf("nn: NewConcat: no device")
	}
	return &Concat{dev: d}, nil
}

// Forward queues the concatenation of xs (two or more, the same type and
// leading shape); in Train mode it saves their widths for Backward.
func (c *Concat) Forward(mode Mode, xs ...Tensor) (Tensor, error) {
	const op = "Concat.Forward"
	if err := c.g.enter("Concat", "Forward"); err != nil {
		return Tensor{}, err
	}
	defer c.g.leave()
	if err := checkMode(op, mode); err != nil {
		return Tensor{}, err
	}
	if len(xs) < 2 {
		return Tensor{}, fmt.Errorf("nn: %s: %d inputs, want 2 or more: %w", op, len(xs), device.ErrShape)
	}
	first := xs[0]
	widths, total := make([]int, len(xs)), 0
	for i, x := range xs {
		if err := inputOf(op, x, first.DType, 0); err != nil {
			return Tensor{}, err
		}
		if !slices.Equal(x.Shape[:x.Rank()-1], first.Shape[:first.Rank()-1]) || !slices.Equal(x.Lengths, first.Lengths) {
			return Tensor{}, fmt.Errorf("nn: %s: input %d is %v, input 0 %v: the shapes but the last and the lengths must agree: %w", op, i, x, first, device.ErrShape)
		}
		widths[i] = x.Features()
		total += widths[i]
	}
	rows, dt := first.Rows(), first.DType
	shape := withLast(first.Shape, total)
	buf, cat := &c.outWork, device.Workspace
	if mode == Train {
		c.widths, c.shape, c.spent = nil, nil, false
		buf, cat = &c.out, device.Activations
	}
	if err := (Tensor{DType: dt, Shape: shape}).sizes(op); err != nil {
		return Tensor{}, err
	}
	out, err := buf.get(c.dev, cat, dt, rows*total)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
	}
	k, off := c.dev.Kernels(), 0
	for i, x := range xs {
		if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: rows, Cols: widths[i], X: x.Data,
			Y: out.Elems(dt, off, rows*total-off), LdY: total}); err != nil {
			return Tensor{}, fmt.Errorf("nn: %s: %w", op, err)
		}
		off += widths[i]
	}
	if mode == Train {
		c.widths, c.shape, c.dtype = widths, shape, dt
	}
	return Tensor{Data: out, DType: dt, Shape: shape, Lengths: first.Lengths}, nil
}

// Backward splits dy, the gradient with respect to the training
// forward's output, into the gradients with respect to its inputs, valid
// until the next Backward.
func (c *Concat) Backward(dy Tensor) ([]Tensor, error) {
	const op = "Concat.Backward"
	if err := c.g.enter("Concat", "Backward"); err != nil {
		return nil, err
	}
	defer c.g.leave()
	if c.widths == nil {
		return nil, noForward(op, c.spent)
	}
	if err := gradOf(op, dy, c.shape, c.dtype); err != nil {
		return nil, err
	}
	for len(c.dx) < len(c.widths) {
		c.dx = append(c.dx, scratch{})
	}
	dt, total, rows := c.dtype, dy.Features(), dy.Rows()
	k, off := c.dev.Kernels(), 0
	out := make([]Tensor, len(c.widths))
	for i, w := range c.widths {
		dx, err := c.dx[i].get(c.dev, device.Workspace, dt, rows*w)
		if err != nil {
			return nil, fmt.Errorf("nn: %s: %w", op, err)
		}
		if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: rows, Cols: w, X: dy.Data.Elems(dt, off, rows*total-off), LdX: total, Y: dx}); err != nil {
			return nil, fmt.Errorf("nn: %s: %w", op, err)
		}
		out[i] = Tensor{Data: dx, DType: dt, Shape: withLast(dy.Shape, w), Lengths: dy.Lengths}
		off += w
	}
	c.widths, c.shape, c.spent = nil, nil, true
	return out, nil
}

// Close frees the concatenation's buffers.
func (c *Concat) Close() error {
	if first, err := c.g.close("Concat"); !first {
		return err
	}
	ss := []*scratch{&c.out, &c.outWork}
	for i := range c.dx {
		ss = append(ss, &c.dx[i])
	}
	return freeAll(c.dev, ss...)
}

var _ Module = (*Pool)(nil)
