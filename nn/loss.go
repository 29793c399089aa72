package nn

import (
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
)

// Reduction is how a loss makes one number of its elements' losses, as
// PyTorch's reduction argument.
type Reduction uint8

const (
	// Mean divides the sum by the number of elements counted (by the sum
	// of their weights for a loss with class weights), PyTorch's default.
	Mean Reduction = iota
	// Sum is the sum.
	Sum
)

func (r Reduction) String() string {
	switch r {
	case Mean:
		return "mean"
	case Sum:
		return "sum"
	}
	return fmt.Sprintf("Reduction(%d)", uint8(r))
}

// Loss is a criterion between a model's output and its target, with
// PyTorch's semantics. Each forward adds to a running total on the
// device (one synchronisation reads a whole step's or evaluation's), and
// in training keeps the gradient with respect to the output for
// Backward. The losses of this package implement it; so may a user's.
//
// The trainer makes a step of several micro-batches equal one large
// batch: it calls ForwardSum with scale 1 on each and, for Mean, divides
// the step's total and gradients by the sum of their Counts at the
// step's end; a hand-written loop may call Forward, which applies the
// reduction to its one batch.
type Loss interface {
	// Reduction is the loss's reduction.
	Reduction() Reduction
	// Count is what Mean divides a batch's sum by: the elements counted
	// (the real steps' only, for an output with lengths), or the sum of
	// their class weights. labels are the target's values on the host,
	// for a loss over class labels (nil otherwise).
	Count(out Tensor, labels []int32) (float64, error)
	// ForwardSum queues scale times the sum of the elements' losses of
	// out against target, added to the running total.
	ForwardSum(mode Mode, out, target Tensor, scale float64) error
	// Backward returns the gradient of the last training forward's
	// scaled sum with respect to its out, valid until the next training
	// forward; a second call for one forward is rnn.ErrNoForward.
	Backward() (Tensor, error)
	// Total is the one-element device buffer of the running total, of
	// the output's DType.
	Total() device.Buffer
	// Loss waits for the queued work and reads the running total.
	Loss() (float64, error)
	// ResetLoss queues zeroing the running total.
	ResetLoss() error
	Close() error
}

// CrossEntropyConfig is PyTorch's nn.CrossEntropyLoss(weight,
// ignore_index, reduction) over Classes classes.
type CrossEntropyConfig struct {
	Classes int
	// DType is the logits' type; 0 means Float32.
	DType device.DType
	// Weights, when set, weights each class (PyTorch's weight): Mean then
	// divides by the sum of the counted targets' weights.
	Weights []float64
	// IgnoreIndex is the target of the rows left out (PyTorch's
	// ignore_index): padded steps; 0 means loader's IgnoreLabel, -100, as
	// PyTorch's default. The targets of a batch with lengths must hold it
	// at every padded step, as the loaders write them.
	IgnoreIndex int32
	Reduction   Reduction
}

// CrossEntropy is softmax cross-entropy over the last dimension: out
// [..., Classes] logits (a head's [B, C], or [T, B, C] at every step),
// target of the same leading shape, device.Int32 class indices.
type CrossEntropy struct {
	ce      *rnn.CrossEntropy
	cfg     CrossEntropyConfig
	dev     device.Device
	shape   []int // the training forward's out shape
	lengths []int32
}

// IgnoreLabel is what CrossEntropyConfig.IgnoreIndex 0 means.
const IgnoreLabel = -100

// NewCrossEntropy returns the loss on d.
func NewCrossEntropy(d device.Device, c CrossEntropyConfig) (*CrossEntropy, error) {
	if c.IgnoreIndex == 0 {
		c.IgnoreIndex = IgnoreLabel
	}
	if c.Reduction > Sum {
		return nil, fmt.Errorf("nn: NewCrossEntropy: %v, want Mean or Sum", c.Reduction)
	}
	for i, w := range c.Weights {
		if !(w >= 0) || w > 1e300 {
			return nil, fmt.Errorf("nn: NewCrossEntropy: class weight %d is %v; want finite and >= 0", i, w)
		}
	}
	ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: c.Classes, DType: c.DType, Ignore: true, IgnoreIndex: c.IgnoreIndex, Weights: c.Weights})
	if err != nil {
		return nil, err
	}
	if c.DType == 0 {
		c.DType = device.Float32
	}
	return &CrossEntropy{ce: ce, cfg: c, dev: d}, nil
}

// Config is the loss's configuration, with defaults filled in.
func (c *CrossEntropy) Config() CrossEntropyConfig { return c.cfg }

// Reduction implements Loss.
func (c *CrossEntropy) Reduction() Reduction { return c.cfg.Reduction }

// Count implements Loss: the rows whose label is not IgnoreIndex, or
// the sum of their weights. A label outside [0, Classes) is an error
// naming it, and so is a padded step of out whose label is not
// IgnoreIndex.
func (c *CrossEntropy) Count(out Tensor, labels []int32) (float64, error) {
	if out.Rank() == 0 || len(labels) != out.Rows() {
		return 0, fmt.Errorf("nn: CrossEntropy.Count: %d labels for an output %v (%d rows): %w", len(labels), out, out.Rows(), device.ErrShape)
	}
	var B int
	if out.Lengths != nil {
		if err := lengthsOf("CrossEntropy.Count", out); err != nil {
			return 0, err
		}
		B = out.Shape[1]
	}
	n := 0.0
	for i, y := range labels {
		if out.Lengths != nil && int32(i/B) >= out.Lengths[i%B] {
			if y != c.cfg.IgnoreIndex {
				return 0, fmt.Errorf("nn: CrossEntropy.Count: label %d at padded step %d of sequence %d, want the ignore index %d", y, i/B, i%B, c.cfg.IgnoreIndex)
			}
			continue
		}
		switch {
		case y == c.cfg.IgnoreIndex:
		case y < 0 || int(y) >= c.cfg.Classes:
			return 0, fmt.Errorf("nn: CrossEntropy.Count: label %d at row %d, want [0, %d) or the ignore index %d: %w", y, i, c.cfg.Classes, c.cfg.IgnoreIndex, device.ErrIndex)
		case c.cfg.Weights != nil:
			n += c.cfg.Weights[y]
		default:
			n++
		}
	}
	return n, nil
}

// Forward queues the loss of one batch with the configured reduction. For
// Mean it reads the targets back to count them (one synchronisation); a
// loop that has them on the host calls ForwardSum with 1/Count instead.
func (c *CrossEntropy) Forward(mode Mode, out, target Tensor) error {
	scale := 1.0
	if c.cfg.Reduction == Mean {
		if err := c.check("CrossEntropy.Forward", out, target); err != nil {
			return err
		}
		labels := make([]int32, target.Len())
		if err := device.DownloadSlice(c.dev, labels, target.Data.Slice(0, target.Bytes())); err != nil {
			return fmt.Errorf("nn: CrossEntropy.Forward: %w", err)
		}
		n, err := c.Count(out, labels)
		if err != nil {
			return err
		}
		if n > 0 {
			scale = 1 / n
		}
	}
	return c.ForwardSum(mode, out, target, scale)
}

func (c *CrossEntropy) check(op string, out, target Tensor) error {
	if err := inputOf(op, out, c.cfg.DType, c.cfg.Classes); err != nil {
		return err
	}
	if target.DType != device.Int32 || target.Len() != out.Rows() || target.Data.IsZero() {
		return fmt.Errorf("nn: %s: the target %v for an output %v, want Int32 labels, one a row (%d): %w", op, target, out, out.Rows(), device.ErrShape)
	}
	return target.sizes(op)
}

// ForwardSum implements Loss.
func (c *CrossEntropy) ForwardSum(mode Mode, out, target Tensor, scale float64) error {
	const op = "CrossEntropy.ForwardSum"
	if err := c.check(op, out, target); err != nil {
		return err
	}
	if err := c.ce.ForwardSum(mode, out.Data, target.Data, out.Rows(), scale); err != nil {
		return fmt.Errorf("nn: %w", err)
	}
	if mode == Train {
		c.shape, c.lengths = out.Shape, out.Lengths
	}
	return nil
}

// Backward implements Loss.
func (c *CrossEntropy) Backward() (Tensor, error) {
	d, err := c.ce.Backward()
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: %w", err)
	}
	return Tensor{Data: d, DType: c.cfg.DType, Shape: c.shape, Lengths: c.lengths}, nil
}

// Total implements Loss.
func (c *CrossEntropy) Total() device.Buffer { return c.ce.Total() }

// Loss implements Loss.
func (c *CrossEntropy) Loss() (float64, error) { return c.ce.Loss() }

// ResetLoss implements Loss.
func (c *CrossEntropy) ResetLoss() error { return c.ce.ResetLoss() }

// Close implements Loss.
func (c *CrossEntropy) Close() error { return c.ce.Close() }

var _ Loss = (*CrossEntropy)(nil)
