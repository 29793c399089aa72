package train_test

import (
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/train"
)

// The metrics of a hand-worked case: labels 0 0 1 1 2 2 (and one padded
// row, -100, left out), predicted 0 1 1 1 0 2. Class 0: precision 1/2,
// recall 1/2, F1 1/2; class 1: 2/3, 1, F1 4/5; class 2: 1, 1/2, F1 2/3;
// accuracy 4/6, macro-F1 (1/2 + 4/5 + 2/3)/3.
func TestConfusion(t *testing.T) {
	onehot := func(preds ...int) []float64 {
		var v []float64
		for _, p := range preds {
			row := []float64{0.1, 0.2, 0.3}
			row[p] = 1
			v = append(v, row...)
		}
		return v
	}
	c := train.NewConfusion(3)
	if err := c.Add(onehot(0, 1, 1, 1, 0, 2, 2), []int32{0, 0, 1, 1, 2, 2, -100}); err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want float64) {
		if !(math.Abs(got-want) <= 1e-15) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	if c.Total() != 6 {
		t.Errorf("Total = %d, want 6 (the padded row left out)", c.Total())
	}
	near("Accuracy", c.Accuracy(), 4.0/6)
	want := []train.ClassFigures{{0.5, 0.5, 0.5, 2}, {2.0 / 3, 1, 0.8, 2}, {1, 0.5, 2.0 / 3, 2}}
	for k, f := range c.PerClass() {
		near("precision", f.Precision, want[k].Precision)
		near("recall", f.Recall, want[k].Recall)
		near("F1", f.F1, want[k].F1)
		if f.Support != want[k].Support {
			t.Errorf("class %d support %d, want %d", k, f.Support, want[k].Support)
		}
	}
	near("MacroF1", c.MacroF1(), (0.5+0.8+2.0/3)/3)
	if err := c.Add(onehot(0), []int32{3}); err == nil || c.Total() != 6 {
		t.Errorf("a label past the classes: %v, total %d; want an error and nothing counted", err, c.Total())
	}
	if err := c.Add([]float64{1, 2}, []int32{0}); err == nil {
		t.Error("2 logits for 1 row of 3 classes: no error")
	}
	if e := train.NewConfusion(2); e.Accuracy() != 0 || e.MacroF1() != 0 {
		t.Error("an empty matrix's figures are not 0")
	}
}
