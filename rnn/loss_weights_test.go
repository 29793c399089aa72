package rnn_test

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// CrossEntropy with PyTorch's ignore_index and weight: the loss over a
// batch with ignored rows and class weights, at PyTorch's mean (1/Σ w over
// the rows counted), equals the weighted sum of the plain loss of each
// counted row alone, and the ignored rows get a zero gradient. The same
// float64 sums in another grouping: aloneTol.
func TestCrossEntropyIgnoreAndWeights(t *testing.T) {
	const rows, classes = 6, 4
	d := testdevice.Open(t)
	logits := []float64{0.1, -0.4, 2.0, 0.3, 1.5, 0.2, -1.0, 0.7, -0.3, 0.8, 0.1, 1.9,
		0.6, 0.0, -0.6, 0.2, 3.0, -2.0, 0.5, 0.5, -0.7, 1.1, 0.9, -0.1}
	targets := []int32{1, -100, 3, 0, -100, 2}
	weights := []float64{0.5, 1, 2, 3}
	total := 0.0
	for _, tg := range targets {
		if tg >= 0 {
			total += weights[tg]
		}
	}
	ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: classes, DType: device.Float64, Ignore: true, IgnoreIndex: -100, Weights: weights})
	ok(t, err)
	defer ce.Close()
	ok(t, ce.ForwardSum(rnn.Train, upload(t, d, logits), uploadInt32(t, d, targets), rows, 1/total))
	got, err := ce.Loss()
	ok(t, err)
	dl, err := ce.Backward()
	ok(t, err)
	gotD := download(t, d, dl, rows*classes)

	plain, err := rnn.NewCrossEntropy(d, classes, device.Float64)
	ok(t, err)
	defer plain.Close()
	want, wantD := 0.0, make([]float64, rows*classes)
	for r, tg := range targets {
		if tg < 0 {
			continue
		}
		ok(t, plain.ResetLoss())
		row := logits[r*classes : (r+1)*classes]
		ok(t, plain.ForwardSum(rnn.Train, upload(t, d, row), uploadInt32(t, d, []int32{tg}), 1, weights[tg]/total))
		l, err := plain.Loss()
		ok(t, err)
		want += l
		g, err := plain.Backward()
		ok(t, err)
		copy(wantD[r*classes:], download(t, d, g, classes))
	}
	compare(t, "loss", []float64{got}, []float64{want}, aloneTol)
	compare(t, "dlogits (ignored rows zero)", gotD, wantD, aloneTol)

	_, err = rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: classes, Weights: []float64{1, 2}})
	if !errors.Is(err, device.ErrShape) {
		t.Errorf("2 weights for 4 classes: %v, want a shape error", err)
	}
}
