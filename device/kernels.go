package device

import (
	"fmt"
	"math"

	"github.com/gocurrent/gocurrent/internal/checked"
)

// Kernels are the operations the layers and the trainer run on a device.
// Each takes its arguments as one struct of buffers and shapes, checks them
// (Check) and queues the work on the compute stream: a nil error means
// the work was queued, not that it ran. Buffers must belong to the device;
// a buffer may hold more than the shape needs, never less. Outputs must not
// overlap inputs unless the argument's documentation says it may alias.
//
// Layouts are row-major; "[B, H]" is B rows of H contiguous elements.
// Float kernels take DType Float32 or Float64; ids and targets are Int32.
// Scalars (learning rates, scales) are float64 and rounded to DType.
type Kernels interface {
	Gemm(a Gemm) error

	LSTMCell(a LSTMCell) error
	LSTMCellGrad(a LSTMCellGrad) error
	GRUCell(a GRUCell) error
	GRUCellGrad(a GRUCellGrad) error

	GatherSeq(a GatherSeq) error
	SeqPool(a SeqPool) error
	SeqPoolGrad(a SeqPoolGrad) error

	Embedding(a Embedding) error
	EmbeddingGrad(a EmbeddingGrad) error
	SoftmaxCrossEntropy(a SoftmaxCrossEntropy) error
	Softmax(a Softmax) error
	Sample(a Sample) error
	Dropout(a Dropout) error
	Advance(a Advance) error

	AddBias(a AddBias) error
	SumRows(a SumRows) error
	Fill(a Fill) error
	Copy(a Copy) error
	Axpby(a Axpby) error
	Mul(a Mul) error
	Clamp(a Clamp) error
	SumSquares(a SumSquares) error

	SGD(a SGD) error
	Adam(a Adam) error
	RMSprop(a RMSprop) error
	StepGuard(a StepGuard) error
	GuardedCopy(a GuardedCopy) error
}

// Gemm computes C = Alpha·op(A)·op(B) + Beta·C for row-major matrices,
// where op(X) is X or its transpose: op(A) is M×K, op(B) is K×N, C is M×N.
// With Batch > 1 it does Batch such products, matrix i of each operand
// starting Stride elements after matrix i-1 (strided batched GEMM). With
// Beta = 0, C is not read (NaNs in it do not propagate).
type Gemm struct {
	DType          DType // Float32 or Float64
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float64
	A, B, C        Buffer
	// LdA, LdB, LdC are the row strides of the stored matrices, in
	// elements; 0 means packed (the stored matrix's column count).
	LdA, LdB, LdC int
	// Batch is the number of products; 0 means 1.
	Batch int
	// StrideA, StrideB, StrideC are the distances between consecutive
	// matrices in elements; 0 means packed (rows × leading dimension).
	StrideA, StrideB, StrideC int
}

// WithDefaults returns g with its zero Ld, Batch and Stride fields replaced
// by the packed values they stand for.
func (g Gemm) WithDefaults() Gemm {
	ra, ca := g.M, g.K
	if g.TransA {
		ra, ca = ca, ra
	}
	rb, cb := g.K, g.N
	if g.TransB {
		rb, cb = cb, rb
	}
	if g.LdA == 0 {
		g.LdA = ca
	}
	if g.LdB == 0 {
		g.LdB = cb
	}
	if g.LdC == 0 {
		g.LdC = g.N
	}
	if g.Batch == 0 {
		g.Batch = 1
	}
	if g.StrideA == 0 {
		g.StrideA = ra * g.LdA
	}
	if g.StrideB == 0 {
		g.StrideB = rb * g.LdB
	}
	if g.StrideC == 0 {
		g.StrideC = g.M * g.LdC
	}
	return g
}

// Check reports whether the arguments are valid for d.
func (g Gemm) Check(d Device) error {
	c := checker{d: d, kernel: "Gemm"}
	c.float(g.DType)
	c.positive("M", g.M)
	c.positive("N", g.N)
	c.positive("K", g.K)
	c.nonNegative("Batch", g.Batch)
	if c.err != nil {
		return c.err
	}
	w := g.WithDefaults()
	ra, ca := g.M, g.K
	if g.TransA {
		ra, ca = ca, ra
	}
	rb, cb := g.K, g.N
	if g.TransB {
		rb, cb = cb, rb
	}
	c.atLeast("LdA", w.LdA, ca)
	c.atLeast("LdB", w.LdB, cb)
	c.atLeast("LdC", w.LdC, g.N)
	// WithDefaults's strides are products that may have overflowed.
	c.fits("A", c.mul(ra, w.LdA))
	c.fits("B", c.mul(rb, w.LdB))
	c.fits("C", c.mul(g.M, w.LdC))
	c.nonNegative("StrideA", w.StrideA)
	c.nonNegative("StrideB", w.StrideB)
	c.nonNegative("StrideC", w.StrideC)
	if c.err != nil {
		return c.err
	}
	c.buf("A", g.A, g.DType, c.add(c.mul(w.Batch-1, w.StrideA), c.span(ra, w.LdA, ca)))
	c.buf("B", g.B, g.DType, c.add(c.mul(w.Batch-1, w.StrideB), c.span(rb, w.LdB, cb)))
	c.buf("C", g.C, g.DType, c.add(c.mul(w.Batch-1, w.StrideC), c.span(g.M, w.LdC, g.N)))
	return c.err
}

// LSTMCell is the pointwise part of one LSTM time step, PyTorch's
// equations with gate order i, f, g, o:
//
//	i = σ(pre_i + b_i)   f = σ(pre_f + b_f)   g = tanh(pre_g + b_g)   o = σ(pre_o + b_o)
//	c = f·cPrev + i·g    h = o·tanh(c)
//
// where pre = x·W_ihᵀ + hPrev·W_hhᵀ and b = BiasIH + BiasHH.
//
// The recurrent product hPrev·W_hhᵀ is either already in Pre (a Gemm with
// Beta 1 before the call) or given as HPrev and W, and then added into Pre
// by the call itself: the fused form, one call per step instead of two,
// which a device may run as one kernel (the CUDA device does for small
// Hidden, where the step's two launches cost more than their arithmetic)
// or as RecurrentGemm followed by the cell (the CPU device always does:
// its results are those of the two calls to the bit, and it counts them as
// the two calls, one GEMM and one launch, in device.Counts). A fused
// kernel sums each product in an order of its own, so its results agree
// with the two calls' within a GEMM's rounding (devicetest.SumTolerance),
// not to the bit; the order depends on the shape only, so a device gives
// the same results on every run.
type LSTMCell struct {
	DType         DType
	Batch, Hidden int
	// Pre is [Batch, 4·Hidden], the gate pre-activations without bias.
	Pre Buffer
	// BiasIH and BiasHH are [4·Hidden] each, or none for no bias.
	BiasIH, BiasHH Buffer
	// CPrev is [Batch, Hidden], the previous cell state.
	CPrev Buffer
	// C and H are [Batch, Hidden], the new cell and hidden state. C may
	// be CPrev (the cell state updated in place).
	C, H Buffer
	// Act is [Batch, 4·Hidden]: the activated gates i, f, g, o, saved for
	// LSTMCellGrad; none in no-grad mode. It may be Pre.
	Act Buffer
	// HPrev [Batch, Hidden], the previous hidden state, and W
	// [4·Hidden, Hidden], the recurrent weights W_hh, are the optional
	// recurrent product, both or neither. When given, the call first adds
	// HPrev·Wᵀ into Pre (RecurrentGemm), so that Pre then holds the full
	// pre-activations, exactly where a separate Gemm with Beta 1 would
	// have left them (unless Act is Pre and the gates replace them), and
	// the cell, Act and LSTMCellGrad are unchanged. H may be HPrev (the
	// state updated in place); HPrev and W must not overlap Pre, C or Act.
	HPrev, W Buffer
}

// Fused reports whether the call carries its recurrent product (HPrev
// and W are given).
func (a LSTMCell) Fused() bool { return !a.W.IsZero() }

// RecurrentGemm is the product the fused form adds into Pre before the
// cell: Pre += HPrev·Wᵀ. Meaningful only when Fused.
func (a LSTMCell) RecurrentGemm() Gemm {
	return Gemm{DType: a.DType, TransB: true, M: a.Batch, N: 4 * a.Hidden, K: a.Hidden, Alpha: 1, Beta: 1,
		A: a.HPrev, B: a.W, C: a.Pre}
}

// Check reports whether the arguments are valid for d.
func (a LSTMCell) Check(d Device) error {
	c := checker{d: d, kernel: "LSTMCell"}
	if !c.cell(a.DType, a.Batch, a.Hidden) {
		return c.err
	}
	bh := c.mul(a.Batch, a.Hidden)
	c.buf("Pre", a.Pre, a.DType, c.mul(4, bh))
	if a.HPrev.IsZero() != a.W.IsZero() {
		c.fail("HPrev and W are the recurrent product: give both or neither")
	}
	c.opt("HPrev", a.HPrev, a.DType, bh)
	c.opt("W", a.W, a.DType, c.mul(4, c.mul(a.Hidden, a.Hidden)))
	c.opt("BiasIH", a.BiasIH, a.DType, c.mul(4, a.Hidden))
	c.opt("BiasHH", a.BiasHH, a.DType, c.mul(4, a.Hidden))
	c.buf("CPrev", a.CPrev, a.DType, bh)
	c.buf("C", a.C, a.DType, bh)
	c.buf("H", a.H, a.DType, bh)
	c.opt("Act", a.Act, a.DType, c.mul(4, bh))
	return c.err
}

// LSTMCellGrad is the backward of LSTMCell for one step. With tc = tanh(c)
// and dcT = DC + DH·o·(1-tc²):
//
//	dPre_i = dcT·g·i(1-i)   dPre_f = dcT·cPrev·f(1-f)
//	dPre_g = dcT·i·(1-g²)   dPre_o = DH·tc·o(1-o)   dCPrev = dcT·f
//
// DPre is also the gradient of both biases; the layer sums it over the
// batch (SumRows) and multiplies it by the weights (Gemm).
//
// DH is the whole gradient with respect to h: what flows from the output
// and, through the recurrent weights, from the next step, whose part is
// dPreNext·W_hh (dPreNext the next step's DPre). That product is either
// already in DH (a Gemm with Beta 1 before the call) or given as DPreNext
// and W, and then added into DH by the call itself: the fused form of the
// backward, as LSTMCell's is of the forward. Folding the product into the
// call that reads it, rather than into the one that writes dPreNext, is
// what a kernel can fuse: every element of the product needs a whole row
// of dPreNext, which the previous call wrote completely before this one
// starts. A device runs it as one kernel (the CUDA device for small
// Hidden) or as RecurrentGemm followed by the cell gradient (the CPU
// device always: the two calls' results to the bit, counted as the two
// calls, one GEMM and one launch); a fused kernel's product agrees with
// the Gemm's within a GEMM's rounding (devicetest.SumTolerance), in an
// order that depends on the shape only.
type LSTMCellGrad struct {
	DType         DType
	Batch, Hidden int
	// Act [Batch, 4·Hidden], CPrev and C [Batch, Hidden] are what
	// LSTMCell saved and read.
	Act, CPrev, C Buffer
	// DH is [Batch, Hidden], the gradient with respect to h (from the
	// output and from the next step; with the recurrent product, DPreNext
	// and W, the next step's part is added by the call and DH is written);
	// DC is [Batch, Hidden], the gradient with respect to c from the next
	// step (zeros at the last step).
	DH, DC Buffer
	// DPre is [Batch, 4·Hidden], the gradient with respect to the
	// pre-activations. It may be Act.
	DPre Buffer
	// DCPrev is [Batch, Hidden], the gradient with respect to CPrev. It
	// may be DC.
	DCPrev Buffer
	// DPreNext [NextBatch, 4·Hidden], the next step's pre-activation
	// gradient, and W [4·Hidden, Hidden], the recurrent weights W_hh, are
	// the optional recurrent product, both or neither. When given, the
	// call first adds DPreNext·W into DH's first NextBatch rows
	// (RecurrentGemm), so that DH then holds exactly what a separate Gemm
	// with Beta 1 would have left there, and then is the cell gradient
	// on Batch rows. DH is then an output too: it holds
	// max(Batch, NextBatch) rows and must not overlap any other buffer of
	// the call. DPreNext and W may overlap DPre and DCPrev, which are
	// written after the product is taken, as the two calls would.
	DPreNext, W Buffer
	// NextBatch is the number of rows of DPreNext, 0 meaning Batch. With
	// variable lengths a step covers the sequences still running, a
	// prefix of the batch, so the next step of a forward walk covers
	// fewer rows and that of a reverse walk more; rows of DH past Batch
	// get the product and nothing else. Nonzero only with the product.
	NextBatch int
}

// Fused reports whether the call carries its recurrent product (DPreNext
// and W are given).
func (a LSTMCellGrad) Fused() bool { return !a.W.IsZero() }

// RecurrentGemm is the product the fused form adds into DH before the
// cell gradient: DH[:NextBatch] += DPreNext·W. Meaningful only when Fused.
func (a LSTMCellGrad) RecurrentGemm() Gemm {
	return Gemm{DType: a.DType, M: nextBatch(a.Batch, a.NextBatch), N: a.Hidden, K: 4 * a.Hidden, Alpha: 1, Beta: 1,
		A: a.DPreNext, B: a.W, C: a.DH}
}

// nextBatch is a cell gradient's NextBatch resolved: 0 means batch.
func nextBatch(batch, next int) int {
	if next == 0 {
		return batch
	}
	return next
}

// Check reports whether the arguments are valid for d.
func (a LSTMCellGrad) Check(d Device) error {
	c := checker{d: d, kernel: "LSTMCellGrad"}
	if !c.cell(a.DType, a.Batch, a.Hidden) {
		return c.err
	}
	bh := c.mul(a.Batch, a.Hidden)
	c.buf("Act", a.Act, a.DType, c.mul(4, bh))
	c.buf("CPrev", a.CPrev, a.DType, bh)
	c.buf("C", a.C, a.DType, bh)
	c.recurrentGrad(4, a.DType, a.Batch, a.Hidden, a.NextBatch, "DPreNext", a.DPreNext, a.W, a.DH)
	c.buf("DC", a.DC, a.DType, bh)
	c.buf("DPre", a.DPre, a.DType, c.mul(4, bh))
	c.buf("DCPrev", a.DCPrev, a.DType, bh)
	return c.err
}

// GRUCell is the pointwise part of one GRU time step, with PyTorch's (and
// cuDNN's) equations and gate order r, z, n; the reset gate multiplies the
// recurrent product plus its bias:
//
//	r = σ(x_r + bi_r + h_r + bh_r)   z = σ(x_z + bi_z + h_z + bh_z)
//	n = tanh(x_n + bi_n + r·(h_n + bh_n))   h = (1-z)·n + z·hPrev
//
// where x = XPre = x·W_ihᵀ and h = HPre = hPrev·W_hhᵀ.
//
// The recurrent product is either already in HPre (a Gemm before the
// call) or computed by the call itself from HPrev and W: the fused form,
// as LSTMCell's (which see for how devices run and count it, and for the
// rounding of a fused kernel).
type GRUCell struct {
	DType         DType
	Batch, Hidden int
	// XPre and HPre are [Batch, 3·Hidden], the input and recurrent
	// products without bias.
	XPre, HPre Buffer
	// BiasIH and BiasHH are [3·Hidden] each, or none for no bias.
	BiasIH, BiasHH Buffer
	// HPrev is [Batch, Hidden], the previous hidden state.
	HPrev Buffer
	// H is [Batch, Hidden], the new hidden state. It may be HPrev.
	H Buffer
	// Act is [Batch, 4·Hidden]: r, z, n and h_n + bh_n, saved for
	// GRUCellGrad; none in no-grad mode.
	Act Buffer
	// W is [3·Hidden, Hidden], the recurrent weights W_hh, or none. When
	// given, the call first computes the recurrent product into HPre,
	// HPre = HPrev·Wᵀ (RecurrentGemm; what HPre held is not read), then
	// the cell: HPre is then an output, which must not overlap XPre,
	// HPrev, H or Act, and W must not overlap any output.
	W Buffer
}

// Fused reports whether the call computes its recurrent product (W is
// given).
func (a GRUCell) Fused() bool { return !a.W.IsZero() }

// RecurrentGemm is the product the fused form writes into HPre before the
// cell: HPre = HPrev·Wᵀ. Meaningful only when Fused.
func (a GRUCell) RecurrentGemm() Gemm {
	return Gemm{DType: a.DType, TransB: true, M: a.Batch, N: 3 * a.Hidden, K: a.Hidden, Alpha: 1,
		A: a.HPrev, B: a.W, C: a.HPre}
}

// Check reports whether the arguments are valid for d.
func (a GRUCell) Check(d Device) error {
	c := checker{d: d, kernel: "GRUCell"}
	if !c.cell(a.DType, a.Batch, a.Hidden) {
		return c.err
	}
	bh := c.mul(a.Batch, a.Hidden)
	c.buf("XPre", a.XPre, a.DType, c.mul(3, bh))
	c.buf("HPre", a.HPre, a.DType, c.mul(3, bh))
	c.opt("W", a.W, a.DType, c.mul(3, c.mul(a.Hidden, a.Hidden)))
	c.opt("BiasIH", a.BiasIH, a.DType, c.mul(3, a.Hidden))
	c.opt("BiasHH", a.BiasHH, a.DType, c.mul(3, a.Hidden))
	c.buf("HPrev", a.HPrev, a.DType, bh)
	c.buf("H", a.H, a.DType, bh)
	c.opt("Act", a.Act, a.DType, c.mul(4, bh))
	return c.err
}

// GRUCellGrad is the backward of GRUCell for one step:
//
//	dz  = DH·(hPrev-n)·z(1-z)      dn = DH·(1-z)·(1-n²)
//	dr  = dn·(h_n+bh_n)·r(1-r)
//	DXPre = [dr, dz, dn]   DHPre = [dr, dz, dn·r]   DHPrev = DH·z
//
// DXPre and DHPre are also the gradients of BiasIH and BiasHH. DHPrev is
// only the direct part of the gradient with respect to hPrev; its
// recurrent part, DHPre·W_hh, is added either by a Gemm with Beta 1 after
// the call or by the cell gradient of the previous step, given DHPre as
// its DHPreNext: the fused form, as LSTMCellGrad's (which see for why the
// product goes into the call that reads it, how devices run and count it,
// and its rounding). With Accumulate, DH·z is added into DHPrev, so a
// layer whose DHPrev already holds the gradient from the layer above needs
// no separate add.
type GRUCellGrad struct {
	DType         DType
	Batch, Hidden int
	// Act [Batch, 4·Hidden] and HPrev [Batch, Hidden] are what GRUCell
	// saved and read.
	Act, HPrev Buffer
	// DH is [Batch, Hidden], the gradient with respect to h (written too
	// with the recurrent product, DHPreNext and W).
	DH Buffer
	// DXPre and DHPre are [Batch, 3·Hidden], the gradients with respect
	// to XPre and HPre.
	DXPre, DHPre Buffer
	// DHPrev is [Batch, Hidden]. It may be DH unless Accumulate is set.
	DHPrev Buffer
	// Accumulate adds DH·z to DHPrev instead of overwriting it.
	Accumulate bool
	// DHPreNext [NextBatch, 3·Hidden], the next step's DHPre, and W
	// [3·Hidden, Hidden], the recurrent weights W_hh, are the optional
	// recurrent product, both or neither: the call first adds
	// DHPreNext·W into DH's first NextBatch rows (RecurrentGemm), then is
	// the cell gradient on Batch rows, as LSTMCellGrad's DPreNext and W.
	// DH is then an output too, of max(Batch, NextBatch) rows, which must
	// not overlap any other buffer of the call but DHPrev (which may
	// still be DH unless Accumulate is set); DHPreNext and W may overlap
	// DXPre, DHPre and DHPrev.
	DHPreNext, W Buffer
	// NextBatch is the number of rows of DHPreNext, 0 meaning Batch, as
	// LSTMCellGrad's.
	NextBatch int
}

// Fused reports whether the call carries its recurrent product (DHPreNext
// and W are given).
func (a GRUCellGrad) Fused() bool { return !a.W.IsZero() }

// RecurrentGemm is the product the fused form adds into DH before the
// cell gradient: DH[:NextBatch] += DHPreNext·W. Meaningful only when
// Fused.
func (a GRUCellGrad) RecurrentGemm() Gemm {
	return Gemm{DType: a.DType, M: nextBatch(a.Batch, a.NextBatch), N: a.Hidden, K: 3 * a.Hidden, Alpha: 1, Beta: 1,
		A: a.DHPreNext, B: a.W, C: a.DH}
}

// Check reports whether the arguments are valid for d.
func (a GRUCellGrad) Check(d Device) error {
	c := checker{d: d, kernel: "GRUCellGrad"}
	if !c.cell(a.DType, a.Batch, a.Hidden) {
		return c.err
	}
	bh := c.mul(a.Batch, a.Hidden)
	c.buf("Act", a.Act, a.DType, c.mul(4, bh))
	c.buf("HPrev", a.HPrev, a.DType, bh)
	c.recurrentGrad(3, a.DType, a.Batch, a.Hidden, a.NextBatch, "DHPreNext", a.DHPreNext, a.W, a.DH)
	c.buf("DXPre", a.DXPre, a.DType, c.mul(3, bh))
	c.buf("DHPre", a.DHPre, a.DType, c.mul(3, bh))
	c.buf("DHPrev", a.DHPrev, a.DType, bh)
	return c.err
}

// GatherSeq copies the rows of a batch of T steps of B sequences into
// another order of the sequences, writing zeros at padded steps: for
// t < T and i < B,
//
//	Y[t, i] = X[t, Index[i]]   if t < Lengths[i]
//	Y[t, i] = 0                otherwise
//
// A row is Cols elements; row (t, b) of X starts at element (t·B + b)·LdX
// and row (t, i) of Y at (t·B + i)·LdY, so a row may be a part of a wider
// one (one direction's half of a bidirectional output). Index, [B] Int32,
// none for the identity, maps Y's sequences to X's; Lengths, [B] Int32,
// none for all T, is the length of Y's sequence i (a length past T counts
// as T, one below 1 makes the sequence all zeros). The recurrent stacks
// use it to sort a batch by length and back, to take and give back their
// states, and to interleave a bidirectional output. An index outside
// [0, B) makes its sequence's rows zeros and raises ErrIndex on the
// stream, whatever the sequence's length. Y must not overlap X.
type GatherSeq struct {
	DType      DType
	T, B, Cols int
	Index      Buffer // [B] Int32, or none
	Lengths    Buffer // [B] Int32, or none
	X          Buffer
	Y          Buffer
	// LdX and LdY are the row strides of X and Y in elements; 0 means
	// Cols.
	LdX, LdY int
}

// WithDefaults returns a with its zero LdX and LdY replaced by Cols.
func (a GatherSeq) WithDefaults() GatherSeq {
	if a.LdX == 0 {
		a.LdX = a.Cols
	}
	if a.LdY == 0 {
		a.LdY = a.Cols
	}
	return a
}

// Check reports whether the arguments are valid for d.
func (a GatherSeq) Check(d Device) error {
	c := checker{d: d, kernel: "GatherSeq"}
	c.float(a.DType)
	c.nonNegative("T", a.T)
	c.nonNegative("B", a.B)
	c.positive("Cols", a.Cols)
	w := a.WithDefaults()
	c.atLeast("LdX", w.LdX, a.Cols)
	c.atLeast("LdY", w.LdY, a.Cols)
	if c.err != nil || a.T == 0 || a.B == 0 {
		return c.err
	}
	c.opt("Index", a.Index, Int32, a.B)
	c.opt("Lengths", a.Lengths, Int32, a.B)
	c.buf("X", a.X, a.DType, c.span(c.mul(a.T, a.B), w.LdX, a.Cols))
	c.buf("Y", a.Y, a.DType, c.span(c.mul(a.T, a.B), w.LdY, a.Cols))
	return c.err
}

// SeqPool pools each of B sequences of T steps into one row over its
// real steps, a sequence classifier's mean or max pooling: for b < B and
// c < Cols, with n = Lengths[b],
//
//	mean: Out[b, c] = (Σ_{t<n} Y[t, b, c]) / n
//	max:  Out[b, c] = max_{t<n} Y[t, b, c]   ArgMax[b, c] = the step t of that maximum
//
// Row (t, b) of Y starts at element (t·B + b)·LdY and row b of Out at
// b·LdOut, so Y may be the whole [T, B, dirs·H] output of a bidirectional
// stack or one direction's half of it. Lengths, [B] Int32, none for all T,
// is each sequence's length, as in GatherSeq: a length past T counts as T,
// and one below 1 makes an empty sequence, which pools to zeros with
// ArgMax -1 (PyTorch's mean of nothing is NaN and its max an error; the
// recurrent stacks never run one). Only the first n steps of a sequence
// are read, so what its padded steps hold, NaN included, never reaches
// Out.
//
// The mean's sum is taken in float64 in order of t, divided by n and
// rounded once to DType, on every device. The maximum is PyTorch's
// torch.max over a dimension: ties go to the first step, and a NaN
// propagates (the first NaN is the maximum). torch.amax gives the same
// values but splits the gradient evenly among ties; SeqPoolGrad follows
// torch.max and gives all of it to ArgMax's step. Out must not overlap Y.
type SeqPool struct {
	DType      DType
	T, B, Cols int
	// Max selects max pooling; false is the mean.
	Max     bool
	Lengths Buffer // [B] Int32, or none
	Y       Buffer
	Out     Buffer
	// ArgMax is [B, Cols] Int32, packed: the step of each maximum, for
	// SeqPoolGrad. Read only with Max, where it may be none (no-grad).
	ArgMax Buffer
	// LdY and LdOut are the row strides of Y and Out in elements; 0
	// means Cols.
	LdY, LdOut int
}

// WithDefaults returns a with its zero LdY and LdOut replaced by Cols.
func (a SeqPool) WithDefaults() SeqPool {
	if a.LdY == 0 {
		a.LdY = a.Cols
	}
	if a.LdOut == 0 {
		a.LdOut = a.Cols
	}
	return a
}

// Check reports whether the arguments are valid for d.
func (a SeqPool) Check(d Device) error {
	c := checker{d: d, kernel: "SeqPool"}
	c.float(a.DType)
	c.nonNegative("T", a.T)
	c.nonNegative("B", a.B)
	c.positive("Cols", a.Cols)
	w := a.WithDefaults()
	c.atLeast("LdY", w.LdY, a.Cols)
	c.atLeast("LdOut", w.LdOut, a.Cols)
	if c.err != nil || a.B == 0 {
		return c.err
	}
	c.opt("Lengths", a.Lengths, Int32, a.B)
	if a.T > 0 {
		c.buf("Y", a.Y, a.DType, c.span(c.mul(a.T, a.B), w.LdY, a.Cols))
	}
	c.buf("Out", a.Out, a.DType, c.span(a.B, w.LdOut, a.Cols))
	if a.Max {
		c.opt("ArgMax", a.ArgMax, Int32, c.mul(a.B, a.Cols))
	}
	return c.err
}

// SeqPoolGrad is the backward of SeqPool: the gradient with respect to
// all of Y, for t < T, b < B and c < Cols, with n as in SeqPool:
//
//	mean: DY[t, b, c] = DOut[b, c] / n   if t < n, else 0
//	max:  DY[t, b, c] = DOut[b, c]       if t = ArgMax[b, c] and t < n, else 0
//
// DY is overwritten, with zeros at padded steps, so one call gives the
// gradient of a whole [T, B, Cols] sequence (a stack's Backward reads
// none of its padded rows). The mean's quotient is taken in float64 and
// rounded once to DType. With Max, ArgMax is what SeqPool wrote; a step
// outside [0, n) for a sequence of n ≥ 1 steps (an ArgMax from another
// batch) routes nothing and raises ErrIndex on the stream. DY must not
// overlap DOut.
type SeqPoolGrad struct {
	DType      DType
	T, B, Cols int
	Max        bool
	Lengths    Buffer // [B] Int32, or none
	DOut       Buffer
	// ArgMax is [B, Cols] Int32, SeqPool's; required with Max, not read
	// otherwise.
	ArgMax Buffer
	DY     Buffer
	// LdDOut and LdDY are the row strides of DOut and DY in elements; 0
	// means Cols.
	LdDOut, LdDY int
}

// WithDefaults returns a with its zero LdDOut and LdDY replaced by Cols.
func (a SeqPoolGrad) WithDefaults() SeqPoolGrad {
	if a.LdDOut == 0 {
		a.LdDOut = a.Cols
	}
	if a.LdDY == 0 {
		a.LdDY = a.Cols
	}
	return a
}

// Check reports whether the arguments are valid for d.
func (a SeqPoolGrad) Check(d Device) error {
	c := checker{d: d, kernel: "SeqPoolGrad"}
	c.float(a.DType)
	c.nonNegative("T", a.T)
	c.nonNegative("B", a.B)
	c.positive("Cols", a.Cols)
	w := a.WithDefaults()
	c.atLeast("LdDOut", w.LdDOut, a.Cols)
	c.atLeast("LdDY", w.LdDY, a.Cols)
	if c.err != nil || a.T == 0 || a.B == 0 {
		return c.err
	}
	c.opt("Lengths", a.Lengths, Int32, a.B)
	c.buf("DOut", a.DOut, a.DType, c.span(a.B, w.LdDOut, a.Cols))
	if a.Max {
		c.buf("ArgMax", a.ArgMax, Int32, c.mul(a.B, a.Cols))
	}
	c.buf("DY", a.DY, a.DType, c.span(c.mul(a.T, a.B), w.LdDY, a.Cols))
	return c.err
}

// Embedding gathers rows of a table: Out[i] = Table[IDs[i]]. An id outside
// [0, Vocab) writes zeros and raises ErrIndex on the stream.
type Embedding struct {
	DType         DType
	N, Dim, Vocab int
	Table         Buffer // [Vocab, Dim]
	IDs           Buffer // [N] Int32
	Out           Buffer // [N, Dim]
}

// Check reports whether the arguments are valid for d.
func (a Embedding) Check(d Device) error {
	c := checker{d: d, kernel: "Embedding"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	c.positive("Dim", a.Dim)
	c.positive("Vocab", a.Vocab)
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("Table", a.Table, a.DType, c.mul(a.Vocab, a.Dim))
	c.buf("IDs", a.IDs, Int32, a.N)
	c.buf("Out", a.Out, a.DType, c.mul(a.N, a.Dim))
	return c.err
}

// EmbeddingGrad is the backward of Embedding, a scatter-add:
// DTable[IDs[i]] += DOut[i] for every i, deterministic on every device. An
// id outside [0, Vocab) is skipped and raises ErrIndex on the stream.
//
// Distinct says no id appears twice (a scatter of rows, as the recurrent
// stacks' gradients of the final states of sequences of several lengths):
// a device may then add every row at once, and writes no row of DTable
// that no id names (the CUDA device's scan over a small vocabulary
// otherwise adds zero to every row). A repeated id raises ErrIndex on the
// stream on every device; the CUDA device, which checks it against a
// bitmap of the vocabulary, has then added that id's rows in no fixed
// order.
type EmbeddingGrad struct {
	DType         DType
	N, Dim, Vocab int
	IDs           Buffer // [N] Int32
	DOut          Buffer // [N, Dim]
	DTable        Buffer // [Vocab, Dim], added into
	Distinct      bool
}

// Check reports whether the arguments are valid for d.
func (a EmbeddingGrad) Check(d Device) error {
	c := checker{d: d, kernel: "EmbeddingGrad"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	c.positive("Dim", a.Dim)
	c.positive("Vocab", a.Vocab)
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("IDs", a.IDs, Int32, a.N)
	c.buf("DOut", a.DOut, a.DType, c.mul(a.N, a.Dim))
	c.buf("DTable", a.DTable, a.DType, c.mul(a.Vocab, a.Dim))
	return c.err
}

// SoftmaxCrossEntropy computes, over N rows of logits,
//
//	Loss = Scale · Σ_i w_i · -log softmax(Logits[i])[Targets[i]]
//	DLogits[i] = Scale · w_i · (softmax(Logits[i]) - onehot(Targets[i]))
//
// with w_i = Weights[Targets[i]], or 1 without Weights, so Scale = 1/N
// gives the mean (and 1/(N·K) the mean over K accumulated micro-batches;
// with Weights, PyTorch's mean is Scale = 1/Σ_i w_i). The softmax is
// computed stably (max subtracted) and the sum in float64 on the CPU
// device. With Ignore, a row whose target is IgnoreIndex (PyTorch's
// ignore_index, -100 by default there) adds nothing and leaves its row of
// DLogits zero: padding; Scale then counts the other rows. Any other target
// outside [0, Classes) adds nothing, leaves its row of DLogits zero and
// raises ErrIndex. The row losses are summed in an order fixed by the
// shape, so the same call gives the same bits every time, on every device.
type SoftmaxCrossEntropy struct {
	DType      DType
	N, Classes int
	Logits     Buffer // [N, Classes]
	Targets    Buffer // [N] Int32
	Scale      float64
	// Loss is one element of DType.
	Loss Buffer
	// Accumulate adds to Loss instead of overwriting it.
	Accumulate bool
	// DLogits is [N, Classes], or none for the loss alone. It may be
	// Logits.
	DLogits Buffer
	// Ignore and IgnoreIndex: rows whose target is IgnoreIndex are left
	// out (see above).
	Ignore      bool
	IgnoreIndex int32
	// Weights is [Classes] of DType, a weight per class, or none.
	Weights Buffer
}

// Check reports whether the arguments are valid for d.
func (a SoftmaxCrossEntropy) Check(d Device) error {
	c := checker{d: d, kernel: "SoftmaxCrossEntropy"}
	c.float(a.DType)
	c.positive("N", a.N)
	c.positive("Classes", a.Classes)
	if c.err != nil {
		return c.err
	}
	c.buf("Logits", a.Logits, a.DType, c.mul(a.N, a.Classes))
	c.buf("Targets", a.Targets, Int32, a.N)
	c.buf("Loss", a.Loss, a.DType, 1)
	c.opt("DLogits", a.DLogits, a.DType, c.mul(a.N, a.Classes))
	c.opt("Weights", a.Weights, a.DType, a.Classes)
	return c.err
}

// Softmax writes Probs[i] = softmax(Logits[i] / Temperature) for N rows;
// Temperature 0 means 1. Probs may be Logits.
type Softmax struct {
	DType         DType
	N, Classes    int
	Logits, Probs Buffer // [N, Classes]
	Temperature   float64
}

// Check reports whether the arguments are valid for d.
func (a Softmax) Check(d Device) error {
	c := checker{d: d, kernel: "Softmax"}
	c.float(a.DType)
	c.positive("N", a.N)
	c.positive("Classes", a.Classes)
	if a.Temperature < 0 {
		c.fail("Temperature %v is negative", a.Temperature)
	}
	if c.err != nil {
		return c.err
	}
	c.buf("Logits", a.Logits, a.DType, c.mul(a.N, a.Classes))
	c.buf("Probs", a.Probs, a.DType, c.mul(a.N, a.Classes))
	return c.err
}

// Sample draws one token per row of logits where the logits are, the
// sampling step of a language model: for each of N rows it draws a class
// from softmax(Logits[i] / Temperature), among the TopK most likely
// classes when TopK > 0, and writes it as an Int32 to IDs[i] (the ids the
// next forward reads) and, when given, to Tokens[i] (a slot of a ring the
// host reads back in chunks, say). Temperature 0 is argmax: the first
// largest logit, a NaN never winning (0 when the row is all NaN). Row i
// draws with the uniform SampleUniform(Seed, Counter+i), so the same seed
// and counters give the same tokens, and a caller that samples token after
// token passes the token's index as Counter.
//
// Every device draws the same ids from the same logits, to the bit: the
// arithmetic is float64, its order is fixed by the shape, and its
// exponential is SampleExp, whose operations every device rounds alike.
// Precisely, for a row x of C = Classes logits (float32 logits widened
// exactly):
//
//  1. Rank: class a ranks before b when x[a] > x[b], or they are equal
//     (-0 = +0) and a < b; NaNs rank last. The candidates are the first
//     TopK classes in rank order, all of them when TopK is 0 or ≥ C.
//  2. Weights: with m the largest logit that is not NaN, a candidate
//     weighs SampleExp((x[c] - m) / Temperature) (one rounded subtraction,
//     one rounded division), or, when m is infinite, 1 if x[c] = m and 0
//     otherwise; a NaN and a class that is not a candidate weigh 0. The
//     first largest class weighs exactly 1.
//  3. Sums: the classes fall into SampleChunks (256) chunks of
//     S = ⌈C/256⌉ consecutive classes (chunk j holds [jS, min(jS+S, C)),
//     empty past C); chunk sum s_j adds its weights in class order, from
//     0, and W adds s_0, s_1, ... s_255 in order, from 0.
//  4. Draw: t = u·W for the row's uniform u. With P_j = s_0 + ... +
//     s_(j-1) added in order, the first chunk with P_j + s_j > t is walked
//     from c = P_j, adding each weight in class order, to the first class
//     where c > t; where rounding leaves none, the chunk's last class of
//     positive weight. When no chunk has P_j + s_j > t (u·W rounded up to
//     W), the last class of positive weight. W is 0 only when the row is
//     all NaN: then 0.
//
// A class of zero weight is never drawn. The logits' own rounding is the
// caller's: two devices whose forward passes round differently may
// disagree on a token when a draw falls within that difference of a
// boundary between two classes.
type Sample struct {
	DType       DType
	N, Classes  int
	Logits      Buffer // [N, Classes]
	Temperature float64
	TopK        int
	Seed        uint64
	Counter     uint64
	// CounterAt, when set, is 8 bytes of device memory, 8-byte aligned,
	// holding a uint64 (two Int32 words, the low one first) that the
	// kernel adds to Counter
	// when it runs: a count that changes between the replays of a graph
	// (Grapher), which fixes the arguments. Row i then draws with
	// Counter + *CounterAt + i.
	CounterAt Buffer
	// IDs is [N] Int32, the drawn classes.
	IDs Buffer
	// Tokens is [N] Int32, a second copy of the drawn classes, or none.
	// It may be IDs.
	Tokens Buffer
}

// Check reports whether the arguments are valid for d.
func (a Sample) Check(d Device) error {
	c := checker{d: d, kernel: "Sample"}
	c.float(a.DType)
	c.positive("N", a.N)
	c.positive("Classes", a.Classes)
	if a.Classes > maxInt32 {
		c.fail("Classes is %d, more than an Int32 id can name", a.Classes)
	}
	c.nonNegative("TopK", a.TopK)
	if !validTemperature(a.Temperature) {
		c.fail("Temperature %v is not a finite number >= 0", a.Temperature)
	}
	if c.err != nil {
		return c.err
	}
	c.buf("Logits", a.Logits, a.DType, c.mul(a.N, a.Classes))
	c.buf("IDs", a.IDs, Int32, a.N)
	c.opt("Tokens", a.Tokens, Int32, a.N)
	c.word64("CounterAt", a.CounterAt, 1, true)
	return c.err
}

// Dropout zeroes each element with probability P and scales the kept ones
// by 1/(1-P): Y = X·Mask, Mask[i] = 1/(1-P) if DropoutKeep(Seed, Offset+i, P)
// else 0. The mask is a function of (Seed, Offset+i) alone, so every device
// draws the same one; the backward is Mul(dY, Mask). Y may be X.
type Dropout struct {
	DType  DType
	N      int
	P      float64 // in [0, 1)
	Seed   uint64
	Offset uint64
	// StateAt, when set, is 16 bytes of device memory, 8-byte aligned,
	// holding two uint64 (each two Int32 words, the low one first, as
	// Sample's CounterAt): a seed s and an offset o that the kernel reads
	// when it runs. The mask is then drawn with seed Seed^s at Offset+o:
	// Mask[i] = 1/(1-P) if DropoutKeep(Seed^s, Offset+o+i, P), the sum
	// modulo 2^64. So where masks come from can change between the replays
	// of a graph (Grapher), which fix the arguments: an rnn stack keeps
	// its masks' seed and start there (with Seed and Offset relative to
	// them, Seed 0), and Advance moves the start on the device. It must
	// not overlap Y or Mask.
	StateAt Buffer
	X, Y    Buffer // [N]
	Mask    Buffer // [N] of DType
}

// Check reports whether the arguments are valid for d.
func (a Dropout) Check(d Device) error {
	c := checker{d: d, kernel: "Dropout"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	if !(a.P >= 0 && a.P < 1) {
		c.fail("P %v is not in [0, 1)", a.P)
	}
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("X", a.X, a.DType, a.N)
	c.buf("Y", a.Y, a.DType, a.N)
	c.buf("Mask", a.Mask, a.DType, a.N)
	c.word64("StateAt", a.StateAt, 2, true)
	return c.err
}

// Advance moves a count kept in device memory, such as where the next
// dropout masks start: it copies the count at At to Prev, when Prev is
// set, then adds Add to it, modulo 2^64. At and Prev are 8 bytes each,
// 8-byte aligned, holding a uint64 (two Int32 words, the low one first,
// as Sample's CounterAt and Dropout's StateAt hold theirs), and must not
// overlap. A graph (Grapher) that records an Advance moves the count at
// every replay, where an argument would stay what it was when recorded;
// Prev keeps the value the work after it reads (a forward's masks,
// drawn again in its backward) whatever later Advances do to At.
type Advance struct {
	At   Buffer
	Add  uint64
	Prev Buffer
}

// Check reports whether the arguments are valid for d.
func (a Advance) Check(d Device) error {
	c := checker{d: d, kernel: "Advance"}
	c.word64("At", a.At, 1, false)
	c.word64("Prev", a.Prev, 1, true)
	return c.err
}

// DropoutKeep reports whether dropout with probability p keeps element
// index of the mask drawn with seed: a splitmix64 hash of seed and index,
// its top 24 bits read as a uniform u in [0, 1), kept when u >= p. Every
// device implements exactly this, so masks agree across devices.
func DropoutKeep(seed, index uint64, p float64) bool {
	z := seed ^ (index * 0x9E3779B97F4A7C15)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	u := float64(z>>40) * (1.0 / (1 << 24))
	return u >= p
}

// AddBias adds a row vector to every row: Y[i] += Bias.
type AddBias struct {
	DType      DType
	Rows, Cols int
	Bias       Buffer // [Cols]
	Y          Buffer // [Rows, Cols]
}

// Check reports whether the arguments are valid for d.
func (a AddBias) Check(d Device) error {
	c := checker{d: d, kernel: "AddBias"}
	c.float(a.DType)
	c.positive("Rows", a.Rows)
	c.positive("Cols", a.Cols)
	if c.err != nil {
		return c.err
	}
	c.buf("Bias", a.Bias, a.DType, a.Cols)
	c.buf("Y", a.Y, a.DType, c.mul(a.Rows, a.Cols))
	return c.err
}

// SumRows sums the rows of X: Out = Σ_i X[i] (+ Out with Accumulate). It
// is the gradient of AddBias. The order of the sum is fixed by the shape:
// the same call gives the same bits every time, on every device.
type SumRows struct {
	DType      DType
	Rows, Cols int
	X          Buffer // [Rows, Cols]
	Out        Buffer // [Cols]
	Accumulate bool
}

// Check reports whether the arguments are valid for d.
func (a SumRows) Check(d Device) error {
	c := checker{d: d, kernel: "SumRows"}
	c.float(a.DType)
	c.positive("Rows", a.Rows)
	c.positive("Cols", a.Cols)
	if c.err != nil {
		return c.err
	}
	c.buf("X", a.X, a.DType, c.mul(a.Rows, a.Cols))
	c.buf("Out", a.Out, a.DType, a.Cols)
	return c.err
}

// Fill sets N elements of X to Value (converted as Go converts a float64,
// truncating toward zero for Int32).
type Fill struct {
	DType DType // Float32, Float64 or Int32
	N     int
	X     Buffer
	Value float64
}

// Check reports whether the arguments are valid for d.
func (a Fill) Check(d Device) error {
	c := checker{d: d, kernel: "Fill"}
	if a.DType.Size() == 0 {
		c.fail("DType %v is not an element type", a.DType)
	}
	c.nonNegative("N", a.N)
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("X", a.X, a.DType, a.N)
	return c.err
}

// Copy copies Src.Len() bytes from Src to the start of Dst, device to
// device. They must not overlap.
type Copy struct {
	Dst, Src Buffer
}

// Check reports whether the arguments are valid for d.
func (a Copy) Check(d Device) error {
	c := checker{d: d, kernel: "Copy"}
	c.owned("Src", a.Src)
	c.owned("Dst", a.Dst)
	if c.err == nil && a.Dst.Len() < a.Src.Len() {
		c.fail("Dst holds %d bytes, Src %d", a.Dst.Len(), a.Src.Len())
	}
	return c.err
}

// Axpby computes Y = Alpha·X + Beta·Y over N elements (add, scale and
// accumulate in one). With Beta = 0, Y is not read. Y may be X.
type Axpby struct {
	DType       DType
	N           int
	Alpha, Beta float64
	X, Y        Buffer
}

// Check reports whether the arguments are valid for d.
func (a Axpby) Check(d Device) error {
	c := checker{d: d, kernel: "Axpby"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("X", a.X, a.DType, a.N)
	c.buf("Y", a.Y, a.DType, a.N)
	return c.err
}

// Mul computes Z = X·Y element-wise over N elements. Z may be X or Y.
type Mul struct {
	DType   DType
	N       int
	X, Y, Z Buffer
}

// Check reports whether the arguments are valid for d.
func (a Mul) Check(d Device) error {
	c := checker{d: d, kernel: "Mul"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("X", a.X, a.DType, a.N)
	c.buf("Y", a.Y, a.DType, a.N)
	c.buf("Z", a.Z, a.DType, a.N)
	return c.err
}

// Clamp limits N elements of X to [Min, Max] in place (element-wise
// gradient clipping). NaNs stay NaN.
type Clamp struct {
	DType    DType
	N        int
	Min, Max float64
	X        Buffer
}

// Check reports whether the arguments are valid for d.
func (a Clamp) Check(d Device) error {
	c := checker{d: d, kernel: "Clamp"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	if !(a.Min <= a.Max) {
		c.fail("Min %v is not at most Max %v", a.Min, a.Max)
	}
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("X", a.X, a.DType, a.N)
	return c.err
}

// SumSquares computes Out = Σ X[i]² over N elements (+ Out with
// Accumulate), the building block of global-norm clipping: accumulate over
// every gradient, then take the square root. A NaN or infinity in X makes
// Out non-finite, which is how non-finite gradients are found. The order of
// the sum is fixed by the shape: the same call gives the same bits every
// time, on every device.
type SumSquares struct {
	DType      DType
	N          int
	X          Buffer
	Out        Buffer // one element of DType
	Accumulate bool
}

// Check reports whether the arguments are valid for d.
func (a SumSquares) Check(d Device) error {
	c := checker{d: d, kernel: "SumSquares"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	if c.err != nil {
		return c.err
	}
	if a.N > 0 {
		c.buf("X", a.X, a.DType, a.N)
	}
	c.buf("Out", a.Out, a.DType, 1)
	return c.err
}

// SGD is PyTorch's torch.optim.SGD step over N parameters:
//
//	g = Grad + WeightDecay·Param
//	v = g at Step 1, else Momentum·v + (1-Dampening)·g   (when Momentum ≠ 0)
//	g = g + Momentum·v if Nesterov, else v                (when Momentum ≠ 0)
//	Param -= LR·g
type SGD struct {
	DType                                DType
	N                                    int
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
	// Step is the 1-based number of this step.
	Step                  int
	Param, Grad, Velocity Buffer // [N]; Velocity only with Momentum ≠ 0
	// Guard, when set, is a StepGuard's verdict: nothing is done while
	// its skip flag is set, and the gradient used is Grad·Guard[0]. Clip,
	// when positive, clamps the gradient used to [-Clip, Clip]. Grad is
	// not modified either way.
	Guard Buffer
	Clip  float64
	// Rates, when set, holds the step's rate and number in device memory
	// (Rates' layout, RatesSize bytes), read as the step runs in place of
	// LR and Step, which are then ignored: one recording of the update
	// (Grapher) serves every step.
	Rates Buffer
}

// Check reports whether the arguments are valid for d.
func (a SGD) Check(d Device) error {
	c := checker{d: d, kernel: "SGD"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	if a.Rates.IsZero() {
		c.positive("Step", a.Step)
	}
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("Param", a.Param, a.DType, a.N)
	c.buf("Grad", a.Grad, a.DType, a.N)
	if a.Momentum != 0 {
		c.buf("Velocity", a.Velocity, a.DType, a.N)
	}
	c.guard(a.Guard, a.Clip)
	c.opt("Rates", a.Rates, Float64, RatesSize/8)
	return c.err
}

// Adam is PyTorch's torch.optim.Adam step (or AdamW with Decoupled) over N
// parameters, with t = Step:
//
//	Adam:  g = Grad + WeightDecay·Param      AdamW: Param *= 1 - LR·WeightDecay; g = Grad
//	M = Beta1·M + (1-Beta1)·g                V = Beta2·V + (1-Beta2)·g²
//	Param -= (LR/(1-Beta1^t)) · M / (sqrt(V)/sqrt(1-Beta2^t) + Eps)
type Adam struct {
	DType                              DType
	N                                  int
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Decoupled                          bool
	Step                               int // 1-based
	Param, Grad, M, V                  Buffer
	// Guard, when set, is a StepGuard's verdict: nothing is done while
	// its skip flag is set, and the gradient used is Grad·Guard[0]. Clip,
	// when positive, clamps the gradient used to [-Clip, Clip]. Grad is
	// not modified either way.
	Guard Buffer
	Clip  float64
	// Rates, when set, holds the step's rate and number in device memory
	// (Rates' layout, RatesSize bytes), read as the step runs in place of
	// LR and Step, which are then ignored: one recording of the update
	// (Grapher) serves every step.
	Rates Buffer
}

// Check reports whether the arguments are valid for d.
func (a Adam) Check(d Device) error {
	c := checker{d: d, kernel: "Adam"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	if a.Rates.IsZero() {
		c.positive("Step", a.Step)
	}
	if !(a.Beta1 >= 0 && a.Beta1 < 1) || !(a.Beta2 >= 0 && a.Beta2 < 1) {
		c.fail("Beta1 %v and Beta2 %v must be in [0, 1)", a.Beta1, a.Beta2)
	}
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("Param", a.Param, a.DType, a.N)
	c.buf("Grad", a.Grad, a.DType, a.N)
	c.buf("M", a.M, a.DType, a.N)
	c.buf("V", a.V, a.DType, a.N)
	c.guard(a.Guard, a.Clip)
	c.opt("Rates", a.Rates, Float64, RatesSize/8)
	return c.err
}

// RMSprop is PyTorch's torch.optim.RMSprop step over N parameters:
//
//	g = Grad + WeightDecay·Param
//	SquareAvg = Alpha·SquareAvg + (1-Alpha)·g²
//	avg = sqrt(SquareAvg - GradAvg²) + Eps with Centered (GradAvg = Alpha·GradAvg + (1-Alpha)·g first),
//	      sqrt(SquareAvg) + Eps otherwise
//	with Momentum ≠ 0: Velocity = Momentum·Velocity + g/avg; Param -= LR·Velocity
//	else:              Param -= LR·g/avg
type RMSprop struct {
	DType                                 DType
	N                                     int
	LR, Alpha, Eps, WeightDecay, Momentum float64
	Centered                              bool
	Param, Grad, SquareAvg                Buffer
	GradAvg                               Buffer // only with Centered
	Velocity                              Buffer // only with Momentum ≠ 0
	// Guard, when set, is a StepGuard's verdict: nothing is done while
	// its skip flag is set, and the gradient used is Grad·Guard[0]. Clip,
	// when positive, clamps the gradient used to [-Clip, Clip]. Grad is
	// not modified either way.
	Guard Buffer
	Clip  float64
	// Rates, when set, holds the step's rate and number in device memory
	// (Rates' layout, RatesSize bytes), read as the step runs in place of
	// LR and Step, which are then ignored: one recording of the update
	// (Grapher) serves every step.
	Rates Buffer
}

// Check reports whether the arguments are valid for d.
func (a RMSprop) Check(d Device) error {
	c := checker{d: d, kernel: "RMSprop"}
	c.float(a.DType)
	c.nonNegative("N", a.N)
	if c.err != nil || a.N == 0 {
		return c.err
	}
	c.buf("Param", a.Param, a.DType, a.N)
	c.buf("Grad", a.Grad, a.DType, a.N)
	c.buf("SquareAvg", a.SquareAvg, a.DType, a.N)
	if a.Centered {
		c.buf("GradAvg", a.GradAvg, a.DType, a.N)
	}
	if a.Momentum != 0 {
		c.buf("Velocity", a.Velocity, a.DType, a.N)
	}
	c.guard(a.Guard, a.Clip)
	c.opt("Rates", a.Rates, Float64, RatesSize/8)
	return c.err
}

// StepGuard decides a training step on the device, so that the host need
// not read the step's loss and gradient norm before it queues the update
// (a steady training step then never waits for the device). From the
// step's summed loss and squared gradient norm (one element each of DType)
// it computes, in float64,
//
//	loss = Loss·Scale        norm = sqrt(NormSq)·Scale
//
// and writes them to Record, three Float64: loss, norm, and the skip flag
// as this step leaves it (1: refused, by this step's figures or data or
// by a step before it). Guard is two Float64, the step's verdict:
//
//	Guard[1], the skip flag: set to 1 when loss or norm is NaN or
//	          infinite, or when work queued before on the stream found an
//	          error not yet reported (an index out of range: the step's
//	          data was bad, and ErrIndex comes at the next
//	          synchronisation); once set it stays set (until the caller
//	          resets Guard with Fill), so a step queued after a refused
//	          one is skipped too.
//	Guard[0], the gradient's coefficient: Scale·ClipNorm/(norm+1e-6)
//	          when ClipNorm > 0 and that ratio is below 1 (PyTorch's
//	          clip_grad_norm_), Scale otherwise.
//
// The optimizer steps given the Guard do nothing while its skip flag is
// set; otherwise they update with the gradient g = Grad·Guard[0] (rounded
// to DType) clamped to [-Clip, Clip] when Clip > 0: the same bits as an
// Axpby scaling Grad by the coefficient and a Clamp. GuardedCopy does
// nothing while the flag is set.
//
// Slot, when set, is one Float64 in device memory holding a whole number
// s >= 0, read as the kernel runs: Record is then a ring of
// Record.Len()/24 records, and the record goes to record s mod that
// count. One recording of the step (Grapher) then serves steps whose
// records go to different slots.
type StepGuard struct {
	DType           DType
	Loss, NormSq    Buffer
	Scale, ClipNorm float64
	Record, Guard   Buffer
	Slot            Buffer
}

// Check reports whether the arguments are valid for d.
func (a StepGuard) Check(d Device) error {
	c := checker{d: d, kernel: "StepGuard"}
	c.float(a.DType)
	if !(a.Scale > 0) || !(a.ClipNorm >= 0) || math.IsInf(a.Scale, 0) || math.IsInf(a.ClipNorm, 0) {
		c.fail("Scale %v and ClipNorm %v must be finite, Scale > 0 and ClipNorm >= 0", a.Scale, a.ClipNorm)
	}
	if c.err != nil {
		return c.err
	}
	c.buf("Loss", a.Loss, a.DType, 1)
	c.buf("NormSq", a.NormSq, a.DType, 1)
	c.buf("Record", a.Record, Float64, 3)
	c.buf("Guard", a.Guard, Float64, 2)
	c.opt("Slot", a.Slot, Float64, 1)
	return c.err
}

// GuardedCopy copies Src.Len() bytes, a multiple of 4, from Src to the
// start of Dst, device to device, unless the skip flag of Guard (a
// StepGuard's) is set: the copy of a step that is to be undone when an
// earlier step queued with it turns out non-finite. They must not
// overlap. Unlike Copy, it is a kernel.
type GuardedCopy struct {
	Dst, Src, Guard Buffer
}

// Check reports whether the arguments are valid for d.
func (a GuardedCopy) Check(d Device) error {
	c := checker{d: d, kernel: "GuardedCopy"}
	c.owned("Src", a.Src)
	c.owned("Dst", a.Dst)
	c.buf("Guard", a.Guard, Float64, 2)
	switch {
	case c.err != nil:
	case a.Src.Len()%4 != 0:
		c.fail("Src holds %d bytes, not a multiple of 4", a.Src.Len())
	case a.Dst.Len() < a.Src.Len():
		c.fail("Dst holds %d bytes, Src %d", a.Dst.Len(), a.Src.Len())
	}
	return c.err
}

// guard checks an optimizer step's optional Guard and Clip.
func (c *checker) guard(g Buffer, clip float64) {
	if !(clip >= 0) || math.IsInf(clip, 0) {
		c.fail("Clip %v, want finite and >= 0", clip)
	}
	c.opt("Guard", g, Float64, 2)
}

// checker collects the first problem with a kernel's arguments. It lives
// on the caller's stack and allocates only when it finds a problem.
type checker struct {
	d      Device
	kernel string
	err    error
}

func (c *checker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("device: %s: %s: %w", c.kernel, fmt.Sprintf(format, args...), ErrShape)
	}
}

func (c *checker) float(t DType) {
	if t != Float32 && t != Float64 {
		c.fail("DType %v is not Float32 or Float64", t)
	}
}

// cell checks the type and shape of a recurrent cell kernel; false if
// they are invalid.
func (c *checker) cell(t DType, batch, hidden int) bool {
	c.float(t)
	c.positive("Batch", batch)
	c.positive("Hidden", hidden)
	return c.err == nil
}

// recurrentGrad checks a cell gradient's optional recurrent product, of
// gates gate blocks (dNext, the next step's recurrent pre-activation
// gradient, named dNextName, and w), and its DH, which holds the rows the
// product adds into as well as the cell's.
func (c *checker) recurrentGrad(gates int, dt DType, batch, hidden, next int, dNextName string, dNext, w, dh Buffer) {
	fused := !w.IsZero()
	if dNext.IsZero() != w.IsZero() {
		c.fail("%s and W are the recurrent product: give both or neither", dNextName)
	}
	c.nonNegative("NextBatch", next)
	if next != 0 && !fused {
		c.fail("NextBatch is %d without the recurrent product (%s and W)", next, dNextName)
	}
	rows := batch
	if fused {
		rows = max(batch, nextBatch(batch, next))
	}
	c.opt(dNextName, dNext, dt, c.mul(nextBatch(batch, next), c.mul(gates, hidden)))
	c.opt("W", w, dt, c.mul(gates, c.mul(hidden, hidden)))
	c.buf("DH", dh, dt, c.mul(rows, hidden))
}

// mul is a·b, or -1 when the product overflows int (or an operand is
// -1, an overflow further down): a caller's 2^62 rows must not wrap into
// a size that passes the buffer checks. The buffer check given -1 fails,
// naming the buffer.
func (c *checker) mul(a, b int) int {
	p, ok := checked.Mul(a, b)
	if !ok {
		return -1
	}
	return p
}

// add is a+b, or -1 as mul.
func (c *checker) add(a, b int) int {
	s, ok := checked.Add(a, b)
	if !ok {
		return -1
	}
	return s
}

// span is the elements from the first of n rows of cols elements, ld
// apart, to the end of the last: (n-1)·ld + cols, 0 for no rows, -1 as
// mul.
func (c *checker) span(n, ld, cols int) int {
	switch {
	case n < 0:
		return -1
	case n == 0:
		return 0
	}
	return c.add(c.mul(n-1, ld), cols)
}

// fits fails, naming name, when size is -1: a product of the
// arguments' sizes that overflows int.
func (c *checker) fits(name string, size int) {
	if size < 0 {
		c.fail("%s: the sizes give it more elements than an int holds", name)
	}
}

func (c *checker) positive(name string, v int) {
	if v <= 0 {
		c.fail("%s is %d, must be positive", name, v)
	}
}

func (c *checker) nonNegative(name string, v int) {
	if v < 0 {
		c.fail("%s is %d, must not be negative", name, v)
	}
}

func (c *checker) atLeast(name string, v, min int) {
	if v < min {
		c.fail("%s is %d, must be at least %d", name, v, min)
	}
}

// owned checks that b is a buffer of the checker's device.
func (c *checker) owned(name string, b Buffer) {
	if c.err == nil {
		c.err = checkOwner(c.d, c.kernel, name, b.dev)
	}
}

// checkOwner returns an error matching ErrForeignBuffer unless owner, the
// Device of a Buffer or HostBuffer named name passed to call op, is d.
// Implementations call it as device/driver.CheckOwner.
func checkOwner(d Device, op, name string, owner Device) error {
	switch owner {
	case d:
		return nil
	case nil:
		return fmt.Errorf("device: %s: %s is the zero buffer: %w", op, name, ErrForeignBuffer)
	}
	return fmt.Errorf("device: %s: %s belongs to %s, not %s: %w", op, name, owner.Name(), d.Name(), ErrForeignBuffer)
}

// buf checks that b is a buffer of the device holding at least n elements
// of t.
func (c *checker) buf(name string, b Buffer, t DType, n int) {
	c.owned(name, b)
	if c.err != nil {
		return
	}
	if need, ok := checked.Mul64(int64(n), t.Size()); !ok {
		c.fail("%s: the sizes give it more elements than an int holds", name)
	} else if b.size < need {
		c.fail("%s holds %d bytes, needs %d (%d %v)", name, b.size, need, n, t)
	}
}

// word64 checks a buffer of n uint64 that a kernel reads or writes as
// such: a buffer of the device, 8-byte aligned, holding 8·n bytes; with
// optional, the zero Buffer passes.
func (c *checker) word64(name string, b Buffer, n int, optional bool) {
	if optional && b.IsZero() {
		return
	}
	c.buf(name, b, Int32, c.mul(2, n))
	if c.err == nil && b.Addr()%8 != 0 {
		c.fail("%s at %#x is not 8-byte aligned", name, uintptr(b.Addr()))
	}
}

// opt is buf for an optional buffer: the zero Buffer passes.
func (c *checker) opt(name string, b Buffer, t DType, n int) {
	if !b.IsZero() {
		c.buf(name, b, t, n)
	}
}
