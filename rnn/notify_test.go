package rnn_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// TestNotifyLayers checks the stack's per-layer gradient notices (what a
// data-parallel trainer sums while the layers below run their backward):
// LayerGrads cuts the flat gradient into the layers' contiguous ranges,
// top to bottom covering it exactly, each holding that layer's parameters
// (both directions); Backward calls NotifyLayers's callback once per
// layer, top first, with and without recomputation; its error ends the
// Backward; nil stops the calls.
func TestNotifyLayers(t *testing.T) {
	d := testdevice.Open(t)
	for _, c := range []struct {
		gru, bidi, noBias bool
		recompute         int
	}{{}, {gru: true}, {bidi: true}, {noBias: true}, {recompute: 2}} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			cfg := rnn.Config{Input: 3, Hidden: 4, Layers: 3, Bidirectional: c.bidi, NoBias: c.noBias, Recompute: c.recompute, DType: device.Float64, Seed: 1}
			type stack interface {
				Forward(rnn.Mode, device.Buffer, int, int, *rnn.State) (device.Buffer, error)
				Backward(device.Buffer) (device.Buffer, error)
				Params() *rnn.Params
				NotifyLayers(func(int) error)
				LayerGrads(int) (int, int)
				Close() error
			}
			var s stack
			var err error
			if c.gru {
				s, err = rnn.NewGRU(context.Background(), d, cfg)
			} else {
				s, err = rnn.NewLSTM(context.Background(), d, cfg)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p := s.Params()
			next := p.Len()
			for l := 2; l >= 0; l-- {
				off, n := s.LayerGrads(l)
				if off+n != next || n <= 0 {
					t.Fatalf("layer %d: elements %d to %d, want a range ending at %d", l, off, off+n, next)
				}
				next = off
				_, flat := p.Flat()
				for q := range p.All() {
					at := int((q.Grad.Addr() - flat.Addr()) / 8)
					in := at >= off && at < off+n
					if want := q.Name[len(q.Name)-1] == byte('0'+l) || q.Name[len(q.Name)-len("_reverse")-1] == byte('0'+l); in != want {
						t.Errorf("layer %d's range %d..%d: %s at %d in it: %v", l, off, off+n, q.Name, at, in)
					}
				}
			}
			if next != 0 {
				t.Fatalf("the layers' ranges start at %d, want 0", next)
			}
			const T, B = 5, 2
			dirs := 1
			if c.bidi {
				dirs = 2
			}
			x, _ := d.Alloc(int64(T*B*3*8), device.Activations)
			dy, _ := d.Alloc(int64(T*B*4*dirs*8), device.Activations)
			defer d.Free(x)
			defer d.Free(dy)
			k := d.Kernels()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(k.Fill(device.Fill{DType: device.Float64, N: T * B * 3, X: x, Value: 0.5}))
			must(k.Fill(device.Fill{DType: device.Float64, N: T * B * 4 * dirs, X: dy, Value: 1}))
			var got []int
			s.NotifyLayers(func(l int) error { got = append(got, l); return nil })
			_, err = s.Forward(rnn.Train, x, T, B, nil)
			must(err)
			_, err = s.Backward(dy)
			must(err)
			if !slices.Equal(got, []int{2, 1, 0}) {
				t.Errorf("notified layers %v, want [2 1 0]", got)
			}
			boom := errors.New("boom")
			s.NotifyLayers(func(int) error { return boom })
			_, err = s.Forward(rnn.Train, x, T, B, nil)
			must(err)
			if _, err := s.Backward(dy); !errors.Is(err, boom) {
				t.Errorf("Backward with a failing notice: got %v, want boom", err)
			}
			got = nil
			s.NotifyLayers(nil)
			_, err = s.Forward(rnn.Train, x, T, B, nil)
			must(err)
			_, err = s.Backward(dy)
			must(err)
			must(d.Synchronize())
		})
	}
}
