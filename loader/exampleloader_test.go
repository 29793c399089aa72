package loader

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// seriesData is n examples of a float series of 1 to 9 steps of 3
// features (example i's values are i·100 + its index, so a batch shows
// where each value came from), token ids of the same steps, and a
// per-example target of 2 values.
func seriesData(t *testing.T, n int) (*Memory, [][]float32, [][]int32, [][]float32) {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	xs, ids, ys := make([][]float32, n), make([][]int32, n), make([][]float32, n)
	for i := range n {
		steps := 1 + r.IntN(9)
		for k := range steps * 3 {
			xs[i] = append(xs[i], float32(i*100+k))
		}
		for k := range steps {
			ids[i] = append(ids[i], int32(2+(i+k)%7))
		}
		ys[i] = []float32{float32(i), -float32(i)}
	}
	m, err := NewMemory([]MemoryColumn{SeriesColumn(xs, 3), TokenColumn(ids)}, ValueColumn(ys, 2))
	if err != nil {
		t.Fatal(err)
	}
	return m, xs, ids, ys
}

func downloadFloat(t *testing.T, dev device.Device, f Field) []float64 {
	t.Helper()
	n := 1
	for _, s := range f.Shape {
		n *= s
	}
	out := make([]float64, n)
	if f.DType == device.Float64 {
		if err := device.DownloadSlice(dev, out, f.Data); err != nil {
			t.Fatal(err)
		}
		return out
	}
	v := make([]float32, n)
	if err := device.DownloadSlice(dev, v, f.Data); err != nil {
		t.Fatal(err)
	}
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// An ExampleLoader delivers every example once an epoch, in batches
// bucketed by the first input's length, each column on the device
// time-major with its padding (zeros for floats, PadID for input ids),
// in float32 or float64; from a position it delivers the rest of the same
// sequence (exact resume).
func TestExampleLoader(t *testing.T) {
	dev := testdevice.Open(t)
	ctx := context.Background()
	const n = 37
	data, xs, ids, ys := seriesData(t, n)
	for _, dt := range []device.DType{device.Float32, device.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			cfg := ExampleConfig{Bucket: BucketConfig{Batch: 5, Pool: 2, Shuffle: true, Seed: 9, Accum: 2}, Epochs: 2, DType: dt}
			l, err := NewExampleLoader(dev, data, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			type seen struct {
				pos      Position
				examples []int
			}
			var all []seen
			perEpoch := map[int]map[int]bool{}
			for b, err := range l.Batches(ctx, Position{}) {
				if err != nil {
					t.Fatal(err)
				}
				x, tok, y := b.Inputs[0], b.Inputs[1], b.Target
				T, B := x.Shape[0], b.Rows
				if !reflect.DeepEqual(x.Shape, []int{T, B, 3}) || x.DType != dt || !reflect.DeepEqual(tok.Shape, []int{T, B}) ||
					!reflect.DeepEqual(y.Shape, []int{B, 2}) || tok.DType != device.Int32 {
					t.Fatalf("shapes %v %v %v (%v), want [%d %d 3] [%d %d] [%d 2]", x.Shape, tok.Shape, y.Shape, x.DType, T, B, T, B, B)
				}
				xv, yv := downloadFloat(t, dev, x), downloadFloat(t, dev, y)
				tv := downloadInt32(t, dev, tok.Data, T*B)
				if !slices.Equal(tv, tok.Ints) {
					t.Fatalf("the ids' host copy %v, the device's %v", tok.Ints, tv)
				}
				var exs []int
				for r := range B {
					i := int(yv[2*r]) // the target says which example
					exs = append(exs, i)
					if perEpoch[b.Epoch] == nil {
						perEpoch[b.Epoch] = map[int]bool{}
					}
					if perEpoch[b.Epoch][i] {
						t.Fatalf("example %d twice in epoch %d", i, b.Epoch)
					}
					perEpoch[b.Epoch][i] = true
					if yv[2*r+1] != -float64(i) {
						t.Fatalf("row %d's target %v, want %v", r, yv[2*r:2*r+2], ys[i])
					}
					steps := len(xs[i]) / 3
					if int(x.Lengths[r]) != steps || int(tok.Lengths[r]) != steps {
						t.Fatalf("row %d (example %d): lengths %d, %d, want %d", r, i, x.Lengths[r], tok.Lengths[r], steps)
					}
					for s := range T {
						for f := range 3 {
							want := 0.0
							if s < steps {
								want = float64(xs[i][3*s+f])
							}
							if got := xv[(s*B+r)*3+f]; got != want {
								t.Fatalf("example %d step %d feature %d: %v, want %v", i, s, f, got, want)
							}
						}
						want := int32(PadID)
						if s < steps {
							want = ids[i][s]
						}
						if got := tv[s*B+r]; got != want {
							t.Fatalf("example %d step %d: id %d, want %d", i, s, got, want)
						}
					}
				}
				if want := slices.Max(x.Lengths); int(want) != T {
					t.Fatalf("T = %d, the longest is %d", T, want)
				}
				all = append(all, seen{Position{b.Epoch, b.Index}, exs})
			}
			for e := range 2 {
				if len(perEpoch[e]) != n {
					t.Fatalf("epoch %d held %d examples, want %d", e, len(perEpoch[e]), n)
				}
			}
			// From every step's first batch, the rest is the same.
			for k, s := range all {
				if !l.StepStart(s.pos) {
					continue
				}
				j := k
				for b, err := range l.Batches(ctx, s.pos) {
					if err != nil {
						t.Fatal(err)
					}
					var exs []int
					yv := downloadFloat(t, dev, b.Target)
					for r := range b.Rows {
						exs = append(exs, int(yv[2*r]))
					}
					if !slices.Equal(exs, all[j].examples) {
						t.Fatalf("resumed at %+v: batch %d holds %v, want %v", s.pos, j, exs, all[j].examples)
					}
					j++
				}
				if j != len(all) {
					t.Fatalf("resumed at %+v: %d batches, want %d", s.pos, j-k, len(all)-k)
				}
				break
			}
		})
	}
}

// A per-step Int32 target is padded with IgnoreLabel, a per-example one
// is [Rows]; Load puts the largest batches on the device for a warm-up.
func TestExampleLoaderTargetsAndLoad(t *testing.T) {
	dev := testdevice.Open(t)
	ctx := context.Background()
	seqs := [][]int32{{2, 3, 4}, {5}, {6, 7}}
	tags := [][]int32{{0, 1, 2}, {1}, {2, 0}}
	data, err := NewMemory([]MemoryColumn{TokenColumn(seqs)}, TagColumn(tags))
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewExampleLoader(dev, data, ExampleConfig{Bucket: BucketConfig{Batch: 3}, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for b, err := range l.Batches(ctx, Position{}) {
		if err != nil {
			t.Fatal(err)
		}
		// Longest first: examples 0, 2, 1.
		want := []int32{0, 2, 1, 1, 0, IgnoreLabel, 2, IgnoreLabel, IgnoreLabel}
		if got := downloadInt32(t, dev, b.Target.Data, 9); !slices.Equal(got, want) || !slices.Equal(b.Target.Ints, want) {
			t.Fatalf("tags %v (host %v), want %v", got, b.Target.Ints, want)
		}
	}
	largest := l.Largest()
	if len(largest) != 1 || len(largest[0]) != 3 || data.Steps(int(largest[0][0]), 0) != 3 {
		t.Fatalf("Largest = %v, want 3 rows of the 3-step example", largest)
	}
	b, release, err := l.Load(ctx, largest[0])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.Inputs[0].Shape, []int{3, 3}) {
		t.Fatalf("loaded %v, want [3 3]", b.Inputs[0].Shape)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}

	labels, err := NewMemory([]MemoryColumn{TokenColumn(seqs)}, LabelColumn([]int32{4, 5, 6}))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := NewExampleLoader(dev, labels, ExampleConfig{Bucket: BucketConfig{Batch: 3}, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	for b, err := range l2.Batches(ctx, Position{}) {
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(b.Target.Shape, []int{3}) || !slices.Equal(b.Target.Ints, []int32{4, 6, 5}) {
			t.Fatalf("labels %v %v, want [3] [4 6 5]", b.Target.Shape, b.Target.Ints)
		}
	}
}

// Bad columns are refused by name, with what was wrong.
func TestMemoryErrors(t *testing.T) {
	seqs := [][]float32{{1, 2, 3, 4}, {5, 6}}
	for _, c := range []struct {
		name   string
		inputs []MemoryColumn
		target MemoryColumn
		want   string
	}{
		{"no inputs", nil, LabelColumn([]int32{1, 2}), "no input column"},
		{"steps of width", []MemoryColumn{SeriesColumn(seqs, 3)}, LabelColumn([]int32{1, 2}), "input 0: example 0 has 4 values, want a whole number of steps of 3"},
		{"an empty sequence", []MemoryColumn{SeriesColumn([][]float32{{1}, {}}, 1)}, LabelColumn([]int32{1, 2}), "example 1 has 0 values"},
		{"counts differ", []MemoryColumn{SeriesColumn(seqs, 2)}, LabelColumn([]int32{1, 2, 3}), "target has 3 examples, input 0 2"},
		{"a value of the wrong width", []MemoryColumn{SeriesColumn(seqs, 2)}, ValueColumn([][]float32{{1}, {2, 3}}, 2), "target: example 0 has 1 values, want 2"},
		{"no examples", []MemoryColumn{SeriesColumn(nil, 2)}, ValueColumn(nil, 2), "no examples"},
		{"mixed types", []MemoryColumn{{Column: Column{DType: device.Int32}, Floats: seqs}}, LabelColumn([]int32{1, 2}), "the other type's values"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewMemory(c.inputs, c.target)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewMemory: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// failing is a dataset whose reads fail at one example.
type failing struct {
	*Memory
	at int
}

func (f failing) Read(i, c int) ([]int32, []float32, error) {
	if i == f.at {
		return nil, nil, errors.New("the disk is on fire")
	}
	return f.Memory.Read(i, c)
}

// A read that fails ends the iteration with an error naming the column
// and example; a closed loader is ErrClosed.
func TestExampleLoaderErrors(t *testing.T) {
	dev := testdevice.Open(t)
	ctx := context.Background()
	data, _, _, _ := seriesData(t, 9)
	l, err := NewExampleLoader(dev, failing{data, 4}, ExampleConfig{Bucket: BucketConfig{Batch: 3}, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for _, err := range l.Batches(ctx, Position{}) {
		last = err
	}
	if last == nil || !strings.Contains(last.Error(), "of example 4: the disk is on fire") {
		t.Fatalf("the iteration ended with %v, want the read's error", last)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, err := range l.Batches(ctx, Position{}) {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Batches after Close: %v, want ErrClosed", err)
		}
	}
	if _, _, err := l.Load(ctx, []int32{0}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Load after Close: %v, want ErrClosed", err)
	}
	for _, cfg := range []ExampleConfig{{}, {Bucket: BucketConfig{Batch: 2}, Epochs: -1}, {Bucket: BucketConfig{Batch: 2}, DType: device.Int32}} {
		if _, err := NewExampleLoader(dev, data, cfg); err == nil {
			t.Fatalf("NewExampleLoader(%+v): no error", cfg)
		}
	}
}
