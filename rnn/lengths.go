package rnn

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/gocurrent/gocurrent/device"
)

// batchShape is the shape of one forward: T steps of B sequences, and
// with variable lengths the order the stack runs them in. The stack sorts
// the sequences by length, longest first, once per forward (keeping the
// permutation to give back the caller's order), so that the sequences
// still running at step t are the first active[t] rows of the step: every
// per-step GEMM and cell kernel covers that prefix and nothing else, and
// the work is the sum of the lengths, not B·T. Without lengths every
// step covers all B rows and nothing is reordered.
type batchShape struct {
	T, B int
	// varlen says the forward was given lengths; the fields below are
	// set only then.
	varlen bool
	// lengths are the caller's, in its order; sorted the same, longest
	// first (ties in the caller's order); perm[i] is the caller's
	// sequence at sorted row i, and inv its inverse.
	lengths, sorted, perm, inv []int32
	// active[t] is the number of sequences longer than t, for t in
	// [0, T]; maxLen is active's first zero, the longest length.
	active []int
	maxLen int
	// idx is perm, inv, sorted and lengths on the device, B Int32 each
	// (set by upload).
	idx device.Buffer
}

// uniformShape is the shape of a forward without lengths.
func uniformShape(T, B int) batchShape { return batchShape{T: T, B: B, maxLen: T} }

// newShape checks lengths (one per sequence, each in [1, T]) and sorts
// them; nil lengths give the uniform shape.
func newShape(op string, T, B int, lengths []int32) (batchShape, error) {
	if lengths == nil {
		return uniformShape(T, B), nil
	}
	if len(lengths) != B {
		return batchShape{}, fmt.Errorf("rnn: %s: %d lengths for a batch of %d sequences, want one per sequence: %w", op, len(lengths), B, device.ErrShape)
	}
	for i, n := range lengths {
		if n < 1 || int(n) > T {
			return batchShape{}, fmt.Errorf("rnn: %s: sequence %d has length %d, want 1 ≤ length ≤ seq = %d: %w", op, i, n, T, device.ErrShape)
		}
	}
	sh := batchShape{T: T, B: B, varlen: true, lengths: slices.Clone(lengths)}
	sh.perm = make([]int32, B)
	for i := range sh.perm {
		sh.perm[i] = int32(i)
	}
	slices.SortStableFunc(sh.perm, func(a, b int32) int { return int(lengths[b]) - int(lengths[a]) })
	sh.sorted, sh.inv = make([]int32, B), make([]int32, B)
	for i, j := range sh.perm {
		sh.sorted[i], sh.inv[j] = lengths[j], int32(i)
	}
	sh.active = make([]int, T+1)
	for _, n := range sh.sorted {
		for t := range int(n) {
			sh.active[t]++
		}
	}
	sh.maxLen = int(sh.sorted[0])
	return sh, nil
}

// rows is the number of sequences step t covers (0 past the longest).
func (sh *batchShape) rows(t int) int {
	if !sh.varlen {
		if t < sh.T {
			return sh.B
		}
		return 0
	}
	if t < 0 || t > sh.T {
		return 0
	}
	return sh.active[t]
}

// idxBytes is the size of the device copy of the permutation and lengths.
func (sh *batchShape) idxBytes() int64 { return int64(4 * sh.B * 4) }

// upload copies perm, inv, sorted and lengths into buf, which becomes
// sh.idx. It returns when the copy is done (device.Device.Upload).
func (sh *batchShape) upload(d device.Device, buf device.Buffer) error {
	b := make([]byte, 0, sh.idxBytes())
	for _, part := range [][]int32{sh.perm, sh.inv, sh.sorted, sh.lengths} {
		for _, v := range part {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
	}
	sh.idx = buf
	return d.Upload(buf, b)
}

// The device copies of the shape's index vectors, B Int32 each.
func (sh *batchShape) devPerm() device.Buffer    { return sh.idx.Elems(device.Int32, 0, sh.B) }
func (sh *batchShape) devInv() device.Buffer     { return sh.idx.Elems(device.Int32, sh.B, sh.B) }
func (sh *batchShape) devSorted() device.Buffer  { return sh.idx.Elems(device.Int32, 2*sh.B, sh.B) }
func (sh *batchShape) devLengths() device.Buffer { return sh.idx.Elems(device.Int32, 3*sh.B, sh.B) }

// toSorted returns the GatherSeq that reads a [T', B, cols] sequence (T'
// = steps) in the caller's order into the stack's, zeroing padded steps
// when steps is T; fromSorted the one back. Without lengths both are the
// identity.
func (sh *batchShape) toSorted(dt device.DType, steps, cols int, x, y device.Buffer) device.GatherSeq {
	g := device.GatherSeq{DType: dt, T: steps, B: sh.B, Cols: cols, X: x, Y: y}
	if sh.varlen {
		g.Index = sh.devPerm()
		if steps == sh.T {
			g.Lengths = sh.devSorted()
		}
	}
	return g
}

func (sh *batchShape) fromSorted(dt device.DType, steps, cols int, x, y device.Buffer) device.GatherSeq {
	g := device.GatherSeq{DType: dt, T: steps, B: sh.B, Cols: cols, X: x, Y: y}
	if sh.varlen {
		g.Index = sh.devInv()
		if steps == sh.T {
			g.Lengths = sh.devLengths()
		}
	}
	return g
}
