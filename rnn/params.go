package rnn

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
)

// Param is one named parameter of a layer: views of its values and of its
// gradient in the layer's two flat buffers.
type Param struct {
	// Name is PyTorch's name within the module, e.g. "weight_ih_l0".
	Name string
	// Shape is PyTorch's shape, row-major.
	Shape []int
	// Value and Grad are on the layer's device. Backward adds into Grad.
	Value, Grad device.Buffer
}

// Len is the number of elements.
func (p Param) Len() int {
	n := 1
	for _, s := range p.Shape {
		n *= s
	}
	return n
}

// Params are the parameters of one layer, held in one flat buffer of values
// and one of gradients (so an optimizer or a norm can treat a layer in one
// kernel), with a named view for each parameter in PyTorch's order.
// Gradients start at zero and are added into by Backward until ZeroGrad.
//
// A layer and its shares (Share) hold the same Params, freed at the last of
// their Closes. Once freed, the methods that move values (ZeroGrad, Value,
// Grad, SetValue, SetGrad) return an error matching ErrClosed, and the
// buffers the others hand out (Flat, All, Lookup) are zero Buffers, which
// every kernel refuses: names, shapes, Len and DType stay.
type Params struct {
	dev         device.Device
	dtype       device.DType
	value, grad device.Buffer
	n           int
	list        []Param
	index       map[string]int // list's position of each name
	// holders are the layer and its shares, each releasing once; the
	// buffers are freed, and freed set, when none is left.
	holders atomic.Int32
	freed   atomic.Bool
}

// paramSpec describes one parameter and its initial distribution,
// U(-bound, bound), or N(0, 1) when normal is set.
type paramSpec struct {
	name   string
	shape  []int
	bound  float64
	normal bool
}

// initChunk is how many parameters newParams draws and uploads at a
// time: the host memory initialisation takes (8 MiB of float64s) whatever
// the layer's size, and how often it looks at its ctx (a few milliseconds
// of drawing apart).
const initChunk = 1 << 20

// newParams allocates the flat buffers for specs, initialises the values
// from seed and zeroes the gradients. The initialisation checks ctx
// between chunks: a cancelled build frees what it allocated and returns an
// error wrapping ctx.Err(). Sizes whose products overflow are an error
// matching device.ErrShape; the constructors check their fields first and
// name them.
func newParams(ctx context.Context, d device.Device, dt device.DType, seed uint64, specs []paramSpec) (*Params, error) {
	p := &Params{dev: d, dtype: dt}
	p.holders.Store(1)
	var n checked.Sum
	for _, s := range specs {
		n.AddMul(s.shape...)
	}
	total, ok := n.Total()
	bytes, okBytes := checked.Mul64(int64(total), dt.Size())
	if !ok || !okBytes {
		return nil, fmt.Errorf("rnn: parameters: the sizes of %d tensors overflow int64: %w", len(specs), device.ErrShape)
	}
	p.n = total
	var err error
	if p.value, err = d.Alloc(bytes, device.Parameters); err != nil {
		return nil, fmt.Errorf("rnn: parameters: %w", err)
	}
	if p.grad, err = d.Alloc(bytes, device.Gradients); err != nil {
		return nil, fmt.Errorf("rnn: parameter gradients: %w", errors.Join(err, d.Free(p.value)))
	}
	off := 0
	p.index = make(map[string]int, len(specs))
	for _, s := range specs {
		q := Param{Name: s.name, Shape: s.shape}
		q.Value = p.value.Elems(dt, off, q.Len())
		q.Grad = p.grad.Elems(dt, off, q.Len())
		p.index[q.Name] = len(p.list)
		p.list = append(p.list, q)
		off += q.Len()
	}
	if _, planning := d.(device.Valueless); !planning {
		err = p.init(ctx, seed, specs)
	}
	if err == nil {
		err = p.ZeroGrad()
	}
	if err != nil {
		return nil, fmt.Errorf("rnn: initialising parameters: %w", errors.Join(err, p.free()))
	}
	return p, nil
}

// init draws the values of specs, in order, from one generator seeded by
// seed, initChunk at a time, and uploads them; it stops with ctx.
func (p *Params) init(ctx context.Context, seed uint64, specs []paramSpec) error {
	// The generator's second word is fixed so that a seed alone names
	// the initial values; "gocurren" in ASCII.
	rng := rand.New(rand.NewPCG(seed, 0x676f63757272656e))
	host := make([]float64, min(p.n, initChunk))
	at := 0 // the element of the flat buffer host[0] goes to
	fill := 0
	flush := func() error {
		if fill == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("building stopped after %d of %d parameters: %w", at, p.n, err)
		}
		err := upload(p.dev, p.dtype, p.value.Elems(p.dtype, at, fill), host[:fill])
		at, fill = at+fill, 0
		return err
	}
	for _, s := range specs {
		for range (Param{Shape: s.shape}).Len() {
			if s.normal {
				host[fill] = rng.NormFloat64()
			} else {
				host[fill] = (2*rng.Float64() - 1) * s.bound
			}
			if fill++; fill == len(host) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// All visits every parameter in PyTorch's order.
func (p *Params) All() iter.Seq[Param] {
	return func(yield func(Param) bool) {
		for _, q := range p.list {
			if !yield(q) {
				return
			}
		}
	}
}

// Flat returns the whole value and gradient buffers, Len elements each, in
// which every Param is a view; zero Buffers once the Params were freed.
func (p *Params) Flat() (value, grad device.Buffer) {
	if p.freed.Load() {
		return device.Buffer{}, device.Buffer{}
	}
	return p.value, p.grad
}

// Len is the total number of elements over all parameters.
func (p *Params) Len() int { return p.n }

// DType is the element type of values and gradients.
func (p *Params) DType() device.DType { return p.dtype }

// Lookup returns the parameter called name.
func (p *Params) Lookup(name string) (Param, bool) {
	if i, ok := p.index[name]; ok {
		return p.list[i], true
	}
	return Param{}, false
}

// ZeroGrad queues zeroing every gradient.
func (p *Params) ZeroGrad() error {
	if p.freed.Load() {
		return closedError("Params", "ZeroGrad")
	}
	return p.dev.Kernels().Fill(device.Fill{DType: p.dtype, N: p.n, X: p.grad})
}

// Value copies the values of the parameter called name to the host, as a
// tensor of PyTorch's shape and the layer's element type. It waits for the
// work queued before it.
func (p *Params) Value(name string) (*tensor.Dense, error) { return p.get(name, false) }

// Grad copies the gradient of the parameter called name to the host, as
// Value does.
func (p *Params) Grad(name string) (*tensor.Dense, error) { return p.get(name, true) }

// SetValue copies t, of the parameter's shape and of type float32 or
// float64 (converted to the layer's type), into the parameter called name.
// It returns once the values are on the device.
func (p *Params) SetValue(name string, t *tensor.Dense) error { return p.set(name, t, false) }

// SetGrad copies t into the gradient of the parameter called name, as
// SetValue does.
func (p *Params) SetGrad(name string, t *tensor.Dense) error { return p.set(name, t, true) }

func (p *Params) find(name string) (Param, error) {
	if q, ok := p.Lookup(name); ok {
		return q, nil
	}
	names := make([]string, len(p.list))
	for i, q := range p.list {
		names[i] = q.Name
	}
	return Param{}, fmt.Errorf("rnn: no parameter %q (have %s)", name, strings.Join(names, ", "))
}

func (p *Params) get(name string, grad bool) (*tensor.Dense, error) {
	if p.freed.Load() {
		return nil, closedError("Params", methodName("Value", "Grad", grad)+"("+strconv.Quote(name)+")")
	}
	q, err := p.find(name)
	if err != nil {
		return nil, err
	}
	b := q.Value
	if grad {
		b = q.Grad
	}
	switch p.dtype {
	case device.Float64:
		v := make([]float64, q.Len())
		if err := device.DownloadSlice(p.dev, v, b); err != nil {
			return nil, fmt.Errorf("rnn: reading %s: %w", name, err)
		}
		return tensor.New(tensor.WithShape(q.Shape...), tensor.WithBacking(v)), nil
	default:
		v := make([]float32, q.Len())
		if err := device.DownloadSlice(p.dev, v, b); err != nil {
			return nil, fmt.Errorf("rnn: reading %s: %w", name, err)
		}
		return tensor.New(tensor.WithShape(q.Shape...), tensor.WithBacking(v)), nil
	}
}

func (p *Params) set(name string, t *tensor.Dense, grad bool) error {
	if p.freed.Load() {
		return closedError("Params", methodName("SetValue", "SetGrad", grad)+"("+strconv.Quote(name)+")")
	}
	q, err := p.find(name)
	if err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("rnn: setting %s: nil tensor: %w", name, device.ErrShape)
	}
	if got := []int(t.Shape()); !slices.Equal(got, q.Shape) {
		return fmt.Errorf("rnn: setting %s: tensor of shape %v, want %v: %w", name, got, q.Shape, device.ErrShape)
	}
	host, err := float64s(t)
	if err != nil {
		return fmt.Errorf("rnn: setting %s: %w", name, err)
	}
	if len(host) != q.Len() {
		return fmt.Errorf("rnn: setting %s: tensor holds %d values, want %d: %w", name, len(host), q.Len(), device.ErrShape)
	}
	b := q.Value
	if grad {
		b = q.Grad
	}
	if err := upload(p.dev, p.dtype, b, host); err != nil {
		return fmt.Errorf("rnn: setting %s: %w", name, err)
	}
	return nil
}

// methodName is a or, for the gradient, b.
func methodName(a, b string, grad bool) string {
	if grad {
		return b
	}
	return a
}

// retain adds a holder: a share of the layer.
func (p *Params) retain() *Params {
	p.holders.Add(1)
	return p
}

// release drops a holder, and frees the buffers with the last: until
// then a share may still be running on them.
func (p *Params) release() error {
	if p.holders.Add(-1) > 0 {
		return nil
	}
	return p.free()
}

// free frees the buffers now (a layer whose construction failed, which
// no share holds) and leaves the names and shapes.
func (p *Params) free() error {
	if p.freed.Swap(true) {
		return nil
	}
	for i := range p.list {
		p.list[i].Value, p.list[i].Grad = device.Buffer{}, device.Buffer{}
	}
	return errors.Join(p.dev.Free(p.value), p.dev.Free(p.grad))
}

// float64s returns the values of a float32 or float64 tensor in row-major
// order, converted to float64.
func float64s(t *tensor.Dense) ([]float64, error) {
	if !t.IsNativelyAccessible() {
		return nil, errors.New("tensor memory is not accessible from the host")
	}
	if t.IsView() {
		t = t.Materialize().(*tensor.Dense)
	}
	switch v := t.Data().(type) {
	case []float64:
		return v, nil
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, nil
	case float64:
		return []float64{v}, nil
	case float32:
		return []float64{float64(v)}, nil
	}
	return nil, fmt.Errorf("tensor of type %v, want float32 or float64: %w", t.Dtype(), device.ErrShape)
}

// upload copies host values, converted to dt, into b.
func upload(d device.Device, dt device.DType, b device.Buffer, host []float64) error {
	if dt == device.Float64 {
		return device.UploadSlice(d, b, host)
	}
	v := make([]float32, len(host))
	for i, x := range host {
		v[i] = float32(x)
	}
	return device.UploadSlice(d, b, v)
}

// uniformBound is PyTorch's default initialisation bound for recurrent
// and linear layers: 1/sqrt(fan), fan the hidden size or input features.
func uniformBound(fan int) float64 { return 1 / math.Sqrt(float64(fan)) }
