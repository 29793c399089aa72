package loader

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/gocurrent/gocurrent/device"
)

// ExampleConfig says how an ExampleLoader batches a dataset.
type ExampleConfig struct {
	// Bucket groups the examples into batches by the length of their
	// first input (Batch is required); as SeqConfig's.
	Bucket BucketConfig
	// Epochs is the number of passes; 0 means no end.
	Epochs int
	// Prefetch is the number of batches prepared ahead of the one the
	// consumer holds; 0 means 2. The ring of Prefetch+1 staging buffers
	// and device batches is allocated once, each for the largest batch.
	Prefetch int
	// DType is the type the Float32 columns have on the device:
	// device.Float32 (0) or device.Float64 (for a model in float64).
	DType device.DType
}

// Field is one column of a batch on the device, with its host copy where
// a loss needs it. A column PerStep is time-major, [T, Rows, Width] (Int32
// of Width 1: [T, Rows]), T the longest of the batch's examples in it, and
// Lengths holds each example's steps; the steps past an example's end are
// padding (PadID for Int32 inputs, IgnoreLabel for an Int32 target, zeros
// for floats). Another column is [Rows, Width] (Int32 of Width 1: [Rows]).
type Field struct {
	Data    device.Buffer
	DType   device.DType
	Shape   []int
	Lengths []int32
	// Ints are an Int32 column's values as they lie on the device
	// (padding included): the labels a loss counts.
	Ints []int32
}

// ExampleBatch is one batch of examples resident on the device. Its
// buffers belong to the loader, valid while the loop body runs (as
// SeqBatch's).
type ExampleBatch struct {
	Inputs []Field
	Target Field
	// Rows is the number of examples.
	Rows int
	// Epoch and Index place the batch in its epoch; Next is the position
	// after it, which a checkpoint saves to resume there; Group is its
	// place among the batches of its step (BucketConfig.Accum) and Last
	// says it ends the step.
	Epoch int
	Index int64
	Next  Position
	Group int
	Last  bool
}

// ExampleLoader delivers the batches of any Examples to a device, as a
// SeqLoader does a labelled dataset's: bucketed by length, shuffled from a
// seed and the epoch, resumable at any step's first batch, collated by a
// producer goroutine into pinned staging buffers copied on a stream of
// their own. One iteration runs at a time; Close may be called from any
// goroutine.
type ExampleLoader struct {
	data  Examples
	cfg   ExampleConfig
	cols  []Column
	steps []int // each column's most steps
	lay   slotLayout

	bucketed[exampleHost]
}

// exampleHost is a batch collated on the host: a hostField a column.
type exampleHost struct {
	rows   int
	fields []hostField
}

type hostField struct {
	steps   int // T, for a column PerStep; 0 otherwise
	lengths []int32
	ints    []int32
	floats  []float32
}

// NewExampleLoader makes a loader of data's batches onto d, allocating
// its staging ring (each slot for Batch examples of the longest lengths)
// and a copy stream.
func NewExampleLoader(d device.Device, data Examples, cfg ExampleConfig) (*ExampleLoader, error) {
	if d == nil || data == nil {
		return nil, errors.New("loader: NewExampleLoader needs a device and a dataset")
	}
	b, err := cfg.Bucket.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Epochs < 0 || cfg.Prefetch < 0:
		return nil, fmt.Errorf("loader: Epochs %d, Prefetch %d; neither may be negative", cfg.Epochs, cfg.Prefetch)
	case cfg.Prefetch > MaxPrefetch:
		return nil, fmt.Errorf("loader: Prefetch = %d, want at most %d", cfg.Prefetch, MaxPrefetch)
	}
	switch cfg.DType {
	case 0:
		cfg.DType = device.Float32
	case device.Float32, device.Float64:
	default:
		return nil, fmt.Errorf("loader: ExampleConfig.DType %v, want Float32 or Float64", cfg.DType)
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 2
	}
	cfg.Bucket = b
	cols, steps, lengths, err := columnSizes(data)
	if err != nil {
		return nil, err
	}
	lay, err := layout(cols, steps, b.Batch, cfg.DType)
	if err != nil {
		return nil, err
	}
	l := &ExampleLoader{data: data, cfg: cfg, cols: cols, steps: steps, lay: lay}
	l.bucketed = bucketed[exampleHost]{dev: d, name: "ExampleLoader", bucket: b, passes: cfg.Epochs, lengths: lengths,
		epochs: map[int]epochBatches{}, collate: l.collateHost, stage: l.stage}
	if err := l.allocRing(lay.bytes, cfg.Prefetch); err != nil {
		return nil, err
	}
	return l, nil
}

// Config is the loader's configuration, its defaults filled in.
func (l *ExampleLoader) Config() ExampleConfig { return l.cfg }

// Examples is the dataset the loader batches.
func (l *ExampleLoader) Examples() Examples { return l.data }

// Columns are the dataset's columns, inputs then the target, with their
// names filled in.
func (l *ExampleLoader) Columns() []Column { return append([]Column(nil), l.cols...) }

// Batches iterates over the batches from position from, as
// SeqLoader.Batches does.
func (l *ExampleLoader) Batches(ctx context.Context, from Position) iter.Seq2[ExampleBatch, error] {
	return func(yield func(ExampleBatch, error) bool) {
		l.iterate(ctx, from, func(s *ringSlot, h exampleHost, p place, err error) bool {
			if err != nil {
				return yield(ExampleBatch{}, err)
			}
			b := l.deviceBatch(s, h)
			b.Epoch, b.Index, b.Next, b.Group, b.Last = p.Epoch, p.Index, p.Next, p.Group, p.Last
			return yield(b, nil)
		})
	}
}

// Largest lists batches that together are as large as any the loader
// makes (SeqLoader.Largest), by the first input's length; a model's
// warm-up trains on them first.
func (l *ExampleLoader) Largest() [][]int32 { return l.largest(1) }

// Load collates the examples into a batch and puts it on the device,
// outside an iteration, as SeqLoader.Load does: for a warm-up.
func (l *ExampleLoader) Load(ctx context.Context, examples []int32) (ExampleBatch, func() error, error) {
	if len(examples) == 0 || len(examples) > l.cfg.Bucket.Batch {
		return ExampleBatch{}, nil, fmt.Errorf("loader: ExampleLoader.Load of %d examples, want 1 to Batch = %d", len(examples), l.cfg.Bucket.Batch)
	}
	for _, i := range examples {
		if i < 0 || int(i) >= l.data.Len() {
			return ExampleBatch{}, nil, fmt.Errorf("loader: ExampleLoader.Load: example %d of %d: %w", i, l.data.Len(), device.ErrIndex)
		}
	}
	s, h, release, err := l.load(ctx, examples, func(h exampleHost) (exampleHost, error) { return h, nil })
	if err != nil {
		return ExampleBatch{}, nil, err
	}
	b := l.deviceBatch(s, h)
	b.Last = true
	return b, release, nil
}

// collateHost reads a batch's examples and lays each column out as the
// device batch has it, padding included.
func (l *ExampleLoader) collateHost(examples []int32) (exampleHost, error) {
	B := len(examples)
	h := exampleHost{rows: B, fields: make([]hostField, len(l.cols))}
	target := len(l.cols) - 1
	for c, col := range l.cols {
		f := &h.fields[c]
		w, T := col.width(), 1
		if col.PerStep {
			f.lengths = make([]int32, B)
			for b, i := range examples {
				f.lengths[b] = int32(l.data.Steps(int(i), c))
				T = max(T, int(f.lengths[b]))
			}
			f.steps = T
		}
		n := T * B * w
		if col.DType == device.Int32 {
			f.ints = make([]int32, n)
			if col.PerStep {
				pad := int32(PadID)
				if c == target {
					pad = IgnoreLabel
				}
				for k := range f.ints {
					f.ints[k] = pad
				}
			}
		} else {
			f.floats = make([]float32, n)
		}
		for b, i := range examples {
			ints, floats, err := l.data.Read(int(i), c)
			if err != nil {
				return exampleHost{}, fmt.Errorf("loader: %s of example %d: %w", col.Name, i, err)
			}
			k := max(len(ints), len(floats))
			want := w
			if col.PerStep {
				want = int(f.lengths[b]) * w
			}
			if k != want || (col.DType == device.Int32) != (floats == nil) {
				return exampleHost{}, fmt.Errorf("loader: %s of example %d: %d values read, want %d of %v", col.Name, i, k, want, col.DType)
			}
			if !col.PerStep {
				if ints != nil {
					copy(f.ints[b*w:], ints)
				} else {
					copy(f.floats[b*w:], floats)
				}
				continue
			}
			// Step t of example b is row t·B + b.
			for t := range int(f.lengths[b]) {
				dst := (t*B + b) * w
				if ints != nil {
					copy(f.ints[dst:dst+w], ints[t*w:])
				} else {
					copy(f.floats[dst:dst+w], floats[t*w:])
				}
			}
		}
	}
	return h, nil
}

// stage writes each column at its place in the slot, floats in the
// loader's DType; it returns the bytes used.
func (l *ExampleLoader) stage(buf []byte, h exampleHost) int64 {
	var used int64
	for c, f := range h.fields {
		off := l.lay.off[c]
		switch {
		case f.ints != nil:
			for k, v := range f.ints {
				binary.LittleEndian.PutUint32(buf[off+4*int64(k):], uint32(v))
			}
			used = off + 4*int64(len(f.ints))
		case l.cfg.DType == device.Float64:
			for k, v := range f.floats {
				binary.LittleEndian.PutUint64(buf[off+8*int64(k):], math.Float64bits(float64(v)))
			}
			used = off + 8*int64(len(f.floats))
		default:
			for k, v := range f.floats {
				binary.LittleEndian.PutUint32(buf[off+4*int64(k):], math.Float32bits(v))
			}
			used = off + 4*int64(len(f.floats))
		}
	}
	return used
}

// deviceBatch is h, staged in slot s, as its device fields.
func (l *ExampleLoader) deviceBatch(s *ringSlot, h exampleHost) ExampleBatch {
	b := ExampleBatch{Rows: h.rows, Last: true}
	for c, col := range l.cols {
		f := h.fields[c]
		dt, w := col.DType, col.width()
		if dt == device.Float32 {
			dt = l.cfg.DType
		}
		var shape []int
		if col.PerStep {
			shape = []int{f.steps, h.rows}
		} else {
			shape = []int{h.rows}
		}
		if w > 1 || col.DType != device.Int32 {
			shape = append(shape, w)
		}
		n := max(len(f.ints), len(f.floats))
		field := Field{Data: s.dev.Slice(l.lay.off[c], int64(n)*l.lay.size[c]), DType: dt, Shape: shape, Lengths: f.lengths, Ints: f.ints}
		if c == len(l.cols)-1 {
			b.Target = field
		} else {
			b.Inputs = append(b.Inputs, field)
		}
	}
	return b
}
