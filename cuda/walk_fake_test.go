package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// TestFakeWalkLaunch checks how a walk reaches the driver, over the fake
// one (an H100's 132 multiprocessors and 227 KiB a block can opt into):
// at Open every walk kernel is opted into the opt-in limit less its static
// staging, 227840 bytes in float32 and 223744 in float64, and only where
// walks may run; each walk is one cooperative launch whose dynamic shared
// memory is its block's slice of W_hh (walkSlice), whose grid is cut to
// the multiprocessors, and whose occupancy the device asks the driver
// once a shape. On a GPU without cooperative launches, and with walks
// off, the walk is its per-step launches and nothing is opted in.
func TestFakeWalkLaunch(t *testing.T) {
	const T = 3
	for _, c := range []struct {
		name          string
		cfg           Config
		noCooperative bool
		hidden, batch int
		dt            device.DType
		// the walk's and the walk back's launch; a zero grid: per step
		grid, block  [3]uint32
		shared, back uint32
	}{
		// H = 1024: J = 8 (128 tiles of units), 16 rows a tile, 2 tiles of
		// rows in turn; 4·8·1028·4 = 131584 bytes (rows 1028 floats
		// apart, 257 vectors), back 4·1024·8·4 = 131072.
		{"LSTM1024", wideWalks, false, 1024, 32, device.Float32, [3]uint32{128, 1, 1}, [3]uint32{8, 16, 1}, 131584, 131072},
		// H = 256: J = 8 (32 tiles), 8 tiles of rows on 132/32 = 4 rows
		// of blocks; 4·8·260·4 = 33280 bytes, back 4·256·8·4 = 32768.
		{"LSTM256", walksOn, false, 256, 128, device.Float32, [3]uint32{32, 4, 1}, [3]uint32{8, 16, 1}, 33280, 32768},
		// float64, H = 400: J = 4 (100 tiles), 32 rows; 4·4·402·8 = 51456.
		{"LSTM400Float64", wideWalks, false, 400, 32, device.Float64, [3]uint32{100, 1, 1}, [3]uint32{4, 32, 1}, 51456, 51200},
		{"NoCooperative", wideWalks, true, 1024, 32, device.Float32, [3]uint32{}, [3]uint32{}, 0, 0},
		{"WalksOff", Config{}, false, 256, 32, device.Float32, [3]uint32{}, [3]uint32{}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAPI()
			f.noCooperative = c.noCooperative
			d := openFake(t, f, c.cfg)
			f.mu.Lock()
			opted := map[string]int{}
			for fn, n := range f.maxDynamic {
				opted[f.functions[fn]] = n
			}
			f.mu.Unlock()
			if c.grid[0] == 0 {
				if len(opted) != 0 {
					t.Errorf("opted in %v where walks never run", opted)
				}
			} else {
				for _, k := range walkKernels {
					for suffix, want := range map[string]int{"_f32": 227840, "_f64": 223744} {
						if name := "gc_" + kernelNames[k] + suffix; opted[name] != want {
							t.Errorf("%s opted into %d bytes of dynamic shared memory, want %d", name, opted[name], want)
						}
					}
				}
			}

			B, H, size := c.batch, c.hidden, c.dt.Size()
			buf := func(n int) device.Buffer {
				b, err := d.Alloc(int64(n)*size, device.Workspace)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			act := buf(4 * T * B * H)
			walk := device.LSTMWalk{DType: c.dt, Steps: T, Batch: B, Hidden: H, Pre: buf(4 * T * B * H), W: buf(4 * H * H),
				H0: buf(B * H), C0: buf(B * H), H: buf(T * B * H), C: buf(T * B * H), Act: act}
			back := device.LSTMGradWalk{DType: c.dt, Steps: T, Batch: B, Hidden: H, Act: act, C: walk.C,
				C0: walk.C0, DH: buf(T * B * H), DC: buf(B * H), DPre: act, W: walk.W, DPreIn: buf(4 * B * H)}
			w := d.Kernels().(device.Walker)
			f.mu.Lock()
			f.launches = nil
			f.mu.Unlock()
			for i := range 2 { // twice: the second asks no occupancy
				if err := w.LSTMWalk(walk); err != nil {
					t.Fatal(err)
				}
				if err := w.LSTMGradWalk(back); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					d.walks.mu.Lock()
					asked := len(d.walks.occ)
					d.walks.mu.Unlock()
					if want := map[bool]int{true: 2, false: 0}[c.grid[0] != 0]; asked != want {
						t.Errorf("asked the occupancy of %d shapes, want %d", asked, want)
					}
				}
			}
			f.mu.Lock()
			launches := f.launches
			f.mu.Unlock()
			if c.grid[0] == 0 {
				if len(launches) != 4*T {
					t.Fatalf("%d launches, want %d: the walks' per-step launches", len(launches), 4*T)
				}
				for _, l := range launches {
					if l.cooperative || l.shared != 0 {
						t.Errorf("per-step launch %s is cooperative %v with %d bytes of shared memory", l.name, l.cooperative, l.shared)
					}
				}
				return
			}
			if len(launches) != 4 {
				t.Fatalf("%d launches, want 4: the walk and the walk back, twice", len(launches))
			}
			sfx := map[device.DType]string{device.Float32: "_f32", device.Float64: "_f64"}[c.dt]
			for i, l := range launches {
				want := fakeLaunch{name: "gc_lstm_walk" + sfx, grid: c.grid, block: c.block, shared: c.shared, cooperative: true}
				if i%2 == 1 {
					want.name, want.shared = "gc_lstm_grad_walk"+sfx, c.back
				}
				got := fmt.Sprintf("%s %v %v %d %v", l.name, l.grid, l.block, l.shared, l.cooperative)
				if w := fmt.Sprintf("%s %v %v %d %v", want.name, want.grid, want.block, want.shared, want.cooperative); got != w {
					t.Errorf("launch %d: %s, want %s", i, got, w)
				}
			}
		})
	}
}

// TestFakeWalkNotCapturable checks a driver that would not record a
// cooperative launch in a stream capture (CUDA_ERROR_STREAM_CAPTURE_
// UNSUPPORTED, the capture invalidated, as CUDA does with an illegal call
// in a capture): the capture of a walk fails with an error matching
// device.ErrNotCapturable (the launch's own, and its invalidated end's), which the trainer and
// the sampler take to run their steps eagerly, and the same walk then
// runs eagerly as one cooperative launch.
func TestFakeWalkNotCapturable(t *testing.T) {
	f := newFakeAPI()
	f.noCooperativeCapture = true
	d := openFake(t, f, walksOn)
	const T, B, H = 3, 4, 32
	buf := func(n int) device.Buffer {
		b, err := d.Alloc(int64(n)*4, device.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	walk := device.LSTMWalk{DType: device.Float32, Steps: T, Batch: B, Hidden: H, Pre: buf(4 * T * B * H), W: buf(4 * H * H),
		H0: buf(B * H), C0: buf(B * H), H: buf(T * B * H), CLast: buf(B * H)}
	w := d.Kernels().(device.Walker)
	var launchErr error
	g, err := d.Capture(func() error {
		launchErr = w.LSTMWalk(walk)
		return launchErr
	})
	if !errors.Is(launchErr, device.ErrNotCapturable) {
		t.Errorf("the walk refused in the capture = %v, want an error matching ErrNotCapturable", launchErr)
	}
	if !errors.Is(err, device.ErrNotCapturable) {
		if g != nil {
			g.Close()
		}
		t.Fatalf("Capture of a walk the driver will not record = %v, want an error matching ErrNotCapturable", err)
	}
	f.mu.Lock()
	f.launches = nil
	f.mu.Unlock()
	if err := w.LSTMWalk(walk); err != nil {
		t.Fatalf("the walk run eagerly after the failed capture: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.launches) != 1 || !f.launches[0].cooperative {
		t.Errorf("the eager walk launched %+v, want one cooperative launch", f.launches)
	}
}
