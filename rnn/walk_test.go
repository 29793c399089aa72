package rnn

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

// openWalks opens two CUDA devices for TestWalksSameBits: the test
// device's GPU when the tests run on one (a real GPU, or the emulator
// when GOCURRENT_TEST_DEVICE=cuda names it), else the emulator, once with
// the walks off and once with them on up to the fused kernels' bound.
func openWalks(t *testing.T) (steps, walks *cuda.Device) {
	var cfg cuda.Config
	if strings.HasPrefix(testdevice.Name(), "cuda") {
		cfg = testdevice.CUDAConfig(t)
	} else {
		lib := cudaemu.ForTest(t)
		cfg.DriverLibrary, cfg.BLASLibrary = lib.Path(), lib.Path()
	}
	open := func(walk int) *cuda.Device {
		c := cfg
		c.WalkCellsUpTo = walk
		d, err := cuda.Open(c)
		must(t, err)
		t.Cleanup(func() { must(t, d.Close()) })
		return d
	}
	return open(-1), open(256)
}

// TestWalksSameBits: a stack's training steps (forward and Backward,
// twice) and a NoGrad forward after them give the same bits, every
// output, final state, gradient and updated value, through the walks
// (device.Walker: a layer's window of steps as one call, and its walk
// back) as through the per-step calls (perStep); with lengths too, where
// each step of a walk covers the sequences still running, a reverse
// walk's sequences start at their own last step (from their initial
// state, put where they read it before the walk, or from zeros without a
// state), the forward's final states are kept after the walk from where
// it leaves them (without grad, the one slot it carries c in), and the
// longest sequence may stop short of the batch's steps (lengths 3, 4 and
// 1 of 5). On the CPU the walks are the per-step calls in another order;
// on the CUDA device (the emulator, or the test GPU) they are the
// persistent kernels (cuda.Config.WalkCellsUpTo), against the per-step
// launches of a device without them, and they must launch fewer kernels,
// or the walks did not run.
func TestWalksSameBits(t *testing.T) {
	host, err := cpu.Open(cpu.Config{})
	must(t, err)
	t.Cleanup(func() { must(t, host.Close()) })
	steps, walks := openWalks(t)
	cases := []branchCase{
		{layers: 2, tied: true},
		{layers: 2, lengths: []int32{3, 5, 1}, tied: true},
		{layers: 2, lengths: []int32{3, 4, 1}, dropout: 0.3},
		{layers: 2, bidir: true, lengths: []int32{3, 4, 1}, tied: true},
		{layers: 2, bidir: true, lengths: []int32{2, 4, 4}},
		{layers: 2, lengths: []int32{4, 2, 5}, recompute: 2, tied: true},
		{layers: 3, bidir: true, lengths: []int32{3, 5, 1}, recompute: 2, tied: true},
	}
	for _, on := range []struct {
		name        string
		want, got   device.Device
		fewerLaunch bool
	}{
		{"cpu", host, host, false},
		{"cuda", steps, walks, true},
	} {
		for _, lstm := range []bool{true, false} {
			for _, c := range cases {
				c.eval = true
				name := fmt.Sprintf("%s/lstm=%v/layers%d/dropout%v/bidirectional=%v/lengths=%v/recompute%d/tied=%v",
					on.name, lstm, c.layers, c.dropout, c.bidir, c.lengths, c.recompute, c.tied)
				t.Run(name, func(t *testing.T) {
					s0, w0 := steps.Counts(), walks.Counts()
					want, _ := branchSteps(t, on.want, lstm, stepwise(c), true)
					got, _ := branchSteps(t, on.got, lstm, c, true)
					if len(got.names) != len(want.names) {
						t.Fatalf("values %v through the walks, want %v", got.names, want.names)
					}
					for i, name := range want.names {
						if j := firstDiff(got.vals[i], want.vals[i]); j >= 0 {
							t.Errorf("%s: [%d] = %v through the walks, want %v (the per-step calls)", name, j, got.vals[i][j], want.vals[i][j])
						}
					}
					if on.fewerLaunch {
						ns, nw := steps.Counts().Sub(s0), walks.Counts().Sub(w0)
						if nw.Launches >= ns.Launches {
							t.Errorf("%d launches through the walks, %d through the per-step calls: the walks did not run", nw.Launches, ns.Launches)
						}
					}
				})
			}
		}
	}
}

// stepwise is c run step by step.
func stepwise(c branchCase) branchCase {
	c.stepwise = true
	return c
}

// TestWalksRandomShapes is TestWalksSameBits over 40 shapes drawn from a
// fixed seed, as TestChunksRandomShapes draws them (LSTM or GRU, 1 to 3
// layers, uni- or bidirectional, 1 to 12 steps, batches of 1 to 5, with
// or without lengths, float64 or float32, dropout, the wavefront's
// windows, Recompute), with the products over steps in one chunk or in
// chunks of 1 to 4 steps: on the CUDA device the persistent walks give
// the per-step launches' bits of two training steps and a NoGrad forward.
// The walks' kernels cover each step's running rows, start reverse walks
// where sequences end and keep final states where the walks leave them:
// the fixed cases pin the shapes known to matter, these look for the
// others. Together the shapes must launch fewer kernels through the
// walks, or the walks did not run.
func TestWalksRandomShapes(t *testing.T) {
	steps, walks := openWalks(t)
	r := rand.New(rand.NewPCG(41, 42))
	n := 40
	if testing.Short() || !testfull.On() { // the whole draw is the full suites'
		n = 8
	}
	var ns, nw int64
	for i := range n {
		c := chunkCase{lstm: r.IntN(2) == 0, layers: 1 + r.IntN(3), bidir: r.IntN(3) == 0, T: 1 + r.IntN(12),
			B: 1 + r.IntN(5), wave: []int{0, 1, 2, 3}[r.IntN(4)], recompute: []int{0, 0, RecomputeAuto, 2}[r.IntN(4)],
			dropout: []float64{0, 0.3}[r.IntN(2)], chunk: r.IntN(5), dt: []device.DType{device.Float64, device.Float32}[r.IntN(2)]}
		if r.IntN(4) > 0 {
			c.lengths = make([]int32, c.B)
			for b := range c.lengths {
				c.lengths[b] = 1 + int32(r.IntN(c.T))
			}
		}
		rows := c.chunk * c.B
		if c.chunk == 0 {
			rows = 1 << 20
		}
		t.Run(fmt.Sprintf("%d/lstm=%v/layers%d/bidirectional=%v/T%d/B%d/lengths=%v/wave%d/recompute%d/dropout%v/chunk%d/%v",
			i, c.lstm, c.layers, c.bidir, c.T, c.B, c.lengths, c.wave, c.recompute, c.dropout, c.chunk, c.dt), func(t *testing.T) {
			s0, w0 := steps.Counts(), walks.Counts()
			want := chunkSteps(t, steps, c, rows)
			got := chunkSteps(t, walks, c, rows)
			ns += steps.Counts().Sub(s0).Launches
			nw += walks.Counts().Sub(w0).Launches
			for k, name := range want.names {
				if j := firstDiff(got.vals[k], want.vals[k]); j >= 0 {
					t.Errorf("%s: [%d] = %v through the walks, want %v (the per-step launches)", name, j, got.vals[k][j], want.vals[k][j])
				}
			}
		})
	}
	if nw >= ns {
		t.Errorf("%d launches through the walks, %d through the per-step launches: the walks did not run", nw, ns)
	}
}
