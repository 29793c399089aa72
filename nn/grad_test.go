package nn_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/nn"
	"github.com/gocurrent/gocurrent/rnn"
)

// The finite-difference checks run in float64 on tiny shapes, as rnn's:
// central differences with step 1e-6 have truncation error ~1e-12 times
// the third derivative and rounding error ~1e-16/1e-6 = 1e-10 relative to
// the loss, so a gradient within 1e-6 (relative to max(1, |g|)) is right
// and a wrong term, of order the gradient itself, is far outside.
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

func upload(t *testing.T, d device.Device, v []float64, shape ...int) nn.Tensor {
	t.Helper()
	x, err := nn.Upload(d, device.Float64, v, shape...)
	must(t, err)
	t.Cleanup(func() { d.Free(x.Data) })
	return x
}

func values(t *testing.T, d device.Device, x nn.Tensor) []float64 {
	t.Helper()
	v, err := x.Float64s(d)
	must(t, err)
	return v
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// variable is a buffer of n float64s that finite differences perturb, and
// the analytic gradient to check.
type variable struct {
	name string
	buf  device.Buffer
	n    int
	grad []float64
}

// checkFD compares each variable's analytic gradient with central
// differences of loss, element by element, and checks that the check can
// see something (some difference above 1e-3).
func checkFD(t *testing.T, d device.Device, loss func() float64, vars []variable) {
	t.Helper()
	for _, v := range vars {
		if len(v.grad) != v.n {
			t.Fatalf("%s: %d analytic gradients for %d elements", v.name, len(v.grad), v.n)
		}
		vals := make([]float64, v.n)
		must(t, device.DownloadSlice(d, vals, v.buf.Slice(0, int64(v.n)*8)))
		set := func() { must(t, device.UploadSlice(d, v.buf.Slice(0, int64(v.n)*8), vals)) }
		worst, at, nonzero := 0.0, 0, false
		for i := range vals {
			x := vals[i]
			vals[i] = x + fdStep
			set()
			lp := loss()
			vals[i] = x - fdStep
			set()
			lm := loss()
			vals[i] = x
			num := (lp - lm) / (2 * fdStep)
			if e := math.Abs(num-v.grad[i]) / math.Max(1, math.Abs(num)); !(e <= worst) {
				worst, at = e, i
			}
			nonzero = nonzero || math.Abs(num) > 1e-3
		}
		set()
		if !(worst <= fdTol) {
			t.Errorf("%s[%d]: analytic gradient off by %.3g (> %g)", v.name, at, worst, fdTol)
		}
		if !nonzero {
			t.Errorf("%s: every finite difference is below 1e-3; the check would not see a wrong gradient", v.name)
		}
	}
}

// paramVars are the variables of m's parameters, with their gradients as
// Backward left them.
func paramVars(t *testing.T, d device.Device, m nn.Module) []variable {
	t.Helper()
	var out []variable
	for _, g := range m.Groups() {
		value, grad := g.Params.Flat()
		n := g.Params.Len()
		gv := make([]float64, n)
		must(t, device.DownloadSlice(d, gv, grad.Slice(0, int64(n)*8)))
		out = append(out, variable{name: "params " + g.Name, buf: value, n: n, grad: gv})
	}
	return out
}

func zeroGrads(t *testing.T, m nn.Module) {
	t.Helper()
	for _, g := range m.Groups() {
		must(t, g.Params.ZeroGrad())
	}
}

// checkModule checks m's Backward on x (its input gradient when x is a
// float tensor, and every parameter's) against finite differences of
// L = Σ out·w for a random w. A Random module draws the same masks at
// every evaluation (its state put back first).
func checkModule(t *testing.T, d device.Device, m nn.Module, x nn.Tensor) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 8))
	var rs []uint64
	rnd, _ := m.(nn.Random)
	if rnd != nil {
		rs = rnd.RandomState()
	}
	forward := func() nn.Tensor {
		if rnd != nil {
			must(t, rnd.SetRandomState(rs))
		}
		y, err := m.Forward(nn.Train, x)
		must(t, err)
		return y
	}
	y := forward()
	w := randoms(r, y.Len())
	wt := upload(t, d, w, y.Shape...)
	wt.Lengths = y.Lengths
	zeroGrads(t, m)
	dx, err := m.Backward(wt)
	must(t, err)
	vars := paramVars(t, d, m)
	if x.DType != device.Int32 {
		if dx.IsZero() {
			t.Fatal("no input gradient for a float input")
		}
		vars = append(vars, variable{name: "input", buf: x.Data, n: x.Len(), grad: values(t, d, dx)})
	} else if !dx.IsZero() {
		t.Fatalf("an input gradient %v for token ids", dx)
	}
	loss := func() float64 { return dot(values(t, d, forward()), w) }
	checkFD(t, d, loss, vars)
}

func TestModulesFiniteDifference(t *testing.T) {
	d := testdevice.Open(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	const T, B, F = 4, 3, 5
	seqs := func(lengths []int32) nn.Tensor {
		x := upload(t, d, randoms(r, T*B*F), T, B, F)
		x.Lengths = lengths
		return x
	}
	for _, c := range []struct {
		name  string
		build func() (nn.Module, error)
		x     func() nn.Tensor
	}{
		{"Linear", func() (nn.Module, error) {
			return nn.NewLinear(ctx, d, rnn.LinearConfig{In: F, Out: 2, DType: device.Float64, Seed: 3})
		}, func() nn.Tensor { return seqs([]int32{4, 1, 2}) }},
		{"Linear/no bias", func() (nn.Module, error) {
			return nn.NewLinear(ctx, d, rnn.LinearConfig{In: F, Out: 3, NoBias: true, DType: device.Float64, Seed: 4})
		}, func() nn.Tensor { return upload(t, d, randoms(r, B*F), B, F) }},
		{"Dropout", func() (nn.Module, error) { return nn.NewDropout(d, nn.DropoutConfig{P: 0.4, Seed: 9}) },
			func() nn.Tensor { return seqs(nil) }},
		{"Pool/last", func() (nn.Module, error) { return nn.NewPool(d, nn.PoolLast) }, func() nn.Tensor { return seqs([]int32{2, 4, 1}) }},
		{"Pool/last, no lengths", func() (nn.Module, error) { return nn.NewPool(d, nn.PoolLast) }, func() nn.Tensor { return seqs(nil) }},
		{"Pool/mean", func() (nn.Module, error) { return nn.NewPool(d, nn.PoolMean) }, func() nn.Tensor { return seqs([]int32{3, 1, 4}) }},
		{"Pool/max", func() (nn.Module, error) { return nn.NewPool(d, nn.PoolMax) }, func() nn.Tensor { return seqs([]int32{4, 2, 3}) }},
		{"Pool/max, no lengths", func() (nn.Module, error) { return nn.NewPool(d, nn.PoolMax) }, func() nn.Tensor { return seqs(nil) }},
		{"Embedding", func() (nn.Module, error) {
			return nn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: 6, Dim: 3, DType: device.Float64, Seed: 5})
		}, func() nn.Tensor {
			x, err := nn.UploadIDs(d, []int32{0, 5, 2, 2, 1, 3}, 2, 3)
			must(t, err)
			t.Cleanup(func() { d.Free(x.Data) })
			return x
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := c.build()
			must(t, err)
			defer m.Close()
			checkModule(t, d, m, c.x())
		})
	}
}

// TestRecurrentFiniteDifference checks the recurrent modules: their
// outputs at every step or their final states (Final), uni- and
// bidirectional, with and without lengths and dropout between layers.
func TestRecurrentFiniteDifference(t *testing.T) {
	d := testdevice.Open(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	const T, B, I, H = 3, 3, 2, 3
	for _, lstm := range []bool{true, false} {
		for _, c := range []struct {
			name    string
			layers  int
			bidir   bool
			final   bool
			dropout float64
			lengths []int32
		}{
			{"outputs", 1, false, false, 0, nil},
			{"outputs, lengths", 2, false, false, 0, []int32{3, 1, 2}},
			{"final", 2, false, true, 0.3, nil},
			{"final, bidirectional, lengths", 2, true, true, 0, []int32{1, 3, 2}},
			{"outputs, bidirectional, dropout", 2, true, false, 0.4, []int32{2, 3, 3}},
		} {
			name := "GRU/" + c.name
			if lstm {
				name = "LSTM/" + c.name
			}
			t.Run(name, func(t *testing.T) {
				rc := nn.RecurrentConfig{Config: rnn.Config{Input: I, Hidden: H, Layers: c.layers, Dropout: c.dropout,
					Bidirectional: c.bidir, DType: device.Float64, Seed: 11}, Final: c.final}
				m, err := newRecurrent(ctx, d, lstm, rc)
				must(t, err)
				defer m.Close()
				x := upload(t, d, randoms(r, T*B*I), T, B, I)
				x.Lengths = c.lengths
				checkModule(t, d, m, x)
			})
		}
	}
}

func newRecurrent(ctx context.Context, d device.Device, lstm bool, c nn.RecurrentConfig) (*nn.Recurrent, error) {
	if lstm {
		return nn.NewLSTM(ctx, d, c)
	}
	return nn.NewGRU(ctx, d, c)
}

// TestEncoderDecoderFiniteDifference checks the pieces an encoder-decoder
// is made of: a decoder started from the encoder's final state
// (ForwardFrom), its gradient with respect to that state (InitialGrad)
// given to the encoder (BackwardFinal, its outputs unused), against
// finite differences of L = Σ y_dec·w in every parameter and both inputs.
func TestEncoderDecoderFiniteDifference(t *testing.T) {
	d := testdevice.Open(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	const T1, T2, B, I, H = 3, 2, 2, 2, 3
	for _, lstm := range []bool{true, false} {
		for _, bidir := range []bool{false, true} {
			name := map[bool]string{true: "LSTM", false: "GRU"}[lstm] + map[bool]string{true: "/bidirectional", false: ""}[bidir]
			t.Run(name, func(t *testing.T) {
				enc, err := newRecurrent(ctx, d, lstm, nn.RecurrentConfig{Config: rnn.Config{Input: I, Hidden: H, Layers: 2, Bidirectional: bidir, DType: device.Float64, Seed: 1}})
				must(t, err)
				defer enc.Close()
				dec, err := newRecurrent(ctx, d, lstm, nn.RecurrentConfig{Config: rnn.Config{Input: I, Hidden: H, Layers: 2, Bidirectional: bidir, DType: device.Float64, Seed: 2}})
				must(t, err)
				defer dec.Close()
				src := upload(t, d, randoms(r, T1*B*I), T1, B, I)
				src.Lengths = []int32{3, 2}
				tgt := upload(t, d, randoms(r, T2*B*I), T2, B, I)
				forward := func() nn.Tensor {
					_, err := enc.Forward(nn.Train, src)
					must(t, err)
					y, err := dec.ForwardFrom(nn.Train, tgt, enc.Final())
					must(t, err)
					return y
				}
				y := forward()
				w := randoms(r, y.Len())
				wt := upload(t, d, w, y.Shape...)
				zeroGrads(t, enc)
				zeroGrads(t, dec)
				dtgt, err := dec.Backward(wt)
				must(t, err)
				dsrc, err := enc.BackwardFinal(nn.Tensor{}, dec.InitialGrad())
				must(t, err)
				vars := append(paramVars(t, d, enc), paramVars(t, d, dec)...)
				vars = append(vars, variable{name: "source", buf: src.Data, n: src.Len(), grad: values(t, d, dsrc)},
					variable{name: "target", buf: tgt.Data, n: tgt.Len(), grad: values(t, d, dtgt)})
				checkFD(t, d, func() float64 { return dot(values(t, d, forward()), w) }, vars)
			})
		}
	}
}

// TestConcatFiniteDifference checks Concat's split of the gradient: two
// branches of a Linear each over one input, joined, then a Linear.
func TestConcatFiniteDifference(t *testing.T) {
	d := testdevice.Open(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(9, 10))
	a := upload(t, d, randoms(r, 3*2*2), 3, 2, 2)
	b := upload(t, d, randoms(r, 3*2*4), 3, 2, 4)
	cat, err := nn.NewConcat(d)
	must(t, err)
	defer cat.Close()
	out, err := nn.NewLinear(ctx, d, rnn.LinearConfig{In: 6, Out: 2, DType: device.Float64, Seed: 1})
	must(t, err)
	defer out.Close()
	forward := func() nn.Tensor {
		x, err := cat.Forward(nn.Train, a, b)
		must(t, err)
		y, err := out.Forward(nn.Train, x)
		must(t, err)
		return y
	}
	y := forward()
	w := randoms(r, y.Len())
	zeroGrads(t, out)
	dx, err := out.Backward(upload(t, d, w, y.Shape...))
	must(t, err)
	ds, err := cat.Backward(dx)
	must(t, err)
	vars := append(paramVars(t, d, out), variable{name: "a", buf: a.Data, n: a.Len(), grad: values(t, d, ds[0])},
		variable{name: "b", buf: b.Data, n: b.Len(), grad: values(t, d, ds[1])})
	checkFD(t, d, func() float64 { return dot(values(t, d, forward()), w) }, vars)
}
