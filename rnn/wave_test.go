package rnn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// TestWaveSameBits checks the forward's wavefront (wave.go) against the
// same stack with Config.NoBranches, which runs its layers one after the
// other: two training steps and a NoGrad forward give the same bits of
// every output, final state, gradient and parameter (branchSteps), for
// LSTM and GRU stacks of 2 layers (one pair), 3 (a pair and a layer
// alone) and 4 (two pairs), with and without dropout (whose masks each
// window draws at its offset), bias and a state (read and written in
// place without grad), in windows of 2 steps (the default 4 windows of
// the 5 steps), 3 (WaveWindows 2) and 1 (WaveWindows 5); and with
// WaveWindows 1, layer after layer. And a bidirectional stack's forwards,
// whose layers run their reverse direction on the branch beside the
// forward one (2 and 3 layers, with and without lengths). The branch
// counts what it is asked for (expectedBranch): one Fork per window of
// each pair's upper layer, one Join per pair, the upper layer's
// projections and state copies (or per bidirectional layer a Fork and a
// Join, the reverse direction's projections and copies), and Backward's
// (waveBackwards, dirsBackwards: with or without lengths, the reverse
// direction's walk back on the branch too); and no product it runs writes into the
// compute stream's pass temporaries (checkTwin).
//
// The last case cuts the 5 steps in one chunk of the products over
// steps, longer than a window: the windows' projections then cover fewer
// rows than the chunk, which the CPU device's float64 product computes
// alike (its counts are not checked: expectedBranch counts chunks of one
// step).
//
// A Fork left out would let the upper layer read the lower one's window
// before it is written (on the CPU device its branch is a stream with a
// worker of its own), and a Join left out the next pair, or the caller,
// read the upper layer's before it is: wrong bits, or a failed count.
// Leaving out the Forks, the Joins, the branch's own pass temporaries,
// the edges or the GRU's third dh slot, in the forward or Backward, each
// failed it.
func TestWaveSameBits(t *testing.T) {
	cases := []branchCase{
		{layers: 2, dropout: 0.3, tied: true, eval: true, branched: true},
		{layers: 3, noBias: true, wave: 2, eval: true, branched: true},
		{layers: 4, dropout: 0.3, tied: true, wave: 5, eval: true, branched: true},
		{layers: 2, tied: true, wave: 1, eval: true, branched: true},
		{layers: 3, dropout: 0.3, tied: true, eval: true, branched: true, chunk: brT},
		// With lengths: each window's walk over its running rows, the
		// final states gathered after a layer's last window, and
		// Backward's products over the running rows packed.
		{layers: 2, dropout: 0.3, lengths: []int32{3, 5, 1}, tied: true, eval: true, branched: true},
		{layers: 3, lengths: []int32{2, 5, 4}, tied: true, wave: 2, eval: true, branched: true},
		{layers: 4, noBias: true, lengths: []int32{5, 1, 4}, eval: true, branched: true},
		// Windows of 2 steps in chunks of 5 and 3: Backward packs each
		// window's part of a chunk apart (batchShape.piece).
		{layers: 3, dropout: 0.3, lengths: []int32{3, 5, 1}, tied: true, eval: true, branched: true, chunk: brT},
		{layers: 2, lengths: []int32{2, 4, 4}, tied: true, eval: true, branched: true, chunk: 3},
		// A bidirectional layer's reverse direction on the branch, beside
		// the forward one (stack.forwardLayers).
		{layers: 2, bidir: true, dropout: 0.3, tied: true, eval: true, branched: true},
		{layers: 3, bidir: true, noBias: true, eval: true, branched: true},
		{layers: 2, bidir: true, dropout: 0.3, lengths: []int32{3, 5, 1}, tied: true, eval: true, branched: true},
		{layers: 3, bidir: true, lengths: []int32{2, 5, 4}, eval: true, branched: true},
	}
	d := testdevice.Open(t)
	if _, ok := d.(device.Brancher); !ok {
		t.Skipf("%s has no branches (device.Brancher)", d.Name())
	}
	for _, lstm := range []bool{true, false} {
		for _, c := range cases {
			name := fmt.Sprintf("lstm=%v/layers%d/dropout%v/bias=%v/tied=%v/bidirectional=%v/lengths=%v/wave%d/chunk%d",
				lstm, c.layers, c.dropout, !c.noBias, c.tied, c.bidir, c.lengths, c.wave, c.chunk)
			t.Run(name, func(t *testing.T) {
				want, _ := branchSteps(t, d, lstm, c, true)
				got, n := branchSteps(t, d, lstm, c, false)
				sameBits(t, got, want)
				if w := expectedBranch(lstm, c); c.chunk == 0 && n != w {
					t.Errorf("the branch was asked for %+v, want %+v", n, w)
				}
				if c.wave != 1 && n.forks == 0 {
					t.Error("no Fork: the forwards ran layer after layer")
				}
			})
		}
	}
}

// TestWaveEdgeRoom checks the memory of the wavefront's edges, which are
// views of each step's own buffers (layerGrads.kept): a 2-layer stack's
// Backward after a wavefront forward takes, beside what it takes after
// the same forward layer after layer (WaveWindows 1), only each layer's
// cell.edgeSize for kept edges (the LSTM none, the GRU the 6·B·H its
// cell gradient writes at the edge) and the GRU's third dh slot (T·B·H).
// Before 2026-11-29 the edges were taken as with Recompute, 4·B·H and
// 14·B·H a layer, and this failed by 2·64 and 2·64 float64s.
func TestWaveEdgeRoom(t *testing.T) {
	d := testdevice.Open(t)
	if _, ok := d.(device.Brancher); !ok {
		t.Skipf("%s has no branches (device.Brancher)", d.Name())
	}
	aligned := func(n int) int64 { return int64((n+arenaAlign-1)/arenaAlign*arenaAlign) * 8 }
	for _, lstm := range []bool{true, false} {
		t.Run(fmt.Sprintf("lstm=%v", lstm), func(t *testing.T) {
			grads := func(wave int) int64 {
				s, err := newStack(context.Background(), d, Config{Input: brI, Hidden: brH, Layers: 2, DType: device.Float64, WaveWindows: wave}, cellFor(lstm))
				must(t, err)
				defer func() { must(t, s.Close()) }()
				r := rand.New(rand.NewPCG(3, 4))
				_, err = s.Forward(Train, newBuf(t, d, randoms(r, brT*brB*brI)), brT, brB, nil)
				must(t, err)
				if got := s.WaveWindows(); (got > 1) != (wave != 1) {
					t.Fatalf("WaveWindows %d: the forward ran %d windows", wave, got)
				}
				_, err = s.Backward(newBuf(t, d, randoms(r, brT*brB*brH)))
				must(t, err)
				must(t, d.Synchronize())
				return s.grads.buf.Len()
			}
			waved, plain := grads(0), grads(1)
			BH := brB * brH
			want := 2 * aligned(0)
			if !lstm {
				want = 2*aligned(6*BH) + aligned(brT*BH)
			}
			if got := waved - plain; got != want {
				t.Errorf("the wavefront's Backward took %d bytes more than layer after layer, want %d", got, want)
			}
		})
	}
}
