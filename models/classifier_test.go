package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// classifierCase is a case of testdata/torch_classifier.json.
type classifierCase struct {
	taggerCase
	Classes int    `json:"classes"`
	Pool    string `json:"pool"`
	Logits  struct {
		Data []float64 `json:"data"`
	} `json:"logits"`
}

// TestClassifierAgreesWithTorch loads a PyTorch classifier with our names
// (testdata/torch_classifier.py: embedding, packed uni- or bidirectional
// LSTM or GRU, the top layer's final states or the mean or maximum of its
// output over each sequence's real positions, linear) into
// models.Classifier, in float64, and finds PyTorch's logits, loss (the
// mean cross-entropy over the sequences), accuracy and every parameter's
// gradient, within taggerTol. It runs the batch twice, so the second pass
// reuses the classifier's state and buffers, the first time with a no-grad
// forward of another shape in between, which must not disturb what the
// training forward left for Backward.
func TestClassifierAgreesWithTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_classifier.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct{ Cases []classifierCase }
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) != 11 {
		t.Fatalf("%d cases, want 11", len(fx.Cases))
	}
	pools := map[string]int{}
	for _, c := range fx.Cases {
		pools[c.Pool]++
	}
	if pools["last"] != 3 || pools["mean"] != 4 || pools["max"] != 4 {
		t.Fatalf("cases per pooling %v, want last 3, mean 4, max 4", pools)
	}
	d := testdevice.Open(t)
	for _, c := range fx.Cases {
		t.Run(fmt.Sprintf("%s/%s/layers%d/bidirectional=%v", c.Pool, c.Cell, c.Layers, c.Bidirectional), func(t *testing.T) {
			words, labels := fixtureVocabs(t, c.Vocab, []string{"x", "y", "z"}[:c.Classes])
			m, err := models.NewClassifier(context.Background(), d, models.ClassifierConfig{Cell: c.Cell, Embed: c.Embed, Hidden: c.Hidden, Layers: c.Layers,
				Bidirectional: c.Bidirectional, Pool: c.Pool, DType: device.Float64}, words, labels, 1)
			check(t, err)
			defer m.Close()
			setParams(t, m.Groups(), c.taggerCase)
			T, B := c.Seq, c.Batch
			tokens, targets := upInt32(t, d, c.Tokens), upInt32(t, d, c.Labels)
			ce, err := rnn.NewCrossEntropy(d, c.Classes, device.Float64)
			check(t, err)
			defer ce.Close()
			for pass := range 2 {
				for _, g := range m.Groups() {
					check(t, g.Params.ZeroGrad())
				}
				check(t, ce.ResetLoss())
				logits, err := m.Forward(rnn.Train, tokens, T, B, c.Lengths)
				check(t, err)
				check(t, ce.Forward(rnn.Train, logits, targets, B, 1))
				lg := make([]float64, B*c.Classes)
				check(t, device.DownloadSlice(d, lg, logits))
				worst := 0.0
				for i, want := range c.Logits.Data {
					worst = math.Max(worst, math.Abs(lg[i]-want)/math.Max(1, math.Abs(want)))
				}
				if !(worst <= taggerTol) {
					t.Errorf("pass %d: logits off by %.3g", pass, worst)
				}
				if pass == 0 {
					// An evaluation between the forward and its Backward:
					// the first two sequences, shortened.
					short := []int32{min(2, c.Lengths[0]), 1}
					_, err := m.Forward(rnn.NoGrad, upInt32(t, d, c.Tokens[:2*T]), T, 2, short)
					check(t, err)
				}
				loss, err := ce.Loss()
				check(t, err)
				if e := math.Abs(loss-c.Loss) / math.Abs(c.Loss); !(e <= taggerTol) {
					t.Errorf("pass %d: loss %v, PyTorch %v (relative error %.3g)", pass, loss, c.Loss, e)
				}
				if acc := argmaxAccuracy(lg, c.Classes, c.Labels); acc != c.Accuracy {
					t.Errorf("pass %d: accuracy %v, PyTorch %v", pass, acc, c.Accuracy)
				}
				dl, err := ce.Backward()
				check(t, err)
				check(t, m.Backward(dl))
				checkGrads(t, m.Groups(), c.taggerCase)
			}
		})
	}
}

// setParams sets every parameter of groups from a PyTorch state dict with
// the groups' names.
func setParams(t *testing.T, groups []train.Group, c taggerCase) {
	t.Helper()
	n := 0
	for _, g := range groups {
		for q := range g.Params.All() {
			v, ok := c.Params[g.Name+"."+q.Name]
			if !ok {
				t.Fatalf("%s.%s is not in PyTorch's state dict", g.Name, q.Name)
			}
			check(t, g.Params.SetValue(q.Name, tensor.New(tensor.WithShape(v.Shape...), tensor.WithBacking(v.Data))))
			n++
		}
	}
	if n != len(c.Params) {
		t.Fatalf("the model has %d parameters, PyTorch's %d", n, len(c.Params))
	}
}

// checkGrads compares every parameter's gradient with PyTorch's.
func checkGrads(t *testing.T, groups []train.Group, c taggerCase) {
	t.Helper()
	for _, g := range groups {
		for q := range g.Params.All() {
			got, err := g.Params.Grad(q.Name)
			check(t, err)
			want := c.GradParams[g.Name+"."+q.Name].Data
			gv := got.Data().([]float64)
			worst := 0.0
			for i := range want {
				worst = math.Max(worst, math.Abs(gv[i]-want[i])/math.Max(1, math.Abs(want[i])))
			}
			if !(worst <= taggerTol) {
				t.Errorf("grad %s.%s off by %.3g", g.Name, q.Name, worst)
			}
		}
	}
}

// argmaxAccuracy is the fraction of rows of logits whose largest element
// is the label, over the labels that are not negative (ignored).
func argmaxAccuracy(logits []float64, classes int, labels []int32) float64 {
	right, n := 0, 0
	for i, l := range labels {
		if l < 0 {
			continue
		}
		n++
		row := logits[i*classes : (i+1)*classes]
		best := 0
		for k := range row {
			if row[k] > row[best] {
				best = k
			}
		}
		if int32(best) == l {
			right++
		}
	}
	return float64(right) / float64(n)
}

// TestClassifierGradientsFiniteDifference checks the classifier's Backward
// with mean and max pooling, every parameter, against central differences
// of its loss (the mean cross-entropy over the sequences), in float64 on a
// tiny batch whose lengths are T, 1 and in between. The step and tolerance
// are rnn's (gradcheck_test.go there): central differences with step
// 1e-6 are within ~1e-10 of the derivative relative to the loss, so a
// gradient within 1e-6 (relative to max(1, |g|)) is right and a wrong
// term, of the order of the gradient, far outside. Random weights give no
// ties, where a maximum is not differentiable.
func TestClassifierGradientsFiniteDifference(t *testing.T) {
	const (
		T, B, V, classes = 4, 3, 7, 3
		fdStep, fdTol    = 1e-6, 1e-6
	)
	lengths := []int32{4, 1, 3}
	d := testdevice.Open(t)
	for _, cfg := range []models.ClassifierConfig{
		{Cell: "lstm", Pool: models.PoolMean, Embed: 3, Hidden: 3, Layers: 2, Bidirectional: true},
		{Cell: "gru", Pool: models.PoolMean, Embed: 3, Hidden: 3, Layers: 2},
		{Cell: "gru", Pool: models.PoolMax, Embed: 3, Hidden: 3, Layers: 1, Bidirectional: true},
		{Cell: "lstm", Pool: models.PoolMax, Embed: 3, Hidden: 3, Layers: 2},
	} {
		t.Run(fmt.Sprintf("%s/%s/layers%d/bidirectional=%v", cfg.Pool, cfg.Cell, cfg.Layers, cfg.Bidirectional), func(t *testing.T) {
			cfg.DType = device.Float64
			words, labels := fixtureVocabs(t, V, []string{"x", "y", "z"})
			m, err := models.NewClassifier(context.Background(), d, cfg, words, labels, 5)
			check(t, err)
			defer m.Close()
			// Weights three times PyTorch's initial ones: gradients that
			// reach the embedding through two layers are then large
			// enough for the check to see (above 1e-3).
			for _, g := range m.Groups() {
				vb, _ := g.Params.Flat()
				v := make([]float64, g.Params.Len())
				check(t, device.DownloadSlice(d, v, vb))
				for i := range v {
					v[i] *= 3
				}
				check(t, device.UploadSlice(d, vb.Slice(0, int64(len(v))*8), v))
			}
			ce, err := rnn.NewCrossEntropy(d, classes, device.Float64)
			check(t, err)
			defer ce.Close()
			ids := make([]int32, T*B)
			for i := range ids {
				if t := i / B; t < int(lengths[i%B]) {
					ids[i] = int32(2 + (5*i+1)%(V-2))
				}
			}
			tokens, targets := upInt32(t, d, ids), upInt32(t, d, []int32{2, 0, 1})
			forward := func(mode rnn.Mode) {
				t.Helper()
				check(t, ce.ResetLoss())
				logits, err := m.Forward(mode, tokens, T, B, lengths)
				check(t, err)
				check(t, ce.Forward(mode, logits, targets, B, 1))
			}
			loss := func() float64 {
				forward(rnn.NoGrad)
				l, err := ce.Loss()
				check(t, err)
				return l
			}
			for _, g := range m.Groups() {
				check(t, g.Params.ZeroGrad())
			}
			forward(rnn.Train)
			dl, err := ce.Backward()
			check(t, err)
			check(t, m.Backward(dl))
			for _, g := range m.Groups() {
				vb, gb := g.Params.Flat()
				n := g.Params.Len()
				vals, grad := make([]float64, n), make([]float64, n)
				check(t, device.DownloadSlice(d, vals, vb))
				check(t, device.DownloadSlice(d, grad, gb))
				set := func() { check(t, device.UploadSlice(d, vb.Slice(0, int64(n)*8), vals)) }
				worst, at, nonzero := 0.0, 0, false
				for i, x := range vals {
					vals[i] = x + fdStep
					set()
					lp := loss()
					vals[i] = x - fdStep
					set()
					lm := loss()
					vals[i] = x
					num := (lp - lm) / (2 * fdStep)
					if e := math.Abs(num-grad[i]) / math.Max(1, math.Abs(num)); !(e <= worst) {
						worst, at = e, i
					}
					nonzero = nonzero || math.Abs(num) > 1e-3
				}
				set()
				if !(worst <= fdTol) { // a NaN too
					t.Errorf("%s[%d]: analytic gradient off by %.3g (> %g)", g.Name, at, worst, fdTol)
				}
				if !nonzero {
					t.Errorf("%s: every finite difference is below 1e-3; the check would not see a wrong gradient", g.Name)
				}
			}
		})
	}
}

// A classifier saved with its metadata loads back with the same shape,
// vocabularies and weights, and gives the same logits, bit for bit, for
// each pooling; its metadata is the checkpoint contract's.
func TestClassifierSaveLoad(t *testing.T) {
	d := testdevice.Open(t)
	chars, err := loader.NewWords([]string{"<pad>", "<unk>", "a", "b", "c", "é"})
	check(t, err)
	labels, err := loader.NewLabels([]string{"neg", "pos", "neutral"})
	check(t, err)
	lengths := []int32{3, 1, 4, 2}
	const T, B = 4, 4
	ids := make([]int32, T*B)
	for i := range ids {
		if i/B < int(lengths[i%B]) {
			ids[i] = int32(2 + i%4)
		}
	}
	tokens := upInt32(t, d, ids)
	for _, cfg := range []models.ClassifierConfig{
		{Cell: "gru", Embed: 4, Hidden: 3, Layers: 2, Bidirectional: true, Dropout: 0.25, Pool: models.PoolMax, Input: models.InputChars},
		{Cell: "lstm", Embed: 3, Hidden: 5, Layers: 1, Pool: models.PoolMean, Input: models.InputChars},
		{Cell: "lstm", Embed: 3, Hidden: 2, Layers: 2, Bidirectional: true, Input: models.InputChars}, // "last", recorded as such
	} {
		t.Run(fmt.Sprintf("pool=%q/%s", cfg.Pool, cfg.Cell), func(t *testing.T) {
			m, err := models.NewClassifier(context.Background(), d, cfg, chars, labels, 7)
			check(t, err)
			defer m.Close()
			meta := m.Metadata()
			var back models.ClassifierConfig
			check(t, json.Unmarshal([]byte(meta["config"]), &back))
			back.DType = device.Float32 // not recorded: LoadClassifier builds float32
			var vocab, labs []string
			check(t, json.Unmarshal([]byte(meta["vocab"]), &vocab))
			check(t, json.Unmarshal([]byte(meta["labels"]), &labs))
			if meta["format"] != models.ClassifierFormat || back != m.Config() || len(meta) != 4 ||
				!slices.Equal(vocab, chars.Items()) || !slices.Equal(labs, labels.Items()) {
				t.Errorf("metadata %v, want the format, config %+v, vocab and labels", meta, m.Config())
			}
			for _, key := range []string{`"cell"`, `"embed"`, `"hidden"`, `"layers"`, `"bidirectional"`, `"dropout"`, `"pool"`, `"input":"chars"`} {
				if !strings.Contains(meta["config"], key) {
					t.Errorf("config metadata %s lacks %s", meta["config"], key)
				}
			}
			path := filepath.Join(t.TempDir(), "classifier.safetensors")
			check(t, train.SaveWeights(path, d, m.Groups(), meta))
			loaded, ck, err := models.LoadClassifier(context.Background(), d, path)
			check(t, err)
			defer loaded.Close()
			if ck == nil || loaded.Config() != m.Config() || !slices.Equal(loaded.Vocab().Items(), chars.Items()) ||
				!slices.Equal(loaded.Labels().Items(), labels.Items()) {
				t.Errorf("loaded %+v %v %v, saved %+v %v %v", loaded.Config(), loaded.Vocab().Items(), loaded.Labels().Items(),
					m.Config(), chars.Items(), labels.Items())
			}
			logits := func(m *models.Classifier) []float32 {
				l, err := m.Forward(rnn.NoGrad, tokens, T, B, lengths)
				check(t, err)
				v := make([]float32, B*labels.Len())
				check(t, device.DownloadSlice(d, v, l))
				return v
			}
			if a, b := logits(m), logits(loaded); !slices.Equal(a, b) {
				t.Errorf("logits %v after the round trip, %v before", b, a)
			}
		})
	}
}

// LoadClassifier refuses, with an error wrapping train.ErrMismatch, a
// checkpoint whose metadata is missing, of another format or inconsistent
// with itself or with the tensors; a missing file is fs.ErrNotExist.
func TestLoadClassifierMismatch(t *testing.T) {
	d := testdevice.Open(t)
	words, err := loader.NewWords([]string{"<pad>", "<unk>", "good", "bad"})
	check(t, err)
	labels, err := loader.NewLabels([]string{"neg", "pos"})
	check(t, err)
	m, err := models.NewClassifier(context.Background(), d, models.ClassifierConfig{Cell: "lstm", Embed: 3, Hidden: 2, Layers: 1, Pool: models.PoolMean}, words, labels, 1)
	check(t, err)
	defer m.Close()
	dir := t.TempDir()
	// edit returns the model's metadata with key set to value, or deleted
	// for "".
	edit := func(key, value string) map[string]string {
		meta := m.Metadata()
		if value == "" {
			delete(meta, key)
		} else {
			meta[key] = value
		}
		return meta
	}
	config := func(old, new string) map[string]string {
		c := m.Metadata()["config"]
		if !strings.Contains(c, old) {
			t.Fatalf("config %s has no %s", c, old)
		}
		return edit("config", strings.Replace(c, old, new, 1))
	}
	for _, c := range []struct {
		name string
		meta map[string]string
	}{
		{"NoFormat", edit("format", "")},
		{"NoConfig", edit("config", "")},
		{"NoVocab", edit("vocab", "")},
		{"NoLabels", edit("labels", "")},
		{"OtherFormat", edit("format", models.TaggerFormat)},
		{"ConfigNotJSON", edit("config", "{cell: lstm")},
		{"Pool", config(`"pool":"mean"`, `"pool":"attention"`)},
		{"Input", config(`"input":"words"`, `"input":"bytes"`)},
		// Characters promised, words given.
		{"InputChars", config(`"input":"words"`, `"input":"chars"`)},
		{"Cell", config(`"cell":"lstm"`, `"cell":"rnn"`)},
		// The tensors are of a hidden size of 2 and a vocabulary of 4.
		{"Hidden", config(`"hidden":2`, `"hidden":3`)},
		{"VocabSize", edit("vocab", `["<pad>","<unk>","good"]`)},
		{"VocabReserved", edit("vocab", `["<unk>","<pad>","good","bad"]`)},
		{"VocabNotJSON", edit("vocab", `["<pad>","<unk>",`)},
		{"LabelsSize", edit("labels", `["neg","pos","neutral"]`)},
		{"LabelsEmpty", edit("labels", `[]`)},
		{"LabelsRepeat", edit("labels", `["neg","neg"]`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".safetensors")
			check(t, train.SaveWeights(path, d, m.Groups(), c.meta))
			_, _, err := models.LoadClassifier(context.Background(), d, path)
			t.Log(err)
			if !errors.Is(err, train.ErrMismatch) {
				t.Errorf("LoadClassifier = %v, want an error wrapping train.ErrMismatch", err)
			}
		})
	}
	t.Run("CharRNN", func(t *testing.T) {
		if _, _, err := models.LoadClassifier(context.Background(), d, "testdata/torch_lstm.safetensors"); !errors.Is(err, train.ErrMismatch) {
			t.Errorf("loading a char-RNN checkpoint as a classifier: %v, want ErrMismatch", err)
		}
	})
	t.Run("Missing", func(t *testing.T) {
		if _, _, err := models.LoadClassifier(context.Background(), d, filepath.Join(dir, "none.safetensors")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("LoadClassifier of a missing file = %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("Defaults", func(t *testing.T) {
		// A config without pool and input (written by hand, say) is a
		// "last" classifier of words.
		path := filepath.Join(dir, "defaults.safetensors")
		check(t, train.SaveWeights(path, d, m.Groups(), config(`,"pool":"mean","input":"words"`, ``)))
		loaded, _, err := models.LoadClassifier(context.Background(), d, path)
		check(t, err)
		defer loaded.Close()
		if c := loaded.Config(); c.Pool != models.PoolLast || c.Input != models.InputWords {
			t.Errorf("pool %q, input %q; want the defaults, last and words", c.Pool, c.Input)
		}
	})
	// A classifier's file is not a tagger's either.
	path := filepath.Join(dir, "classifier.safetensors")
	check(t, train.SaveWeights(path, d, m.Groups(), m.Metadata()))
	if _, _, err := models.LoadTagger(context.Background(), d, path); !errors.Is(err, train.ErrMismatch) {
		t.Errorf("LoadTagger of a classifier checkpoint = %v, want ErrMismatch", err)
	}
}
