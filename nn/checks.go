package nn

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
)

// checkMode rejects a Mode that is neither Train nor NoGrad.
func checkMode(op string, m Mode) error {
	if m != Train && m != NoGrad {
		return fmt.Errorf("nn: %s: %v is neither Train nor NoGrad", op, m)
	}
	return nil
}

// inputOf checks a module's float input: its data present and holding its
// shape's elements, of dt (0: Float32 or Float64), rank 1 or more, with
// features in the last dimension (0: any), and lengths that fit its
// shape.
func inputOf(op string, x Tensor, dt device.DType, features int) error {
	switch {
	case x.Data.IsZero():
		return fmt.Errorf("nn: %s: the input %v has no data: %w", op, x, device.ErrShape)
	case dt == 0 && x.DType != device.Float32 && x.DType != device.Float64:
		return fmt.Errorf("nn: %s: the input %v, want Float32 or Float64: %w", op, x, device.ErrShape)
	case dt != 0 && x.DType != dt:
		return fmt.Errorf("nn: %s: the input %v, want %v: %w", op, x, dt, device.ErrShape)
	case x.Rank() == 0:
		return fmt.Errorf("nn: %s: a scalar input, want rank 1 or more: %w", op, device.ErrShape)
	}
	if err := x.sizes(op); err != nil {
		return err
	}
	if features != 0 && x.Features() != features {
		return fmt.Errorf("nn: %s: the input %v has %d features, want %d: %w", op, x, x.Features(), features, device.ErrShape)
	}
	return lengthsOf(op, x)
}

// lengthsOf checks that x's lengths, if any, describe its batch: x is
// [T, B, ...] with B lengths, each in [1, T].
func lengthsOf(op string, x Tensor) error {
	if x.Lengths == nil {
		return nil
	}
	if x.Rank() < 2 {
		return fmt.Errorf("nn: %s: %v has lengths but not the [T, B, ...] shape of a batch of sequences: %w", op, x, device.ErrShape)
	}
	T, B := x.Shape[0], x.Shape[1]
	if len(x.Lengths) != B {
		return fmt.Errorf("nn: %s: %v has %d lengths for a batch of %d sequences: %w", op, x.DType, len(x.Lengths), B, device.ErrShape)
	}
	for b, n := range x.Lengths {
		if n < 1 || int(n) > T {
			return fmt.Errorf("nn: %s: sequence %d has length %d, want [1, %d]: %w", op, b, n, T, device.ErrShape)
		}
	}
	return nil
}

// gradOf checks the gradient a Backward is given against the shape and
// type of the training forward's output; with no forward saved (shape
// nil) the layer's own Backward reports rnn.ErrNoForward.
func gradOf(op string, dy Tensor, shape []int, dt device.DType) error {
	if shape == nil {
		return nil
	}
	if dy.DType != dt || !slices.Equal(dy.Shape, shape) {
		return fmt.Errorf("nn: %s: the gradient %v, want %v%v as the forward's output: %w", op, dy, dt, shape, device.ErrShape)
	}
	if dy.Data.IsZero() {
		return fmt.Errorf("nn: %s: the gradient %v has no data: %w", op, dy, device.ErrShape)
	}
	return dy.sizes(op)
}

// noForward is the error of a Backward with nothing saved to consume.
func noForward(op string, spent bool) error {
	if spent {
		return fmt.Errorf("nn: %s: %w (called twice for one training forward)", op, rnn.ErrNoForward)
	}
	return fmt.Errorf("nn: %s: %w", op, rnn.ErrNoForward)
}

// withLast is shape with its last dimension replaced by f.
func withLast(shape []int, f int) []int {
	out := slices.Clone(shape)
	out[len(out)-1] = f
	return out
}

// scratch is device memory a module owns and reuses across calls: it grows
// when a call needs more and never shrinks, so calls of one shape allocate
// nothing after the first.
type scratch struct{ buf device.Buffer }

// get is n elements of dt of the scratch, counted in cat.
func (s *scratch) get(d device.Device, cat device.Category, dt device.DType, n int) (device.Buffer, error) {
	bytes := int64(n) * dt.Size()
	if s.buf.IsZero() || s.buf.Len() < bytes {
		if err := s.free(d); err != nil {
			return device.Buffer{}, err
		}
		b, err := d.Alloc(max(bytes, 1), cat)
		if err != nil {
			return device.Buffer{}, err
		}
		s.buf = b
	}
	return s.buf.Slice(0, bytes), nil
}

func (s *scratch) free(d device.Device) error {
	if s.buf.IsZero() {
		return nil
	}
	err := d.Free(s.buf)
	s.buf = device.Buffer{}
	return err
}

// freeAll frees every scratch, joining the errors.
func freeAll(d device.Device, ss ...*scratch) error {
	var errs []error
	for _, s := range ss {
		errs = append(errs, s.free(d))
	}
	return errors.Join(errs...)
}
