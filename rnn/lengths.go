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
	// idx is perm, inv, sorted and lengths on the device, B Int32 each,
	// the maps packing chunks of chunk steps from element packAt on,
	// active's first T from element rowsAt on, with wave the maps
	// packing each piece (pieceAt on), and the ends' rows (posAt on)
	// (set by upload).
	idx                   device.Buffer
	chunk, packAt, rowsAt int
	// wave is the window of a forward's wavefront whose windows are not
	// whole chunks (0 otherwise): its projections and its Backward's
	// products pack each window's part of a chunk apart (piece), with
	// maps of their own.
	wave, pieceAt int
	// posAt is where the rows of the sequences' ends lie among idx
	// (devEnds, devSortedEnds, devLasts: win is the steps of the windows
	// Backward walks back, to which the last's are relative), and with
	// entries the rows that put each sequence's initial state at every
	// position (devEntries).
	posAt, win int
	entries    bool
	// cEntries says the rows that put each sorted sequence's initial c at
	// every position of a window of win steps follow (devCEntries): a
	// bidirectional LSTM's Recompute, whose reverse walks keep c a window
	// at a time.
	cEntries bool
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

// idxBytes is the size of the device copy of the permutation and lengths,
// with the lengths past the start of each of segs segments after the
// first, the maps of every chunk of c steps of the T (packMaps), and the
// rows each step runs (the walks' RowsAt).
func (sh *batchShape) idxBytes(segs, c int) int64 {
	n := (4+2*max(segs-1, 0))*sh.B + sh.packChunks(c)*4*c*sh.B + sh.T
	if sh.wave > 0 {
		n += 4 * sh.T * sh.B
	}
	n += 3 * sh.B
	if sh.entries {
		n += (sh.T + 1) * sh.B
	}
	if sh.cEntries {
		n += (sh.win + 1) * sh.B
	}
	return int64(n) * 4
}

// packChunks is the number of chunks of c steps, from step 0, of T steps
// (those past the longest length have no running rows: their maps serve
// nobody, but the pass's layout then depends on T and B alone).
func (sh *batchShape) packChunks(c int) int { return (sh.T + c - 1) / c }

// upload copies perm, inv, sorted and lengths into buf, which becomes
// sh.idx, and for each segment i of seg steps after the first (i < segs)
// the steps past its start of every sequence, max(0, length - i·seg),
// sorted and in the caller's order, for the gathers of that segment alone;
// then the maps that pack each chunk of c steps (packMaps), and the rows
// each step runs. It returns when the copy is done
// (device.Device.Upload).
func (sh *batchShape) upload(d device.Device, buf device.Buffer, seg, segs, c int) error {
	v := make([]int32, 0, sh.idxBytes(segs, c)/4)
	v = append(append(append(append(v, sh.perm...), sh.inv...), sh.sorted...), sh.lengths...)
	for i := 1; i < segs; i++ {
		for _, ls := range [][]int32{sh.sorted, sh.lengths} {
			for _, n := range ls {
				v = append(v, max(n-int32(i*seg), 0))
			}
		}
	}
	sh.chunk, sh.packAt = c, len(v)
	for k := range sh.packChunks(c) {
		v = sh.packMaps(v, k*c, c)
	}
	sh.rowsAt = len(v)
	for _, n := range sh.active[:sh.T] {
		v = append(v, int32(n))
	}
	if sh.wave > 0 {
		sh.pieceAt = len(v)
		for a := 0; a < sh.T; {
			p := sh.piece(a)
			v = sh.packMaps(v, a, p.t1-a)
			a = p.t1
		}
	}
	sh.posAt = len(v)
	for j, n := range sh.lengths {
		v = append(v, n*int32(sh.B)+sh.inv[j])
	}
	for i, n := range sh.sorted {
		v = append(v, n*int32(sh.B)+int32(i))
	}
	for i, n := range sh.sorted {
		v = append(v, (n-1)%int32(sh.win)*int32(sh.B)+int32(i))
	}
	if sh.entries {
		for range sh.T + 1 {
			v = append(v, sh.perm...)
		}
	}
	if sh.cEntries {
		for range sh.win + 1 {
			for i := range sh.B {
				v = append(v, int32(i))
			}
		}
	}
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	sh.idx = buf
	return d.Upload(buf, b)
}

// packMaps appends to v the four index vectors, c·B Int32 each, that pack
// the c steps from step a of a per-step buffer (rows r = (t-a)·B + i,
// i < B) into the running rows of those steps one step after the other
// (packed row j, PyTorch's PackedSequence data) and back, as GatherSeq
// over one step of c·B rows (packSeq): packed row j's row, and whether j
// is one (1 below the chunk's running rows, 0 past them); row r's packed
// row (0 for a padded row), and whether r runs.
func (sh *batchShape) packMaps(v []int32, a, c int) []int32 {
	n := c * sh.B
	at := len(v)
	v = append(v, make([]int32, 4*n)...)
	from, fromOK, to, toOK := v[at:at+n], v[at+n:at+2*n], v[at+2*n:at+3*n], v[at+3*n:]
	j := 0
	for t := a; t < a+c; t++ {
		for i := range sh.rows(t) {
			r := (t-a)*sh.B + i
			from[j], fromOK[j], to[r], toOK[r] = int32(r), 1, int32(j), 1
			j++
		}
	}
	return v
}

// piece is the piece of the steps that starts at step a, with wave: up
// to the next end of a window of the wavefront or of a chunk, whichever
// comes first. The pieces of a window are where its Backward packs its
// input gradient's products (stack.packedWindowGrads).
func (sh *batchShape) piece(a int) span {
	next := func(n int) int { return (a/n + 1) * n }
	return span{a, min(next(sh.wave), next(sh.chunk), sh.T)}
}

// chunkAt is the chunk of the steps that starts at step a, cut at end:
// with wave its piece, else up to the next multiple of chunk (the steps
// the packing maps were made for, packs, when a is where one starts).
func (sh *batchShape) chunkAt(a, end int) span {
	if sh.wave > 0 {
		p := sh.piece(a)
		return span{a, min(p.t1, end)}
	}
	return span{a, min((a/sh.chunk+1)*sh.chunk, end, sh.T)}
}

// running is the number of running rows of the steps of ch.
func (sh *batchShape) running(ch span) int {
	n := 0
	for t := ch.t0; t < ch.t1; t++ {
		n += sh.rows(t)
	}
	return n
}

// projection says how stack.project computes the input projection of
// the steps of ch, a chunk (chunkAt's): over the chunk's first n rows,
// or, packed, over its n running rows gathered apart. Its first n rows
// are its running rows when every step but its last runs the whole
// batch (the sequences run sorted, longest first). n is 0 for a chunk
// past the longest sequence (no product: no step reads it), and every
// row of a chunk that packs cannot cover (chunkAt gives none).
func (sh *batchShape) projection(ch span) (n int, packed bool) {
	rows, n := (ch.t1-ch.t0)*sh.B, sh.running(ch)
	switch {
	case n == 0 || n == rows || ch.t1-ch.t0 == 1 || sh.rows(ch.t1-2) == sh.B:
		return n, false
	case sh.packs(ch):
		return n, true
	}
	return rows, false
}

// projectsPacked reports whether a chunk of the steps of a window from
// step 0 to T, or of one of the wavefront's windows, is projected packed
// (projection): whether a forward without grad needs buffers to pack
// into.
func (sh *batchShape) projectsPacked() bool {
	for a := 0; a < sh.T; {
		ch := sh.chunkAt(a, sh.T)
		if _, packed := sh.projection(ch); packed {
			return true
		}
		a = ch.t1
	}
	return false
}

// packRoom is the rows of the largest chunk chunkAt gives (chunk steps,
// a piece's with wave, at most T, times B): where stack.project packs a
// chunk's input, the rows of one part of it (pass.pkIn), and the most its
// product writes.
func (sh *batchShape) packRoom() int {
	steps := min(sh.chunk, sh.T)
	if sh.wave > 0 {
		steps = min(steps, sh.wave)
	}
	return steps * sh.B
}

// packs reports whether packSeq packs the steps of ch: a whole chunk,
// or with wave a piece.
func (sh *batchShape) packs(ch span) bool {
	return sh.wholeChunk(ch) || sh.isPiece(ch)
}

// wholeChunk reports whether ch is a chunk of the packing maps: chunk
// steps from a multiple of chunk (the last up to T).
func (sh *batchShape) wholeChunk(ch span) bool {
	c := sh.chunk
	return ch.t0%c == 0 && (ch.t1-ch.t0 == c || ch.t1 == sh.T && ch.t1-ch.t0 < c)
}

// isPiece reports whether ch is a piece of the wavefront's (with wave).
func (sh *batchShape) isPiece(ch span) bool { return sh.wave > 0 && sh.piece(ch.t0) == ch }

// packSeq returns the GatherSeq that packs the running rows of chunk ch's
// steps of x (a [steps, B, cols] buffer's steps ch.t0 to ch.t1) into y,
// one step after the other, zeros past them (pack), or back from y into x,
// zeros at the padded rows (!pack). ch is a chunk of the steps, chunk
// steps from a multiple of chunk (the last up to T), or a piece (with
// wave): those the maps were made for (upload); y holds (ch.t1-ch.t0)·B
// rows.
func (sh *batchShape) packSeq(dt device.DType, ch span, cols int, x, y device.Buffer, pack bool) device.GatherSeq {
	n, c := (ch.t1-ch.t0)*sh.B, sh.chunk
	at, stride := sh.packAt+ch.t0/c*4*c*sh.B, c*sh.B
	switch {
	case sh.wholeChunk(ch):
	case sh.isPiece(ch):
		at, stride = sh.pieceAt+4*ch.t0*sh.B, n
	default:
		// A part of a chunk would pack the running rows of its steps past
		// the part too.
		panic(fmt.Sprintf("rnn: steps [%d, %d) are neither within one chunk of %d steps from its start nor a piece", ch.t0, ch.t1, c))
	}
	m := func(i int) device.Buffer { return sh.idx.Elems(device.Int32, at+i*stride, n) }
	y = y.Elems(dt, 0, n*cols)
	if pack {
		return device.GatherSeq{DType: dt, T: 1, B: n, Cols: cols, Index: m(0), Lengths: m(1), X: x, Y: y}
	}
	return device.GatherSeq{DType: dt, T: 1, B: n, Cols: cols, Index: m(2), Lengths: m(3), X: y, Y: x}
}

// devRows is the device copy of the rows steps [a, b) run, b-a Int32 (a
// walk's RowsAt).
func (sh *batchShape) devRows(a, b int) device.Buffer {
	return sh.idx.Elems(device.Int32, sh.rowsAt+a, b-a)
}

// devEnds is, for each sequence in the caller's order, the row at its
// length's position of a [T+1, B] per-position buffer in the stack's
// order, length·B + its sorted row, B Int32: where the forward
// direction's walk leaves its final state (position length), and where
// the reverse one's reads its initial state. devSortedEnds is the same in
// the stack's order. As Embedding's IDs, they gather a sequence's state
// from where its walk leaves or reads it.
func (sh *batchShape) devEnds() device.Buffer { return sh.idx.Elems(device.Int32, sh.posAt, sh.B) }
func (sh *batchShape) devSortedEnds() device.Buffer {
	return sh.idx.Elems(device.Int32, sh.posAt+sh.B, sh.B)
}

// devLasts is, for each sequence in the stack's order, the row of its
// last step in the per-step buffer of the window of win steps that holds
// it, ((length-1) mod win)·B + its row, B Int32: where the gradient with
// respect to its final state joins that of its output in Backward's
// window (stack.finalGrads).
func (sh *batchShape) devLasts() device.Buffer {
	return sh.idx.Elems(device.Int32, sh.posAt+2*sh.B, sh.B)
}

// devEntries is, for every row of a [T+1, B] per-position buffer in the
// stack's order, the sequence in the caller's order it holds (perm, T+1
// times), (T+1)·B Int32 (with entries): as Embedding's IDs, they put every
// sequence's initial state at each of its positions, the reverse walk's
// entry among them.
func (sh *batchShape) devEntries() device.Buffer {
	return sh.idx.Elems(device.Int32, sh.posAt+3*sh.B, (sh.T+1)*sh.B)
}

// devCEntries is, for every row of a window's [win+1, B] per-position
// buffer in the stack's order, its sorted row (0 to B-1, win+1 times),
// (win+1)·B Int32 (with cEntries): as Embedding's IDs over a sorted
// [B, H] state, they put every sequence's state at each position of the
// window.
func (sh *batchShape) devCEntries() device.Buffer {
	at := sh.posAt + 3*sh.B
	if sh.entries {
		at += (sh.T + 1) * sh.B
	}
	return sh.idx.Elems(device.Int32, at, (sh.win+1)*sh.B)
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

// segmentToSorted and segmentFromSorted are toSorted and fromSorted over
// w, the i-th segment alone ([w.t1-w.t0, B, cols] sequences), with zeros
// past each sequence's end. The lengths past the segment's start are on
// the device for a forward that keeps its boundaries (upload).
func (sh *batchShape) segmentToSorted(dt device.DType, i int, w span, cols int, x, y device.Buffer) device.GatherSeq {
	return device.GatherSeq{DType: dt, T: w.t1 - w.t0, B: sh.B, Cols: cols, X: x, Y: y, Index: sh.devPerm(), Lengths: sh.past(i, 0)}
}

func (sh *batchShape) segmentFromSorted(dt device.DType, i int, w span, cols int, x, y device.Buffer) device.GatherSeq {
	return device.GatherSeq{DType: dt, T: w.t1 - w.t0, B: sh.B, Cols: cols, X: x, Y: y, Index: sh.devInv(), Lengths: sh.past(i, 1)}
}

// past is the device copy of the steps past segment i's start of every
// sequence, sorted (order 0) or in the caller's order (order 1).
func (sh *batchShape) past(i, order int) device.Buffer {
	if i == 0 {
		return sh.idx.Elems(device.Int32, (2+order)*sh.B, sh.B)
	}
	return sh.idx.Elems(device.Int32, (4+2*(i-1)+order)*sh.B, sh.B)
}
