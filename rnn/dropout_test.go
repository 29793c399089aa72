package rnn_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// dropper is the dropout state of an LSTM or GRU stack.
type dropper interface {
	DropoutState() (seed, offset uint64)
	SetDropoutState(seed, offset uint64) error
	Replayed(mode rnn.Mode, seq, batch int)
}

// TestDropoutReplayed: a training forward and backward of a stack with
// dropout, recorded in a device graph and replayed, draws at each replay
// the masks the next forward queued eagerly would: the same outputs, input
// gradients and parameter gradients, bit for bit, as a stack that runs
// every step eagerly. Replayed keeps DropoutState where the device is;
// SetDropoutState sets where the next replay draws (a trainer's roll-back)
// and an eager forward after the replays continues from there. Plain,
// recomputed (whose Backward draws the masks again) and bidirectional
// stacks, four layers of which three draw.
func TestDropoutReplayed(t *testing.T) {
	const T, I, H, L, steps = 4, 5, 6, 4, 4
	d := testdevice.Open(t)
	// Half the device's product rows: chunks of two steps, so that
	// Recompute 2 cuts the four steps in two segments.
	B := device.ProductRows(d) / 2
	grapher, isGrapher := d.(device.Grapher)
	if !isGrapher {
		t.Skipf("%s records no graphs (device.Grapher)", d.Name())
	}
	// The CUDA emulator runs every kernel thread by thread on the CPU, and
	// its product rows make B 1024: there each cell takes two of the four
	// stacks, the LSTM the plain and the bidirectional recomputed, the GRU
	// the other two, so that the GPU kit's layers stage runs within its
	// time; the CPU and a GPU take all eight.
	emulated := testdevice.Emulated(d)
	for i, cell := range []string{"lstm", "gru"} {
		for j, c := range []struct {
			name      string
			recompute int
			bidir     bool
		}{{"Plain", 0, false}, {"Recompute", 2, false}, {"Bidirectional", 0, true}, {"Bidirectional/Recompute", 2, true}} {
			if emulated && (i+j/2+j%2)%2 != 0 {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", cell, c.name), func(t *testing.T) {
				cfg := rnn.Config{Input: I, Hidden: H, Layers: L, Dropout: 0.4, DType: device.Float64, Seed: 9,
					Recompute: c.recompute, Bidirectional: c.bidir}
				D := 1
				if c.bidir {
					D = 2
				}
				r := rand.New(rand.NewPCG(3, 3))
				x, dy := upload(t, d, randoms(r, T*B*I)), upload(t, d, randoms(r, T*B*D*H))
				// step queues a training forward and backward of m.
				step := func(m recurrent) (y, dx device.Buffer, err error) {
					if err := m.Params().ZeroGrad(); err != nil {
						return y, dx, err
					}
					if y, err = m.Forward(rnn.Train, x, T, B, nil); err != nil {
						return y, dx, err
					}
					dx, err = m.Backward(dy)
					return y, dx, err
				}
				// result is what a step computed, and the dropout state
				// after it.
				type result struct {
					y, dx, grad []float64
					seed, off   uint64
				}
				read := func(m recurrent, y, dx device.Buffer) result {
					t.Helper()
					_, g := m.Params().Flat()
					res := result{y: download(t, d, y, T*B*D*H), dx: download(t, d, dx, T*B*I), grad: download(t, d, g, m.Params().Len())}
					res.seed, res.off = m.(dropper).DropoutState()
					return res
				}
				check := func(what string, got, want result) {
					t.Helper()
					switch {
					case !slices.Equal(got.y, want.y):
						t.Errorf("%s: the output differs from the eager run's", what)
					case !slices.Equal(got.dx, want.dx):
						t.Errorf("%s: the input's gradient differs from the eager run's", what)
					case !slices.Equal(got.grad, want.grad):
						t.Errorf("%s: the parameters' gradient differs from the eager run's", what)
					}
					if got.seed != want.seed || got.off != want.off {
						t.Errorf("%s: DropoutState (%d, %d), want (%d, %d)", what, got.seed, got.off, want.seed, want.off)
					}
				}

				ref := newRecurrent(t, d, cell, cfg)
				var want []result
				for range steps {
					y, dx, err := step(ref)
					ok(t, err)
					want = append(want, read(ref, y, dx))
				}
				if slices.Equal(want[0].y, want[1].y) {
					t.Fatal("two steps drew the same masks: the test would not see a replay that repeats them")
				}

				m := newRecurrent(t, d, cell, cfg)
				dm := m.(dropper)
				// The first step runs eagerly (it allocates what the stack
				// keeps), the second is recorded and launched, the others
				// replayed.
				y, dx, err := step(m)
				ok(t, err)
				check("step 1, eager", read(m, y, dx), want[0])
				g, err := grapher.Capture(func() error {
					var err error
					y, dx, err = step(m)
					return err
				})
				if errors.Is(err, device.ErrNotCapturable) {
					t.Skipf("%s: %v", d.Name(), err)
				}
				ok(t, err)
				defer g.Close()
				for i := 1; i < steps; i++ {
					ok(t, g.Launch())
					if i > 1 {
						dm.Replayed(rnn.Train, T, B)
					}
					check(fmt.Sprintf("step %d, replayed", i+1), read(m, y, dx), want[i])
				}
				// Back to where step 3 began, as a trainer puts back a
				// voided step: its replay draws step 3's masks again.
				ok(t, dm.SetDropoutState(want[1].seed, want[1].off))
				ok(t, g.Launch())
				dm.Replayed(rnn.Train, T, B)
				check("step 3 replayed after SetDropoutState", read(m, y, dx), want[2])
				y, dx, err = step(m)
				ok(t, err)
				check("step 4, eager after the replays", read(m, y, dx), want[3])
				// NoGrad forwards draw nothing.
				dm.Replayed(rnn.NoGrad, T, B)
				if _, off := dm.DropoutState(); off != want[3].off {
					t.Errorf("Replayed(NoGrad) moved the offset to %d, want %d", off, want[3].off)
				}
			})
		}
	}
}
