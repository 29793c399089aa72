package rnn_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// TestInputMismatches: shapes, devices, states and ids that do not match a
// layer are errors that match a sentinel and name the mismatch.
func TestInputMismatches(t *testing.T) {
	d := testdevice.Open(t)
	other := testdevice.Open(t) // a second device of the same kind, for foreign buffers
	const T, B, I, H = 3, 2, 4, 5
	lstm := newRecurrent(t, d, "lstm", rnn.Config{Input: I, Hidden: H, Layers: 2})
	gru := newRecurrent(t, d, "gru", rnn.Config{Input: I, Hidden: H, Layers: 2})
	bi := newRecurrent(t, d, "lstm", rnn.Config{Input: I, Hidden: H, Layers: 1, Bidirectional: true})
	alloc := func(dev device.Device, n int) device.Buffer {
		b, err := dev.Alloc(int64(n)*4, device.Workspace)
		ok(t, err)
		return b
	}
	x := alloc(d, T*B*I)
	lstmState, err := lstm.NewState(B)
	ok(t, err)
	defer lstmState.Free()
	wrongBatch, err := lstm.NewState(B + 1)
	ok(t, err)
	defer wrongBatch.Free()
	emb, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: 5, Dim: I})
	ok(t, err)
	defer emb.Close()
	lin, err := rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: H, Out: 5})
	ok(t, err)
	defer lin.Close()
	ce, err := rnn.NewCrossEntropy(d, 5, device.Float32)
	ok(t, err)
	defer ce.Close()

	for _, c := range []struct {
		name  string
		call  func() error
		is    error
		words []string
	}{
		{"short x", func() error { _, err := lstm.Forward(rnn.Train, x, T+1, B, nil); return err },
			device.ErrShape, []string{"LSTM.Forward", "x holds 24 float32 values, want seq·batch·input = 4·2·4 = 32"}},
		{"x on another device", func() error { _, err := lstm.Forward(rnn.Train, alloc(other, T*B*I), T, B, nil); return err },
			device.ErrForeignBuffer, []string{"x is on device"}},
		{"missing x", func() error { _, err := gru.Forward(rnn.NoGrad, device.Buffer{}, T, B, nil); return err },
			device.ErrShape, []string{"GRU.Forward", "x is missing"}},
		{"zero seq", func() error { _, err := lstm.Forward(rnn.Train, x, 0, B, nil); return err },
			device.ErrShape, []string{"seq = 0"}},
		{"state batch", func() error { _, err := lstm.Forward(rnn.Train, x, T, B, wrongBatch); return err },
			device.ErrShape, []string{"batch 3, want 2"}},
		{"LSTM state in a GRU", func() error { _, err := gru.Forward(rnn.Train, x, T, B, lstmState); return err },
			device.ErrShape, []string{"a LSTM state, want a GRU one"}},
		{"short dy", func() error {
			_, err := lstm.Forward(rnn.Train, x, T, B, nil)
			ok(t, err)
			_, err = lstm.Backward(alloc(d, T*B*H-1))
			return err
		}, device.ErrShape, []string{"LSTM.Backward", "dy holds 29 float32 values, want seq·batch·hidden = 3·2·5 = 30"}},
		{"short dy of two directions", func() error {
			_, err := bi.Forward(rnn.Train, x, T, B, nil)
			ok(t, err)
			_, err = bi.Backward(alloc(d, T*B*2*H-1))
			return err
		}, device.ErrShape, []string{"dy holds 59 float32 values, want seq·batch·2·hidden = 3·2·10 = 60"}},
		{"ids of float type size", func() error { _, err := emb.Forward(rnn.Train, alloc(d, 2), 3); return err },
			device.ErrShape, []string{"ids holds 2 int32 values, want n = 3"}},
		{"linear input width", func() error { _, err := lin.Forward(rnn.NoGrad, alloc(d, 4*H-1), 4); return err },
			device.ErrShape, []string{"Linear.Forward", "x holds 19 float32 values, want rows·in = 4·5 = 20"}},
		{"targets on another device", func() error { return ce.Forward(rnn.NoGrad, alloc(d, 10), alloc(other, 2), 2, 1) },
			device.ErrForeignBuffer, []string{"targets is on device"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !errors.Is(err, c.is) {
				t.Fatalf("error %v, want %v", err, c.is)
			}
			for _, w := range c.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	// An id outside the vocabulary is found by the kernel and reported at
	// the next synchronisation. The CPU device names the id and its
	// position; the CUDA device's kernels set one status bit per kernel
	// (cuda/doc.go), so a GPU names the kernel, not the id.
	bad := uploadInt32(t, d, []int32{1, 7, 2})
	if _, err := emb.Forward(rnn.NoGrad, bad, 3); err != nil {
		t.Fatal(err)
	}
	err = d.Synchronize()
	if !errors.Is(err, device.ErrIndex) {
		t.Errorf("id 7 of vocabulary 5: %v, want ErrIndex", err)
	} else if testdevice.IsCPU() && !strings.Contains(err.Error(), "7 at position 1") {
		t.Errorf("id 7 of vocabulary 5: %v, want ErrIndex naming id 7 at position 1", err)
	}
}

// TestConfigErrors: configurations no layer can have are errors.
func TestConfigErrors(t *testing.T) {
	d := testdevice.Open(t)
	for _, c := range []struct {
		name string
		make func() error
	}{
		{"hidden 0", func() error { _, err := rnn.NewLSTM(context.Background(), d, rnn.Config{Input: 3}); return err }},
		{"negative layers", func() error {
			_, err := rnn.NewGRU(context.Background(), d, rnn.Config{Input: 3, Hidden: 2, Layers: -1})
			return err
		}},
		{"dropout 1", func() error {
			_, err := rnn.NewLSTM(context.Background(), d, rnn.Config{Input: 3, Hidden: 2, Dropout: 1})
			return err
		}},
		{"dropout NaN", func() error {
			_, err := rnn.NewLSTM(context.Background(), d, rnn.Config{Input: 3, Hidden: 2, Dropout: math.NaN()})
			return err
		}},
		{"int32 parameters", func() error {
			_, err := rnn.NewGRU(context.Background(), d, rnn.Config{Input: 3, Hidden: 2, DType: device.Int32})
			return err
		}},
		{"no device", func() error {
			_, err := rnn.NewLSTM(context.Background(), nil, rnn.Config{Input: 3, Hidden: 2})
			return err
		}},
		{"vocab 0", func() error {
			_, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Dim: 3})
			return err
		}},
		{"linear out 0", func() error { _, err := rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: 3}); return err }},
		{"classes 0", func() error { _, err := rnn.NewCrossEntropy(d, 0, 0); return err }},
	} {
		if err := c.make(); err == nil || !strings.HasPrefix(err.Error(), "rnn: ") {
			t.Errorf("%s: error %v, want one starting with \"rnn: \"", c.name, err)
		}
	}
}

// TestParamsMatchPyTorch: names, order and shapes are nn.LSTM's and
// nn.GRU's (from the fixture script's modules), and the initial values
// follow PyTorch's distributions, reproducibly from the seed.
func TestParamsMatchPyTorch(t *testing.T) {
	d := testdevice.Open(t)
	const I, H = 3, 16
	for _, c := range []struct {
		cell  string
		gates int
	}{{"lstm", 4}, {"gru", 3}} {
		m := newRecurrent(t, d, c.cell, rnn.Config{Input: I, Hidden: H, Layers: 2, DType: device.Float64, Seed: 9})
		var names []string
		var shapes [][]int
		for p := range m.Params().All() {
			names = append(names, p.Name)
			shapes = append(shapes, p.Shape)
		}
		G := c.gates * H
		wantNames := []string{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"}
		wantShapes := [][]int{{G, I}, {G, H}, {G}, {G}, {G, H}, {G, H}, {G}, {G}}
		if !slices.Equal(names, wantNames) || !slices.EqualFunc(shapes, wantShapes, slices.Equal) {
			t.Errorf("%s: parameters %v %v, want %v %v", c.cell, names, shapes, wantNames, wantShapes)
		}
		// U(-1/sqrt(H), 1/sqrt(H)): every value inside, and the extremes
		// near the bounds (over 4·16·(3+16+2)·2 values).
		values, _ := m.Params().Flat()
		all := download(t, d, values, m.Params().Len())
		bound := 1 / math.Sqrt(H)
		lo, hi := slices.Min(all), slices.Max(all)
		if lo < -bound || hi > bound || lo > -0.95*bound || hi < 0.95*bound {
			t.Errorf("%s: initial values in [%v, %v], want U(-%v, %v)", c.cell, lo, hi, bound, bound)
		}
		same := newRecurrent(t, d, c.cell, rnn.Config{Input: I, Hidden: H, Layers: 2, DType: device.Float64, Seed: 9})
		differ := newRecurrent(t, d, c.cell, rnn.Config{Input: I, Hidden: H, Layers: 2, DType: device.Float64, Seed: 10})
		v1, _ := same.Params().Flat()
		v2, _ := differ.Params().Flat()
		if !slices.Equal(download(t, d, v1, len(all)), all) || slices.Equal(download(t, d, v2, len(all)), all) {
			t.Errorf("%s: initial values are not a function of the seed", c.cell)
		}
	}
	noBias := newRecurrent(t, d, "gru", rnn.Config{Input: I, Hidden: H, NoBias: true})
	if n := noBias.Params().Len(); n != 3*H*(I+H) {
		t.Errorf("GRU without bias: %d parameters, want %d", n, 3*H*(I+H))
	}

	emb, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: 100, Dim: 50, DType: device.Float64, Seed: 1})
	ok(t, err)
	defer emb.Close()
	w, err := emb.Params().Value("weight")
	v := hostData(t, w, err)
	mean, sq := 0.0, 0.0
	for _, x := range v {
		mean += x / float64(len(v))
		sq += x * x / float64(len(v))
	}
	// N(0, 1) over 5,000 draws: the mean's standard error is 0.014.
	if !(math.Abs(mean) <= 0.06) || !(math.Abs(math.Sqrt(sq-mean*mean)-1) <= 0.06) {
		t.Errorf("embedding: mean %v, std %v, want N(0, 1)", mean, math.Sqrt(sq-mean*mean))
	}
}

// TestParamsHostAccess: values and gradients go to and from host tensors
// by name, converting float32 and float64, and bad names and shapes are
// errors that say what is there.
func TestParamsHostAccess(t *testing.T) {
	d := testdevice.Open(t)
	lin, err := rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: 3, Out: 2})
	ok(t, err)
	defer lin.Close()
	p := lin.Params()
	w64 := []float64{1, 2, 3, 4, 5, 6.5}
	ok(t, p.SetValue("weight", tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(w64))))
	got, err := p.Value("weight")
	ok(t, err)
	if v, isF32 := got.Data().([]float32); !isF32 || !slices.Equal(v, []float32{1, 2, 3, 4, 5, 6.5}) || !slices.Equal(got.Shape(), tensor.Shape{2, 3}) {
		t.Errorf("weight after SetValue: %v %v, want float32 1..6.5 of shape (2, 3)", got.Shape(), got.Data())
	}
	ok(t, p.SetGrad("bias", tensor.New(tensor.WithShape(2), tensor.WithBacking([]float32{-1, 0.25}))))
	g, err := p.Grad("bias")
	ok(t, err)
	if v := g.Data().([]float32); !slices.Equal(v, []float32{-1, 0.25}) {
		t.Errorf("bias gradient %v, want [-1 0.25]", v)
	}
	ok(t, p.ZeroGrad())
	g, err = p.Grad("bias")
	ok(t, err)
	if v := g.Data().([]float32); !slices.Equal(v, []float32{0, 0}) {
		t.Errorf("bias gradient after ZeroGrad %v, want zeros", v)
	}

	err = p.SetValue("weight", tensor.New(tensor.WithShape(3, 2), tensor.WithBacking(w64)))
	if !errors.Is(err, device.ErrShape) || !strings.Contains(err.Error(), "shape [3 2], want [2 3]") {
		t.Errorf("transposed weight: %v, want ErrShape naming both shapes", err)
	}
	if _, err := p.Value("weights"); err == nil || !strings.Contains(err.Error(), "have weight, bias") {
		t.Errorf("unknown name: %v, want an error listing the names", err)
	}
	err = p.SetValue("bias", tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2})))
	if !errors.Is(err, device.ErrShape) {
		t.Errorf("int tensor: %v, want ErrShape", err)
	}
}

// TestGradientsAccumulate: Backward adds into the gradients, so two
// identical forward/backward passes give twice the gradients of one.
//
// Not bit for bit on every device, and accumTol (relative to
// max(1, |once|)) says how far: a parameter gradient is a sum of
// K = T·B = 12 terms (the weight-gradient GEMMs over all steps, the bias
// SumRows over all rows), the same terms in both passes. The CPU's GEMM
// scales C by Beta and then adds the products into it one by one, so the
// second pass rounds s + t_1 + ... + t_K where the first rounded
// 0 + t_1 + ... + t_K: they differ from 2·once by ≲ 2·K·2⁻⁵³ ≈ 2.7e-15
// times Σ|t_k| + |s| (cuBLAS forms the sum and adds it to C once, which
// gives 2·once exactly; a split-K sum added into C in parts falls under
// the CPU's bound). A term is a gate gradient (|dPre| ≤ |dh| ≲ 1 for dy
// of 0.3 and 0.7: the gate derivatives are ≤ 1/4 or ≤ 1) times a layer
// input (|x| ≤ 2, |h| < 1), so Σ|t_k| ≤ 12·2 = 24 and the difference is
// ≲ 2.7e-15·(24 + 1.7) ≈ 7e-14 (|once| ≤ 1.7 here); accumTol = 1e-13.
// Overwriting instead of adding is off by |once| itself.
func TestGradientsAccumulate(t *testing.T) {
	const accumTol = 1e-13
	d := testdevice.Open(t)
	const T, B, I, H = 4, 3, 2, 5
	for _, cell := range []string{"lstm", "gru"} {
		m := newRecurrent(t, d, cell, rnn.Config{Input: I, Hidden: H, Layers: 2, DType: device.Float64})
		x := upload(t, d, make([]float64, T*B*I))
		put(t, d, x, []float64{0.5, -1, 0.25, 2})
		dy := upload(t, d, slices.Repeat([]float64{0.3, -0.7}, T*B*H/2))
		pass := func() {
			_, err := m.Forward(rnn.Train, x, T, B, nil)
			ok(t, err)
			_, err = m.Backward(dy)
			ok(t, err)
		}
		_, g := m.Params().Flat()
		pass()
		once := download(t, d, g, m.Params().Len())
		pass()
		twice := download(t, d, g, m.Params().Len())
		for i := range once {
			if !(math.Abs(twice[i]-2*once[i]) <= accumTol*math.Max(1, math.Abs(once[i]))) {
				t.Fatalf("%s: gradient %d after two passes %v, want 2·%v (within %g)", cell, i, twice[i], once[i], accumTol)
			}
		}
		if slices.Max(once) == 0 {
			t.Fatalf("%s: zero gradients", cell)
		}
	}
}

// TestLayerCallsAllocateNothing: the embedding, the linear layer and the
// loss make no Go garbage per call once warm (testing.AllocsPerRun), in
// training, forward and backward: the shape checks name their sizes only
// in an error, and the kernels the layers queue allocate nothing (the
// devices' own tests). The recurrent stack is left out: its Forward
// plans its windows and layers anew at each call (about 19 allocations
// a forward of one token through 2 layers, rnn's CharRNN sample bench).
func TestLayerCallsAllocateNothing(t *testing.T) {
	d := testdevice.Open(t)
	const n, dim, classes = 6, 4, 5
	emb, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: classes, Dim: dim})
	ok(t, err)
	defer emb.Close()
	lin, err := rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: dim, Out: classes})
	ok(t, err)
	defer lin.Close()
	ce, err := rnn.NewCrossEntropy(d, classes, device.Float32)
	ok(t, err)
	defer ce.Close()
	ids := uploadInt32(t, d, []int32{0, 1, 2, 3, 4, 0})
	step := func() {
		x, err := emb.Forward(rnn.Train, ids, n)
		ok(t, err)
		logits, err := lin.Forward(rnn.Train, x, n)
		ok(t, err)
		ok(t, ce.Forward(rnn.Train, logits, ids, n, 1))
		dl, err := ce.Backward()
		ok(t, err)
		dx, err := lin.Backward(dl)
		ok(t, err)
		ok(t, emb.Backward(dx))
	}
	step()
	ok(t, d.Synchronize())
	if a := testing.AllocsPerRun(20, step); a != 0 {
		t.Errorf("a training step of Embedding, Linear and CrossEntropy allocates %v times, want 0", a)
	}
}
