package kern

import (
	"math"

	"github.com/gocurrent/gocurrent/device"
)

// GatherSeq is device.GatherSeq over rows [lo, hi) of Y's steps·batch
// rows: y[t, i] = x[t, index[i]] for t < lengths[i], zeros otherwise
// (index nil: the identity; lengths nil: all steps), rows ldx and ldy
// elements apart. An index outside [0, batch) writes zero rows, whatever
// the sequence's length; it returns the sequence i of the first such
// index, or -1.
func GatherSeq[T Float](steps, batch, cols, ldx, ldy, lo, hi int, index, lengths []int32, x, y []T) (bad int) {
	bad = -1
	for r := lo; r < hi; r++ {
		t, i := r/batch, r%batch
		o := y[r*ldy : r*ldy+cols]
		src, n := i, steps
		if index != nil {
			src = int(index[i])
		}
		if lengths != nil {
			n = int(lengths[i])
		}
		switch {
		case src < 0 || src >= batch:
			clear(o)
			if bad < 0 {
				bad = i
			}
		case t >= n:
			clear(o)
		default:
			k := (t*batch + src) * ldx
			copy(o, x[k:k+cols])
		}
	}
	return bad
}

// Embedding gathers rows of table (device.Embedding): out[i] =
// table[ids[i]] for rows = len(ids). table is [vocab, dim] and out is
// [rows, dim]. An id outside [0, vocab) writes a zero row. It returns the
// index into ids of the first such id, or -1.
func Embedding[T Float](dim, vocab int, table []T, ids []int32, out []T) (bad int) {
	bad = -1
	for i, id := range ids {
		o := out[i*dim : i*dim+dim]
		if id < 0 || int(id) >= vocab {
			clear(o)
			if bad < 0 {
				bad = i
			}
			continue
		}
		copy(o, table[int(id)*dim:int(id)*dim+dim])
	}
	return bad
}

// EmbeddingGrad is the scatter-add dTable[ids[i]] += dOut[i]
// (device.EmbeddingGrad) restricted to columns [c0, c1) of every row, for
// rows = len(ids). dOut is [rows, dim] and dTable [vocab, dim]. The caller
// splits the columns across cores, so parts never write the same element
// and the rows are added in index order: the result is deterministic. An
// id outside [0, vocab) is skipped; it returns the index of the first such
// id, or -1.
func EmbeddingGrad[T Float](dim, vocab, c0, c1 int, ids []int32, dOut, dTable []T) (bad int) {
	bad = -1
	w := c1 - c0
	if w <= 0 {
		// Still report bad ids: a caller may give a core no columns.
		for i, id := range ids {
			if id < 0 || int(id) >= vocab {
				return i
			}
		}
		return -1
	}
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			if bad < 0 {
				bad = i
			}
			continue
		}
		src := dOut[i*dim+c0 : i*dim+c1]
		dst := dTable[int(id)*dim+c0 : int(id)*dim+c1]
		dst = dst[:len(src)]
		for k, v := range src {
			dst[k] += v
		}
	}
	return bad
}

// SoftmaxCrossEntropy computes, for rows = len(targets) rows of logits
// [rows, classes] (device.SoftmaxCrossEntropy),
//
//	loss = scale · Σ_i -log softmax(logits[i])[targets[i]]
//	dLogits[i] = scale · (softmax(logits[i]) - onehot(targets[i]))
//
// The softmax subtracts the row maximum and -log softmax is the
// log-sum-exp minus the target logit; the sums and the loss are float64.
// dLogits is nil for the loss alone, and may be logits. A target outside
// [0, classes) adds nothing to the loss and leaves its dLogits row zero;
// bad is the first such row, or -1. A NaN logit makes its row's loss and
// gradient NaN. dLogits first holds exp(x - max) rounded to T, then that
// times scale/sum: two roundings, so a float32 element is within 1.5 ulp
// of the exact value (one rounding would need a second exp per element).
// The target entries, scale·(p - 1), are computed from float64 values.
func SoftmaxCrossEntropy[T Float](classes int, logits []T, targets []int32, scale float64, dLogits []T, ignore bool, ignoreIndex int32, weights []T) (loss float64, bad int) {
	fast := single[T]()
	bad = -1
	var sum float64
	var buf [chunk]float64
	for r, t := range targets {
		x := logits[r*classes : r*classes+classes]
		var d []T
		if dLogits != nil {
			d = dLogits[r*classes : r*classes+classes]
		}
		if ignore && t == ignoreIndex {
			clear(d)
			continue
		}
		if t < 0 || int(t) >= classes {
			if bad < 0 {
				bad = r
			}
			clear(d)
			continue
		}
		w := 1.0
		if weights != nil {
			w = float64(weights[t])
		}
		m := rowMax(x)
		xt := float64(x[t]) - m // read before d, which may be x, is written
		var s, et float64
		for k0 := 0; k0 < classes; k0 += chunk {
			e := buf[:min(chunk, classes-k0)]
			for k := range e {
				e[k] = float64(x[k0+k]) - m
			}
			expSlice(fast, e)
			s += sum4(e)
			if k0 <= int(t) && int(t) < k0+len(e) {
				et = e[int(t)-k0]
			}
			if d != nil {
				// Keep exp(x-m) in d (past what was read of x) until s is known.
				for k, v := range e {
					d[k0+k] = T(v)
				}
			}
		}
		sum += w * (math.Log(s) - xt)
		if d != nil {
			ws := scale * w
			f := ws / s
			for k, e := range d {
				d[k] = T(float64(e) * f)
			}
			// scale·w·(p_t - 1) from float64 values: rounding p_t to T
			// first would lose the difference when p_t is near 1.
			d[t] = T(ws * (et/s - 1))
		}
	}
	return scale * sum, bad
}

// sum4 is Σ x with four partial sums (elements k mod 4) added in a fixed
// order at the end: deterministic, and four independent addition chains
// instead of one.
func sum4(x []float64) float64 {
	var s0, s1, s2, s3 float64
	k := 0
	for ; k+4 <= len(x); k += 4 {
		v := x[k : k+4 : k+4]
		s0 += v[0]
		s1 += v[1]
		s2 += v[2]
		s3 += v[3]
	}
	for ; k < len(x); k++ {
		s0 += x[k]
	}
	return (s0 + s1) + (s2 + s3)
}

// rowMax is the largest element of a non-empty row as float64. A NaN is
// skipped unless it comes first; either way it reaches the row's sum of
// exponentials, so the row's results are NaN. (A branch that is rarely
// taken beats the builtin max here, whose NaN handling lengthens the
// dependency chain.)
func rowMax[T Float](x []T) float64 {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	return float64(m)
}

// Softmax writes probs[i] = softmax(logits[i] / temperature) for
// rows = len(probs)/classes rows (device.Softmax); temperature 0 means 1.
// probs may be logits. The row maximum is subtracted before dividing by
// the temperature (multiplying by its float64 reciprocal), and the sum is
// float64. probs first holds the exponentials rounded to T, then those
// times 1/sum: two roundings, so a float32 probability is within 1.5 ulp
// of the exact value.
func Softmax[T Float](classes int, logits, probs []T, temperature float64) {
	fast := single[T]()
	inv := 1.0
	if temperature != 0 {
		inv = 1 / temperature
	}
	rows := len(probs) / classes
	var buf [chunk]float64
	for r := range rows {
		x := logits[r*classes : r*classes+classes]
		p := probs[r*classes : r*classes+classes]
		m := rowMax(x)
		var s float64
		for k0 := 0; k0 < classes; k0 += chunk {
			e := buf[:min(chunk, classes-k0)]
			for k := range e {
				e[k] = (float64(x[k0+k]) - m) * inv
			}
			expSlice(fast, e)
			s += sum4(e)
			for k, v := range e {
				p[k0+k] = T(v)
			}
		}
		w := 1 / s
		for k, e := range p {
			p[k] = T(float64(e) * w)
		}
	}
}

// Dropout writes mask[i] = 1/(1-p) if device.DropoutKeep(seed, offset+i, p)
// else 0, and y[i] = x[i]·mask[i] (device.Dropout), for i < len(y). offset
// is the global index of element 0, so a caller that splits the elements
// draws the same mask as one call over all of them. 1/(1-p) is computed in
// float64 and rounded to T. y = x·mask literally, so a dropped NaN or
// infinity gives NaN, as the backward Mul(dY, mask) does. y may be x.
func Dropout[T Float](p float64, seed, offset uint64, x, y, mask []T) {
	keep := T(1 / (1 - p))
	x = x[:len(y)]
	mask = mask[:len(y)]
	for i := range y {
		var m T
		if device.DropoutKeep(seed, offset+uint64(i), p) {
			m = keep
		}
		mask[i] = m
		y[i] = x[i] * m
	}
}
