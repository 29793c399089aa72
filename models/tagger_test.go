package models_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
)

// taggerTol: float64 on both sides, the same operations in other orders
// (PyTorch's packed batches, our sorted prefixes): rounding of a few
// hundred terms, ≲ 1e-13 relative; 1e-12 is rnn's torchTol, far below any
// wrong row, gate or ignored position.
const taggerTol = 1e-12

type taggerCase struct {
	Cell          string  `json:"cell"`
	Embed         int     `json:"embed"`
	Hidden        int     `json:"hidden"`
	Layers        int     `json:"layers"`
	Bidirectional bool    `json:"bidirectional"`
	Vocab         int     `json:"vocab"`
	Tags          int     `json:"tags"`
	Seq           int     `json:"seq"`
	Batch         int     `json:"batch"`
	Lengths       []int32 `json:"lengths"`
	Tokens        []int32 `json:"tokens"`
	Labels        []int32 `json:"labels"`
	Params        map[string]struct {
		Shape []int     `json:"shape"`
		Data  []float64 `json:"data"`
	} `json:"params"`
	Loss       float64 `json:"loss"`
	Accuracy   float64 `json:"accuracy"`
	GradParams map[string]struct {
		Data []float64 `json:"data"`
	} `json:"grad_params"`
}

// TestTaggerAgreesWithTorch loads a PyTorch tagger with our names
// (testdata/torch_tagger.py: embedding, packed uni- or bidirectional LSTM
// or GRU, linear per token) into models.Tagger, in float64, and finds
// PyTorch's loss (cross-entropy with ignore_index -100, the mean over the
// real tokens), accuracy and every parameter's gradient.
func TestTaggerAgreesWithTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_tagger.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct{ Cases []taggerCase }
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) != 3 {
		t.Fatalf("%d cases, want 3", len(fx.Cases))
	}
	d := testdevice.Open(t)
	for _, c := range fx.Cases {
		t.Run(fmt.Sprintf("%s/layers%d/bidirectional=%v", c.Cell, c.Layers, c.Bidirectional), func(t *testing.T) {
			items := []string{"<pad>", "<unk>"}
			for i := 2; i < c.Vocab; i++ {
				items = append(items, fmt.Sprintf("w%d", i))
			}
			words, err := loader.NewWords(items)
			check(t, err)
			tags, err := loader.NewLabels([]string{"A", "B", "C", "D"}[:c.Tags])
			check(t, err)
			m, err := models.NewTagger(d, models.TaggerConfig{Cell: c.Cell, Embed: c.Embed, Hidden: c.Hidden, Layers: c.Layers,
				Bidirectional: c.Bidirectional, DType: device.Float64}, words, tags, 1)
			check(t, err)
			defer m.Close()
			setParams(t, m.Groups(), c)
			T, B := c.Seq, c.Batch
			tokens, labels := upInt32(t, d, c.Tokens), upInt32(t, d, c.Labels)
			ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: c.Tags, DType: device.Float64, Ignore: true, IgnoreIndex: loader.IgnoreLabel})
			check(t, err)
			defer ce.Close()
			logits, err := m.Forward(rnn.Train, tokens, T, B, c.Lengths)
			check(t, err)
			real := 0
			for _, n := range c.Lengths {
				real += int(n)
			}
			check(t, ce.ForwardSum(rnn.Train, logits, labels, T*B, 1/float64(real)))
			lg := make([]float64, T*B*c.Tags)
			check(t, device.DownloadSlice(d, lg, logits))
			loss, err := ce.Loss()
			check(t, err)
			if e := math.Abs(loss-c.Loss) / math.Abs(c.Loss); !(e <= taggerTol) {
				t.Errorf("loss %v, PyTorch %v (relative error %.3g)", loss, c.Loss, e)
			}
			if acc := argmaxAccuracy(lg, c.Tags, c.Labels); acc != c.Accuracy {
				t.Errorf("accuracy %v, PyTorch %v", acc, c.Accuracy)
			}
			dl, err := ce.Backward()
			check(t, err)
			check(t, m.Backward(dl))
			checkGrads(t, m.Groups(), c)
			meta := m.Metadata()
			if meta["format"] != models.TaggerFormat || !strings.Contains(meta["config"], `"bidirectional":`+fmt.Sprint(c.Bidirectional)) {
				t.Errorf("metadata %v", meta)
			}
		})
	}
}

func upInt32(t *testing.T, d device.Device, v []int32) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(v)) * 4)
	check(t, err)
	t.Cleanup(func() { d.Free(b) })
	check(t, device.UploadSlice(d, b, v))
	return b
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
