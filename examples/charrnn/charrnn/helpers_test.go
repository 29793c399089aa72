// The tests run on the device internal/testdevice names (the CPU by
// default, the CUDA device with GOCURRENT_TEST_DEVICE=cuda): library-level
// tests open it with testdevice.Open, command-level tests pass -device
// testdevice.Spec and Env.CUDA = testdevice.CUDAConfig, so one test binary
// checks the char-RNN on either. Device memory is read only through the
// library's host paths (the checkpoint writer, Params.Grad, the commands'
// output). What is exact on one device (a resumed run's checkpoint, a
// sample for a seed) is held exact; what compares different arithmetic
// (PyTorch's, another grouping of the same sums) derives its tolerance
// from float32 rounding (roundingBound). Output that names the device is
// compared with the test device's name. The Example stays on the CPU: it
// is documentation, with fixed output.

package charrnn_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/train"
)

// The fixtures are made by ../testdata/torch_fixture.py (see its docstring).
const testdata = "../testdata"

// corpusPath is the fixtures' corpus: 5,949 ASCII characters, 40 distinct.
var corpusPath = filepath.Join(testdata, "corpus.txt")

func torchCheckpoint(cell string) string {
	return filepath.Join(testdata, "torch_"+cell+".safetensors")
}

func torchTrained(cell string) string {
	return filepath.Join(testdata, "torch_"+cell+"_trained.safetensors")
}

// torchReport is torch_<cell>.json, as torch_fixture.py writes it.
type torchReport struct {
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

func readReport(t *testing.T, cell string) torchReport {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, "torch_"+cell+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r torchReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("torch_%s.json: %v", cell, err)
	}
	if r.Cell != cell || len(r.Train.Losses) != int(r.Train.Steps) || len(r.Train.GradNorms) != int(r.Train.Steps) {
		t.Fatalf("torch_%s.json: cell %q, %d losses and %d norms for %d steps; regenerate it with torch_fixture.py",
			cell, r.Cell, len(r.Train.Losses), len(r.Train.GradNorms), r.Train.Steps)
	}
	return r
}

// tensor is one tensor of a safetensors file, its bytes as stored.
type tensor struct {
	DType string
	Shape []int
	Data  []byte
}

// float32s decodes an F32 tensor.
func (tn tensor) float32s(t *testing.T, name string) []float32 {
	t.Helper()
	if tn.DType != "F32" {
		t.Fatalf("tensor %s is %s, want F32", name, tn.DType)
	}
	v := make([]float32, len(tn.Data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(tn.Data[4*i:]))
	}
	return v
}

// readSafetensors reads a safetensors file with a reader of its own, so
// the tests check the files against the format, not against train's
// decoder.
func readSafetensors(t *testing.T, path string) (map[string]tensor, map[string]string) {
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
	tensors := map[string]tensor{}
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
			t.Fatalf("%s: tensor %s: %v", path, name, err)
		}
		if e.Offsets[0] < 0 || e.Offsets[0] > e.Offsets[1] || e.Offsets[1] > int64(len(data)) {
			t.Fatalf("%s: tensor %s: offsets %v outside %d bytes of data", path, name, e.Offsets, len(data))
		}
		tensors[name] = tensor{DType: e.DType, Shape: e.Shape, Data: data[e.Offsets[0]:e.Offsets[1]]}
	}
	return tensors, meta
}

// modelTensors keeps the tensors that are not the trainer's (no "optim."
// prefix).
func modelTensors(all map[string]tensor) map[string]tensor {
	out := map[string]tensor{}
	for name, tn := range all {
		if !strings.HasPrefix(name, "optim.") {
			out[name] = tn
		}
	}
	return out
}

// maxAbsDiff compares two sets of F32 tensors of the same names and shapes
// and returns the largest elementwise difference and where it is.
func maxAbsDiff(t *testing.T, got, want map[string]tensor) (float64, string) {
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
			t.Fatalf("tensor %s: shape %v, want %v", name, g.Shape, w.Shape)
		}
		gv, wv := g.float32s(t, name), w.float32s(t, name)
		for i := range wv {
			d := math.Abs(float64(gv[i]) - float64(wv[i]))
			if !(d <= worst) { // NaN counts as worst
				worst, where = d, fmt.Sprintf("%s[%d]: got %v, want %v", name, i, gv[i], wv[i])
			}
		}
	}
	return worst, where
}

// sameTensors reports the first tensor whose dtype, shape or bytes differ.
func sameTensors(got, want map[string]tensor) error {
	gotNames := slices.Sorted(maps.Keys(got))
	wantNames := slices.Sorted(maps.Keys(want))
	if !slices.Equal(gotNames, wantNames) {
		return fmt.Errorf("tensors %v, want %v", gotNames, wantNames)
	}
	for _, name := range wantNames {
		g, w := got[name], want[name]
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) {
			return fmt.Errorf("tensor %s: %s%v, want %s%v", name, g.DType, g.Shape, w.DType, w.Shape)
		}
		if !bytes.Equal(g.Data, w.Data) {
			for i := range w.Data {
				if g.Data[i] != w.Data[i] {
					return fmt.Errorf("tensor %s: byte %d of %d differs (got %#x, want %#x)", name, i, len(w.Data), g.Data[i], w.Data[i])
				}
			}
		}
	}
	return nil
}

// relDiff is |got-want| / |want|.
func relDiff(got, want float64) float64 {
	return math.Abs(got-want) / math.Abs(want)
}

// testEnv is an Env writing to stdout and stderr with the test device's
// CUDA configuration (its driver and cuBLAS), as main fills it from the
// environment. (A zero Env's nil writers are not enough for Train, Sample,
// Eval and Bench called directly: only Run replaces them with io.Discard.)
func testEnv(t testing.TB, stdout, stderr io.Writer) charrnn.Env {
	t.Helper()
	return charrnn.Env{Stdout: stdout, Stderr: stderr, CUDA: testdevice.CUDAConfig(t)}
}

// discard is testEnv dropping all output.
func discard(t testing.TB) charrnn.Env {
	t.Helper()
	return testEnv(t, io.Discard, io.Discard)
}

// run runs the command line args with testEnv and returns its stdout and
// stderr. The command line names its device: -device testdevice.Spec(t).
func run(t testing.TB, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = charrnn.Run(ctx, args, testEnv(t, &o, &e))
	return o.String(), e.String(), err
}

// deviceName is the test device's Name, which the commands print ("cpu",
// "cuda:0").
func deviceName(t testing.TB) string {
	t.Helper()
	d, err := charrnn.OpenDevice(testdevice.Spec(t), testdevice.CUDAConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return d.Name()
}

// smallTrain is a train command line on the test device for a model small
// enough to train on the fixture corpus in well under a second a step on
// the CPU; extra flags follow it and override it (the flag package keeps
// the last value).
func smallTrain(t testing.TB, ckpt string, extra ...string) []string {
	t.Helper()
	return append([]string{"train", "-data", corpusPath, "-device", testdevice.Spec(t), "-cell", "lstm",
		"-embed", "16", "-hidden", "32", "-layers", "2", "-seq", "16",
		"-val-frac", "0", "-sample", "0", "-checkpoint", ckpt}, extra...)
}

// saveWeights loads the checkpoint from and writes its weights alone to
// to, with the model's metadata changed by meta (a "" value deletes a key).
func saveWeights(t *testing.T, from, to string, meta map[string]string) {
	t.Helper()
	d := testdevice.Open(t)
	m, _, err := charrnn.Load(d, from)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	md := m.Metadata()
	for k, v := range meta {
		if v == "" {
			delete(md, k)
		} else {
			md[k] = v
		}
	}
	if err := train.SaveWeights(to, d, m.Groups(), md); err != nil {
		t.Fatal(err)
	}
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
// 3,400) a run of these tests bounds. roundingBound is that bound, relative to the
// terms' magnitudes; each test counts its D and says what the magnitudes
// are.
func roundingBound(depth float64) float64 {
	const lambda, u = 8, 0x1p-24
	return lambda * math.Sqrt(depth) * u
}

// magnitudes bounds the magnitudes the roundings of a char-RNN's forward
// pass act on, from its checkpoint tensors, with every weight allowed to
// have moved by up to move (the steps of training since): pre is the
// largest sum of a gate pre-activation's terms, Σ|W_ih[r,·]|·|x| +
// Σ|W_hh[r,·]|·|h| + |b_ih[r]| + |b_hh[r]|, with |h| < 1 and |x| the
// largest embedding value of each column in layer 0 (< 1 above it);
// logit is the largest sum of a logit's terms, Σ|out.weight[c,·]|·|h| +
// |out.bias[c]|.
func magnitudes(t *testing.T, tensors map[string]tensor, move float64) (pre, logit float64) {
	t.Helper()
	get := func(name string) ([]float32, []int) {
		tn, ok := tensors[name]
		if !ok || len(tn.Shape) == 0 {
			t.Fatalf("no tensor %s", name)
		}
		return tn.float32s(t, name), tn.Shape
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

// lossBound is the relative difference the rounding of a forward pass of
// depth D allows in a mean cross-entropy loss: the pre-activations err by
// ≲ ρ·pre (ρ = roundingBound(D)), which σ (slope ≤ 1/4), tanh (≤ 1) and
// products of values in (−1, 1) carry into h with a gain ≤ 1, and a
// logit's weights carry into it with a gain ≤ logit, to which its own
// GEMM adds ≲ ρ·logit: |δz| ≲ ρ·(pre+1)·logit. A row's loss
// log Σexp(z) − z_target moves by Σ_c |p_c − [c = target]|·|δz_c| ≤
// 2·max|δz|, and so does their mean (computed in float64).
func lossBound(depth, pre, logit, loss float64) float64 {
	return 2 * roundingBound(depth) * (pre + 1) * logit / loss
}

// grads downloads the gradient of every parameter of m, by checkpoint
// name, through the host accessor (device memory is not host-accessible
// on a GPU).
func grads(t *testing.T, m *charrnn.Model) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, g := range m.Groups() {
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
