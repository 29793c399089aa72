package rnn_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

func randoms(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 2*r.Float64() - 1
	}
	return v
}

// TestNoGradEqualsTrain: the two modes run the same kernels on the same
// shapes (Train only also stores the activations), so without dropout
// their outputs and final states are bit for bit equal, on every device:
// a device gives the same bits for the same calls. With dropout, NoGrad
// applies none (equal to a model without dropout) and Train does
// (different). NoGrad reads and writes the state in place (no copies in
// or out, and over one step the output is the state's top row) where
// Train copies it, so each mode runs two windows in a row on one state,
// of 7 steps and of 1 (sampling), uni- and bidirectional, and h and c are
// compared after each.
func TestNoGradEqualsTrain(t *testing.T) {
	const B, I, H, L = 3, 5, 8, 3
	d := testdevice.Open(t)
	for _, cell := range []string{"lstm", "gru"} {
		for _, bi := range []bool{false, true} {
			for _, T := range []int{7, 1} {
				name := fmt.Sprintf("%s/bidirectional=%v/T=%d", cell, bi, T)
				t.Run(name, func(t *testing.T) {
					D := 1
					if bi {
						D = 2
					}
					r := rand.New(rand.NewPCG(1, 1))
					xs := []device.Buffer{upload(t, d, randoms(r, T*B*I)), upload(t, d, randoms(r, T*B*I))}
					h0, c0 := randoms(r, L*D*B*H), randoms(r, L*D*B*H)
					// run returns the two windows' outputs and, after each,
					// the state's h and c.
					run := func(m recurrent, mode rnn.Mode) (got [][]float64) {
						st, err := m.NewState(B)
						ok(t, err)
						defer st.Free()
						put(t, d, st.H(), h0)
						if cell == "lstm" {
							put(t, d, st.C(), c0)
						}
						for _, x := range xs {
							y, err := m.Forward(mode, x, T, B, st)
							ok(t, err)
							got = append(got, download(t, d, y, T*B*D*H), download(t, d, st.H(), L*D*B*H))
							if cell == "lstm" {
								got = append(got, download(t, d, st.C(), L*D*B*H))
							}
							st.Detach()
						}
						return got
					}
					cfg := rnn.Config{Input: I, Hidden: H, Layers: L, Bidirectional: bi, DType: device.Float64, Seed: 3}
					plain := newRecurrent(t, d, cell, cfg)
					train, infer := run(plain, rnn.Train), run(plain, rnn.NoGrad)
					what := []string{"output", "h", "c"}
					for i := range train {
						if per := len(train) / len(xs); !slices.Equal(train[i], infer[i]) {
							t.Errorf("window %d's %s: NoGrad differs from Train without dropout", i/per, what[i%per])
						}
					}
					cfg.Dropout = 0.5
					dropped := newRecurrent(t, d, cell, cfg)
					if out := run(dropped, rnn.NoGrad); !slices.Equal(out[0], infer[0]) {
						t.Errorf("NoGrad applied dropout")
					}
					if out := run(dropped, rnn.Train); slices.Equal(out[0], train[0]) {
						t.Errorf("Train with dropout 0.5 gave the output without dropout")
					}
				})
			}
		}
	}
}

// TestDetach: Detach keeps the values, allocates nothing, and cuts the
// gradient path, so the gradients of the next window are those of a fresh
// state holding the same values (bit for bit: the same calls on the same
// values); a training forward refuses a state still tied to the previous
// one.
func TestDetach(t *testing.T) {
	const T, B, I, H, L = 4, 2, 3, 5, 2
	d := testdevice.Open(t)
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			r := rand.New(rand.NewPCG(2, 2))
			m := newRecurrent(t, d, cell, rnn.Config{Input: I, Hidden: H, Layers: L, DType: device.Float64, Seed: 5})
			x1, x2 := upload(t, d, randoms(r, T*B*I)), upload(t, d, randoms(r, T*B*I))
			dy := upload(t, d, randoms(r, T*B*H))
			st, err := m.NewState(B)
			ok(t, err)
			defer st.Free()
			_, err = m.Forward(rnn.Train, x1, T, B, st)
			ok(t, err)
			_, err = m.Backward(dy)
			ok(t, err)

			_, err = m.Forward(rnn.Train, x2, T, B, st)
			if err == nil || !strings.Contains(err.Error(), "Detach") {
				t.Fatalf("training forward from a tied state: error %v, want one that says to call Detach", err)
			}
			before := download(t, d, st.H(), L*B*H)
			stats := d.MemStats()
			st.Detach()
			if got := download(t, d, st.H(), L*B*H); !slices.Equal(got, before) {
				t.Errorf("Detach changed the state's values")
			}
			if after := d.MemStats(); after.DeviceAllocs != stats.DeviceAllocs ||
				after.Allocation[alloc.AllPools].Allocated != stats.Allocation[alloc.AllPools].Allocated {
				t.Errorf("Detach allocated: %d -> %d allocations", stats.Allocation[alloc.AllPools].Allocated, after.Allocation[alloc.AllPools].Allocated)
			}

			// Window 2 from the detached state, and from a fresh state
			// holding the same values: the same gradients.
			grads := func(st *rnn.State) ([]float64, []float64) {
				ok(t, m.Params().ZeroGrad())
				_, err := m.Forward(rnn.Train, x2, T, B, st)
				ok(t, err)
				dx, err := m.Backward(dy)
				ok(t, err)
				_, g := m.Params().Flat()
				return download(t, d, dx, T*B*I), download(t, d, g, m.Params().Len())
			}
			dx1, g1 := grads(st)
			fresh, err := m.NewState(B)
			ok(t, err)
			defer fresh.Free()
			put(t, d, fresh.H(), before)
			if cell == "lstm" {
				st2, err := m.NewState(B) // c of window 1's end, recomputed
				ok(t, err)
				defer st2.Free()
				_, err = m.Forward(rnn.NoGrad, x1, T, B, st2)
				ok(t, err)
				put(t, d, fresh.C(), download(t, d, st2.C(), L*B*H))
			}
			dx2, g2 := grads(fresh)
			if !slices.Equal(dx1, dx2) || !slices.Equal(g1, g2) {
				t.Errorf("gradients after Detach differ from those of a fresh state with the same values")
			}
		})
	}
}

// TestBackwardNeedsATrainingForward: Backward without a training forward,
// after a NoGrad one, or twice for one, is ErrNoForward with a message that
// says what to do; for every layer.
func TestBackwardNeedsATrainingForward(t *testing.T) {
	d := testdevice.Open(t)
	const n = 6
	ids := uploadInt32(t, d, []int32{0, 1, 2, 3, 0, 1})
	emb, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: 4, Dim: 3, DType: device.Float64})
	ok(t, err)
	defer emb.Close()
	lin, err := rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: 3, Out: 4, DType: device.Float64})
	ok(t, err)
	defer lin.Close()
	lstm := newRecurrent(t, d, "lstm", rnn.Config{Input: 3, Hidden: 3, DType: device.Float64})
	ce, err := rnn.NewCrossEntropy(d, 4, device.Float64)
	ok(t, err)
	defer ce.Close()
	g := upload(t, d, make([]float64, n*4))

	layers := []struct {
		name     string
		forward  func(rnn.Mode) error
		backward func() error
	}{
		{"Embedding", func(m rnn.Mode) error { _, err := emb.Forward(m, ids, n); return err }, func() error { return emb.Backward(g) }},
		{"Linear", func(m rnn.Mode) error { _, err := lin.Forward(m, g, n); return err }, func() error { _, err := lin.Backward(g); return err }},
		{"LSTM", func(m rnn.Mode) error { _, err := lstm.Forward(m, g, 2, 3, nil); return err }, func() error { _, err := lstm.Backward(g); return err }},
		{"CrossEntropy", func(m rnn.Mode) error { return ce.Forward(m, g, ids, n, 1) }, func() error { _, err := ce.Backward(); return err }},
	}
	for _, l := range layers {
		t.Run(l.name, func(t *testing.T) {
			expect := func(when, want string) {
				t.Helper()
				err := l.backward()
				if !errors.Is(err, rnn.ErrNoForward) || !strings.Contains(err.Error(), want) {
					t.Errorf("Backward %s: %v, want ErrNoForward saying %q", when, err, want)
				}
			}
			expect("first", "run Forward with Train first")
			ok(t, l.forward(rnn.NoGrad))
			expect("after NoGrad", "run Forward with Train first")
			ok(t, l.forward(rnn.Train))
			ok(t, l.backward())
			expect("twice", "twice")
			if err := l.forward(rnn.Mode(0)); err == nil {
				t.Errorf("Forward with Mode(0) succeeded")
			}
		})
	}
}

// TestNoGradMemoryIsConstant samples 10,000 tokens one step at a time
// (embedding, 2-layer LSTM and GRU, linear head, softmax) and finds the
// device's memory figures after 10,000 steps equal to those after 10: a
// difference of zero, whatever the device held before the first step (the
// CUDA device's cuBLAS workspace, say).
func TestNoGradMemoryIsConstant(t *testing.T) {
	const V, E, H, L = 11, 8, 16, 2
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			d := testdevice.Open(t)
			emb, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: V, Dim: E})
			ok(t, err)
			defer emb.Close()
			m := newRecurrent(t, d, cell, rnn.Config{Input: E, Hidden: H, Layers: L, Dropout: 0.2})
			lin, err := rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: H, Out: V})
			ok(t, err)
			defer lin.Close()
			st, err := m.NewState(1)
			ok(t, err)
			defer st.Free()
			id := uploadInt32(t, d, []int32{0})
			probs := make([]float32, V)
			k := d.Kernels()
			step := func() {
				x, err := emb.Forward(rnn.NoGrad, id, 1)
				ok(t, err)
				y, err := m.Forward(rnn.NoGrad, x, 1, 1, st)
				ok(t, err)
				logits, err := lin.Forward(rnn.NoGrad, y, 1)
				ok(t, err)
				ok(t, k.Softmax(device.Softmax{DType: device.Float32, N: 1, Classes: V, Logits: logits, Probs: logits}))
				ok(t, device.DownloadSlice(d, probs, logits))
				next := int32(slices.Index(probs, slices.Max(probs)))
				ok(t, device.UploadSlice(d, id, []int32{next}))
			}
			for range 10 {
				step()
			}
			after10 := memFigures(d)
			for range 10_000 - 10 {
				step()
			}
			if after := memFigures(d); after != after10 {
				t.Errorf("memory figures [allocated, reserved, peak allocated, peak reserved, device allocs]: %v after 10,000 steps, %v after 10", after, after10)
			}
			if math.IsNaN(float64(probs[0])) {
				t.Errorf("sampling produced NaN")
			}
		})
	}
}

// memFigures are the device's memory figures a flat-memory test compares:
// allocated, reserved, peak allocated, peak reserved, device allocations.
func memFigures(d device.Device) [5]int64 {
	s := d.MemStats()
	return [5]int64{s.AllocatedBytes[alloc.AllPools].Current, s.ReservedBytes[alloc.AllPools].Current,
		s.AllocatedBytes[alloc.AllPools].Peak, s.ReservedBytes[alloc.AllPools].Peak, s.DeviceAllocs}
}

// TestStateResize: a state resized to a batch it has room for allocates
// nothing and behaves as a fresh state of that batch (zero, detached: a
// forward from it gives the fresh state's output and final state, bit for
// bit); past its room it allocates once; a batch below 1 and a freed state
// are errors.
func TestStateResize(t *testing.T) {
	const T, I, H, L = 3, 2, 4, 2
	d := testdevice.Open(t)
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			m := newRecurrent(t, d, cell, rnn.Config{Input: I, Hidden: H, Layers: L, DType: device.Float64, Seed: 4})
			r := rand.New(rand.NewPCG(4, 4))
			x := upload(t, d, randoms(r, T*5*I))
			run := func(st *rnn.State, B int) []float64 {
				y, err := m.Forward(rnn.Train, x, T, B, st)
				ok(t, err)
				got := append(download(t, d, y, T*B*H), download(t, d, st.H(), L*B*H)...)
				if cell == "lstm" {
					got = append(got, download(t, d, st.C(), L*B*H)...)
				}
				return got
			}
			st, err := m.NewState(5)
			ok(t, err)
			defer st.Free()
			run(st, 5) // nonzero values, and tied to the forward
			before := d.MemStats()
			ok(t, st.Resize(3))
			if after := d.MemStats(); after.Allocation[alloc.AllPools].Allocated != before.Allocation[alloc.AllPools].Allocated {
				t.Errorf("Resize(3) of a state for 5 allocated: %d -> %d allocations",
					before.Allocation[alloc.AllPools].Allocated, after.Allocation[alloc.AllPools].Allocated)
			}
			if st.Batch() != 3 {
				t.Errorf("Batch() = %d after Resize(3), want 3", st.Batch())
			}
			fresh, err := m.NewState(3)
			ok(t, err)
			defer fresh.Free()
			if got, want := run(st, 3), run(fresh, 3); !slices.Equal(got, want) {
				t.Errorf("a forward from a state resized to 3 differs from one from a fresh state of 3")
			}
			st.Detach()
			before = d.MemStats()
			ok(t, st.Resize(7))
			if after := d.MemStats(); after.Allocation[alloc.AllPools].Allocated != before.Allocation[alloc.AllPools].Allocated+1 {
				t.Errorf("Resize(7) of a state for 5: %d -> %d allocations, want one more",
					before.Allocation[alloc.AllPools].Allocated, after.Allocation[alloc.AllPools].Allocated)
			}
			if got := download(t, d, st.H(), L*7*H); slices.ContainsFunc(got, func(v float64) bool { return v != 0 }) {
				t.Errorf("h after Resize(7) is not zero")
			}
			if err := st.Resize(0); !errors.Is(err, device.ErrShape) {
				t.Errorf("Resize(0): %v, want device.ErrShape", err)
			}
			ok(t, fresh.Free())
			if err := fresh.Resize(3); err == nil {
				t.Errorf("Resize of a freed state: no error")
			}
		})
	}
}
