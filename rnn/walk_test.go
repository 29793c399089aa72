package rnn

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
	"github.com/gocurrent/gocurrent/internal/testdevice"
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
