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

// seqLen is the length of sequence b of steps steps: lengths[b] clamped
// to [0, steps], steps when lengths is nil.
func seqLen(lengths []int32, b, steps int) int {
	if lengths == nil {
		return steps
	}
	return max(0, min(int(lengths[b]), steps))
}

// poolChunk is how many columns SeqPool keeps running sums or maxima of at
// once, on the stack: it walks the steps once per chunk, reading each row's
// chunk contiguously.
const poolChunk = 64

// SeqPool is device.SeqPool over sequences [lo, hi) of batch: out[b] is the
// mean (float64 sum in order of steps, divided by the length, rounded
// once) or, with takeMax, the maximum of the first lengths[b] rows (t, b) of y,
// which are ldy elements apart; ties keep the first step and the first NaN
// wins. argmax, [batch, cols] or nil, gets each maximum's step. An empty
// sequence gives zeros and steps -1.
func SeqPool[T Float](steps, batch, cols, ldy, ldout, lo, hi int, takeMax bool, lengths []int32, y, out []T, argmax []int32) {
	for b := lo; b < hi; b++ {
		n := seqLen(lengths, b, steps)
		o := out[b*ldout : b*ldout+cols]
		var am []int32
		if argmax != nil {
			am = argmax[b*cols : b*cols+cols]
		}
		if n == 0 {
			clear(o)
			for c := range am {
				am[c] = -1
			}
			continue
		}
		for c0 := 0; c0 < cols; c0 += poolChunk {
			w := min(poolChunk, cols-c0)
			if takeMax {
				var best [poolChunk]T
				var arg [poolChunk]int32
				copy(best[:w], y[b*ldy+c0:][:w])
				for t := 1; t < n; t++ {
					row := y[(t*batch+b)*ldy+c0:][:w]
					for c, v := range row {
						if v > best[c] || v != v && best[c] == best[c] {
							best[c], arg[c] = v, int32(t)
						}
					}
				}
				copy(o[c0:c0+w], best[:w])
				if am != nil {
					copy(am[c0:c0+w], arg[:w])
				}
				continue
			}
			var sum [poolChunk]float64
			for t := range n {
				row := y[(t*batch+b)*ldy+c0:][:w]
				for c, v := range row {
					sum[c] += float64(v)
				}
			}
			for c := range w {
				o[c0+c] = T(sum[c] / float64(n))
			}
		}
	}
}

// SeqPoolGrad is device.SeqPoolGrad over rows [lo, hi) of dy's
// steps·batch rows, ldy elements apart: dout[b]/n (the quotient in
// float64, rounded once) at the first n = lengths[b] steps of sequence b,
// or with takeMax dout[b, c] at step argmax[b, c] alone; zeros elsewhere. It
// returns the index into argmax of the first step outside [0, n) of a
// sequence of n ≥ 1 steps, which routes nothing, or -1.
func SeqPoolGrad[T Float](steps, batch, cols, lddout, lddy, lo, hi int, takeMax bool, lengths []int32, dout []T, argmax []int32, dy []T) (bad int) {
	bad = -1
	for r := lo; r < hi; r++ {
		t, b := r/batch, r%batch
		o := dy[r*lddy : r*lddy+cols]
		n := seqLen(lengths, b, steps)
		if t >= n {
			clear(o)
			continue
		}
		g := dout[b*lddout : b*lddout+cols]
		if !takeMax {
			for c, v := range g {
				o[c] = T(float64(v) / float64(n))
			}
			continue
		}
		am := argmax[b*cols : b*cols+cols]
		for c, v := range g {
			s := int(am[c])
			if s < 0 || s >= n {
				if bad < 0 {
					bad = b*cols + c
				}
			}
			if s == t {
				o[c] = v
			} else {
				o[c] = 0
			}
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
