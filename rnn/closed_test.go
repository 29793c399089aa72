package rnn_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/closedtest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// zeroBuf is a getter's check that a closed object hands out no memory.
func zeroBuf(what string, b device.Buffer) error {
	if !b.IsZero() {
		return fmt.Errorf("%s is a buffer of %d bytes, want the zero Buffer", what, b.Len())
	}
	return nil
}

// closed and getter make closedtest's table read as a list.
func closed(f func() error) closedtest.Call { return closedtest.Call{Closed: true, F: f} }
func getter(f func() error) closedtest.Call { return closedtest.Call{F: f} }

// TestClosedLayers builds each type of rnn with a Close (or Free), closes
// it, and calls every exported method (the table must name them all):
// each that touches device memory returns an error matching rnn.ErrClosed
// that names the method, the getters of the configuration still answer,
// the buffers handed out are zero Buffers, nothing panics, and a second
// Close returns nil.
func TestClosedLayers(t *testing.T) {
	d := testdevice.Open(t)
	const T, B, I, H, V = 3, 2, 4, 5, 6
	ids := uploadInt32(t, d, []int32{0, 1, 2, 3, 4, 5})
	x := upload(t, d, make([]float64, T*B*I))
	f32 := func(n int) device.Buffer {
		b, err := d.Alloc(int64(n)*4, device.Workspace)
		ok(t, err)
		ok(t, d.Kernels().Fill(device.Fill{DType: device.Float32, N: n, X: b}))
		return b
	}

	t.Run("Embedding", func(t *testing.T) {
		e, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: V, Dim: I})
		ok(t, err)
		dOut := f32(B * I)
		ok(t, e.Close())
		closedtest.Check(t, "Embedding", e, rnn.ErrClosed, map[string]closedtest.Call{
			"Config": getter(func() error {
				if c := e.Config(); c.Vocab != V || c.Dim != I {
					return fmt.Errorf("Config = %+v, want Vocab %d, Dim %d", c, V, I)
				}
				return nil
			}),
			"Params":   getter(func() error { checkParams(t, e.Params(), V*I); return nil }),
			"Forward":  closed(func() error { _, err := e.Forward(rnn.NoGrad, ids, B); return err }),
			"Backward": closed(func() error { return e.Backward(dOut) }),
			"Share":    closed(func() error { _, err := e.Share(); return err }),
			"Close":    getter(e.Close),
		})
	})

	t.Run("Linear", func(t *testing.T) {
		l, err := rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: I, Out: V})
		ok(t, err)
		xl, dy := f32(B*I), f32(B*V)
		ok(t, l.Close())
		closedtest.Check(t, "Linear", l, rnn.ErrClosed, map[string]closedtest.Call{
			"Config": getter(func() error {
				if c := l.Config(); c.In != I || c.Out != V {
					return fmt.Errorf("Config = %+v, want In %d, Out %d", c, I, V)
				}
				return nil
			}),
			"Params":   getter(func() error { checkParams(t, l.Params(), V*I+V); return nil }),
			"Forward":  closed(func() error { _, err := l.Forward(rnn.NoGrad, xl, B); return err }),
			"Backward": closed(func() error { _, err := l.Backward(dy); return err }),
			"Share":    closed(func() error { _, err := l.Share(); return err }),
			"Close":    getter(l.Close),
		})
	})

	t.Run("CrossEntropy", func(t *testing.T) {
		c, err := rnn.NewCrossEntropy(d, V, device.Float32)
		ok(t, err)
		logits := f32(B * V)
		ok(t, c.Close())
		closedtest.Check(t, "CrossEntropy", c, rnn.ErrClosed, map[string]closedtest.Call{
			"Forward":    closed(func() error { return c.Forward(rnn.NoGrad, logits, ids, B, 1) }),
			"ForwardSum": closed(func() error { return c.ForwardSum(rnn.NoGrad, logits, ids, B, 1) }),
			"Backward":   closed(func() error { _, err := c.Backward(); return err }),
			"Loss":       closed(func() error { _, err := c.Loss(); return err }),
			"ResetLoss":  closed(c.ResetLoss),
			"Total":      getter(func() error { return zeroBuf("Total", c.Total()) }),
			"Close":      getter(c.Close),
		})
	})

	for _, cell := range []string{"LSTM", "GRU"} {
		t.Run(cell, func(t *testing.T) {
			cfg := rnn.Config{Input: I, Hidden: H, Layers: 2, Dropout: 0.5}
			var (
				s     recurrentAll
				share func() error
			)
			if cell == "LSTM" {
				l, err := rnn.NewLSTM(context.Background(), d, cfg)
				ok(t, err)
				s, share = l, func() error { _, err := l.Share(); return err }
			} else {
				g, err := rnn.NewGRU(context.Background(), d, cfg)
				ok(t, err)
				s, share = g, func() error { _, err := g.Share(); return err }
			}
			st, err := s.NewState(B)
			ok(t, err)
			defer st.Free()
			gates := 4
			if cell == "GRU" {
				gates = 3
			}
			// Layer 1's weights and biases: 2·gates·H·(H + 1) + ... as
			// paramSpecs lays them out after layer 0's.
			l0 := gates*H*I + gates*H*H + 2*gates*H
			l1 := gates*H*H + gates*H*H + 2*gates*H
			off0, n0 := s.LayerGrads(1)
			if off0 != l0 || n0 != l1 {
				t.Fatalf("LayerGrads(1) = %d, %d before Close, want %d, %d", off0, n0, l0, l1)
			}
			seed, offset := s.DropoutState()
			dy := f32(T * B * H)
			ok(t, s.Close())
			closedtest.Check(t, cell, s, rnn.ErrClosed, map[string]closedtest.Call{
				"Config": getter(func() error {
					if c := s.Config(); c.Hidden != H || c.Layers != 2 {
						return fmt.Errorf("Config = %+v, want Hidden %d, Layers 2", c, H)
					}
					return nil
				}),
				"Params": getter(func() error { checkParams(t, s.Params(), l0+l1); return nil }),
				"LayerGrads": getter(func() error {
					if off, n := s.LayerGrads(1); off != off0 || n != n0 {
						return fmt.Errorf("LayerGrads(1) = %d, %d, want %d, %d as before Close", off, n, off0, n0)
					}
					return nil
				}),
				"DropoutState": getter(func() error {
					if a, b := s.DropoutState(); a != seed || b != offset {
						return fmt.Errorf("DropoutState = %d, %d, want %d, %d as before Close", a, b, seed, offset)
					}
					return nil
				}),
				"Branched": getter(func() error {
					if s.Branched() {
						return errors.New("Branched = true, want false: Close closed the branch")
					}
					return nil
				}),
				"WaveWindows":     getter(func() error { s.WaveWindows(); return nil }),
				"NotifyLayers":    getter(func() error { s.NotifyLayers(func(int) error { return nil }); return nil }),
				"Replayed":        getter(func() error { s.Replayed(rnn.Train, T, B); return nil }),
				"SetRecompute":    closed(func() error { return s.SetRecompute(2) }),
				"SetDropoutState": closed(func() error { return s.SetDropoutState(1, 2) }),
				"NewState":        closed(func() error { _, err := s.NewState(B); return err }),
				"Forward":         closed(func() error { _, err := s.Forward(rnn.NoGrad, x, T, B, st); return err }),
				"ForwardLengths": closed(func() error {
					_, err := s.ForwardLengths(rnn.NoGrad, x, T, B, []int32{3, 1}, nil)
					return err
				}),
				"Backward": closed(func() error { _, err := s.Backward(dy); return err }),
				"Share":    closed(share),
				"Close":    getter(s.Close),
			})
		})
	}

	t.Run("State", func(t *testing.T) {
		l, err := rnn.NewLSTM(context.Background(), d, rnn.Config{Input: I, Hidden: H})
		ok(t, err)
		defer l.Close()
		st, err := l.NewState(B)
		ok(t, err)
		ok(t, st.Free())
		closedtest.Check(t, "State", st, rnn.ErrClosed, map[string]closedtest.Call{
			"Resize": closed(func() error { return st.Resize(B + 1) }),
			"Reset":  closed(st.Reset),
			"H":      getter(func() error { return zeroBuf("H", st.H()) }),
			"C":      getter(func() error { return zeroBuf("C", st.C()) }),
			"GradH":  getter(func() error { return zeroBuf("GradH", st.GradH()) }),
			"GradC":  getter(func() error { return zeroBuf("GradC", st.GradC()) }),
			"Batch": getter(func() error {
				if st.Batch() != B || st.Layers() != 1 || st.DType() != device.Float32 {
					return fmt.Errorf("Batch, Layers, DType = %d, %d, %v, want %d, 1, float32", st.Batch(), st.Layers(), st.DType(), B)
				}
				return nil
			}),
			"Layers": getter(func() error { st.Layers(); return nil }),
			"DType":  getter(func() error { st.DType(); return nil }),
			"Detach": getter(func() error { st.Detach(); return nil }),
			"Free":   getter(st.Free),
		})
		// A forward given the freed state refuses it, before reading it.
		if _, err := l.Forward(rnn.NoGrad, x, T, B, st); !errors.Is(err, rnn.ErrClosed) {
			t.Errorf("Forward with a freed state = %v, want an error matching rnn.ErrClosed", err)
		}
	})
}

// recurrentAll is every exported method of a stack but Share, whose
// result type differs.
type recurrentAll interface {
	recurrent
	SetRecompute(k int) error
	NotifyLayers(done func(layer int) error)
	LayerGrads(l int) (off, n int)
	DropoutState() (seed, offset uint64)
	SetDropoutState(seed, offset uint64) error
	Replayed(mode rnn.Mode, seq, batch int)
	Branched() bool
	WaveWindows() int
}

// checkParams checks a closed layer's Params, as closedtest checks the
// layer: still n elements, the methods that move values ErrClosed, every
// buffer it hands out a zero Buffer, names and shapes kept.
func checkParams(t *testing.T, p *rnn.Params, n int) {
	t.Helper()
	if p == nil {
		t.Fatal("Params = nil after Close, want the layer's freed Params")
	}
	var first string
	for q := range p.All() {
		first = q.Name
		break
	}
	if first == "" {
		t.Fatal("Params.All after Close yields nothing, want every parameter's name and shape")
	}
	one := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{1}))
	closedtest.Check(t, "Params", p, rnn.ErrClosed, map[string]closedtest.Call{
		"ZeroGrad": closed(p.ZeroGrad),
		"Value":    closed(func() error { _, err := p.Value(first); return err }),
		"Grad":     closed(func() error { _, err := p.Grad(first); return err }),
		"SetValue": closed(func() error { return p.SetValue(first, one) }),
		"SetGrad":  closed(func() error { return p.SetGrad(first, one) }),
		"Len": getter(func() error {
			if p.Len() != n {
				return fmt.Errorf("Len = %d, want %d", p.Len(), n)
			}
			return nil
		}),
		"DType": getter(func() error {
			if p.DType() != device.Float32 {
				return fmt.Errorf("DType = %v, want float32", p.DType())
			}
			return nil
		}),
		"Flat": getter(func() error {
			v, g := p.Flat()
			return errors.Join(zeroBuf("Flat's value", v), zeroBuf("Flat's gradient", g))
		}),
		"All": getter(func() error {
			var errs []error
			for q := range p.All() {
				errs = append(errs, zeroBuf(q.Name, q.Value), zeroBuf("the gradient of "+q.Name, q.Grad))
			}
			return errors.Join(errs...)
		}),
		"Lookup": getter(func() error {
			q, found := p.Lookup(first)
			if !found || len(q.Shape) == 0 {
				return fmt.Errorf("Lookup(%q) = %v, %v, want the parameter's name and shape", first, q, found)
			}
			return zeroBuf("Lookup's "+first, q.Value)
		}),
	})
}

// second is a call's error alone.
func second[T any](_ T, err error) error { return err }
