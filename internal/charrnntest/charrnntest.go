// Package charrnntest holds what the char-RNN's tests share (those of
// package models and of the charrnn example): the PyTorch fixtures that
// models/testdata/torch_fixture.py writes, a safetensors reader of its own
// (so that checkpoints are checked against the format, not against
// train's decoder), and the float32 rounding bounds that say how far two
// computations of the same figure may differ (RoundingBound, LossBound,
// Magnitudes). Only tests import it.
package charrnntest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/train"
)

// Fixtures is the directory of torch_fixture.py's files (models/testdata),
// as a path from the test's package directory, where a test binary runs.
type Fixtures string

// Corpus is the fixtures' corpus: 5,949 ASCII characters, 40 distinct.
func (f Fixtures) Corpus() string { return filepath.Join(string(f), "corpus.txt") }

// TorchCheckpoint is PyTorch's initial weights of the 2-layer char-RNN of
// cell ("lstm" or "gru"), embedding 8, hidden 16, with the checkpoint
// format's metadata.
func (f Fixtures) TorchCheckpoint(cell string) string {
	return filepath.Join(string(f), "torch_"+cell+".safetensors")
}

// TorchTrained is the same model's weights after PyTorch's four training
// steps (Report's Train).
func (f Fixtures) TorchTrained(cell string) string {
	return filepath.Join(string(f), "torch_"+cell+"_trained.safetensors")
}

// ForwardDepth and Depth are the depths D (see RoundingBound) of a figure
// of the fixtures' forward pass and of an element of a training step's
// gradient. The model: embedding 8, hidden 16, 2 layers, vocabulary 40; a
// training step holds 64 positions (batch 2 × accum 2 × seq 16).
//
// Forward, one layer, one time step: the input product (8 or 16 terms)
// and the recurrent one (16), the two biases and their sum (3), then ≲ 12
// pointwise roundings (σ: exp, add, divide; tanh; c = f·c + i·g; tanh(c);
// o·tanh(c); exp and tanh counted twice): ≲ 47. An error carried in the
// state shrinks by the forget (GRU: update) gate, σ of a pre-activation
// of about ±1 at these weights, ≤ 0.73, so the steps before count ≲
// 1/(1 − 0.73) ≈ 4 times: ≲ 190 a layer, 380 for two, and the output
// product (16 terms and the bias): ForwardDepth = 400.
//
// Backward: the same paths transposed, with the products over the gates
// (4H = 64 terms, GRU 48) and the vocabulary (40): per layer and step ≲
// 64 + 64 + 15 pointwise, over the same ≲ 4 steps, ≲ 570 a layer, 1,140
// for two; the weight-gradient sums over the step's 64 positions and the
// accumulation of the two micro-batches (65); and the forward values they
// use (400): Depth = 1,700 for a gradient element.
const (
	ForwardDepth = 400
	Depth        = 1700
)

// EvalTolerance is the relative difference allowed between an evaluation
// of PyTorch's initial weights for cell and PyTorch's loss: LossBound at
// the fixture's forward depth, with the magnitudes of its weights (pre ≈
// 6, logit ≈ 2.9, loss ≈ 3.7: about 1e-4). A wrong gate order, a state
// not carried or a window dropped moves the loss by far more.
func (f Fixtures) EvalTolerance(t testing.TB, cell string, loss float64) float64 {
	t.Helper()
	init, _ := ReadSafetensors(t, f.TorchCheckpoint(cell))
	pre, logit := Magnitudes(t, ModelTensors(init), 0)
	return LossBound(ForwardDepth, pre, logit, loss)
}

// Report is torch_<cell>.json, as torch_fixture.py writes it.
type Report struct {
	Cell      string `json:"cell"`
	VocabSize int    `json:"vocab_size"`
	Tokens    int64  `json:"tokens"`
	Eval      struct {
		Batch   int     `json:"batch"`
		Seq     int     `json:"seq"`
		Windows int64   `json:"windows"`
		Loss    float64 `json:"loss"`
	} `json:"eval"`
	Train struct {
		Batch     int       `json:"batch"`
		Accum     int       `json:"accum"`
		Seq       int       `json:"seq"`
		Optimizer string    `json:"optimizer"`
		LR        float64   `json:"lr"`
		Clip      float64   `json:"clip"`
		Steps     int64     `json:"steps"`
		Losses    []float64 `json:"losses"`
		GradNorms []float64 `json:"grad_norms"`
	} `json:"train"`
}

// Report reads torch_<cell>.json and fails the test if it is incomplete.
func (f Fixtures) Report(t testing.TB, cell string) Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(string(f), "torch_"+cell+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("torch_%s.json: %v", cell, err)
	}
	if r.Cell != cell || len(r.Train.Losses) != int(r.Train.Steps) || len(r.Train.GradNorms) != int(r.Train.Steps) {
		t.Fatalf("torch_%s.json: cell %q, %d losses and %d norms for %d steps; regenerate it with models/testdata/torch_fixture.py",
			cell, r.Cell, len(r.Train.Losses), len(r.Train.GradNorms), r.Train.Steps)
	}
	return r
}

// Tensor is one tensor of a safetensors file, its bytes as stored.
type Tensor struct {
	DType string
	Shape []int
	Data  []byte
}

// Float32s decodes an F32 tensor.
func (tn Tensor) Float32s(t testing.TB, name string) []float32 {
	t.Helper()
	if tn.DType != "F32" {
		t.Fatalf("Tensor %s is %s, want F32", name, tn.DType)
	}
	v := make([]float32, len(tn.Data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(tn.Data[4*i:]))
	}
	return v
}

// ReadSafetensors reads a safetensors file with a reader of its own, so
// the tests check the files against the format, not against train's
// decoder.
func ReadSafetensors(t testing.TB, path string) (map[string]Tensor, map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 {
		t.Fatalf("%s: %d bytes, too short for a safetensors header", path, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		t.Fatalf("%s: header of %d bytes in a file of %d", path, n, len(b))
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatalf("%s: header: %v", path, err)
	}
	data := b[8+n:]
	tensors := map[string]Tensor{}
	meta := map[string]string{}
	for name, raw := range header {
		if name == "__metadata__" {
			if err := json.Unmarshal(raw, &meta); err != nil {
				t.Fatalf("%s: metadata: %v", path, err)
			}
			continue
		}
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []int    `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("%s: Tensor %s: %v", path, name, err)
		}
		if e.Offsets[0] < 0 || e.Offsets[0] > e.Offsets[1] || e.Offsets[1] > int64(len(data)) {
			t.Fatalf("%s: Tensor %s: offsets %v outside %d bytes of data", path, name, e.Offsets, len(data))
		}
		tensors[name] = Tensor{DType: e.DType, Shape: e.Shape, Data: data[e.Offsets[0]:e.Offsets[1]]}
	}
	return tensors, meta
}

// ModelTensors keeps the tensors that are not the trainer's (no "optim."
// prefix).
func ModelTensors(all map[string]Tensor) map[string]Tensor {
	out := map[string]Tensor{}
	for name, tn := range all {
		if !strings.HasPrefix(name, "optim.") {
			out[name] = tn
		}
	}
	return out
}

// MaxAbsDiff compares two sets of F32 tensors of the same names and shapes
// and returns the largest elementwise difference and where it is.
func MaxAbsDiff(t testing.TB, got, want map[string]Tensor) (float64, string) {
	t.Helper()
	gotNames := slices.Sorted(maps.Keys(got))
	wantNames := slices.Sorted(maps.Keys(want))
	if !slices.Equal(gotNames, wantNames) {
		t.Fatalf("tensors %v, want %v", gotNames, wantNames)
	}
	worst, where := 0.0, ""
	for _, name := range wantNames {
		g, w := got[name], want[name]
		if !slices.Equal(g.Shape, w.Shape) {
			t.Fatalf("Tensor %s: shape %v, want %v", name, g.Shape, w.Shape)
		}
		gv, wv := g.Float32s(t, name), w.Float32s(t, name)
		for i := range wv {
			d := math.Abs(float64(gv[i]) - float64(wv[i]))
			if !(d <= worst) { // NaN counts as worst
				worst, where = d, fmt.Sprintf("%s[%d]: got %v, want %v", name, i, gv[i], wv[i])
			}
		}
	}
	return worst, where
}

// SameTensors reports the first tensor whose dtype, shape or bytes differ.
func SameTensors(got, want map[string]Tensor) error {
	gotNames := slices.Sorted(maps.Keys(got))
	wantNames := slices.Sorted(maps.Keys(want))
	if !slices.Equal(gotNames, wantNames) {
		return fmt.Errorf("tensors %v, want %v", gotNames, wantNames)
	}
	for _, name := range wantNames {
		g, w := got[name], want[name]
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) {
			return fmt.Errorf("Tensor %s: %s%v, want %s%v", name, g.DType, g.Shape, w.DType, w.Shape)
		}
		if !bytes.Equal(g.Data, w.Data) {
			for i := range w.Data {
				if g.Data[i] != w.Data[i] {
					return fmt.Errorf("Tensor %s: byte %d of %d differs (got %#x, want %#x)", name, i, len(w.Data), g.Data[i], w.Data[i])
				}
			}
		}
	}
	return nil
}

// RelDiff is |got-want| / |want|.
func RelDiff(got, want float64) float64 {
	return math.Abs(got-want) / math.Abs(want)
}

// How far two float32 computations of the same figure may differ.
//
// The tests compare float32 figures computed by different code: PyTorch's
// (the fixtures) and the test device's (the CPU's, or cuBLAS's and our
// kernels on a GPU), or one device's with its sums grouped differently.
// Each rounds to nearest with unit roundoff u = 2⁻²⁴ ≈ 6e-8, in its own
// order (cuBLAS tiles and splits its sums, a GPU contracts a·b+c into one
// FMA), and CUDA's expf and tanhf are within 2 ulp (counted as two
// roundings each below). A figure whose dependency path holds D roundings
// then differs by at most D·u relative to the magnitudes of the terms
// those roundings act on, in the worst case, where every rounding errs
// the same way. Rounding errors of different operations are independent
// and of either sign, and the probabilistic bound of Higham and Mary ("A
// new approach to probabilistic rounding error analysis", SIAM J. Sci.
// Comput. 41(5), 2019, Theorems 2.4 and 3.1) is λ·√D·u, holding with
// probability at least 1 − 2D·exp(−λ²/2): with λ = 8 it fails with
// probability < 3e-14·D, about 1e-5 over all the ≲ 10⁵ figures (D ≤
// 3,400) a run of the char-RNN's tests bounds. RoundingBound is that bound,
// relative to the terms' magnitudes; each test counts its D and says what
// the magnitudes are.
func RoundingBound(depth float64) float64 {
	const lambda, u = 8, 0x1p-24
	return lambda * math.Sqrt(depth) * u
}

// Magnitudes bounds the magnitudes the roundings of a char-RNN's forward
// pass act on, from its checkpoint tensors, with every weight allowed to
// have moved by up to move (the steps of training since): pre is the
// largest sum of a gate pre-activation's terms, Σ|W_ih[r,·]|·|x| +
// Σ|W_hh[r,·]|·|h| + |b_ih[r]| + |b_hh[r]|, with |h| < 1 and |x| the
// largest embedding value of each column in layer 0 (< 1 above it);
// logit is the largest sum of a logit's terms, Σ|out.weight[c,·]|·|h| +
// |out.bias[c]|.
func Magnitudes(t testing.TB, tensors map[string]Tensor, move float64) (pre, logit float64) {
	t.Helper()
	get := func(name string) ([]float32, []int) {
		tn, ok := tensors[name]
		if !ok || len(tn.Shape) == 0 {
			t.Fatalf("no Tensor %s", name)
		}
		return tn.Float32s(t, name), tn.Shape
	}
	emb, es := get("emb.weight")
	if len(es) != 2 {
		t.Fatalf("emb.weight of shape %v", es)
	}
	xmax := make([]float64, es[1])
	for i, v := range emb {
		xmax[i%es[1]] = max(xmax[i%es[1]], math.Abs(float64(v))+move)
	}
	for l := 0; ; l++ {
		if _, ok := tensors[fmt.Sprintf("rnn.weight_ih_l%d", l)]; !ok {
			break
		}
		wih, sih := get(fmt.Sprintf("rnn.weight_ih_l%d", l))
		whh, shh := get(fmt.Sprintf("rnn.weight_hh_l%d", l))
		bih, _ := get(fmt.Sprintf("rnn.bias_ih_l%d", l))
		bhh, _ := get(fmt.Sprintf("rnn.bias_hh_l%d", l))
		for r := range sih[0] {
			sum := math.Abs(float64(bih[r])) + math.Abs(float64(bhh[r])) + 2*move
			for j := range sih[1] {
				x := 1.0
				if l == 0 {
					x = xmax[j]
				}
				sum += (math.Abs(float64(wih[r*sih[1]+j])) + move) * x
			}
			for j := range shh[1] {
				sum += math.Abs(float64(whh[r*shh[1]+j])) + move
			}
			pre = max(pre, sum)
		}
	}
	w, ws := get("out.weight")
	b, _ := get("out.bias")
	for c := range ws[0] {
		sum := math.Abs(float64(b[c])) + move
		for j := range ws[1] {
			sum += math.Abs(float64(w[c*ws[1]+j])) + move
		}
		logit = max(logit, sum)
	}
	return pre, logit
}

// LossBound is the relative difference the rounding of a forward pass of
// depth D allows in a mean cross-entropy loss: the pre-activations err by
// ≲ ρ·pre (ρ = RoundingBound(D)), which σ (slope ≤ 1/4), tanh (≤ 1) and
// products of values in (−1, 1) carry into h with a gain ≤ 1, and a
// logit's weights carry into it with a gain ≤ logit, to which its own
// GEMM adds ≲ ρ·logit: |δz| ≲ ρ·(pre+1)·logit. A row's loss
// log Σexp(z) − z_target moves by Σ_c |p_c − [c = target]|·|δz_c| ≤
// 2·max|δz|, and so does their mean (computed in float64).
func LossBound(depth, pre, logit, loss float64) float64 {
	return 2 * RoundingBound(depth) * (pre + 1) * logit / loss
}

// Grads downloads the gradient of every parameter of groups (a model's
// Groups), by checkpoint name, through the host accessor (device memory is not host-accessible
// on a GPU).
func Grads(t testing.TB, groups []train.Group) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, g := range groups {
		for p := range g.Params.All() {
			v, err := g.Params.Grad(p.Name)
			if err != nil {
				t.Fatal(err)
			}
			data, ok := v.Data().([]float32)
			if !ok {
				t.Fatalf("%s.%s holds %T, want []float32", g.Name, p.Name, v.Data())
			}
			f := make([]float64, len(data))
			for i, x := range data {
				f[i] = float64(x)
			}
			out[g.Name+"."+p.Name] = f
		}
	}
	return out
}
