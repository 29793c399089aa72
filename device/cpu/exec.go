package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"gonum.org/v1/gonum/blas"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu/internal/kern"
	"github.com/gocurrent/gocurrent/device/driver"
)

// exec runs one command on the stream's worker goroutine. Errors it
// returns are found in the data (an index out of range) and become the
// stream's pending error.
func (s *stream) exec(c *cmd) error {
	d := s.dev
	p, wg := d.pool, &s.wg
	switch c.op {
	case opWait:
		c.wait.s.wait(c.wait.seq)
	case opJoin:
		c.wait.s.wait(c.wait.seq)
		return c.wait.s.report()
	case opGraph:
		return c.graph.run(s)
	case opHost:
		return c.host.run()
	case opCopy:
		copy(unsafe.Slice((*byte)(c.copy.dst), c.copy.n), unsafe.Slice((*byte)(c.copy.src), c.copy.n))
	case opGemm:
		if c.gemm.DType == device.Float32 {
			gemm32(d, &c.gemm)
		} else {
			gemm64(d, &c.gemm)
		}
	case opLSTMCell:
		a := &c.lstm
		p.split(wg, c, a.Batch, 4*a.Hidden, pick(a.DType, lstmPart[float32], lstmPart[float64]))
	case opLSTMCellGrad:
		a := &c.lstmGrad
		p.split(wg, c, a.Batch, 8*a.Hidden, pick(a.DType, lstmGradPart[float32], lstmGradPart[float64]))
	case opGRUCell:
		a := &c.gru
		p.split(wg, c, a.Batch, 6*a.Hidden, pick(a.DType, gruPart[float32], gruPart[float64]))
	case opGRUCellGrad:
		a := &c.gruGrad
		p.split(wg, c, a.Batch, 8*a.Hidden, pick(a.DType, gruGradPart[float32], gruGradPart[float64]))
	case opGatherSeq:
		a := &c.gather
		p.split(wg, c, a.T*a.B, a.Cols, pick(a.DType, gatherSeqPart[float32], gatherSeqPart[float64]))
		return badIndex(s, c, "GatherSeq: index", a.Index, a.B, a.B)
	case opSeqPool:
		a := &c.pool
		p.split(wg, c, a.B, max(a.T, 1)*a.Cols, pick(a.DType, seqPoolPart[float32], seqPoolPart[float64]))
	case opSeqPoolGrad:
		a := &c.poolGrad
		p.split(wg, c, a.T*a.B, a.Cols, pick(a.DType, seqPoolGradPart[float32], seqPoolGradPart[float64]))
		return badArgMax(s, c)
	case opEmbedding:
		a := &c.emb
		p.split(wg, c, a.N, a.Dim, pick(a.DType, embeddingPart[float32], embeddingPart[float64]))
		return badIndex(s, c, "Embedding: id", a.IDs, a.N, a.Vocab)
	case opEmbeddingGrad:
		a := &c.embGrad
		p.split(wg, c, a.Dim, a.N, pick(a.DType, embeddingGradPart[float32], embeddingGradPart[float64]))
		if err := badIndex(s, c, "EmbeddingGrad: id", a.IDs, a.N, a.Vocab); err != nil || !a.Distinct {
			return err
		}
		return repeatedID(s, a.IDs, a.N)
	case opSoftmaxCrossEntropy:
		a := &c.sce
		p.split(wg, c, a.N, 2*a.Classes, pick(a.DType, sceePart[float32], sceePart[float64]))
		store(a.DType, a.Loss, sumPartials(c), a.Accumulate)
		return badIndex(s, c, "SoftmaxCrossEntropy: target", a.Targets, a.N, a.Classes)
	case opSoftmax:
		a := &c.softmax
		p.split(wg, c, a.N, 2*a.Classes, pick(a.DType, softmaxPart[float32], softmaxPart[float64]))
	case opSample:
		a := &c.sample
		p.split(wg, c, a.N, 4*a.Classes, pick(a.DType, samplePart[float32], samplePart[float64]))
	case opDropout:
		a := &c.dropout
		p.split(wg, c, a.N, 8, pick(a.DType, dropoutPart[float32], dropoutPart[float64]))
	case opAdvance:
		a := &c.advance
		at := elems[uint64](a.At, 1)
		if !a.Prev.IsZero() {
			elems[uint64](a.Prev, 1)[0] = at[0]
		}
		at[0] += a.Add
	case opAddBias:
		a := &c.addBias
		p.split(wg, c, a.Rows, a.Cols, pick(a.DType, addBiasPart[float32], addBiasPart[float64]))
	case opSumRows:
		a := &c.sumRows
		p.split(wg, c, a.Cols, a.Rows, pick(a.DType, sumRowsPart[float32], sumRowsPart[float64]))
	case opFill:
		a := &c.fill
		switch a.DType {
		case device.Float32:
			p.split(wg, c, a.N, 1, fillPart[float32])
		case device.Float64:
			p.split(wg, c, a.N, 1, fillPart[float64])
		default:
			p.split(wg, c, a.N, 1, fillPart[int32])
		}
	case opAxpby:
		a := &c.axpby
		p.split(wg, c, a.N, 3, pick(a.DType, axpbyPart[float32], axpbyPart[float64]))
	case opMul:
		a := &c.mul
		p.split(wg, c, a.N, 3, pick(a.DType, mulPart[float32], mulPart[float64]))
	case opClamp:
		a := &c.clamp
		p.split(wg, c, a.N, 2, pick(a.DType, clampPart[float32], clampPart[float64]))
	case opSumSquares:
		a := &c.sumSq
		c.parts = 0
		if a.N > 0 {
			p.split(wg, c, a.N, 1, pick(a.DType, sumSquaresPart[float32], sumSquaresPart[float64]))
		}
		store(a.DType, a.Out, sumPartials(c), a.Accumulate)
	case opSGD:
		a := &c.sgd
		if c.verdict(a.Guard) {
			c.stepRates(a.LR, a.Step, 0, 0, a.Rates)
			p.split(wg, c, a.N, 4, pick(a.DType, sgdPart[float32], sgdPart[float64]))
		}
	case opAdam:
		a := &c.adam
		if c.verdict(a.Guard) {
			c.stepRates(a.LR, a.Step, a.Beta1, a.Beta2, a.Rates)
			p.split(wg, c, a.N, 8, pick(a.DType, adamPart[float32], adamPart[float64]))
		}
	case opRMSprop:
		a := &c.rms
		if c.verdict(a.Guard) {
			c.stepRates(a.LR, 1, 0, 0, a.Rates)
			p.split(wg, c, a.N, 8, pick(a.DType, rmspropPart[float32], rmspropPart[float64]))
		}
	case opStepGuard:
		a := &c.guard
		s.mu.Lock()
		failed := s.err != nil // an index error not yet reported
		s.mu.Unlock()
		if failed {
			elems[float64](a.Guard, 2)[1] = 1
		}
		record := elems[float64](a.Record, 3)
		if !a.Slot.IsZero() {
			n := uint64(a.Record.Len() / 24)
			s := uint64(elems[float64](a.Slot, 1)[0]) % n
			record = elems[float64](a.Record, int(3*(s+1)))[3*s:]
		}
		kern.StepGuard(load(a.DType, a.Loss), load(a.DType, a.NormSq), a.Scale, a.ClipNorm,
			record, elems[float64](a.Guard, 2))
	case opGuardedCopy:
		a := &c.gcopy
		if elems[float64](a.Guard, 2)[1] == 0 {
			n := a.Src.Len()
			copy(unsafe.Slice((*byte)(driver.HostPointer(a.Dst)), n), unsafe.Slice((*byte)(driver.HostPointer(a.Src)), n))
		}
	default:
		panic(fmt.Sprintf("cpu: unknown command %d", c.op))
	}
	return nil
}

// pick returns the part function for the kernel's float type.
func pick(t device.DType, f32, f64 partFunc) partFunc {
	if t == device.Float32 {
		return f32
	}
	return f64
}

// elems views the first n elements of b as a Go slice; nil for the zero
// Buffer. The kernels checked that b holds them.
func elems[T any](b device.Buffer, n int) []T {
	if b.IsZero() || n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(driver.HostPointer(b)), n)
}

// rows views rows [lo, hi) of width elements each; nil for the zero Buffer.
func rows[T any](b device.Buffer, lo, hi, width int) []T {
	if b.IsZero() {
		return nil
	}
	return elems[T](b, hi*width)[lo*width:]
}

func sumPartials(c *cmd) float64 {
	var s float64
	for i := range c.parts {
		s += c.partial[i]
	}
	return s
}

// badIndex reports the first out-of-range index the parts of c found, as
// the error of stream s (named after its device or scope); ids holds the n
// indices, valid in [0, limit).
func badIndex(s *stream, c *cmd, what string, ids device.Buffer, n, limit int) error {
	for i := range c.parts {
		if j := c.bad[i]; j >= 0 {
			return fmt.Errorf("%s: %s %d at position %d is outside [0, %d): %w",
				s.ln.owner.Name(), what, elems[int32](ids, n)[j], j, limit, device.ErrIndex)
		}
	}
	return nil
}

// repeatedID reports an id that appears twice among the n of ids, given
// as distinct (EmbeddingGrad's Distinct), as the error of stream s.
func repeatedID(s *stream, ids device.Buffer, n int) error {
	seen := make(map[int32]int, n)
	for i, id := range elems[int32](ids, n) {
		if j, ok := seen[id]; ok {
			return fmt.Errorf("%s: EmbeddingGrad: id %d at positions %d and %d, given as Distinct: %w",
				s.ln.owner.Name(), id, j, i, device.ErrIndex)
		}
		seen[id] = i
	}
	return nil
}

// badArgMax reports the first ArgMax step outside its sequence that the
// parts of SeqPoolGrad c found, as the error of stream s.
func badArgMax(s *stream, c *cmd) error {
	a := &c.poolGrad
	for i := range c.parts {
		if j := c.bad[i]; j >= 0 {
			b := j / a.Cols
			n := a.T
			if !a.Lengths.IsZero() {
				n = max(0, min(int(elems[int32](a.Lengths, a.B)[b]), a.T))
			}
			return fmt.Errorf("%s: SeqPoolGrad: ArgMax step %d of sequence %d, column %d, is outside its %d steps: %w",
				s.ln.owner.Name(), elems[int32](a.ArgMax, a.B*a.Cols)[j], b, j%a.Cols, n, device.ErrIndex)
		}
	}
	return nil
}

// store writes (or with accumulate adds) a reduction's result v into the
// one-element buffer b of type t.
// load reads the first element of b, of type t.
func load(t device.DType, b device.Buffer) float64 {
	if t == device.Float32 {
		return float64(elems[float32](b, 1)[0])
	}
	return elems[float64](b, 1)[0]
}

// verdict reads an optimizer step's Guard (device.StepGuard) as the step
// runs: it reports whether the step is to be taken, and keeps the
// gradient's coefficient in c.coef (1 without a Guard).
func (c *cmd) verdict(guard device.Buffer) bool {
	c.coef = 1
	if guard.IsZero() {
		return true
	}
	g := elems[float64](guard, 2)
	c.coef = g[0]
	return g[1] == 0
}

// stepRates reads an optimizer step's rate and number as the step runs,
// into c.rates (device.Rates' layout): from rates when set, else from the
// arguments lr and step, the powers of beta1 and beta2 computed as
// device.Rates.Put computes them, so both give the same bits.
func (c *cmd) stepRates(lr float64, step int, beta1, beta2 float64, rates device.Buffer) {
	if !rates.IsZero() {
		copy(c.rates[:], elems[float64](rates, 4))
		return
	}
	t := float64(step)
	c.rates = [4]float64{lr, t, math.Pow(beta1, t), math.Pow(beta2, t)}
}

// clipOf is the gradient clipping of an optimizer step of c.
func clipOf[T kern.Float](c *cmd, clip float64) kern.Clip[T] {
	return kern.Clip[T]{Coef: T(c.coef), Max: T(clip)}
}

func store(t device.DType, b device.Buffer, v float64, accumulate bool) {
	if t == device.Float32 {
		storeAs[float32](b, v, accumulate)
	} else {
		storeAs[float64](b, v, accumulate)
	}
}

func storeAs[T kern.Float](b device.Buffer, v float64, accumulate bool) {
	out := elems[T](b, 1)
	if accumulate {
		out[0] += T(v)
	} else {
		out[0] = T(v)
	}
}

func lstmPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.lstm
	h := a.Hidden
	kern.LSTMCell(h, rows[T](a.Pre, lo, hi, 4*h), elems[T](a.BiasIH, 4*h), elems[T](a.BiasHH, 4*h),
		rows[T](a.CPrev, lo, hi, h), rows[T](a.C, lo, hi, h), rows[T](a.H, lo, hi, h), rows[T](a.Act, lo, hi, 4*h))
}

func lstmGradPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.lstmGrad
	h := a.Hidden
	kern.LSTMCellGrad(h, rows[T](a.Act, lo, hi, 4*h), rows[T](a.CPrev, lo, hi, h), rows[T](a.C, lo, hi, h),
		rows[T](a.DH, lo, hi, h), rows[T](a.DC, lo, hi, h), rows[T](a.DPre, lo, hi, 4*h), rows[T](a.DCPrev, lo, hi, h))
}

func gruPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.gru
	h := a.Hidden
	kern.GRUCell(h, rows[T](a.XPre, lo, hi, 3*h), rows[T](a.HPre, lo, hi, 3*h), elems[T](a.BiasIH, 3*h), elems[T](a.BiasHH, 3*h),
		rows[T](a.HPrev, lo, hi, h), rows[T](a.H, lo, hi, h), rows[T](a.Act, lo, hi, 4*h))
}

func gruGradPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.gruGrad
	h := a.Hidden
	kern.GRUCellGrad(h, rows[T](a.Act, lo, hi, 4*h), rows[T](a.HPrev, lo, hi, h), rows[T](a.DH, lo, hi, h),
		rows[T](a.DXPre, lo, hi, 3*h), rows[T](a.DHPre, lo, hi, 3*h), rows[T](a.DHPrev, lo, hi, h), a.Accumulate)
}

func gatherSeqPart[T kern.Float](c *cmd, part, lo, hi int) {
	a := &c.gather
	n := a.T * a.B
	c.bad[part] = kern.GatherSeq(a.T, a.B, a.Cols, a.LdX, a.LdY, lo, hi, elems[int32](a.Index, a.B), elems[int32](a.Lengths, a.B),
		elems[T](a.X, (n-1)*a.LdX+a.Cols), elems[T](a.Y, (n-1)*a.LdY+a.Cols))
}

func seqPoolPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.pool
	var y []T
	if a.T > 0 {
		y = elems[T](a.Y, (a.T*a.B-1)*a.LdY+a.Cols)
	}
	var argmax []int32
	if a.Max {
		argmax = elems[int32](a.ArgMax, a.B*a.Cols)
	}
	kern.SeqPool(a.T, a.B, a.Cols, a.LdY, a.LdOut, lo, hi, a.Max, elems[int32](a.Lengths, a.B), y,
		elems[T](a.Out, (a.B-1)*a.LdOut+a.Cols), argmax)
}

func seqPoolGradPart[T kern.Float](c *cmd, part, lo, hi int) {
	a := &c.poolGrad
	var argmax []int32
	if a.Max {
		argmax = elems[int32](a.ArgMax, a.B*a.Cols)
	}
	c.bad[part] = kern.SeqPoolGrad(a.T, a.B, a.Cols, a.LdDOut, a.LdDY, lo, hi, a.Max, elems[int32](a.Lengths, a.B),
		elems[T](a.DOut, (a.B-1)*a.LdDOut+a.Cols), argmax, elems[T](a.DY, (a.T*a.B-1)*a.LdDY+a.Cols))
}

func embeddingPart[T kern.Float](c *cmd, part, lo, hi int) {
	a := &c.emb
	bad := kern.Embedding(a.Dim, a.Vocab, elems[T](a.Table, a.Vocab*a.Dim), rows[int32](a.IDs, lo, hi, 1), rows[T](a.Out, lo, hi, a.Dim))
	c.bad[part] = offset(bad, lo)
}

func embeddingGradPart[T kern.Float](c *cmd, part, lo, hi int) {
	a := &c.embGrad
	bad := kern.EmbeddingGrad(a.Dim, a.Vocab, lo, hi, elems[int32](a.IDs, a.N), elems[T](a.DOut, a.N*a.Dim), elems[T](a.DTable, a.Vocab*a.Dim))
	c.bad[part] = bad
}

func sceePart[T kern.Float](c *cmd, part, lo, hi int) {
	a := &c.sce
	loss, bad := kern.SoftmaxCrossEntropy(a.Classes, rows[T](a.Logits, lo, hi, a.Classes), rows[int32](a.Targets, lo, hi, 1),
		a.Scale, rows[T](a.DLogits, lo, hi, a.Classes), a.Ignore, a.IgnoreIndex, elems[T](a.Weights, a.Classes))
	c.partial[part], c.bad[part] = loss, offset(bad, lo)
}

func softmaxPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.softmax
	kern.Softmax(a.Classes, rows[T](a.Logits, lo, hi, a.Classes), rows[T](a.Probs, lo, hi, a.Classes), a.Temperature)
}

func samplePart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.sample
	counter := a.Counter
	if !a.CounterAt.IsZero() {
		counter += *(*uint64)(driver.HostPointer(a.CounterAt))
	}
	kern.Sample(a.Classes, rows[T](a.Logits, lo, hi, a.Classes), a.Temperature, a.TopK, a.Seed, counter+uint64(lo),
		rows[int32](a.IDs, lo, hi, 1), rows[int32](a.Tokens, lo, hi, 1))
}

func dropoutPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.dropout
	seed, offset := a.Seed, a.Offset
	if st := elems[uint64](a.StateAt, 2); st != nil {
		seed, offset = seed^st[0], offset+st[1]
	}
	kern.Dropout(a.P, seed, offset+uint64(lo), rows[T](a.X, lo, hi, 1), rows[T](a.Y, lo, hi, 1), rows[T](a.Mask, lo, hi, 1))
}

func addBiasPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.addBias
	kern.AddBias(a.Cols, elems[T](a.Bias, a.Cols), rows[T](a.Y, lo, hi, a.Cols))
}

func sumRowsPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.sumRows
	kern.SumRows(a.Cols, lo, hi, elems[T](a.X, a.Rows*a.Cols), elems[T](a.Out, a.Cols), a.Accumulate)
}

func fillPart[T float32 | float64 | int32](c *cmd, _, lo, hi int) {
	a := &c.fill
	kern.Fill(rows[T](a.X, lo, hi, 1), T(a.Value))
}

func axpbyPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.axpby
	kern.Axpby(T(a.Alpha), T(a.Beta), rows[T](a.X, lo, hi, 1), rows[T](a.Y, lo, hi, 1))
}

func mulPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.mul
	kern.Mul(rows[T](a.X, lo, hi, 1), rows[T](a.Y, lo, hi, 1), rows[T](a.Z, lo, hi, 1))
}

func clampPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.clamp
	kern.Clamp(T(a.Min), T(a.Max), rows[T](a.X, lo, hi, 1))
}

func sumSquaresPart[T kern.Float](c *cmd, part, lo, hi int) {
	a := &c.sumSq
	c.partial[part] = kern.SumSquares(rows[T](a.X, lo, hi, 1))
}

func sgdPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.sgd
	kern.SGD(c.rates[0], a.Momentum, a.Dampening, a.WeightDecay, a.Nesterov, c.rates[1] == 1, clipOf[T](c, a.Clip),
		rows[T](a.Param, lo, hi, 1), rows[T](a.Grad, lo, hi, 1), rows[T](a.Velocity, lo, hi, 1))
}

func adamPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.adam
	kern.Adam(c.rates[0], a.Beta1, a.Beta2, a.Eps, a.WeightDecay, a.Decoupled, c.rates[2], c.rates[3], clipOf[T](c, a.Clip),
		rows[T](a.Param, lo, hi, 1), rows[T](a.Grad, lo, hi, 1), rows[T](a.M, lo, hi, 1), rows[T](a.V, lo, hi, 1))
}

func rmspropPart[T kern.Float](c *cmd, _, lo, hi int) {
	a := &c.rms
	kern.RMSprop(c.rates[0], a.Alpha, a.Eps, a.WeightDecay, a.Momentum, a.Centered, clipOf[T](c, a.Clip),
		rows[T](a.Param, lo, hi, 1), rows[T](a.Grad, lo, hi, 1), rows[T](a.SquareAvg, lo, hi, 1),
		rows[T](a.GradAvg, lo, hi, 1), rows[T](a.Velocity, lo, hi, 1))
}

// offset turns a part's first bad index into a global one.
func offset(bad, lo int) int {
	if bad < 0 {
		return -1
	}
	return bad + lo
}

// gemm32 runs a float32 GEMM through the device's BLAS, one call per
// matrix of a batch.
func gemm32(d *Device, g *device.Gemm) {
	ta, tb, ra, ca, rb, cb := gemmShape(g)
	a := elems[float32](g.A, (g.Batch-1)*g.StrideA+(ra-1)*g.LdA+ca)
	b := elems[float32](g.B, (g.Batch-1)*g.StrideB+(rb-1)*g.LdB+cb)
	c := elems[float32](g.C, (g.Batch-1)*g.StrideC+(g.M-1)*g.LdC+g.N)
	for i := range g.Batch {
		d.blas.Sgemm(ta, tb, g.M, g.N, g.K, float32(g.Alpha),
			a[i*g.StrideA:], g.LdA, b[i*g.StrideB:], g.LdB, float32(g.Beta), c[i*g.StrideC:], g.LdC)
	}
}

func gemm64(d *Device, g *device.Gemm) {
	ta, tb, ra, ca, rb, cb := gemmShape(g)
	a := elems[float64](g.A, (g.Batch-1)*g.StrideA+(ra-1)*g.LdA+ca)
	b := elems[float64](g.B, (g.Batch-1)*g.StrideB+(rb-1)*g.LdB+cb)
	c := elems[float64](g.C, (g.Batch-1)*g.StrideC+(g.M-1)*g.LdC+g.N)
	for i := range g.Batch {
		d.blas.Dgemm(ta, tb, g.M, g.N, g.K, g.Alpha,
			a[i*g.StrideA:], g.LdA, b[i*g.StrideB:], g.LdB, g.Beta, c[i*g.StrideC:], g.LdC)
	}
}

// gemmShape returns the BLAS transpose flags and the stored shapes of A
// and B.
func gemmShape(g *device.Gemm) (ta, tb blas.Transpose, ra, ca, rb, cb int) {
	ta, tb = blas.NoTrans, blas.NoTrans
	ra, ca, rb, cb = g.M, g.K, g.K, g.N
	if g.TransA {
		ta, ra, ca = blas.Trans, g.K, g.M
	}
	if g.TransB {
		tb, rb, cb = blas.Trans, g.N, g.K
	}
	return
}
