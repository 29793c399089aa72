package rnn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// chunksTol bounds the difference between a stack's results with its
// products over steps cut in chunks of a few steps and in one chunk: the
// same float64 operations, but for the products' row counts and the
// order in which the weight gradients' chunks are summed, so a few ulps
// (≲ 1e-15 relative); a step taken from the wrong chunk, a packed row
// put back in the wrong place or a piece left out differs by O(1).
const chunksTol = 1e-12

// TestChunksRandomShapes checks the products over steps (the input
// projection, the input gradient, the weight gradients; with lengths
// packed, one gather per chunk or piece) cut in chunks of 1 to 4 steps
// against the same stack's in one chunk, over 60 shapes drawn from a
// fixed seed: LSTM or GRU, 1 to 3 layers, uni- or bidirectional, 1 to 12
// steps, batches of 1 to 5, with or without lengths (any in [1, T]),
// dropout, the wavefront's windows (WaveWindows 0, 1, 2 or 3, so that
// chunks and windows cut each other into pieces) and Recompute (whose
// segments are whole chunks). Two training steps, the state carried, and
// a NoGrad forward give the same outputs, final states and gradients
// within chunksTol. rnn_test's TestPackedRandomShapes checks lengths
// against sequences alone at the device's own chunk, which on the CUDA
// device is 2,048 rows, one chunk for its shapes; this runs the chunked
// paths there too.
func TestChunksRandomShapes(t *testing.T) {
	d := testdevice.Open(t)
	r := rand.New(rand.NewPCG(31, 32))
	n := 60
	if testing.Short() {
		n = 10
	}
	for i := range n {
		c := chunkCase{lstm: r.IntN(2) == 0, layers: 1 + r.IntN(3), bidir: r.IntN(3) == 0, T: 1 + r.IntN(12),
			B: 1 + r.IntN(5), wave: []int{0, 1, 2, 3}[r.IntN(4)], recompute: []int{0, 0, RecomputeAuto, 2}[r.IntN(4)],
			dropout: []float64{0, 0.3}[r.IntN(2)], chunk: 1 + r.IntN(4)}
		if r.IntN(4) > 0 {
			c.lengths = make([]int32, c.B)
			for b := range c.lengths {
				c.lengths[b] = 1 + int32(r.IntN(c.T))
			}
		}
		t.Run(fmt.Sprintf("%d/lstm=%v/layers%d/bidirectional=%v/T%d/B%d/lengths=%v/wave%d/recompute%d/dropout%v/chunk%d",
			i, c.lstm, c.layers, c.bidir, c.T, c.B, c.lengths, c.wave, c.recompute, c.dropout, c.chunk), func(t *testing.T) {
			want := chunkSteps(t, d, c, 1<<20)
			got := chunkSteps(t, d, c, c.chunk*c.B)
			for k, name := range want.names {
				if j := farFrom(got.vals[k], want.vals[k], chunksTol); j >= 0 {
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
}

// chunkSteps runs two training steps of a new float64 stack of case c on
// d, its products over steps cut in chunks of chunkRows rows, the state
// carried (detached) from the first to the second, then a NoGrad forward,
// and returns what they gave back; every input comes from one seed.
func chunkSteps(t *testing.T, d device.Device, c chunkCase, chunkRows int) branchResult {
	t.Helper()
	const I, H = 3, 4
	s, err := newStack(d, Config{Input: I, Hidden: H, Layers: c.layers, Dropout: c.dropout, Bidirectional: c.bidir,
		DType: device.Float64, Seed: 7, Recompute: c.recompute, WaveWindows: c.wave}, cellFor(c.lstm))
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
	up(t, d, st.H(), randoms(r, LD*B*H))
	if c.lstm {
		up(t, d, st.C(), randoms(r, LD*B*H))
	}
	var res branchResult
	for step := range 2 {
		x, dy := newBuf(t, d, randoms(r, T*B*I)), newBuf(t, d, randoms(r, T*B*D*H))
		must(t, s.params.ZeroGrad())
		st.Detach()
		y, err := s.ForwardLengths(Train, x, T, B, c.lengths, st)
		must(t, err)
		res.add(fmt.Sprintf("step %d output", step), down(t, d, y, T*B*D*H))
		res.add(fmt.Sprintf("step %d h_n", step), down(t, d, st.H(), LD*B*H))
		up(t, d, st.GradH(), randoms(r, LD*B*H))
		if c.lstm {
			res.add(fmt.Sprintf("step %d c_n", step), down(t, d, st.C(), LD*B*H))
			up(t, d, st.GradC(), randoms(r, LD*B*H))
		}
		dx, err := s.Backward(dy)
		must(t, err)
		res.add(fmt.Sprintf("step %d dx", step), down(t, d, dx, T*B*I))
		for p := range s.params.All() {
			res.add(fmt.Sprintf("step %d grad %s", step, p.Name), down(t, d, p.Grad, p.Len()))
		}
		res.add(fmt.Sprintf("step %d dh_0", step), down(t, d, st.GradH(), LD*B*H))
		if c.lstm {
			res.add(fmt.Sprintf("step %d dc_0", step), down(t, d, st.GradC(), LD*B*H))
		}
		must(t, d.Free(x))
		must(t, d.Free(dy))
	}
	x := newBuf(t, d, randoms(r, T*B*I))
	y, err := s.ForwardLengths(NoGrad, x, T, B, c.lengths, st)
	must(t, err)
	res.add("NoGrad output", down(t, d, y, T*B*D*H))
	res.add("NoGrad h_n", down(t, d, st.H(), LD*B*H))
	if c.lstm {
		res.add("NoGrad c_n", down(t, d, st.C(), LD*B*H))
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
