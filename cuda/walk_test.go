package cuda

import (
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/devicetest"
)

// walksOn is a Config that runs every walk it can as the persistent
// kernel (up to the fused kernels' bound, 256 by default).
var walksOn = Config{WalkCellsUpTo: 1 << 20}

// TestEmulatedWalkConformance runs the conformance suite's walks (the
// walk against its per-step calls, to the bit, and against a float64
// reference) over the persistent walk kernels, on the emulated GPU's 132
// multiprocessors and on 2, where the grid is cut to the multiprocessors
// and each block takes several tiles of rows in turn (or, with more
// tiles of units than multiprocessors, the walk runs step by step). The
// kernels' grid barrier runs as the emulator's: every thread of the grid
// waits until all have arrived (internal/cudaemu).
func TestEmulatedWalkConformance(t *testing.T) {
	for _, sms := range []string{"", "2"} {
		t.Run("Multiprocessors="+sms, func(t *testing.T) {
			t.Setenv("GOCURRENT_EMU_MULTIPROCESSORS", sms)
			devicetest.RunGroups(t, func(t testing.TB) device.Device { return openEmulated(t, walksOn) },
				func(group string) bool { return group == "Walks" })
		})
	}
}

// TestEmulatedWalkLaunches checks which path a walk takes, by what it
// launches (Counts): one launch of the persistent kernel where
// Config.WalkCellsUpTo and the GPU's multiprocessors allow, on the compute
// stream and on a branch (each with a barrier of its own); the per-step
// calls otherwise: without the setting, above the fused kernels' bound
// (a GEMM and the cell a step), and with more tiles of units (32 units
// each) than multiprocessors. The walks back as the walks, but for a
// first step walked back given no product, which is the plain cell
// gradient, no GEMM.
func TestEmulatedWalkLaunches(t *testing.T) {
	const B, T = 3, 5
	for _, c := range []struct {
		cfg    Config
		sms    string
		hidden int
		want   device.Counts
	}{
		{walksOn, "", 33, device.Counts{Launches: 1, Calls: 1}},
		{walksOn, "", 256, device.Counts{Launches: 1, Calls: 1}},
		{Config{WalkCellsUpTo: 64}, "", 64, device.Counts{Launches: 1, Calls: 1}},
		{Config{WalkCellsUpTo: 64}, "", 65, device.Counts{Launches: T, Calls: T}},
		{Config{}, "", 33, device.Counts{Launches: T, Calls: T}},
		{walksOn, "", 257, device.Counts{Launches: T, GEMMs: T, Calls: 2 * T}},
		{Config{WalkCellsUpTo: 1 << 20, FuseCellsUpTo: 16}, "", 33, device.Counts{Launches: T, GEMMs: T, Calls: 2 * T}},
		{walksOn, "2", 64, device.Counts{Launches: 1, Calls: 1}},
		{walksOn, "2", 65, device.Counts{Launches: T, Calls: T}},
	} {
		name := fmt.Sprintf("WalkCellsUpTo=%d/FuseCellsUpTo=%d/Multiprocessors=%s/Hidden=%d", c.cfg.WalkCellsUpTo, c.cfg.FuseCellsUpTo, c.sms, c.hidden)
		t.Run(name, func(t *testing.T) {
			t.Setenv("GOCURRENT_EMU_MULTIPROCESSORS", c.sms)
			d := openEmulated(t, c.cfg)
			H := c.hidden
			buf := func(n int) device.Buffer {
				b, err := d.Alloc(int64(n)*4, device.Workspace)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			w3, w4 := buf(3*H*H), buf(4*H*H)
			lstm := device.LSTMWalk{DType: device.Float32, Steps: T, Batch: B, Hidden: H, Pre: buf(4 * T * B * H), W: w4,
				H0: buf(B * H), C0: buf(B * H), H: buf(T * B * H), CLast: buf(B * H)}
			gru := device.GRUWalk{DType: device.Float32, Steps: T, Batch: B, Hidden: H, Reverse: true, XPre: buf(3 * T * B * H),
				HPre: buf(3 * B * H), W: w3, H0: buf(B * H), H: buf(T * B * H)}
			act := buf(4 * T * B * H)
			lstmBack := device.LSTMGradWalk{DType: device.Float32, Steps: T, Batch: B, Hidden: H, Act: act, C: buf(T * B * H),
				C0: buf(B * H), DH: buf(T * B * H), DC: buf(B * H), DPre: act, W: w4, DPreIn: buf(4 * B * H)}
			gruBack := device.GRUGradWalk{DType: device.Float32, Steps: T, Batch: B, Hidden: H, Reverse: true, Act: buf(4 * T * B * H),
				H: buf(T * B * H), H0: buf(B * H), DH: buf(T * B * H), DH0: buf(B * H), DXPre: buf(3 * T * B * H),
				DHPre: buf(3 * T * B * H), W: w3}
			br, err := d.Branch()
			if err != nil {
				t.Fatal(err)
			}
			defer br.Close()
			for _, on := range []struct {
				name string
				k    device.Kernels
			}{{"compute", d.Kernels()}, {"branch", br.Kernels()}} {
				w := on.k.(device.Walker)
				if on.name == "branch" {
					if err := br.Fork(); err != nil {
						t.Fatal(err)
					}
				}
				for _, call := range []struct {
					name string
					do   func() error
				}{
					{"LSTMWalk", func() error { return w.LSTMWalk(lstm) }},
					{"GRUWalk", func() error { return w.GRUWalk(gru) }},
					{"LSTMGradWalk", func() error { return w.LSTMGradWalk(lstmBack) }},
					{"GRUGradWalk", func() error { return w.GRUGradWalk(gruBack) }},
				} {
					want := c.want
					if call.name == "GRUGradWalk" && want.Launches == T && want.GEMMs > 0 {
						// Its first step walked back has no product (no
						// DHPreIn): the plain cell gradient, no GEMM.
						want.GEMMs, want.Calls = T-1, 2*T-1
					}
					before := d.Counts()
					if err := call.do(); err != nil {
						t.Fatalf("%s on the %s: %v", call.name, on.name, err)
					}
					if got := d.Counts().Sub(before); got != want {
						t.Errorf("%s on the %s counted %+v, want %+v", call.name, on.name, got, want)
					}
				}
				if on.name == "branch" {
					if err := br.Join(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := d.Synchronize(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWalkConformance runs the conformance suite's walks with every walk
// it can as the persistent kernel (Config.WalkCellsUpTo): its blocks
// resident together and meeting at the grid barrier between steps, which
// only a GPU runs as it is (the emulator's barrier is its scheduler's),
// against the per-step launches to the bit. It is the package's last
// test (this file sorts last), so that a walk that faults or traps on a
// GPU, which kills the context, fails no other test of the GPU kit's
// tests stage.
func TestWalkConformance(t *testing.T) {
	cfg := gpuConfig()
	cfg.WalkCellsUpTo = 1 << 20
	openGPU(t, cfg)
	devicetest.RunGroups(t, func(t testing.TB) device.Device {
		d, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}, func(group string) bool { return group == "Walks" })
}
