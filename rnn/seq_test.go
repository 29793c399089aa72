package rnn_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/internal/testfull"
	"github.com/gocurrent/gocurrent/rnn"
)

// aloneTol bounds the difference between a sequence run in a padded
// batch and run alone: the same float64 operations on the same values,
// only with GEMMs of other row counts (which may block their sums
// differently), so a few ulps of the values, ≲ 1e-15 relative; 1e-12 is
// torchTol's budget, orders of magnitude below what a row taken from the
// wrong sequence or a step from the padding gives.
const aloneTol = 1e-12

// TestPackedEqualsAlone: a padded batch with lengths (unsorted, 1 and T
// among them, a repeated length) gives each sequence the output, final
// state and gradients (input, initial state, and parameters summed over
// the sequences) of that sequence run alone, over two windows whose state
// is carried with Detach between them (truncated backpropagation through
// time), for LSTM and GRU stacks of 2 layers, uni- and bidirectional,
// with dy random at padded positions (which must not matter). Over 60
// steps the products over steps run in two chunks on the CPU device
// (⌈256/5⌉ = 52 steps, device.DefaultProductRows), the second with two
// or three running rows; over 7, in one.
func TestPackedEqualsAlone(t *testing.T) {
	for _, sh := range []struct {
		T       int
		windows [][]int32
	}{
		{7, [][]int32{{4, 7, 1, 7, 3}, {2, 5, 7, 1, 6}}},
		{60, [][]int32{{40, 60, 1, 60, 53}, {2, 55, 60, 1, 52}}},
	} {
		for _, cell := range []string{"lstm", "gru"} {
			for _, bidir := range []bool{false, true} {
				t.Run(fmt.Sprintf("T%d/%s/bidirectional=%v", sh.T, cell, bidir), func(t *testing.T) {
					packedEqualsAlone(t, packedCase{cell: cell, bidir: bidir, T: sh.T, B: 5, layers: 2, windows: sh.windows})
				})
			}
		}
	}
}

// TestPackedRandomShapes runs packedEqualsAlone over shapes drawn at
// random from a fixed seed: 1 to 3 layers, uni- or bidirectional, 1 to 100
// steps, batches of 1 to 8 (so that on the CPU device, with chunks of
// ⌈256/B⌉ steps, some forwards span two to four chunks), lengths anywhere in
// [1, T], the wavefront's windows (WaveWindows 0, 2 or 3, cutting the
// chunks into pieces, or 1, off) and Recompute (off, auto, or one chunk);
// and checks a NoGrad forward over the same window against the training
// one. The fixed cases above pin the shapes known to matter; these look
// for the ones nobody thought of between chunks, pieces, windows and
// segments.
func TestPackedRandomShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	n := 200
	if testing.Short() || !testfull.On() { // the whole draw is the full suites'
		n = 20
	}
	for i := range n {
		c := packedCase{cell: []string{"lstm", "gru"}[r.IntN(2)], bidir: r.IntN(3) == 0, T: 1 + r.IntN(100),
			B: 1 + r.IntN(8), layers: 1 + r.IntN(3), wave: []int{0, 1, 2, 3}[r.IntN(4)],
			recompute: []int{0, 0, rnn.RecomputeAuto, 1}[r.IntN(4)], noGrad: true}
		for range 2 {
			lengths := make([]int32, c.B)
			for b := range lengths {
				lengths[b] = 1 + int32(r.IntN(c.T))
			}
			c.windows = append(c.windows, lengths)
		}
		t.Run(fmt.Sprintf("%d/%s/layers%d/bidirectional=%v/T%d/B%d/wave%d/recompute%d/%v", i, c.cell, c.layers, c.bidir,
			c.T, c.B, c.wave, c.recompute, c.windows), func(t *testing.T) {
			packedEqualsAlone(t, c)
		})
	}
}

// packedCase is a stack and the lengths of its windows for
// packedEqualsAlone: with noGrad, a NoGrad forward of each window is
// checked too.
type packedCase struct {
	cell            string
	bidir           bool
	T, B, layers    int
	wave, recompute int
	noGrad          bool
	windows         [][]int32
}

func packedEqualsAlone(t *testing.T, c packedCase) {
	const I, H = 3, 4
	B, T, L, windows := c.B, c.T, c.layers, c.windows
	d := testdevice.Open(t)
	cfg := rnn.Config{Input: I, Hidden: H, Layers: L, Bidirectional: c.bidir, DType: device.Float64, Seed: 3,
		WaveWindows: c.wave, Recompute: c.recompute}
	batch, alone := newRecurrent(t, d, c.cell, cfg), newRecurrent(t, d, c.cell, cfg)
	D, lstm := 1, c.cell == "lstm"
	if c.bidir {
		D = 2
	}
	LD := L * D
	r := rand.New(rand.NewPCG(5, 6))
	// Random initial states of every sequence, carried from window
	// to window: st for the batch, one state per sequence alone.
	st, err := batch.NewState(B)
	ok(t, err)
	defer st.Free()
	h0, c0 := randomsF(r, LD*B*H), randomsF(r, LD*B*H)
	put(t, d, st.H(), h0)
	if lstm {
		put(t, d, st.C(), c0)
	}
	singles := make([]*rnn.State, B)
	for b := range singles {
		singles[b], err = alone.NewState(1)
		ok(t, err)
		defer singles[b].Free()
		put(t, d, singles[b].H(), column(h0, LD, B, H, b))
		if lstm {
			put(t, d, singles[b].C(), column(c0, LD, B, H, b))
		}
	}
	for w, lengths := range windows {
		x, dy := randomsF(r, T*B*I), randomsF(r, T*B*D*H)
		dhn, dcn := randomsF(r, LD*B*H), randomsF(r, LD*B*H)
		ok(t, batch.Params().ZeroGrad())
		ok(t, alone.Params().ZeroGrad())
		st.Detach()
		var entryH, entryC []float64
		if c.noGrad {
			entryH = download(t, d, st.H(), LD*B*H)
			if lstm {
				entryC = download(t, d, st.C(), LD*B*H)
			}
		}
		out, err := batch.ForwardLengths(rnn.Train, upload(t, d, x), T, B, lengths, st)
		ok(t, err)
		gotOut := download(t, d, out, T*B*D*H)
		gotH, gotC := download(t, d, st.H(), LD*B*H), []float64(nil)
		if lstm {
			gotC = download(t, d, st.C(), LD*B*H)
		}
		put(t, d, st.GradH(), dhn)
		if lstm {
			put(t, d, st.GradC(), dcn)
		}
		dx, err := batch.Backward(upload(t, d, dy))
		ok(t, err)
		gotDX, gotDH := download(t, d, dx, T*B*I), download(t, d, st.GradH(), LD*B*H)
		var gotDC []float64
		if lstm {
			gotDC = download(t, d, st.GradC(), LD*B*H)
		}
		if c.noGrad {
			// The same window without grad, from the same state: the
			// training forward's outputs and final states.
			sn, err := batch.NewState(B)
			ok(t, err)
			put(t, d, sn.H(), entryH)
			if lstm {
				put(t, d, sn.C(), entryC)
			}
			y, err := batch.ForwardLengths(rnn.NoGrad, upload(t, d, x), T, B, lengths, sn)
			ok(t, err)
			where := fmt.Sprintf("window %d, NoGrad", w)
			compare(t, where+": out", download(t, d, y, T*B*D*H), gotOut, aloneTol)
			compare(t, where+": h_n", download(t, d, sn.H(), LD*B*H), gotH, aloneTol)
			if lstm {
				compare(t, where+": c_n", download(t, d, sn.C(), LD*B*H), gotC, aloneTol)
			}
			sn.Free()
		}
		for b, n := range lengths {
			where := fmt.Sprintf("window %d sequence %d (length %d)", w, b, n)
			one := singles[b]
			one.Detach()
			xb := make([]float64, int(n)*I)
			for s := range int(n) {
				copy(xb[s*I:], x[(s*B+b)*I:(s*B+b+1)*I])
			}
			y, err := alone.Forward(rnn.Train, upload(t, d, xb), int(n), 1, one)
			ok(t, err)
			wantOut := download(t, d, y, int(n)*D*H)
			for s := range T {
				row := gotOut[(s*B+b)*D*H : (s*B+b+1)*D*H]
				if s < int(n) {
					compare(t, fmt.Sprintf("%s: out step %d", where, s), row, wantOut[s*D*H:(s+1)*D*H], aloneTol)
				} else {
					compare(t, fmt.Sprintf("%s: out step %d (padding)", where, s), row, make([]float64, D*H), 0)
				}
			}
			compare(t, where+": h_n", column(gotH, LD, B, H, b), download(t, d, one.H(), LD*H), aloneTol)
			if lstm {
				compare(t, where+": c_n", column(gotC, LD, B, H, b), download(t, d, one.C(), LD*H), aloneTol)
			}
			dyb := make([]float64, int(n)*D*H)
			for s := range int(n) {
				copy(dyb[s*D*H:], dy[(s*B+b)*D*H:(s*B+b+1)*D*H])
			}
			put(t, d, one.GradH(), column(dhn, LD, B, H, b))
			if lstm {
				put(t, d, one.GradC(), column(dcn, LD, B, H, b))
			}
			dxb, err := alone.Backward(upload(t, d, dyb))
			ok(t, err)
			wantDX := download(t, d, dxb, int(n)*I)
			for s := range T {
				row := gotDX[(s*B+b)*I : (s*B+b+1)*I]
				if s < int(n) {
					compare(t, fmt.Sprintf("%s: dx step %d", where, s), row, wantDX[s*I:(s+1)*I], aloneTol)
				} else {
					compare(t, fmt.Sprintf("%s: dx step %d (padding)", where, s), row, make([]float64, I), 0)
				}
			}
			compare(t, where+": dh0", column(gotDH, LD, B, H, b), download(t, d, one.GradH(), LD*H), aloneTol)
			if lstm {
				compare(t, where+": dc0", column(gotDC, LD, B, H, b), download(t, d, one.GradC(), LD*H), aloneTol)
			}
		}
		for q := range batch.Params().All() {
			got, err := batch.Params().Grad(q.Name)
			want, err2 := alone.Params().Grad(q.Name)
			ok(t, err2)
			compare(t, fmt.Sprintf("window %d: grad %s (the sum over the sequences alone)", w, q.Name),
				hostData(t, got, err), hostData(t, want, nil), aloneTol)
		}
	}
}

// TestPackedBackwardCopies: Backward with lengths packs the operands of
// its products over steps with one gather per operand and chunk, not one
// copy per step: over 40 steps of 6 sequences (one chunk on every device:
// ⌈256/6⌉ = 43 steps on the CPU), the only copies of a Backward are the
// LSTM's shared bias gradient, one per layer and direction
// (stack.sharedBiasGrad), and none for the GRU. (Copying step by step, a
// 2-layer bidirectional LSTM made 924 here, a GRU 1,080.)
func TestPackedBackwardCopies(t *testing.T) {
	const T, B, I, H, L = 40, 6, 3, 4, 2
	lengths := []int32{40, 3, 17, 40, 1, 29}
	for _, cell := range []string{"lstm", "gru"} {
		for _, bidir := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/bidirectional=%v", cell, bidir), func(t *testing.T) {
				d := testdevice.Open(t)
				counter, isCounter := d.(device.Counter)
				if !isCounter {
					t.Fatalf("%s counts nothing", d.Name())
				}
				D := 1
				if bidir {
					D = 2
				}
				m := newRecurrent(t, d, cell, rnn.Config{Input: I, Hidden: H, Layers: L, Bidirectional: bidir})
				x, dy := fill32(t, d, T*B*I, 0.1), fill32(t, d, T*B*D*H, 0.01)
				_, err := m.ForwardLengths(rnn.Train, x, T, B, lengths, nil)
				ok(t, err)
				before := counter.Counts()
				_, err = m.Backward(dy)
				ok(t, err)
				want := int64(0)
				if cell == "lstm" {
					want = L * int64(D)
				}
				if got := counter.Counts().Copies - before.Copies; got != want {
					t.Errorf("Backward made %d copies, want %d", got, want)
				}
			})
		}
	}
}

// TestNilStateIsZeroState: with lengths, a bidirectional stack given no
// state (whose reverse walk starts from states zeroed whole,
// stack.initial) gives the bits it gives from a zero state (whose initial
// rows are copied in where each sequence's reverse walk enters): output,
// input gradient and every parameter's gradient, in training, and the
// output without grad, for LSTM and GRU stacks of 2 layers. Each stack
// first runs a training step and a forward without grad from a random
// state, so that the buffers the runs reuse hold other values than the
// zeros of fresh memory (a Fill left out fails on the CPU device too,
// not only on the emulator, whose fresh memory is NaN).
func TestNilStateIsZeroState(t *testing.T) {
	const T, B, I, H, L = 9, 5, 3, 4, 2
	lengths := []int32{4, 9, 1, 6, 6}
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			d := testdevice.Open(t)
			cfg := rnn.Config{Input: I, Hidden: H, Layers: L, Bidirectional: true, DType: device.Float64, Seed: 5}
			r := rand.New(rand.NewPCG(7, 8))
			x, dy := upload(t, d, randomsF(r, T*B*I)), upload(t, d, randomsF(r, T*B*2*H))
			h0, c0 := randomsF(r, 2*L*B*H), randomsF(r, 2*L*B*H)
			run := func(zero bool) (vals [][]float64) {
				m := newRecurrent(t, d, cell, cfg)
				dirty, err := m.NewState(B)
				ok(t, err)
				defer dirty.Free()
				for _, mode := range []rnn.Mode{rnn.Train, rnn.NoGrad} {
					put(t, d, dirty.H(), h0)
					if cell == "lstm" {
						put(t, d, dirty.C(), c0)
					}
					dirty.Detach()
					_, err := m.ForwardLengths(mode, x, T, B, lengths, dirty)
					ok(t, err)
					if mode == rnn.Train {
						_, err = m.Backward(dy)
						ok(t, err)
					}
				}
				var st *rnn.State
				if zero {
					var err error
					st, err = m.NewState(B)
					ok(t, err)
					defer st.Free()
				}
				y, err := m.ForwardLengths(rnn.NoGrad, x, T, B, lengths, st)
				ok(t, err)
				vals = append(vals, download(t, d, y, T*B*2*H))
				if st != nil {
					ok(t, d.Kernels().Fill(device.Fill{DType: device.Float64, N: 2 * L * B * H, X: st.H()}))
					if cell == "lstm" {
						ok(t, d.Kernels().Fill(device.Fill{DType: device.Float64, N: 2 * L * B * H, X: st.C()}))
					}
				}
				ok(t, m.Params().ZeroGrad())
				y, err = m.ForwardLengths(rnn.Train, x, T, B, lengths, st)
				ok(t, err)
				vals = append(vals, download(t, d, y, T*B*2*H))
				dx, err := m.Backward(dy)
				ok(t, err)
				vals = append(vals, download(t, d, dx, T*B*I))
				for q := range m.Params().All() {
					g, err := m.Params().Grad(q.Name)
					vals = append(vals, hostData(t, g, err))
				}
				return vals
			}
			got, want := run(false), run(true)
			for i := range want {
				compare(t, fmt.Sprintf("value %d (outputs, input gradient, parameter gradients)", i), got[i], want[i], 0)
			}
		})
	}
}

// randomsF draws n values uniform in [-1, 1).
func randomsF(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 2*r.Float64() - 1
	}
	return v
}

// column is sequence b's rows of a [rows, B, H] state: [rows, H].
func column(v []float64, rows, B, H, b int) []float64 {
	out := make([]float64, 0, rows*H)
	for l := range rows {
		out = append(out, v[(l*B+b)*H:(l*B+b+1)*H]...)
	}
	return out
}

// TestLengthErrors: lengths that do not fit the batch are refused before
// anything runs, naming the sequence; a state still tied to a training
// forward is refused with lengths too.
func TestLengthErrors(t *testing.T) {
	const T, B, I, H = 4, 3, 2, 3
	d := testdevice.Open(t)
	r := newRecurrent(t, d, "lstm", rnn.Config{Input: I, Hidden: H, Bidirectional: true, DType: device.Float64})
	x := upload(t, d, make([]float64, T*B*I))
	for _, c := range []struct {
		lengths []int32
		says    string
	}{
		{[]int32{2, 0, 3}, "sequence 1 has length 0, want 1 ≤ length ≤ seq = 4"},
		{[]int32{2, 5, 3}, "sequence 1 has length 5"},
		{[]int32{-1, 2, 3}, "sequence 0 has length -1"},
		{[]int32{2, 3}, "2 lengths for a batch of 3 sequences"},
	} {
		_, err := r.ForwardLengths(rnn.NoGrad, x, T, B, c.lengths, nil)
		if !errors.Is(err, device.ErrShape) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("lengths %v: %v, want a shape error saying %q", c.lengths, err, c.says)
		}
	}
	st, err := r.NewState(B)
	ok(t, err)
	defer st.Free()
	_, err = r.ForwardLengths(rnn.Train, x, T, B, []int32{1, 2, 3}, st)
	ok(t, err)
	if _, err := r.ForwardLengths(rnn.Train, x, T, B, []int32{3, 2, 1}, st); err == nil || !strings.Contains(err.Error(), "Detach") {
		t.Errorf("a second training forward on a tied state: %v, want an error pointing to Detach", err)
	}
}

// TestNoGradBetweenTrainAndBackward: a no-grad forward with other lengths
// between a training forward and its Backward leaves what the training
// forward saved (its order of the sequences included): the gradients are
// those without it, bit for bit.
func TestNoGradBetweenTrainAndBackward(t *testing.T) {
	const T, B, I, H = 6, 4, 3, 5
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			d := testdevice.Open(t)
			r := newRecurrent(t, d, cell, rnn.Config{Input: I, Hidden: H, Layers: 2, Bidirectional: true, DType: device.Float64, Seed: 9})
			g := rand.New(rand.NewPCG(7, 8))
			x, x2, dy := upload(t, d, randomsF(g, T*B*I)), upload(t, d, randomsF(g, T*B*I)), upload(t, d, randomsF(g, T*B*2*H))
			grads := func(between bool) []float64 {
				ok(t, r.Params().ZeroGrad())
				_, err := r.ForwardLengths(rnn.Train, x, T, B, []int32{3, 6, 1, 4}, nil)
				ok(t, err)
				if between {
					_, err := r.ForwardLengths(rnn.NoGrad, x2, T, B, []int32{6, 2, 5, 1}, nil)
					ok(t, err)
				}
				dx, err := r.Backward(dy)
				ok(t, err)
				_, gr := r.Params().Flat()
				return append(download(t, d, dx, T*B*I), download(t, d, gr, r.Params().Len())...)
			}
			compare(t, "dx and parameter gradients", grads(true), grads(false), 0)
		})
	}
}

// TestNoGradMemoryFlatWithLengths: 10,000 no-grad forwards of a
// bidirectional 2-layer LSTM over batches padded to one length, with
// lengths drawn anew for each, leave the device's memory figures as the
// first 10 left them: the stack's buffers depend on the padded shape only.
func TestNoGradMemoryFlatWithLengths(t *testing.T) {
	testfull.Skip(t, "10,000 NoGrad forwards of random lengths, their memory flat")
	const T, B, I, H = 12, 8, 4, 8
	d := testdevice.Open(t)
	r := newRecurrent(t, d, "lstm", rnn.Config{Input: I, Hidden: H, Layers: 2, Bidirectional: true})
	x, err := d.Alloc(int64(T*B*I*4), device.Workspace)
	ok(t, err)
	ok(t, d.Kernels().Fill(device.Fill{DType: device.Float32, N: T * B * I, X: x, Value: 0.5}))
	st, err := r.NewState(B)
	ok(t, err)
	defer st.Free()
	g := rand.New(rand.NewPCG(1, 1))
	lengths := make([]int32, B)
	step := func() {
		for i := range lengths {
			lengths[i] = int32(1 + g.IntN(T))
		}
		_, err := r.ForwardLengths(rnn.NoGrad, x, T, B, lengths, st)
		ok(t, err)
	}
	for range 10 {
		step()
	}
	ok(t, d.Synchronize())
	after10 := memFigures(d)
	for range 10_000 - 10 {
		step()
	}
	ok(t, d.Synchronize())
	if after := memFigures(d); after != after10 {
		t.Errorf("memory figures [allocated, reserved, peak allocated, peak reserved, device allocs]: %v after 10,000 calls, %v after 10", after, after10)
	}
}
