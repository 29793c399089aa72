package models_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// TestClassifierAgreesWithTorch loads a PyTorch classifier with our names
// (testdata/torch_classifier.py: embedding, packed uni- or bidirectional
// LSTM or GRU, the top layer's final states, linear) into
// models.Classifier, in float64, and finds PyTorch's loss (the mean
// cross-entropy over the sequences), accuracy and every parameter's
// gradient, within taggerTol. It runs the batch twice, so the second
// pass reuses the classifier's state and buffers.
func TestClassifierAgreesWithTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_classifier.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			taggerCase
			Classes int `json:"classes"`
		}
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) != 3 {
		t.Fatalf("%d cases, want 3", len(fx.Cases))
	}
	d := testdevice.Open(t)
	for _, c := range fx.Cases {
		t.Run(fmt.Sprintf("%s/layers%d/bidirectional=%v", c.Cell, c.Layers, c.Bidirectional), func(t *testing.T) {
			words, labels := fixtureVocabs(t, c.Vocab, []string{"x", "y", "z"}[:c.Classes])
			m, err := models.NewClassifier(d, models.ClassifierConfig{Cell: c.Cell, Embed: c.Embed, Hidden: c.Hidden, Layers: c.Layers,
				Bidirectional: c.Bidirectional, DType: device.Float64}, words, labels, 1)
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
