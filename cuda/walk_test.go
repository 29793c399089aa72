package cuda

import (
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/devicetest"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

// walksOn is a Config that runs every walk it can as the persistent
// kernel (up to the fused kernels' bound, 256 by default); wideWalks
// fuses and walks at every hidden size, as far as the walks' slices of W
// fit the GPU.
var (
	walksOn   = Config{WalkCellsUpTo: 1 << 20}
	wideWalks = Config{WalkCellsUpTo: 1 << 20, FuseCellsUpTo: 1 << 20}
)

// TestEmulatedWalkConformance runs the conformance suite's walks (the
// walk against its per-step calls, to the bit, and against a float64
// reference) over the persistent walk kernels: on the emulated GPU's 132
// multiprocessors with the fused kernels' default bound (hidden 256: the
// tiles an H100 gets); on 2, where the grid is cut to the
// multiprocessors and each block takes several tiles of rows in turn (or,
// with more tiles of units than multiprocessors, the walk runs step by
// step); and on 16 with every hidden size fused, where the walks at
// hidden 257 and 400 run too: the LSTM's in float32 as 9 and 13 blocks of
// 32 units whose slices of W, 133120 and 206848 bytes, need the opt-in
// (the GRU's too, and in float64 the GRU's at 257). The
// per-step calls the walks stand for above the fused bound run in
// TestEmulatedConformance (walks off). The kernels' grid barrier runs as
// the emulator's: every thread of the grid waits until all have arrived
// (internal/cudaemu).
func TestEmulatedWalkConformance(t *testing.T) {
	testfull.Skip(t, "the walks' results in three launch shapes (TestEmulatedWalkLaunches launches each walk kernel, and the walks are off by default)")
	for _, c := range []struct {
		name, sms string
		cfg       Config
	}{
		{"Multiprocessors=", "", walksOn},
		{"Multiprocessors=2", "2", walksOn},
		{"Multiprocessors=16/FusedEverywhere", "16", wideWalks},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOCURRENT_EMU_MULTIPROCESSORS", c.sms)
			devicetest.RunGroups(t, func(t testing.TB) device.Device { return openEmulated(t, c.cfg) },
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
// each) than multiprocessors; and at hidden 100 on 4 multiprocessors,
// where only tiles of 32 units fit them and a walk block's slice of W
// then takes more than 48 KiB of shared memory (4·32·100·4 = 51200
// bytes). The walks back as the walks, but for a
// first step walked back given no product, which is the plain cell
// gradient, no GEMM. With lengths (each step's running rows) the same:
// one launch with the walks, a launch a step without.
func TestEmulatedWalkLaunches(t *testing.T) {
	const B, T = 3, 5
	for _, c := range []struct {
		cfg     Config
		sms     string
		hidden  int
		lengths bool
		want    device.Counts
	}{
		{walksOn, "", 33, false, device.Counts{Launches: 1, Calls: 1}},
		{walksOn, "", 256, false, device.Counts{Launches: 1, Calls: 1}},
		{Config{WalkCellsUpTo: 64}, "", 64, false, device.Counts{Launches: 1, Calls: 1}},
		{Config{WalkCellsUpTo: 64}, "", 65, false, device.Counts{Launches: T, Calls: T}},
		{Config{}, "", 33, false, device.Counts{Launches: T, Calls: T}},
		{walksOn, "", 257, false, device.Counts{Launches: T, GEMMs: T, Calls: 2 * T}},
		{Config{WalkCellsUpTo: 1 << 20, FuseCellsUpTo: 16}, "", 33, false, device.Counts{Launches: T, GEMMs: T, Calls: 2 * T}},
		{walksOn, "2", 64, false, device.Counts{Launches: 1, Calls: 1}},
		{walksOn, "2", 65, false, device.Counts{Launches: T, Calls: T}},
		{walksOn, "4", 100, false, device.Counts{Launches: 1, Calls: 1}},
		{walksOn, "", 33, true, device.Counts{Launches: 1, Calls: 1}},
		{Config{}, "", 33, true, device.Counts{Launches: T, Calls: T}},
	} {
		name := fmt.Sprintf("WalkCellsUpTo=%d/FuseCellsUpTo=%d/Multiprocessors=%s/Hidden=%d", c.cfg.WalkCellsUpTo, c.cfg.FuseCellsUpTo, c.sms, c.hidden)
		if c.lengths {
			name += "/Lengths"
		}
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
			if c.lengths {
				// Sequences of lengths 5, 4 and 2: the rows each step
				// runs, on the host and on the device.
				rows := []int{3, 3, 2, 2, 1}
				at := buf(T)
				b := make([]byte, 0, 4*T)
				for _, n := range rows {
					b = binary.LittleEndian.AppendUint32(b, uint32(n))
				}
				if err := d.Upload(at, b); err != nil {
					t.Fatal(err)
				}
				lstm.Rows, lstm.RowsAt = rows, at
				gru.Rows, gru.RowsAt = rows, at
				lstmBack.Rows, lstmBack.RowsAt, lstmBack.NextBatch = rows, at, 1
				gruBack.Rows, gruBack.RowsAt = rows, at
			}
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
// the static shared memory of every walk kernel in the PTX is the
// staging walkStaging counts (the rest of a block's shared memory is its
// slice of W, dynamic), and walkTile takes the J worked by hand below
// (slices of G·J·walkStride·size bytes) for an H100's 132
// multiprocessors and 227 KiB a block can opt into, less the staging:
// 227840 bytes in float32, 223744 in float64. walkStride's rows are
// checked against cells.cu's through the emulated walks.
func TestWalkTile(t *testing.T) {
	src, err := os.ReadFile("kernels/cells.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"GC_WALK_BMAX": walkMaxRows, "GC_WALK_K": walkK, "GC_FUSE_THREADS": fuseThreads} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindSubmatch(src)
		if m == nil {
			t.Errorf("cells.cu defines no %s", name)
		} else if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("cells.cu's %s = %d, the launcher's %d", name, got, want)
		}
	}
	ptx, err := os.ReadFile("kernels/cells.compute_80.ptx")
	if err != nil {
		t.Fatal(err)
	}
	static := ptxStaticShared(string(ptx))
	for _, k := range walkKernels {
		for ti, dt := range []device.DType{device.Float32, device.Float64} {
			name := "gc_" + kernelNames[k] + []string{"_f32", "_f64"}[ti]
			if got, ok := static[name]; !ok {
				t.Errorf("the PTX has no entry %s", name)
			} else if got != walkStaging(dt) {
				t.Errorf("%s has %d bytes of static shared memory, walkStaging %d", name, got, walkStaging(dt))
			}
		}
	}
	if !strings.Contains(string(ptx), ".extern .shared .align 16 .b8 gc_dynamic_shared[];") {
		t.Error("the PTX declares no gc_dynamic_shared")
	}

	h100 := func(dt device.DType) int64 { return 227<<10 - walkStaging(dt) }
	for _, c := range []struct {
		hidden, gates int
		dt            device.DType
		budget        int64
		sms           int
		j             int // 0: none fits
	}{
		// Slices of at most walkSmallSlice (39936), the largest J first.
		// Strides: hidden in whole vectors (4 floats, 2 doubles), an odd
		// number of them.
		{5, 4, device.Float64, h100(device.Float64), 132, 8},   // fuseTile's 8: 4·8·6·8 = 1536
		{64, 4, device.Float32, h100(device.Float32), 132, 32}, // 4·32·68·4 = 34816
		{64, 4, device.Float64, h100(device.Float64), 132, 16}, // 4·32·66·8 = 67584; 4·16·66·8 = 33792
		{256, 4, device.Float32, h100(device.Float32), 132, 8}, // 4·16·260·4 = 66560; 4·8·260·4 = 33280
		{256, 3, device.Float32, h100(device.Float32), 132, 8}, // 3·16·260·4 = 49920; 3·8·260·4 = 24960
		{256, 4, device.Float64, h100(device.Float64), 132, 4}, // 4·8·258·8 = 66048; 4·4·258·8 = 33024
		{310, 4, device.Float64, h100(device.Float64), 132, 4}, // 4·4·310·8 = 39680, 78 tiles
		// Else the smallest J whose tiles fit 132 multiprocessors.
		{311, 4, device.Float64, h100(device.Float64), 132, 4},   // 4·4·314·8 = 40192, 78 tiles
		{623, 4, device.Float32, h100(device.Float32), 132, 8},   // J = 4: 156 tiles; 4·8·628·4 = 80384, 78 tiles
		{1024, 4, device.Float32, h100(device.Float32), 132, 8},  // 4·8·1028·4 = 131584, 128 tiles
		{1056, 4, device.Float32, h100(device.Float32), 132, 8},  // 4·8·1060·4 = 135680, 132 tiles
		{1057, 4, device.Float32, h100(device.Float32), 132, 0},  // J = 8: 133 tiles; 4·16·1060·4 = 271360
		{1024, 3, device.Float32, h100(device.Float32), 132, 8},  // 3·8·1028·4 = 98688
		{1100, 3, device.Float32, h100(device.Float32), 132, 16}, // J = 8: 138 tiles; 3·16·1100·4 = 211200
		{1180, 3, device.Float32, h100(device.Float32), 132, 16}, // 3·16·1180·4 = 226560
		{1181, 3, device.Float32, h100(device.Float32), 132, 0},  // 3·16·1188·4 = 228096
		{874, 4, device.Float64, h100(device.Float64), 132, 8},   // J = 4: 219 tiles; 4·8·874·8 = 223744
		{875, 4, device.Float64, h100(device.Float64), 132, 0},   // 4·8·878·8 = 224768
		{1056, 3, device.Float64, h100(device.Float64), 132, 8},  // 3·8·1058·8 = 203136, 132 tiles
		{1057, 3, device.Float64, h100(device.Float64), 132, 0},  // J = 8: 133 tiles; 3·16·1058·8 = 406272
		// A GPU without the opt-in (48 KiB a block, less the staging).
		{256, 4, device.Float32, 48<<10 - walkStaging(device.Float32), 132, 8}, // 33280
		{623, 4, device.Float32, 48<<10 - walkStaging(device.Float32), 132, 0}, // J = 4: 156 tiles; 80384 > 44544
		// Few multiprocessors.
		{64, 4, device.Float32, h100(device.Float32), 2, 32}, // 2 tiles
		{65, 4, device.Float32, h100(device.Float32), 2, 0},  // 3 tiles of 32
		// No budget: walks off.
		{5, 4, device.Float32, 0, 132, 0},
	} {
		j, b, fits := walkTile(c.hidden, c.gates, c.dt, c.budget, c.sms)
		if want := c.j != 0; fits != want || j != c.j || (fits && j*b != fuseThreads) {
			t.Errorf("walkTile(%d, %d, %v, %d, %d) = %d, %d, %v; want J = %d (0: none)", c.hidden, c.gates, c.dt, c.budget, c.sms, j, b, fits, c.j)
		}
	}
}

// ptxStaticShared sums the static shared memory each .entry of a PTX
// module declares (".shared ... name[bytes];" in its body), by name.
func ptxStaticShared(ptx string) map[string]int64 {
	out := map[string]int64{}
	entry := regexp.MustCompile(`\.entry (\w+)\(`)
	decl := regexp.MustCompile(`^\s+\.shared \.align \d+ \.b8 \w+\[(\d+)\];`)
	var name string
	for _, line := range strings.Split(ptx, "\n") {
		if m := entry.FindStringSubmatch(line); m != nil {
			name = m[1]
			out[name] = 0
		} else if m := decl.FindStringSubmatch(line); m != nil && name != "" {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			out[name] += n
		}
	}
	return out
}

// TestWalkConformance runs the conformance suite's walks with every walk
// it can as the persistent kernel (Config.WalkCellsUpTo): its blocks
// resident together and meeting at the grid barrier between steps, which
// only a GPU runs as it is (the emulator's barrier is its scheduler's),
// against the per-step launches to the bit: with the fused kernels'
// default bound, and fused everywhere (the walks at hidden 257 and 400
// too, the latter's blocks in float64 opted into more than 48 KiB of
// shared memory). It is the package's last
// test (this file sorts last), so that a walk that faults or traps on a
// GPU, which kills the context, fails no other test of the GPU kit's
// tests stage.
func TestWalkConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"FuseCellsUpTo=default", walksOn}, {"FusedEverywhere", wideWalks}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := gpuConfig()
			cfg.WalkCellsUpTo, cfg.FuseCellsUpTo = c.cfg.WalkCellsUpTo, c.cfg.FuseCellsUpTo
			openGPU(t, cfg)
			devicetest.RunGroups(t, func(t testing.TB) device.Device {
				d, err := Open(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}, func(group string) bool { return group == "Walks" })
		})
	}
}
