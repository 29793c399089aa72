package rnn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

// chunksTol bounds the difference between a stack's results with its
// products over steps cut in chunks of a few steps and in one chunk: the
// same float64 operations, but for the products' row counts and the
// order in which the weight gradients' chunks are summed, so a few ulps
// (≲ 1e-15 relative); a step taken from the wrong chunk, a packed row
// put back in the wrong place or a piece left out differs by O(1).
// In float32 the cuts round differently at float32's 6e-8: on the CPU
// device the 37 float32 shapes below differ by more than 1e-7 in 15 and
// by at most 1e-6 in all (2026-11-29), so chunksTol32 leaves a margin of
// ten.
const (
	chunksTol   = 1e-12
	chunksTol32 = 1e-5
)

// TestChunksRandomShapes checks the products over steps (the input
// projection, the input gradient, the weight gradients; with lengths
// packed, one gather per chunk or piece) cut in chunks of 1 to 4 steps
// against the same stack's in one chunk, over 60 shapes drawn from a
// fixed seed: LSTM or GRU, 1 to 3 layers, uni- or bidirectional, 1 to 12
// steps, batches of 1 to 5, with or without lengths (any in [1, T]),
// float64 or float32 (the dtype of training on a GPU, whose fused cells
// and walks have kernels of their own), dropout, the wavefront's windows (WaveWindows 0, 1, 2 or 3, so that
// chunks and windows cut each other into pieces) and Recompute (whose
// segments are whole chunks). Two training steps, the state carried, and
// a NoGrad forward give the same outputs, final states and gradients
// within chunksTol (chunksTol32). rnn_test's TestPackedRandomShapes checks lengths
// against sequences alone at the device's own chunk, which on the CUDA
// device is 2,048 rows, one chunk for its shapes; this runs the chunked
// paths there too.
func TestChunksRandomShapes(t *testing.T) {
	d := testdevice.Open(t)
	r := rand.New(rand.NewPCG(31, 32))
	n := 60
	if testing.Short() || !testfull.On() { // the whole draw is the full suites'
		n = 10
	}
	for i := range n {
		c := chunkCase{lstm: r.IntN(2) == 0, layers: 1 + r.IntN(3), bidir: r.IntN(3) == 0, T: 1 + r.IntN(12),
			B: 1 + r.IntN(5), wave: []int{0, 1, 2, 3}[r.IntN(4)], recompute: []int{0, 0, RecomputeAuto, 2}[r.IntN(4)],
			dropout: []float64{0, 0.3}[r.IntN(2)], chunk: 1 + r.IntN(4), dt: []device.DType{device.Float64, device.Float32}[r.IntN(2)]}
		if r.IntN(4) > 0 {
			c.lengths = make([]int32, c.B)
			for b := range c.lengths {
				c.lengths[b] = 1 + int32(r.IntN(c.T))
			}
		}
		t.Run(fmt.Sprintf("%d/lstm=%v/layers%d/bidirectional=%v/T%d/B%d/lengths=%v/wave%d/recompute%d/dropout%v/chunk%d/%v",
			i, c.lstm, c.layers, c.bidir, c.T, c.B, c.lengths, c.wave, c.recompute, c.dropout, c.chunk, c.dt), func(t *testing.T) {
			want := chunkSteps(t, d, c, 1<<20)
			got := chunkSteps(t, d, c, c.chunk*c.B)
			tol := chunksTol
			if c.dt == device.Float32 {
				tol = chunksTol32
			}
			for k, name := range want.names {
				if j := farFrom(got.vals[k], want.vals[k], tol); j >= 0 {
					t.Errorf("%s: [%d] = %v in chunks of %d steps, want %v (one chunk)", name, j, got.vals[k][j], c.chunk, want.vals[k][j])
				}
			}
		})
	}
}

// chunkCase is a stack and a batch for TestChunksRandomShapes.
type chunkCase struct {
	lstm, bidir         bool
	layers, T, B, chunk int
	wave, recompute     int
	dropout             float64
	lengths             []int32
	dt                  device.DType
}

// chunkSteps runs two training steps of a new stack of case c on
// d, its products over steps cut in chunks of chunkRows rows, the state
// carried (detached) from the first to the second, then a NoGrad forward,
// and returns what they gave back; every input comes from one seed.
func chunkSteps(t *testing.T, d device.Device, c chunkCase, chunkRows int) branchResult {
	t.Helper()
	const I, H = 3, 4
	s, err := newStack(context.Background(), d, Config{Input: I, Hidden: H, Layers: c.layers, Dropout: c.dropout, Bidirectional: c.bidir,
		DType: c.dt, Seed: 7, Recompute: c.recompute, WaveWindows: c.wave}, cellFor(c.lstm))
	must(t, err)
	defer func() { must(t, s.Close()) }()
	s.chunkRows = chunkRows
	if steps := s.chunkSteps(c.B); chunkRows < 1<<20 && steps != c.chunk {
		t.Fatalf("chunks of %d rows over a batch of %d are %d steps, want %d", chunkRows, c.B, steps, c.chunk)
	}
	D := s.dirs()
	LD, T, B := c.layers*D, c.T, c.B
	r := rand.New(rand.NewPCG(8, 9))
	st, err := s.NewState(B)
	must(t, err)
	defer st.Free()
	upAs(t, d, c.dt, st.H(), randoms(r, LD*B*H))
	if c.lstm {
		upAs(t, d, c.dt, st.C(), randoms(r, LD*B*H))
	}
	var res branchResult
	for step := range 2 {
		x, dy := newBufAs(t, d, c.dt, randoms(r, T*B*I)), newBufAs(t, d, c.dt, randoms(r, T*B*D*H))
		must(t, s.params.ZeroGrad())
		st.Detach()
		y, err := s.ForwardLengths(Train, x, T, B, c.lengths, st)
		must(t, err)
		res.add(fmt.Sprintf("step %d output", step), downAs(t, d, c.dt, y, T*B*D*H))
		res.add(fmt.Sprintf("step %d h_n", step), downAs(t, d, c.dt, st.H(), LD*B*H))
		upAs(t, d, c.dt, st.GradH(), randoms(r, LD*B*H))
		if c.lstm {
			res.add(fmt.Sprintf("step %d c_n", step), downAs(t, d, c.dt, st.C(), LD*B*H))
			upAs(t, d, c.dt, st.GradC(), randoms(r, LD*B*H))
		}
		dx, err := s.Backward(dy)
		must(t, err)
		res.add(fmt.Sprintf("step %d dx", step), downAs(t, d, c.dt, dx, T*B*I))
		for p := range s.params.All() {
			res.add(fmt.Sprintf("step %d grad %s", step, p.Name), downAs(t, d, c.dt, p.Grad, p.Len()))
		}
		res.add(fmt.Sprintf("step %d dh_0", step), downAs(t, d, c.dt, st.GradH(), LD*B*H))
		if c.lstm {
			res.add(fmt.Sprintf("step %d dc_0", step), downAs(t, d, c.dt, st.GradC(), LD*B*H))
		}
		must(t, d.Free(x))
		must(t, d.Free(dy))
	}
	x := newBufAs(t, d, c.dt, randoms(r, T*B*I))
	y, err := s.ForwardLengths(NoGrad, x, T, B, c.lengths, st)
	must(t, err)
	res.add("NoGrad output", downAs(t, d, c.dt, y, T*B*D*H))
	res.add("NoGrad h_n", downAs(t, d, c.dt, st.H(), LD*B*H))
	if c.lstm {
		res.add("NoGrad c_n", downAs(t, d, c.dt, st.C(), LD*B*H))
	}
	must(t, d.Free(x))
	return res
}

// farFrom is the first index where got differs from want by more than
// tol relative to the larger of 1 and |want|, -1 for none (a length
// mismatch differs at the shorter length; NaN differs from everything).
func farFrom(got, want []float64, tol float64) int {
	for i := range min(len(got), len(want)) {
		if !(math.Abs(got[i]-want[i]) <= tol*math.Max(1, math.Abs(want[i]))) {
			return i
		}
	}
	if len(got) != len(want) {
		return min(len(got), len(want))
	}
	return -1
}

// upAs, downAs and newBufAs are up, down and newBuf for buffers of dt,
// float64 or float32, the values float64 on the host either way.
func upAs(t *testing.T, d device.Device, dt device.DType, b device.Buffer, v []float64) {
	t.Helper()
	if dt == device.Float64 {
		up(t, d, b, v)
		return
	}
	v32 := make([]float32, len(v))
	for i, x := range v {
		v32[i] = float32(x)
	}
	must(t, device.UploadSlice(d, b.Slice(0, int64(len(v))*4), v32))
}

func downAs(t *testing.T, d device.Device, dt device.DType, b device.Buffer, n int) []float64 {
	t.Helper()
	if dt == device.Float64 {
		return down(t, d, b, n)
	}
	v32 := make([]float32, n)
	must(t, device.DownloadSlice(d, v32, b.Slice(0, int64(n)*4)))
	v := make([]float64, n)
	for i, x := range v32 {
		v[i] = float64(x)
	}
	return v
}

func newBufAs(t *testing.T, d device.Device, dt device.DType, v []float64) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(v))*dt.Size(), device.Workspace)
	must(t, err)
	upAs(t, d, dt, b, v)
	return b
}
