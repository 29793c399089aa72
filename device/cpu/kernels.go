package cpu

import (
	"sync/atomic"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/driver"
)

// op is the kind of a queued command.
type op uint8

const (
	opNone op = iota
	opWait
	opJoin // a wait for a branch's work that takes its error
	opCopy
	opGemm
	opLSTMCell
	opLSTMCellGrad
	opGRUCell
	opGRUCellGrad
	opGatherSeq
	opSeqPool
	opSeqPoolGrad
	opEmbedding
	opEmbeddingGrad
	opSoftmaxCrossEntropy
	opSoftmax
	opSample
	opDropout
	opAdvance
	opAddBias
	opSumRows
	opFill
	opAxpby
	opMul
	opClamp
	opSumSquares
	opSGD
	opAdam
	opRMSprop
	opStepGuard
	opGuardedCopy
	opGraph
	opHost
)

// cmd is one slot of a stream's ring: the kind of work and its arguments,
// held by value so that queuing allocates nothing. Only the field of its
// kind is meaningful.
type cmd struct {
	op    op
	wait  event
	copy  copyCmd
	graph *graph // opGraph's
	host  hostCmd

	gemm     device.Gemm
	lstm     device.LSTMCell
	lstmGrad device.LSTMCellGrad
	gru      device.GRUCell
	gruGrad  device.GRUCellGrad
	gather   device.GatherSeq
	pool     device.SeqPool
	poolGrad device.SeqPoolGrad
	emb      device.Embedding
	embGrad  device.EmbeddingGrad
	sce      device.SoftmaxCrossEntropy
	softmax  device.Softmax
	sample   device.Sample
	dropout  device.Dropout
	advance  device.Advance
	addBias  device.AddBias
	sumRows  device.SumRows
	fill     device.Fill
	axpby    device.Axpby
	mul      device.Mul
	clamp    device.Clamp
	sumSq    device.SumSquares
	sgd      device.SGD
	adam     device.Adam
	rms      device.RMSprop
	guard    device.StepGuard
	gcopy    device.GuardedCopy

	// coef is an optimizer step's gradient coefficient, read from its
	// Guard when the step runs, and rates its rate, number and Adam's
	// powers of the betas (device.Rates), from its arguments or its Rates.
	coef  float64
	rates [4]float64

	// parts is the number of parts the pool ran; partial and bad hold
	// their partial sums and first out-of-range index (-1 for none).
	parts   int
	partial [maxThreads]float64
	bad     [maxThreads]int
}

// release drops what the slot references outside the device's memory
// (the Go slices of Upload and Download), so that the ring does not keep
// them alive.
func (c *cmd) release() {
	c.copy = copyCmd{}
	c.wait = event{}
	c.graph = nil
	c.host = hostCmd{}
}

// kernels is the CPU device's device.Kernels: each method checks its
// arguments against the lane's buffers and queues a command on the lane's
// compute stream.
type kernels struct {
	l *lane
	s *stream // a branch's stream, nil for the compute stream
}

// stream is the stream k queues on.
func (k kernels) stream() *stream {
	if k.s != nil {
		return k.s
	}
	return k.l.compute
}

var (
	_ device.Kernels = kernels{}
	_ device.Walker  = kernels{}
)

// launch queues the command fill writes, unless the arguments were
// invalid (err).
func (k kernels) launch(err error, fill func(c *cmd)) error {
	return k.launchN(1, err, fill)
}

// launchN is launch for a kernel over n elements: with n = 0 there is
// nothing to queue, but bad arguments and a closed device are still
// reported.
func (k kernels) launchN(n int, err error, fill func(c *cmd)) error {
	return k.launchAs(launchesOf, n, err, fill)
}

// The counters a command counts in (GEMMs and copies apart from the
// other kernels), of the device's counts or a recording graph's.
func launchesOf(c *counts) *atomic.Int64 { return &c.launches }
func gemmsOf(c *counts) *atomic.Int64    { return &c.gemms }
func copiesOf(c *counts) *atomic.Int64   { return &c.copies }

// launchAs is launchN counted in counter's: the device's counts, or the
// graph's that the command was recorded into.
func (k kernels) launchAs(counter func(*counts) *atomic.Int64, n int, err error, fill func(c *cmd)) error {
	if err != nil {
		return err
	}
	if n == 0 {
		return k.l.checkOpen("kernel")
	}
	_, rec, err := k.stream().enqueueAt(fill)
	if err == nil {
		c := &k.l.d.counts
		if rec != nil {
			c = &rec.tally // recorded, not run: counted at each Launch
		}
		counter(c).Add(1)
	}
	return err
}

func (k kernels) Gemm(a device.Gemm) error {
	return k.launchAs(gemmsOf, 1, a.Check(k.l.owner), func(c *cmd) { c.op, c.gemm = opGemm, a.WithDefaults() })
}

// LSTMCell runs the fused form (device.LSTMCell.Fused) as the two calls
// it stands for, the recurrent Gemm then the cell, queued one after the
// other: results identical to the bit, counted as one GEMM and one launch.
func (k kernels) LSTMCell(a device.LSTMCell) error {
	err := a.Check(k.l.owner)
	if err == nil && a.Fused() {
		err = k.Gemm(a.RecurrentGemm())
		a.HPrev, a.W = device.Buffer{}, device.Buffer{}
	}
	return k.launch(err, func(c *cmd) { c.op, c.lstm = opLSTMCell, a })
}

// The walks queue the per-step calls they stand for (their Queue): the
// CPU device has no cost per call to save.
func (k kernels) LSTMWalk(a device.LSTMWalk) error         { return queueWalk(k, a) }
func (k kernels) GRUWalk(a device.GRUWalk) error           { return queueWalk(k, a) }
func (k kernels) LSTMGradWalk(a device.LSTMGradWalk) error { return queueWalk(k, a) }
func (k kernels) GRUGradWalk(a device.GRUGradWalk) error   { return queueWalk(k, a) }

// queueWalk checks a walk's arguments and queues its per-step calls on k.
func queueWalk[A interface {
	Check(device.Device) error
	Queue(device.Kernels) error
}](k kernels, a A) error {
	if err := a.Check(k.l.owner); err != nil {
		return err
	}
	return a.Queue(k)
}

// LSTMCellGrad runs the fused form (device.LSTMCellGrad.Fused) as the two
// calls it stands for, as LSTMCell does: the recurrent Gemm into DH, then
// the cell gradient.
func (k kernels) LSTMCellGrad(a device.LSTMCellGrad) error {
	err := a.Check(k.l.owner)
	if err == nil && a.Fused() {
		err = k.Gemm(a.RecurrentGemm())
		a.DPreNext, a.W, a.NextBatch = device.Buffer{}, device.Buffer{}, 0
	}
	return k.launch(err, func(c *cmd) { c.op, c.lstmGrad = opLSTMCellGrad, a })
}

// GRUCell runs the fused form as LSTMCell does.
func (k kernels) GRUCell(a device.GRUCell) error {
	err := a.Check(k.l.owner)
	if err == nil && a.Fused() {
		err = k.Gemm(a.RecurrentGemm())
		a.W = device.Buffer{}
	}
	return k.launch(err, func(c *cmd) { c.op, c.gru = opGRUCell, a })
}

// GRUCellGrad runs the fused form as LSTMCellGrad does.
func (k kernels) GRUCellGrad(a device.GRUCellGrad) error {
	err := a.Check(k.l.owner)
	if err == nil && a.Fused() {
		err = k.Gemm(a.RecurrentGemm())
		a.DHPreNext, a.W, a.NextBatch = device.Buffer{}, device.Buffer{}, 0
	}
	return k.launch(err, func(c *cmd) { c.op, c.gruGrad = opGRUCellGrad, a })
}

func (k kernels) GatherSeq(a device.GatherSeq) error {
	return k.launchN(a.T*a.B, a.Check(k.l.owner), func(c *cmd) { c.op, c.gather = opGatherSeq, a.WithDefaults() })
}

func (k kernels) SeqPool(a device.SeqPool) error {
	return k.launchN(a.B, a.Check(k.l.owner), func(c *cmd) { c.op, c.pool = opSeqPool, a.WithDefaults() })
}

func (k kernels) SeqPoolGrad(a device.SeqPoolGrad) error {
	return k.launchN(a.T*a.B, a.Check(k.l.owner), func(c *cmd) { c.op, c.poolGrad = opSeqPoolGrad, a.WithDefaults() })
}

func (k kernels) Embedding(a device.Embedding) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.emb = opEmbedding, a })
}

func (k kernels) EmbeddingGrad(a device.EmbeddingGrad) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.embGrad = opEmbeddingGrad, a })
}

func (k kernels) SoftmaxCrossEntropy(a device.SoftmaxCrossEntropy) error {
	return k.launch(a.Check(k.l.owner), func(c *cmd) { c.op, c.sce = opSoftmaxCrossEntropy, a })
}

func (k kernels) Softmax(a device.Softmax) error {
	return k.launch(a.Check(k.l.owner), func(c *cmd) { c.op, c.softmax = opSoftmax, a })
}

func (k kernels) Sample(a device.Sample) error {
	return k.launch(a.Check(k.l.owner), func(c *cmd) { c.op, c.sample = opSample, a })
}

func (k kernels) Dropout(a device.Dropout) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.dropout = opDropout, a })
}

func (k kernels) Advance(a device.Advance) error {
	return k.launch(a.Check(k.l.owner), func(c *cmd) { c.op, c.advance = opAdvance, a })
}

func (k kernels) AddBias(a device.AddBias) error {
	return k.launch(a.Check(k.l.owner), func(c *cmd) { c.op, c.addBias = opAddBias, a })
}

func (k kernels) SumRows(a device.SumRows) error {
	return k.launch(a.Check(k.l.owner), func(c *cmd) { c.op, c.sumRows = opSumRows, a })
}

func (k kernels) Fill(a device.Fill) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.fill = opFill, a })
}

func (k kernels) Copy(a device.Copy) error {
	return k.launchAs(copiesOf, int(a.Src.Len()), a.Check(k.l.owner), func(c *cmd) {
		c.op, c.copy = opCopy, copyCmd{dst: driver.HostPointer(a.Dst), src: driver.HostPointer(a.Src), n: a.Src.Len()}
	})
}

func (k kernels) Axpby(a device.Axpby) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.axpby = opAxpby, a })
}

func (k kernels) Mul(a device.Mul) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.mul = opMul, a })
}

func (k kernels) Clamp(a device.Clamp) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.clamp = opClamp, a })
}

func (k kernels) SumSquares(a device.SumSquares) error {
	return k.launch(a.Check(k.l.owner), func(c *cmd) { c.op, c.sumSq = opSumSquares, a })
}

func (k kernels) SGD(a device.SGD) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.sgd = opSGD, a })
}

func (k kernels) Adam(a device.Adam) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.adam = opAdam, a })
}

func (k kernels) RMSprop(a device.RMSprop) error {
	return k.launchN(a.N, a.Check(k.l.owner), func(c *cmd) { c.op, c.rms = opRMSprop, a })
}

func (k kernels) StepGuard(a device.StepGuard) error {
	return k.launch(a.Check(k.l.owner), func(c *cmd) { c.op, c.guard = opStepGuard, a })
}

func (k kernels) GuardedCopy(a device.GuardedCopy) error {
	return k.launchN(int(a.Src.Len()), a.Check(k.l.owner), func(c *cmd) { c.op, c.gcopy = opGuardedCopy, a })
}
