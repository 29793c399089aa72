package nn

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
)

// Tensor is a typed, shaped view of device memory: what flows between
// modules. Shape lists the sizes, outermost first; the elements are dense
// and row-major, Len() of them of DType from the start of Data (which may
// be longer). A Tensor owns nothing: the memory is its producer's (a
// module's output is valid until that module's next forward) or the
// caller's.
//
// A batch of sequences is time-major, [T, B, F] (or [T, B] of
// device.Int32 token ids): step t of sequence b is row t·B + b. Lengths,
// when not nil, holds each sequence's real steps (B of them, each in [1,
// T]); the positions past a sequence's end are padding, which the
// recurrent modules, the heads and the losses never read, and which the
// modules' outputs hold as zeros. A module over steps (Linear, Dropout,
// the activations) passes Lengths through, so a loss at the end of a
// chain counts only the real steps. Lengths live on the host: the
// recurrent kernels are scheduled from them. Nil means every sequence
// has all T steps.
type Tensor struct {
	Data    device.Buffer
	DType   device.DType
	Shape   []int
	Lengths []int32
}

// Of is a Tensor over data, of dt, with the given shape and no lengths.
func Of(data device.Buffer, dt device.DType, shape ...int) Tensor {
	return Tensor{Data: data, DType: dt, Shape: shape}
}

// IsZero reports whether t is the zero Tensor: what Backward returns for
// an input that carries no gradient (token ids).
func (t Tensor) IsZero() bool { return t.Data.IsZero() && t.Shape == nil }

// Len is the number of elements, the product of the shape (1 for a
// scalar's empty shape); -1 when the product overflows int.
func (t Tensor) Len() int {
	n, ok := checked.Mul(t.Shape...)
	if !ok {
		return -1
	}
	return n
}

// Rank is the number of dimensions.
func (t Tensor) Rank() int { return len(t.Shape) }

// Dim is the size of dimension i; a negative i counts from the end (-1 is
// the last), as Python's indices.
func (t Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.Shape)
	}
	return t.Shape[i]
}

// Features is the size of the last dimension (1 for a scalar), and Rows
// the number of rows of that many: Len() / Features().
func (t Tensor) Features() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[len(t.Shape)-1]
}

// Rows is the product of every dimension but the last.
func (t Tensor) Rows() int {
	if len(t.Shape) == 0 {
		return 1
	}
	n, _ := checked.Mul(t.Shape[:len(t.Shape)-1]...)
	return n
}

// Bytes is the size of the elements in bytes.
func (t Tensor) Bytes() int64 { return int64(t.Len()) * t.DType.Size() }

// Reshape is the same elements under another shape (with the same
// product) and the same lengths; it panics otherwise, as a shape written
// wrong in the caller's code is a bug.
func (t Tensor) Reshape(shape ...int) Tensor {
	n, ok := checked.Mul(shape...)
	if !ok || n != t.Len() {
		panic(fmt.Sprintf("nn: Reshape of %v to %v: %d elements, not %d", t.Shape, shape, n, t.Len()))
	}
	return Tensor{Data: t.Data, DType: t.DType, Shape: shape, Lengths: t.Lengths}
}

// Step is step s of a time-major batch [T, B, ...]: the [B, ...] rows it
// holds, without lengths.
func (t Tensor) Step(s int) Tensor {
	if len(t.Shape) < 2 || s < 0 || s >= t.Shape[0] {
		panic(fmt.Sprintf("nn: Step(%d) of a tensor %v", s, t.Shape))
	}
	per := t.Len() / t.Shape[0]
	return Tensor{Data: t.Data.Elems(t.DType, s*per, per), DType: t.DType, Shape: slices.Clone(t.Shape[1:])}
}

// String is the tensor's type and shape, "Float32[35 8 64]", and its
// lengths when it has them.
func (t Tensor) String() string {
	var b strings.Builder
	b.WriteString(t.DType.String())
	b.WriteByte('[')
	for i, s := range t.Shape {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(s))
	}
	b.WriteByte(']')
	if t.Lengths != nil {
		fmt.Fprintf(&b, " lengths %v", t.Lengths)
	}
	return b.String()
}

// Alloc is a new tensor of dt and shape on d, its memory counted in cat,
// uninitialised; the caller frees t.Data with d.Free.
func Alloc(d device.Device, cat device.Category, dt device.DType, shape ...int) (Tensor, error) {
	t := Tensor{DType: dt, Shape: slices.Clone(shape)}
	if err := t.sizes("Alloc"); err != nil {
		return Tensor{}, err
	}
	b, err := d.Alloc(max(t.Bytes(), 1), cat)
	if err != nil {
		return Tensor{}, fmt.Errorf("nn: Alloc %v: %w", t, err)
	}
	t.Data = b.Slice(0, t.Bytes())
	return t, nil
}

// Upload is a new tensor of shape on d holding v, converted to dt (a
// float type: Float32 or Float64), counted as device.Workspace; the
// caller frees t.Data with d.Free.
func Upload(d device.Device, dt device.DType, v []float64, shape ...int) (Tensor, error) {
	if dt != device.Float32 && dt != device.Float64 {
		return Tensor{}, fmt.Errorf("nn: Upload of %v: want Float32 or Float64: %w", dt, device.ErrShape)
	}
	t := Tensor{DType: dt, Shape: slices.Clone(shape)}
	if err := t.sizes("Upload"); err != nil {
		return Tensor{}, err
	}
	if len(v) != t.Len() {
		return Tensor{}, fmt.Errorf("nn: Upload of %d values into %v (%d): %w", len(v), t, t.Len(), device.ErrShape)
	}
	t, err := Alloc(d, device.Workspace, dt, shape...)
	if err != nil {
		return Tensor{}, err
	}
	if err := t.upload(d, v); err != nil {
		return Tensor{}, errors.Join(err, d.Free(t.Data))
	}
	return t, nil
}

// UploadIDs is a new Int32 tensor of shape on d holding ids (token ids,
// labels), counted as device.Workspace; the caller frees t.Data with
// d.Free.
func UploadIDs(d device.Device, ids []int32, shape ...int) (Tensor, error) {
	t := Tensor{DType: device.Int32, Shape: slices.Clone(shape)}
	if err := t.sizes("UploadIDs"); err != nil {
		return Tensor{}, err
	}
	if len(ids) != t.Len() {
		return Tensor{}, fmt.Errorf("nn: UploadIDs of %d ids into %v (%d): %w", len(ids), t, t.Len(), device.ErrShape)
	}
	t, err := Alloc(d, device.Workspace, device.Int32, shape...)
	if err != nil {
		return Tensor{}, err
	}
	if err := device.UploadSlice(d, t.Data, ids); err != nil {
		return Tensor{}, errors.Join(err, d.Free(t.Data))
	}
	return t, nil
}

func (t Tensor) upload(d device.Device, v []float64) error {
	if t.DType == device.Float64 {
		return device.UploadSlice(d, t.Data, v)
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return device.UploadSlice(d, t.Data, f)
}

// Float64s downloads a float tensor's elements (waiting for the work
// queued before), converted to float64.
func (t Tensor) Float64s(d device.Device) ([]float64, error) {
	if err := t.sizes("Float64s"); err != nil {
		return nil, err
	}
	switch t.DType {
	case device.Float64:
		v := make([]float64, t.Len())
		return v, device.DownloadSlice(d, v, t.Data.Slice(0, t.Bytes()))
	case device.Float32:
		f := make([]float32, t.Len())
		if err := device.DownloadSlice(d, f, t.Data.Slice(0, t.Bytes())); err != nil {
			return nil, err
		}
		v := make([]float64, len(f))
		for i, x := range f {
			v[i] = float64(x)
		}
		return v, nil
	}
	return nil, fmt.Errorf("nn: Float64s of %v: not a float tensor: %w", t, device.ErrShape)
}

// maxElems bounds a tensor's elements so that its bytes, and the few
// buffers of it a module sizes, stay far from overflowing int64.
const maxElems = math.MaxInt64 / 256

// sizes checks that the shape's sizes are positive, that their product
// does not overflow, and that Data (when set) holds them.
func (t Tensor) sizes(op string) error {
	for i, s := range t.Shape {
		if s <= 0 {
			return fmt.Errorf("nn: %s: %v has size %d in dimension %d, want > 0: %w", op, t, s, i, device.ErrShape)
		}
	}
	if n, ok := checked.Mul(t.Shape...); !ok || n > maxElems {
		return fmt.Errorf("nn: %s: %v overflows the sizes a tensor can have (at most %d elements): %w", op, t, maxElems, device.ErrShape)
	}
	if t.DType.Size() == 0 {
		return fmt.Errorf("nn: %s: %v: %w", op, t, device.ErrShape)
	}
	if !t.Data.IsZero() && t.Data.Len() < t.Bytes() {
		return fmt.Errorf("nn: %s: %v needs %d bytes, its data holds %d: %w", op, t, t.Bytes(), t.Data.Len(), device.ErrShape)
	}
	return nil
}
