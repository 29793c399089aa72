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

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
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

// discard is an Env that drops all output. (A zero Env is not enough:
// Train, Sample, Eval and Bench write to its nil writers; only Run
// replaces them with io.Discard.)
var discard = charrnn.Env{Stdout: io.Discard, Stderr: io.Discard}

// run runs the command line args and returns its stdout and stderr.
func run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	err = charrnn.Run(ctx, args, charrnn.Env{Stdout: &o, Stderr: &e})
	return o.String(), e.String(), err
}

// smallTrain is a train command line for a model small enough to train on
// the fixture corpus in well under a second a step on the CPU; extra flags
// follow it and override it (the flag package keeps the last value).
func smallTrain(ckpt string, extra ...string) []string {
	return append([]string{"train", "-data", corpusPath, "-device", "cpu", "-cell", "lstm",
		"-embed", "16", "-hidden", "32", "-layers", "2", "-seq", "16",
		"-val-frac", "0", "-sample", "0", "-checkpoint", ckpt}, extra...)
}

// saveWeights loads the checkpoint from and writes its weights alone to
// to, with the model's metadata changed by meta (a "" value deletes a key).
func saveWeights(t *testing.T, from, to string, meta map[string]string) {
	t.Helper()
	d, err := charrnn.OpenDevice("cpu", cuda.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
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
