package rnn

import (
	"context"
	"fmt"
	"math"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
)

// LinearConfig describes an affine layer, as PyTorch's nn.Linear(In, Out,
// bias=!NoBias).
type LinearConfig struct {
	In, Out int
	NoBias  bool
	// DType is Float32 (the default) or Float64.
	DType device.DType
	// Seed draws the initial parameters from U(-1/sqrt(In), 1/sqrt(In)),
	// PyTorch's default bound for weight and bias.
	Seed uint64
}

// Linear computes y = x·Wᵀ + b over rows, parameters "weight" [Out, In]
// and "bias" [Out]. It is used by one goroutine at a time (a call meeting
// another is ErrBusy); goroutines that run it at once each use a share
// (Share).
type Linear struct {
	g       guard
	share   bool // made by Share: NoGrad forwards only
	dev     device.Device
	cfg     LinearConfig
	params  *Params
	w, b    device.Buffer
	gw, gb  device.Buffer
	out, dx scratch
	// x is the input of the saved training forward, the caller's buffer
	// (Forward: kept, not copied); rows is its rows, 0 when none.
	x     device.Buffer
	rows  int
	spent bool
}

// NewLinear allocates a linear layer on d and initialises it, as
// NewEmbedding does.
func NewLinear(ctx context.Context, d device.Device, c LinearConfig) (*Linear, error) {
	if d == nil {
		return nil, fmt.Errorf("rnn: NewLinear: no device")
	}
	dt, err := floatType(c.DType)
	if err != nil {
		return nil, err
	}
	c.DType = dt
	if c.In <= 0 || c.Out <= 0 {
		return nil, fmt.Errorf("rnn: NewLinear: in %d, out %d: each must be positive: %w", c.In, c.Out, device.ErrShape)
	}
	if _, ok := checked.Mul(c.Out, c.In+1); !ok || c.In == math.MaxInt {
		return nil, fmt.Errorf("rnn: NewLinear: in %d, out %d: out × (in + 1) parameters overflow int: %w", c.In, c.Out, device.ErrShape)
	}
	bound := uniformBound(c.In)
	specs := []paramSpec{{name: "weight", shape: []int{c.Out, c.In}, bound: bound}}
	if !c.NoBias {
		specs = append(specs, paramSpec{name: "bias", shape: []int{c.Out}, bound: bound})
	}
	p, err := newParams(ctx, d, dt, c.Seed, specs)
	if err != nil {
		return nil, err
	}
	l := &Linear{dev: d, cfg: c, params: p}
	w, _ := p.Lookup("weight")
	b, _ := p.Lookup("bias")
	l.w, l.gw, l.b, l.gb = w.Value, w.Grad, b.Value, b.Grad
	return l, nil
}

// Config returns the configuration, with defaults filled in.
func (l *Linear) Config() LinearConfig { return l.cfg }

// Params returns the weight and bias, which its shares hold too (freed at
// the last Close of the layer and its shares).
func (l *Linear) Params() *Params { return l.params }

// Share returns a linear layer over the same parameters with buffers of
// its own, for NoGrad forwards from another goroutine, as Embedding.Share.
func (l *Linear) Share() (*Linear, error) {
	if err := l.g.enter("Linear", "Share"); err != nil {
		return nil, err
	}
	defer l.g.leave()
	return &Linear{share: true, dev: l.dev, cfg: l.cfg, params: l.params.retain(), w: l.w, b: l.b}, nil
}

// Forward computes y [rows, Out] from x [rows, In]; y is valid until the
// next Forward.
//
// In Train mode the layer keeps a reference to x, not a copy: Backward
// reads x again for the weight gradient. The caller must leave x as it is
// until it has called Backward (work queued after that call may overwrite
// it: the stream runs in order). The models of this module pass either a
// stack's training output, which the stack leaves unchanged until its
// next training forward (its NoGrad forwards write other buffers), or a
// buffer of their own that only their training forward writes, and call
// Backward before the next training forward.
func (l *Linear) Forward(mode Mode, x device.Buffer, rows int) (device.Buffer, error) {
	const op = "Linear.Forward"
	if err := l.g.enter("Linear", "Forward"); err != nil {
		return device.Buffer{}, err
	}
	defer l.g.leave()
	if err := checkMode(op, mode); err != nil {
		return device.Buffer{}, err
	}
	if mode == Train && l.share {
		return device.Buffer{}, sharedError("Linear", "Forward(Train)")
	}
	if err := positive(op, []string{"rows"}, rows); err != nil {
		return device.Buffer{}, err
	}
	c, dt := l.cfg, l.cfg.DType
	if err := input(op, "x", l.dev, x, dt, rows*c.In, shapeOf("rows·in", rows, c.In)); err != nil {
		return device.Buffer{}, err
	}
	if err := sizeOK(op, shapeOf("rows·out", rows, c.Out)); err != nil {
		return device.Buffer{}, err
	}
	y, err := l.out.get(l.dev, device.Workspace, int64(rows*c.Out)*dt.Size())
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	x = x.Slice(0, int64(rows*c.In)*dt.Size())
	k := l.dev.Kernels()
	var q queue
	if mode == Train {
		l.x, l.rows, l.spent = device.Buffer{}, 0, false
	}
	q.add(k.Gemm(device.Gemm{DType: dt, TransB: true, M: rows, N: c.Out, K: c.In, Alpha: 1, A: x, B: l.w, C: y}))
	if !c.NoBias {
		q.add(k.AddBias(device.AddBias{DType: dt, Rows: rows, Cols: c.Out, Bias: l.b, Y: y}))
	}
	if q.err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	if mode == Train {
		l.x, l.rows = x, rows
	}
	return y, nil
}

// Backward adds the weight and bias gradients, given dy [rows, Out] for
// the saved training forward, and returns the gradient with respect to x,
// [rows, In], valid until the next Backward. Calling it without a training
// forward, or twice for one, returns ErrNoForward.
func (l *Linear) Backward(dy device.Buffer) (device.Buffer, error) {
	const op = "Linear.Backward"
	if err := l.g.enter("Linear", "Backward"); err != nil {
		return device.Buffer{}, err
	}
	defer l.g.leave()
	if l.share {
		return device.Buffer{}, sharedError("Linear", "Backward")
	}
	if l.rows == 0 {
		return device.Buffer{}, noForward(op, l.spent)
	}
	c, dt, rows := l.cfg, l.cfg.DType, l.rows
	if err := input(op, "dy", l.dev, dy, dt, rows*c.Out, shapeOf("rows·out", rows, c.Out)); err != nil {
		return device.Buffer{}, err
	}
	x := l.x
	l.x, l.rows, l.spent = device.Buffer{}, 0, true
	dx, err := l.dx.get(l.dev, device.Workspace, int64(rows*c.In)*dt.Size())
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	k := l.dev.Kernels()
	var q queue
	q.add(k.Gemm(device.Gemm{DType: dt, TransA: true, M: c.Out, N: c.In, K: rows, Alpha: 1, Beta: 1, A: dy, B: x, C: l.gw}))
	if !c.NoBias {
		q.add(k.SumRows(device.SumRows{DType: dt, Rows: rows, Cols: c.Out, X: dy, Out: l.gb, Accumulate: true}))
	}
	q.add(k.Gemm(device.Gemm{DType: dt, M: rows, N: c.In, K: c.Out, Alpha: 1, A: dy, B: l.w, C: dx}))
	if q.err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	return dx, nil
}

// Close frees the layer's buffers, and the parameters unless a share
// still holds them; after it, calls are ErrClosed, as Embedding.Close
// says.
func (l *Linear) Close() error {
	if first, err := l.g.close("Linear"); !first {
		return err
	}
	var q queue
	l.x, l.rows = device.Buffer{}, 0
	for _, s := range []*scratch{&l.out, &l.dx} {
		q.add(s.free(l.dev))
	}
	if l.params != nil {
		q.add(l.params.release())
	}
	return q.err
}
