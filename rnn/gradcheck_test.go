package rnn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// The finite-difference checks run in float64 on tiny shapes. Central
// differences with step 1e-6 have truncation error ~1e-12 times the third
// derivative and rounding error ~1e-16/1e-6 = 1e-10 relative to the loss,
// so a gradient
// within 1e-6 (relative to max(1, |g|)) is right and a wrong term, of order
// the gradient itself, is far outside. Nothing here depends on the device:
// the loss is evaluated by the same deterministic calls at every point,
// and its rounding (another summation order, FMA on a GPU) stays near
// 1e-16 relative.
const (
	fdStep = 1e-6
	fdTol  = 1e-6
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randoms(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 2*r.Float64() - 1
	}
	return v
}

func up(t *testing.T, d device.Device, b device.Buffer, v []float64) {
	t.Helper()
	must(t, device.UploadSlice(d, b.Slice(0, int64(len(v))*8), v))
}

func down(t *testing.T, d device.Device, b device.Buffer, n int) []float64 {
	t.Helper()
	v := make([]float64, n)
	must(t, device.DownloadSlice(d, v, b))
	return v
}

func newBuf(t *testing.T, d device.Device, v []float64) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(v))*8, device.Workspace)
	must(t, err)
	up(t, d, b, v)
	return b
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// variable is one input of a loss that finite differences perturb: its
// device buffer of n elements and the analytic gradient to check.
type variable struct {
	name string
	buf  device.Buffer
	n    int
	grad []float64
}

// checkFD compares each variable's analytic gradient with central
// differences of loss, element by element.
func checkFD(t *testing.T, d device.Device, loss func() float64, vars []variable) {
	t.Helper()
	for _, v := range vars {
		if len(v.grad) != v.n {
			t.Fatalf("%s: %d analytic gradients for %d elements", v.name, len(v.grad), v.n)
		}
		vals := down(t, d, v.buf, v.n)
		worst, at, nonzero := 0.0, 0, false
		for i := range vals {
			x := vals[i]
			vals[i] = x + fdStep
			up(t, d, v.buf, vals)
			lp := loss()
			vals[i] = x - fdStep
			up(t, d, v.buf, vals)
			lm := loss()
			vals[i] = x
			num := (lp - lm) / (2 * fdStep)
			if e := math.Abs(num-v.grad[i]) / math.Max(1, math.Abs(num)); !(e <= worst) {
				worst, at = e, i
			}
			nonzero = nonzero || math.Abs(num) > 1e-3
		}
		up(t, d, v.buf, vals)
		if !(worst <= fdTol) { // a NaN too
			t.Errorf("%s[%d]: analytic gradient off by %.3g (> %g)", v.name, at, worst, fdTol)
		}
		if !nonzero {
			t.Errorf("%s: every finite difference is below 1e-3; the check would not see a wrong gradient", v.name)
		}
	}
}

// TestRecurrentGradientsFiniteDifference checks Backward of LSTM and GRU
// stacks (input, every weight and bias, initial h and c) against central
// differences of L = Σ out·wOut + Σ h_n·wH (+ Σ c_n·wC), with dropout
// between layers included by replaying the same mask (drawn reset), for
// unidirectional and bidirectional stacks, with and without lengths, and
// with Recompute (segments of 1 and 2 steps). The stack's chunk is lowered
// to one row, so that its products over steps run step by step and a
// batch of 3 recomputes segments of k steps.
func TestRecurrentGradientsFiniteDifference(t *testing.T) {
	const T, B, I, H = 3, 3, 3, 4
	for _, lstm := range []bool{true, false} {
		for _, c := range []struct {
			layers    int
			noBias    bool
			dropout   float64
			state     bool
			bidir     bool
			lengths   []int32
			recompute int
		}{
			{1, false, 0, true, false, nil, 0}, {1, true, 0, false, false, nil, 0}, {2, false, 0, true, false, nil, 0},
			{2, false, 0.4, true, false, nil, 0}, {3, true, 0.3, false, false, nil, 0},
			{2, false, 0.4, true, true, nil, 0}, {1, false, 0, true, true, []int32{1, 3, 2}, 0},
			{3, true, 0.3, true, true, []int32{2, 3, 1}, 0}, {2, false, 0, true, false, []int32{3, 1, 2}, 0},
			{2, false, 0.4, false, false, []int32{2, 3, 3}, 0},
			{2, false, 0.4, true, false, nil, 1}, {3, false, 0.3, true, false, []int32{2, 3, 1}, 2},
			{2, false, 0.4, true, true, nil, 1}, {2, false, 0.3, true, true, []int32{1, 3, 2}, 2},
		} {
			name := fmt.Sprintf("lstm=%v/layers%d/bias=%v/dropout%v/state=%v/bidirectional=%v/lengths=%v/recompute%d",
				lstm, c.layers, !c.noBias, c.dropout, c.state, c.bidir, c.lengths, c.recompute)
			t.Run(name, func(t *testing.T) {
				d := testdevice.Open(t)
				s, err := newStack(context.Background(), d, Config{Input: I, Hidden: H, Layers: c.layers, Dropout: c.dropout, NoBias: c.noBias,
					Bidirectional: c.bidir, DType: device.Float64, Seed: 7, Recompute: c.recompute}, cellFor(lstm))
				must(t, err)
				defer s.Close()
				s.chunkRows = 1
				L, DH := c.layers*s.dirs(), s.dirs()*H
				r := rand.New(rand.NewPCG(1, 2))
				x := newBuf(t, d, randoms(r, T*B*I))
				wOut, wH, wC := randoms(r, T*B*DH), randoms(r, L*B*H), randoms(r, L*B*H)
				var st *State
				if c.state {
					st, err = s.NewState(B)
					must(t, err)
					defer st.Free()
					up(t, d, st.H(), randoms(r, L*B*H))
					if lstm {
						up(t, d, st.C(), randoms(r, L*B*H))
					}
				}
				// h0 and c0 live in buffers of their own, copied into the
				// state before each forward, since Forward overwrites it.
				var h0, c0 device.Buffer
				if st != nil {
					h0 = newBuf(t, d, down(t, d, st.H(), L*B*H))
					if lstm {
						c0 = newBuf(t, d, down(t, d, st.C(), L*B*H))
					}
				}
				k := d.Kernels()
				forward := func() device.Buffer {
					t.Helper()
					must(t, s.SetDropoutState(s.dropSeed, 0)) // the same dropout mask every time
					if st != nil {
						st.Detach()
						must(t, k.Copy(device.Copy{Dst: st.H(), Src: h0}))
						if lstm {
							must(t, k.Copy(device.Copy{Dst: st.C(), Src: c0}))
						}
					}
					out, err := s.ForwardLengths(Train, x, T, B, c.lengths, st)
					must(t, err)
					return out
				}
				loss := func() float64 {
					l := dot(down(t, d, forward(), T*B*DH), wOut)
					if st != nil {
						l += dot(down(t, d, st.H(), L*B*H), wH)
						if lstm {
							l += dot(down(t, d, st.C(), L*B*H), wC)
						}
					}
					return l
				}

				forward()
				if st != nil {
					up(t, d, st.GradH(), wH)
					if lstm {
						up(t, d, st.GradC(), wC)
					}
				}
				dx, err := s.Backward(newBuf(t, d, wOut))
				must(t, err)
				values, grads := s.Params().Flat()
				np := s.Params().Len()
				vars := []variable{
					{"x", x, T * B * I, down(t, d, dx, T*B*I)},
					{"params", values, np, down(t, d, grads, np)},
				}
				if st != nil {
					vars = append(vars, variable{"h0", h0, L * B * H, down(t, d, st.GradH(), L*B*H)})
					if lstm {
						vars = append(vars, variable{"c0", c0, L * B * H, down(t, d, st.GradC(), L*B*H)})
					}
				}
				checkFD(t, d, loss, vars)
			})
		}
	}
}

// TestModelGradientsFiniteDifference checks the stacked char-RNN model,
// Embedding → LSTM or GRU (2 layers, initial state) → Linear → mean
// softmax cross-entropy scaled by 1/2 (as for two accumulated
// micro-batches), against central differences for every parameter of every
// layer and the initial state.
func TestModelGradientsFiniteDifference(t *testing.T) {
	const T, B, V, E, H, L = 3, 2, 5, 3, 4, 2
	const scale = 0.5
	for _, lstm := range []bool{true, false} {
		t.Run(fmt.Sprintf("lstm=%v", lstm), func(t *testing.T) {
			d := testdevice.Open(t)
			emb, err := NewEmbedding(context.Background(), d, EmbeddingConfig{Vocab: V, Dim: E, DType: device.Float64, Seed: 1})
			must(t, err)
			defer emb.Close()
			s, err := newStack(context.Background(), d, Config{Input: E, Hidden: H, Layers: L, DType: device.Float64, Seed: 2}, cellFor(lstm))
			must(t, err)
			defer s.Close()
			lin, err := NewLinear(context.Background(), d, LinearConfig{In: H, Out: V, DType: device.Float64, Seed: 3})
			must(t, err)
			defer lin.Close()
			ce, err := NewCrossEntropy(d, V, device.Float64)
			must(t, err)
			defer ce.Close()

			r := rand.New(rand.NewPCG(3, 4))
			ids, targets := make([]int32, T*B), make([]int32, T*B)
			for i := range ids {
				ids[i], targets[i] = int32(r.IntN(V)), int32(r.IntN(V))
			}
			idBuf, err := d.Alloc(int64(len(ids))*4, device.Workspace)
			must(t, err)
			must(t, device.UploadSlice(d, idBuf, ids))
			tgtBuf, err := d.Alloc(int64(len(targets))*4, device.Workspace)
			must(t, err)
			must(t, device.UploadSlice(d, tgtBuf, targets))
			st, err := s.NewState(B)
			must(t, err)
			defer st.Free()
			h0 := newBuf(t, d, randoms(r, L*B*H))
			c0 := newBuf(t, d, randoms(r, L*B*H))
			k := d.Kernels()
			forward := func(mode Mode) {
				t.Helper()
				st.Detach()
				must(t, k.Copy(device.Copy{Dst: st.H(), Src: h0}))
				if lstm {
					must(t, k.Copy(device.Copy{Dst: st.C(), Src: c0}))
				}
				x, err := emb.Forward(mode, idBuf, T*B)
				must(t, err)
				y, err := s.Forward(mode, x, T, B, st)
				must(t, err)
				logits, err := lin.Forward(mode, y, T*B)
				must(t, err)
				must(t, ce.ResetLoss())
				must(t, ce.Forward(mode, logits, tgtBuf, T*B, scale))
			}
			loss := func() float64 {
				forward(NoGrad)
				l, err := ce.Loss()
				must(t, err)
				return l
			}

			forward(Train)
			dLogits, err := ce.Backward()
			must(t, err)
			dy, err := lin.Backward(dLogits)
			must(t, err)
			dx, err := s.Backward(dy)
			must(t, err)
			must(t, emb.Backward(dx))
			var vars []variable
			for _, p := range []*Params{emb.Params(), s.Params(), lin.Params()} {
				v, g := p.Flat()
				vars = append(vars, variable{p.list[0].Name + "...", v, p.Len(), down(t, d, g, p.Len())})
			}
			vars = append(vars, variable{"h0", h0, L * B * H, down(t, d, st.GradH(), L*B*H)})
			if lstm {
				vars = append(vars, variable{"c0", c0, L * B * H, down(t, d, st.GradC(), L*B*H)})
			}
			checkFD(t, d, loss, vars)
		})
	}
}

// cellFor is the LSTM's cell for lstm, the GRU's otherwise.
func cellFor(lstm bool) cell {
	if lstm {
		return lstmCell{}
	}
	return gruCell{}
}
