package cuda

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
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

// TestWalkTile checks the walks' tiles: the Go constants are cells.cu's,
// and walkTile takes the largest J whose slice of W fits, at shapes worked
// by hand from GC_WALK_W_BYTES = 39936 (G·J·(hidden|1)·size bytes).
func TestWalkTile(t *testing.T) {
	src, err := os.ReadFile("kernels/cells.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"GC_WALK_W_BYTES": walkWBytes, "GC_WALK_BMAX": walkMaxRows,
		"GC_FUSE_THREADS": fuseThreads} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindSubmatch(src)
		if m == nil {
			t.Errorf("cells.cu defines no %s", name)
		} else if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("cells.cu's %s = %d, the launcher's %d", name, got, want)
		}
	}
	for _, c := range []struct {
		hidden, gates int
		dt            device.DType
		j             int // 0: none fits
	}{
		{5, 4, device.Float64, 8},   // fuseTile's 8: 4·8·5·8 = 1280
		{64, 4, device.Float32, 32}, // 4·32·65·4 = 33280
		{64, 4, device.Float64, 16}, // 4·32·65·8 = 66560 > 39936; 4·16·65·8 = 33280
		{256, 4, device.Float32, 8}, // 4·16·257·4 = 65792; 4·8·257·4 = 32896
		{256, 3, device.Float32, 8}, // 3·16·257·4 = 49344; 3·8·257·4 = 24672
		{256, 4, device.Float64, 4}, // 4·8·257·8 = 65792; 4·4·257·8 = 32896
		{623, 4, device.Float32, 4}, // 4·4·623·4 = 39872
		{624, 4, device.Float32, 0}, // 4·4·625·4 = 40000
		{311, 4, device.Float64, 4}, // 4·4·311·8 = 39808
		{312, 4, device.Float64, 0}, // 4·4·313·8 = 40064
		{831, 3, device.Float32, 4}, // 3·4·831·4 = 39888
		{832, 3, device.Float32, 0}, // 3·4·833·4 = 39984
		{415, 3, device.Float64, 4}, // 3·4·415·8 = 39840
		{416, 3, device.Float64, 0}, // 3·4·417·8 = 40032
	} {
		j, b, fits := walkTile(c.hidden, c.gates, c.dt)
		if want := c.j != 0; fits != want || j != c.j || (fits && j*b != fuseThreads) {
			t.Errorf("walkTile(%d, %d, %v) = %d, %d, %v; want J = %d (0: none)", c.hidden, c.gates, c.dt, j, b, fits, c.j)
		}
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
