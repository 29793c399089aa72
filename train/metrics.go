package train

import "fmt"

// Confusion counts predictions against labels, for the metrics of tagging
// and classification: accuracy, macro-F1 and per-class precision, recall
// and F1. Rows whose label is negative (padding: loader.IgnoreLabel) are
// left out. The zero value is not usable; make one with NewConfusion.
type Confusion struct {
	classes int
	counts  []int64 // counts[label·classes + predicted]
	total   int64
}

// NewConfusion makes an empty confusion matrix over classes classes.
func NewConfusion(classes int) *Confusion {
	return &Confusion{classes: classes, counts: make([]int64, classes*classes)}
}

// Add counts the rows of logits ([rows, classes], the prediction each
// row's largest element, the first on ties) against labels ([rows]). A
// label outside [0, classes) other than a negative one is an error, and
// nothing is counted.
func (c *Confusion) Add(logits []float64, labels []int32) error {
	if len(logits) != len(labels)*c.classes {
		return fmt.Errorf("train: Confusion.Add: %d logits for %d labels of %d classes", len(logits), len(labels), c.classes)
	}
	for i, l := range labels {
		if int(l) >= c.classes {
			return fmt.Errorf("train: Confusion.Add: label %d at row %d, want < %d", l, i, c.classes)
		}
	}
	for i, l := range labels {
		if l < 0 {
			continue
		}
		row := logits[i*c.classes : (i+1)*c.classes]
		best := 0
		for k, v := range row {
			if v > row[best] {
				best = k
			}
		}
		c.counts[int(l)*c.classes+best]++
		c.total++
	}
	return nil
}

// Total is the number of rows counted.
func (c *Confusion) Total() int64 { return c.total }

// Accuracy is the fraction of rows predicted right (0 for none counted).
func (c *Confusion) Accuracy() float64 {
	if c.total == 0 {
		return 0
	}
	var right int64
	for k := range c.classes {
		right += c.counts[k*c.classes+k]
	}
	return float64(right) / float64(c.total)
}

// ClassFigures are one class's precision, recall and F1 (0 where the
// ratio has no rows), and its number of rows (support).
type ClassFigures struct {
	Precision, Recall, F1 float64
	Support               int64
}

// PerClass returns the figures of every class, by class id.
func (c *Confusion) PerClass() []ClassFigures {
	out := make([]ClassFigures, c.classes)
	for k := range c.classes {
		var predicted, actual int64
		for j := range c.classes {
			predicted += c.counts[j*c.classes+k]
			actual += c.counts[k*c.classes+j]
		}
		tp := c.counts[k*c.classes+k]
		f := &out[k]
		f.Support = actual
		if predicted > 0 {
			f.Precision = float64(tp) / float64(predicted)
		}
		if actual > 0 {
			f.Recall = float64(tp) / float64(actual)
		}
		if f.Precision+f.Recall > 0 {
			f.F1 = 2 * f.Precision * f.Recall / (f.Precision + f.Recall)
		}
	}
	return out
}

// MacroF1 is the mean F1 over the classes that occur as labels or
// predictions (scikit-learn's f1_score(average="macro") over the labels
// seen).
func (c *Confusion) MacroF1() float64 {
	var sum float64
	n := 0
	for k, f := range c.PerClass() {
		var predicted int64
		for j := range c.classes {
			predicted += c.counts[j*c.classes+k]
		}
		if f.Support == 0 && predicted == 0 {
			continue
		}
		sum += f.F1
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
