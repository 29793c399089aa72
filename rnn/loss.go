package rnn

import (
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
)

// CrossEntropy is softmax cross-entropy over rows of logits, as PyTorch's
// nn.CrossEntropyLoss with mean reduction. Each Forward adds its loss to a
// running total on the device, so a step of several micro-batches (or an
// evaluation over many batches) needs one synchronisation to read it. It is
// used by one goroutine at a time: a call meeting another is ErrBusy.
type CrossEntropy struct {
	g       guard
	dev     device.Device
	dtype   device.DType
	classes int
	cfg     CrossEntropyConfig
	weights device.Buffer // [classes], or none
	total   device.Buffer // one element: the running loss
	dLogits scratch
	rows    int // rows of the saved training forward, 0 when none
	spent   bool
}

// NewCrossEntropy makes a loss over classes classes, with values of type
// dt (0 means Float32), and a zero running total.
func NewCrossEntropy(d device.Device, classes int, dt device.DType) (*CrossEntropy, error) {
	return NewCrossEntropyConfig(d, CrossEntropyConfig{Classes: classes, DType: dt})
}

// CrossEntropyConfig configures a CrossEntropy: PyTorch's
// nn.CrossEntropyLoss(weight, ignore_index).
type CrossEntropyConfig struct {
	Classes int
	// DType is the values' type; 0 means Float32.
	DType device.DType
	// Ignore leaves out the rows whose target is IgnoreIndex (PyTorch's
	// ignore_index, -100 there by default): padding positions of a batch
	// of sequences. They add nothing to the loss and get a zero gradient.
	Ignore      bool
	IgnoreIndex int32
	// Weights, when set, has one weight per class: each row's loss and
	// gradient are multiplied by its target's weight (PyTorch's weight).
	Weights []float64
}

// NewCrossEntropyConfig makes the loss cfg describes, with a zero
// running total.
func NewCrossEntropyConfig(d device.Device, cfg CrossEntropyConfig) (_ *CrossEntropy, err error) {
	const op = "rnn: NewCrossEntropy"
	if d == nil {
		return nil, fmt.Errorf("%s: no device", op)
	}
	if cfg.DType, err = floatType(cfg.DType); err != nil {
		return nil, err
	}
	dt, classes := cfg.DType, cfg.Classes
	if classes <= 0 {
		return nil, fmt.Errorf("%s: classes %d, want > 0: %w", op, classes, device.ErrShape)
	}
	if cfg.Weights != nil && len(cfg.Weights) != classes {
		return nil, fmt.Errorf("%s: %d weights for %d classes, want one per class: %w", op, len(cfg.Weights), classes, device.ErrShape)
	}
	cfg.Weights = append([]float64(nil), cfg.Weights...)
	c := &CrossEntropy{dev: d, dtype: dt, classes: classes, cfg: cfg}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", op, errors.Join(err, c.Close()))
		}
	}()
	if c.total, err = d.Alloc(dt.Size(), device.Workspace); err != nil {
		return nil, err
	}
	if err := c.resetLoss(); err != nil {
		return nil, err
	}
	if cfg.Weights != nil {
		if c.weights, err = d.Alloc(int64(classes)*dt.Size(), device.Parameters); err != nil {
			return nil, err
		}
		if dt == device.Float64 {
			err = device.UploadSlice(d, c.weights, cfg.Weights)
		} else {
			w := make([]float32, classes)
			for i, v := range cfg.Weights {
				w[i] = float32(v)
			}
			err = device.UploadSlice(d, c.weights, w)
		}
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Forward adds scale · mean over the rows of -log softmax(logits)[target]
// to the running total: logits [rows, classes], targets [rows] of Int32 in
// [0, classes). Scale 0 means 1; a trainer accumulating K micro-batches
// passes 1/K so that the total and the gradients are those of the mean
// over the whole step. In Train mode it also computes the gradient with
// respect to the logits, which Backward returns. A target outside
// [0, classes) adds nothing and raises device.ErrIndex at the next
// synchronisation (naming the target and its position on the CPU device).
func (c *CrossEntropy) Forward(mode Mode, logits, targets device.Buffer, rows int, scale float64) error {
	if err := c.g.enter("CrossEntropy", "Forward"); err != nil {
		return err
	}
	defer c.g.leave()
	if scale == 0 {
		scale = 1
	}
	if rows > 0 {
		scale /= float64(rows)
	}
	return c.forwardSum(mode, logits, targets, rows, scale)
}

// ForwardSum is Forward with the sum over the rows instead of the mean:
// it adds scale · Σ_i w_i · -log softmax(logits_i)[target_i] over the rows
// not ignored (w_i the target's weight, or 1), so that a caller who knows
// the rows counted (the real tokens of a batch of sequences, or Σ w_i)
// passes 1/that for PyTorch's mean.
func (c *CrossEntropy) ForwardSum(mode Mode, logits, targets device.Buffer, rows int, scale float64) error {
	if err := c.g.enter("CrossEntropy", "ForwardSum"); err != nil {
		return err
	}
	defer c.g.leave()
	return c.forwardSum(mode, logits, targets, rows, scale)
}

func (c *CrossEntropy) forwardSum(mode Mode, logits, targets device.Buffer, rows int, scale float64) error {
	const op = "CrossEntropy.Forward"
	if err := checkMode(op, mode); err != nil {
		return err
	}
	if err := positive(op, []string{"rows"}, rows); err != nil {
		return err
	}
	if err := input(op, "logits", c.dev, logits, c.dtype, rows*c.classes, shapeOf("rows·classes", rows, c.classes)); err != nil {
		return err
	}
	if err := input(op, "targets", c.dev, targets, device.Int32, rows, shapeOf("rows")); err != nil {
		return err
	}
	a := device.SoftmaxCrossEntropy{DType: c.dtype, N: rows, Classes: c.classes, Logits: logits, Targets: targets,
		Scale: scale, Loss: c.total, Accumulate: true, Ignore: c.cfg.Ignore, IgnoreIndex: c.cfg.IgnoreIndex, Weights: c.weights}
	if mode == Train {
		c.rows, c.spent = 0, false
		var err error
		if a.DLogits, err = c.dLogits.get(c.dev, device.Activations, int64(rows*c.classes)*c.dtype.Size()); err != nil {
			return fmt.Errorf("rnn: %s: %w", op, err)
		}
	}
	if err := c.dev.Kernels().SoftmaxCrossEntropy(a); err != nil {
		return fmt.Errorf("rnn: %s: %w", op, err)
	}
	if mode == Train {
		c.rows = rows
	}
	return nil
}

// Backward returns the gradient of the saved training forward's loss with
// respect to its logits, [rows, classes], valid until the next training
// Forward. Calling it without a training forward, or twice for one,
// returns ErrNoForward.
func (c *CrossEntropy) Backward() (device.Buffer, error) {
	if err := c.g.enter("CrossEntropy", "Backward"); err != nil {
		return device.Buffer{}, err
	}
	defer c.g.leave()
	if c.rows == 0 {
		return device.Buffer{}, noForward("CrossEntropy.Backward", c.spent)
	}
	n := c.rows
	c.rows, c.spent = 0, true
	return c.dLogits.buf.Elems(c.dtype, 0, n*c.classes), nil
}

// Loss waits for the queued work and returns the running total.
func (c *CrossEntropy) Loss() (float64, error) {
	if err := c.g.enter("CrossEntropy", "Loss"); err != nil {
		return 0, err
	}
	defer c.g.leave()
	if c.dtype == device.Float64 {
		v := make([]float64, 1)
		err := device.DownloadSlice(c.dev, v, c.total)
		return v[0], err
	}
	v := make([]float32, 1)
	err := device.DownloadSlice(c.dev, v, c.total)
	return float64(v[0]), err
}

// Total is the one-element device buffer holding the running total; the
// zero Buffer, which every kernel refuses, after Close.
func (c *CrossEntropy) Total() device.Buffer {
	if c.g.closed() {
		return device.Buffer{}
	}
	return c.total
}

// ResetLoss queues zeroing the running total.
func (c *CrossEntropy) ResetLoss() error {
	if err := c.g.enter("CrossEntropy", "ResetLoss"); err != nil {
		return err
	}
	defer c.g.leave()
	return c.resetLoss()
}

func (c *CrossEntropy) resetLoss() error {
	return c.dev.Kernels().Fill(device.Fill{DType: c.dtype, N: 1, X: c.total})
}

// Close frees the loss's buffers. Every later call returns an error
// matching ErrClosed (Total the zero Buffer); a second Close does nothing.
// Close during another goroutine's call is ErrBusy, and closes nothing.
func (c *CrossEntropy) Close() error {
	if first, err := c.g.close("CrossEntropy"); !first {
		return err
	}
	var q queue
	q.add(c.dLogits.free(c.dev))
	for _, b := range []*device.Buffer{&c.total, &c.weights} {
		if !b.IsZero() {
			q.add(c.dev.Free(*b))
			*b = device.Buffer{}
		}
	}
	return q.err
}
