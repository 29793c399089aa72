package loader

import (
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
)

// Column describes one tensor that every example of a dataset has: an
// input of the model, or its target.
type Column struct {
	// Name names the column in errors; "" is "input i" or "target".
	Name string
	// DType is device.Int32 (token ids, class labels) or device.Float32
	// (values, put on the device as ExampleConfig.DType says).
	DType device.DType
	// Width is the number of values at a step (PerStep) or of the whole
	// example; 0 means 1.
	Width int
	// PerStep says the column is a sequence: Width values at each of the
	// example's steps (its length), one row a step. Otherwise it is one
	// row of Width values for the example (a label, a vector).
	PerStep bool
}

func (c Column) width() int { return max(c.Width, 1) }

// Examples is a dataset of examples that an ExampleLoader batches: each
// example has a value for every column, the inputs' and the target's.
// Memory holds them in memory; a source over files may read them when
// asked (Read may then fail, and is called from the loader's producer
// goroutine, one call at a time).
type Examples interface {
	// Columns describes the inputs, in the order a model takes them, and
	// the target.
	Columns() (inputs []Column, target Column)
	// Len is the number of examples.
	Len() int
	// Steps is example i's steps in column c (the inputs 0 to n-1, the
	// target n): at least 1 for a column PerStep; ignored otherwise. The
	// first input's steps are the example's length, which batches are
	// bucketed by.
	Steps(i, c int) int
	// Read returns example i's values in column c, step by step: ints for
	// an Int32 column, floats otherwise, Steps·Width or Width of them.
	// They are the dataset's, read and not kept by the caller.
	Read(i, c int) (ints []int32, floats []float32, err error)
}

// MemoryColumn is a column of a dataset in memory and its values, one
// slice an example: Ints for an Int32 column, Floats for a Float32 one.
type MemoryColumn struct {
	Column
	Ints   [][]int32
	Floats [][]float32
}

// TokenColumn is a column of token-id sequences (a sequence an
// example, an id a step): an Embedding's input, or a language model's
// next-token targets.
func TokenColumn(seqs [][]int32) MemoryColumn {
	return MemoryColumn{Column: Column{DType: device.Int32, PerStep: true}, Ints: seqs}
}

// TagColumn is a column of a label at each step (a tagger's targets).
func TagColumn(tags [][]int32) MemoryColumn { return TokenColumn(tags) }

// LabelColumn is a column of one class label an example (a classifier's
// targets).
func LabelColumn(labels []int32) MemoryColumn {
	v := make([][]int32, len(labels))
	for i := range labels {
		v[i] = labels[i : i+1 : i+1]
	}
	return MemoryColumn{Column: Column{DType: device.Int32}, Ints: v}
}

// SeriesColumn is a column of float sequences of width values a step:
// seqs[i] holds example i's steps one after the other.
func SeriesColumn(seqs [][]float32, width int) MemoryColumn {
	return MemoryColumn{Column: Column{DType: device.Float32, Width: width, PerStep: true}, Floats: seqs}
}

// ValueColumn is a column of width floats an example (a regression
// target per sequence, a forecast's horizon).
func ValueColumn(values [][]float32, width int) MemoryColumn {
	return MemoryColumn{Column: Column{DType: device.Float32, Width: width}, Floats: values}
}

// Memory is a dataset held in memory: PyTorch's TensorDataset for
// sequences of any length. It keeps the caller's slices, which must not
// change while a loader uses it.
type Memory struct {
	cols []MemoryColumn // the inputs, then the target
	n    int
}

// NewMemory checks the columns and makes a dataset of them: one or more
// inputs and a target, the same number of examples in each, every
// example's values a whole number of steps (at least one) of a PerStep
// column, exactly Width values of another.
func NewMemory(inputs []MemoryColumn, target MemoryColumn) (*Memory, error) {
	if len(inputs) == 0 {
		return nil, errors.New("loader: NewMemory: no input column")
	}
	m := &Memory{cols: append(append([]MemoryColumn(nil), inputs...), target)}
	for c := range m.cols {
		col := &m.cols[c]
		if col.Name == "" {
			col.Name = columnName(c, len(inputs))
		}
		if err := col.check(c == len(inputs)); err != nil {
			return nil, err
		}
		n := max(len(col.Ints), len(col.Floats))
		if c == 0 {
			m.n = n
		} else if n != m.n {
			return nil, fmt.Errorf("loader: NewMemory: %s has %d examples, %s %d", col.Name, n, m.cols[0].Name, m.n)
		}
	}
	if m.n == 0 {
		return nil, errors.New("loader: NewMemory: no examples")
	}
	return m, nil
}

func columnName(c, inputs int) string {
	if c == inputs {
		return "target"
	}
	return fmt.Sprintf("input %d", c)
}

// check checks a column's description and values.
func (c *MemoryColumn) check(target bool) error {
	switch {
	case c.Width < 0:
		return fmt.Errorf("loader: %s: Width %d, want >= 0", c.Name, c.Width)
	case c.DType == device.Int32 && c.Floats != nil, c.DType == device.Float32 && c.Ints != nil:
		return fmt.Errorf("loader: %s: a %v column with the other type's values", c.Name, c.DType)
	case c.DType != device.Int32 && c.DType != device.Float32:
		return fmt.Errorf("loader: %s: DType %v, want Int32 or Float32", c.Name, c.DType)
	case c.DType == device.Int32 && c.PerStep && c.Width > 1 && !target:
		return fmt.Errorf("loader: %s: token ids of width %d; a step of ids is one id", c.Name, c.Width)
	}
	w := c.width()
	n := max(len(c.Ints), len(c.Floats))
	for i := range n {
		var k int
		if c.Ints != nil {
			k = len(c.Ints[i])
		} else {
			k = len(c.Floats[i])
		}
		switch {
		case c.PerStep && (k == 0 || k%w != 0):
			return fmt.Errorf("loader: %s: example %d has %d values, want a whole number of steps of %d (and at least one)", c.Name, i, k, w)
		case !c.PerStep && k != w:
			return fmt.Errorf("loader: %s: example %d has %d values, want %d", c.Name, i, k, w)
		}
	}
	return nil
}

// Columns implements Examples.
func (m *Memory) Columns() ([]Column, Column) {
	in := make([]Column, len(m.cols)-1)
	for i := range in {
		in[i] = m.cols[i].Column
	}
	return in, m.cols[len(m.cols)-1].Column
}

// Len implements Examples.
func (m *Memory) Len() int { return m.n }

// Steps implements Examples.
func (m *Memory) Steps(i, c int) int {
	col := &m.cols[c]
	if !col.PerStep {
		return 1
	}
	if col.Ints != nil {
		return len(col.Ints[i]) / col.width()
	}
	return len(col.Floats[i]) / col.width()
}

// Read implements Examples: the slices given to NewMemory.
func (m *Memory) Read(i, c int) ([]int32, []float32, error) {
	col := &m.cols[c]
	if col.Ints != nil {
		return col.Ints[i], nil, nil
	}
	return nil, col.Floats[i], nil
}

var _ Examples = (*Memory)(nil)

// columnSizes checks data's columns and finds, for each, its most steps
// over the examples (1 for a column not PerStep) and the lengths of the
// first input's examples, what batches are bucketed by.
func columnSizes(data Examples) (cols []Column, steps []int, lengths []int32, err error) {
	inputs, target := data.Columns()
	if len(inputs) == 0 {
		return nil, nil, nil, errors.New("loader: a dataset without inputs")
	}
	cols = append(append([]Column(nil), inputs...), target)
	for c := range cols {
		if cols[c].Name == "" {
			cols[c].Name = columnName(c, len(inputs))
		}
		if dt := cols[c].DType; dt != device.Int32 && dt != device.Float32 {
			return nil, nil, nil, fmt.Errorf("loader: %s: DType %v, want Int32 or Float32", cols[c].Name, dt)
		}
		if cols[c].Width < 0 {
			return nil, nil, nil, fmt.Errorf("loader: %s: Width %d, want >= 0", cols[c].Name, cols[c].Width)
		}
	}
	n := data.Len()
	if n <= 0 {
		return nil, nil, nil, errors.New("loader: a dataset without examples")
	}
	steps = make([]int, len(cols))
	lengths = make([]int32, n)
	for c, col := range cols {
		steps[c] = 1
		if !col.PerStep {
			continue
		}
		for i := range n {
			k := data.Steps(i, c)
			if k < 1 || k > maxSteps {
				return nil, nil, nil, fmt.Errorf("loader: %s: example %d has %d steps, want [1, %d]", col.Name, i, k, maxSteps)
			}
			steps[c] = max(steps[c], k)
			if c == 0 {
				lengths[i] = int32(k)
			}
		}
	}
	if !cols[0].PerStep {
		for i := range lengths {
			lengths[i] = 1
		}
	}
	return cols, steps, lengths, nil
}

// maxSteps bounds an example's steps: its length is an int32 (a batch's
// lengths are), and a recurrent layer runs a step at a time.
const maxSteps = 1<<31 - 1

// slotLayout is where each column of a batch lies in a staging slot: a
// region of cap[c] elements of size[c] bytes at off[c] bytes, each at a
// 256-byte boundary.
type slotLayout struct {
	off, cap []int64
	size     []int64
	bytes    int64
}

// layout sizes a slot for batches of at most batch examples, column c of
// at most steps[c] steps, floats of dt.
func layout(cols []Column, steps []int, batch int, dt device.DType) (slotLayout, error) {
	var l slotLayout
	for c, col := range cols {
		n, ok := checked.Mul(batch, steps[c], col.width())
		if !ok || int64(n) > int64(maxSlot) {
			return slotLayout{}, fmt.Errorf("loader: %s: a batch of %d examples of %d steps of %d values overflows a staging slot", col.Name, batch, steps[c], col.width())
		}
		size := int64(4)
		if col.DType == device.Float32 {
			size = dt.Size()
		}
		l.off = append(l.off, l.bytes)
		l.cap = append(l.cap, int64(n))
		l.size = append(l.size, size)
		l.bytes += (int64(n)*size + 255) / 256 * 256
		if l.bytes > maxSlot {
			return slotLayout{}, fmt.Errorf("loader: a batch of %d examples overflows a staging slot (%d bytes, at most %d)", batch, l.bytes, int64(maxSlot))
		}
	}
	return l, nil
}

// maxSlot bounds a staging slot's bytes.
const maxSlot = 1 << 50
