package rnn

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
)

// Mode says what a forward pass is for.
type Mode uint8

const (
	// Train saves what Backward needs (overwriting what the previous
	// training forward of the layer saved) and applies dropout.
	Train Mode = 1 + iota
	// NoGrad saves nothing and applies no dropout: evaluation and
	// sampling. Its memory does not depend on how many calls were made.
	NoGrad
)

func (m Mode) String() string {
	switch m {
	case Train:
		return "Train"
	case NoGrad:
		return "NoGrad"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ErrNoForward is returned by Backward when there is no training forward
// to differentiate: none was run, the last one was NoGrad, or Backward
// already consumed it.
var ErrNoForward = errors.New("rnn: no saved training forward")

// scratch is device memory a layer owns and reuses across calls: it grows
// when a call needs more and never shrinks, so repeated calls of one shape
// allocate nothing. Buffers handed out are valid until the next get. Its
// memory counts in category cat.
type scratch struct {
	buf device.Buffer
}

func (s *scratch) get(d device.Device, cat device.Category, bytes int64) (device.Buffer, error) {
	if s.buf.IsZero() || s.buf.Len() < bytes {
		if err := s.free(d); err != nil {
			return device.Buffer{}, err
		}
		b, err := d.Alloc(bytes, cat)
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

// arena hands out consecutive, aligned element ranges of one buffer.
type arena struct {
	dt  device.DType
	buf device.Buffer // zero while sizing
	off int
}

// arenaAlign keeps every region at a 256-byte boundary (64 float32s),
// the alignment a GPU wants for coalesced access.
const arenaAlign = 64

func (a *arena) take(n int) device.Buffer {
	var b device.Buffer
	if !a.buf.IsZero() {
		b = a.buf.Elems(a.dt, a.off, n)
	}
	a.off += (n + arenaAlign - 1) / arenaAlign * arenaAlign
	return b
}

// dims is a size as the product of named factors, e.g. "rows·in" of 3
// and 8, written "rows·in = 3·8" (just the names without factors): the
// shape input names in its errors, formatted only for one, so that a
// check that passes allocates nothing.
type dims struct {
	names string
	v     [4]int
	n     int // the factors in v
}

// shapeOf is the dims of names and its factors (at most 4).
func shapeOf(names string, v ...int) dims {
	d := dims{names: names, n: len(v)}
	copy(d.v[:], v)
	return d
}

func (d dims) String() string {
	if d.n == 0 {
		return d.names
	}
	s := d.names + " = "
	for i, v := range d.v[:d.n] {
		if i > 0 {
			s += "·"
		}
		s += strconv.Itoa(v)
	}
	return s
}

// callSizeLimit bounds the product of a call's sizes (sizeOK): the
// buffers a layer sizes from them, a few gate blocks of them in elements,
// then in bytes, summed over a stack's layers in its arenas, stay far
// from overflowing int64 under it (a factor of 256 to spare), whatever
// seq, batch or rows a caller passes.
const callSizeLimit = math.MaxInt64 / 256

// sizeOK checks that the product of shape's factors stays under
// callSizeLimit, and names the factors otherwise.
func sizeOK(op string, shape dims) error {
	if p, ok := checked.Mul(shape.v[:shape.n]...); !ok || p > callSizeLimit {
		return fmt.Errorf("rnn: %s: %s overflows the sizes a call can take (at most %d): %w", op, shape, callSizeLimit, device.ErrShape)
	}
	return nil
}

// input checks that a caller's buffer is on the layer's device and holds at
// least n elements of dt, and names it in the error otherwise. When shape
// has factors, n is their product, checked for overflow (a caller's
// 2^62 steps must not wrap into a size the buffer holds).
func input(op, name string, d device.Device, b device.Buffer, dt device.DType, n int, shape dims) error {
	if shape.n > 0 {
		if err := sizeOK(op, shape); err != nil {
			return err
		}
		n, _ = checked.Mul(shape.v[:shape.n]...)
	}
	if b.IsZero() {
		return fmt.Errorf("rnn: %s: %s is missing (want %s = %d %v values): %w", op, name, shape, n, dt, device.ErrShape)
	}
	if b.Device() != d {
		return fmt.Errorf("rnn: %s: %s is on device %s, the layer on %s: %w",
			op, name, b.Device().Name(), d.Name(), device.ErrForeignBuffer)
	}
	if have := b.Len() / dt.Size(); have < int64(n) {
		return fmt.Errorf("rnn: %s: %s holds %d %v values, want %s = %d: %w", op, name, have, dt, shape, n, device.ErrShape)
	}
	return nil
}

// positive checks sizes given to a call.
func positive(op string, names []string, vals ...int) error {
	for i, v := range vals {
		if v <= 0 {
			return fmt.Errorf("rnn: %s: %s = %d, want > 0: %w", op, names[i], v, device.ErrShape)
		}
	}
	return nil
}

// checkMode rejects a Mode that is neither Train nor NoGrad.
func checkMode(op string, m Mode) error {
	if m != Train && m != NoGrad {
		return fmt.Errorf("rnn: %s: %v is neither Train nor NoGrad", op, m)
	}
	return nil
}

// floatType resolves a configured element type: zero means Float32.
func floatType(dt device.DType) (device.DType, error) {
	switch dt {
	case 0:
		return device.Float32, nil
	case device.Float32, device.Float64:
		return dt, nil
	}
	return 0, fmt.Errorf("rnn: element type %v, want float32 or float64", dt)
}

// queue records the first error of a sequence of kernel calls, so a
// layer's passes read as the list of kernels they queue. The calls after a
// failed one are still made (each checks its own arguments); since a pass
// validates its inputs first, a failure there means the device failed or
// closed. The pass returns the first error and saves nothing for Backward.
type queue struct{ err error }

func (q *queue) add(err error) {
	if q.err == nil {
		q.err = err
	}
}
