package cuda

import (
	"errors"
	"fmt"
	"math"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// kernel names a typed kernel of cuda/kernels (ABI.md): gc_<name>_f32 and
// gc_<name>_f64.
type kernel int

const (
	kLSTMCell kernel = iota
	kLSTMCellGrad
	kGRUCell
	kGRUCellGrad
	kGatherSeq
	kSeqPool
	kSeqPoolGrad
	kEmbedding
	kEmbeddingGradScan
	kEmbeddingGradSeq
	kEmbeddingGradRows
	kSoftmaxXent
	kSoftmax
	kSample
	kDropout
	kSumSquaresPartial
	kSumFinish
	kSumRows
	kSumRowsPartial
	kSumRowsFinish
	kAddBias
	kFill
	kAxpby
	kMul
	kClamp
	kSGD
	kAdam
	kRMSprop
	kStepGuard
	kLSTMCellFused
	kGRUCellFused
	kLSTMCellGradFused
	kGRUCellGradFused
	kLSTMWalk
	kGRUWalk
	kLSTMGradWalk
	kGRUGradWalk
	numKernels
)

var kernelNames = [numKernels]string{
	kLSTMCell:          "lstm_cell",
	kLSTMCellGrad:      "lstm_cell_grad",
	kGRUCell:           "gru_cell",
	kGRUCellGrad:       "gru_cell_grad",
	kGatherSeq:         "gather_seq",
	kSeqPool:           "seq_pool",
	kSeqPoolGrad:       "seq_pool_grad",
	kEmbedding:         "embedding",
	kEmbeddingGradScan: "embedding_grad_scan",
	kEmbeddingGradSeq:  "embedding_grad_seq",
	kEmbeddingGradRows: "embedding_grad_rows",
	kSoftmaxXent:       "softmax_xent",
	kSoftmax:           "softmax",
	kSample:            "sample",
	kDropout:           "dropout",
	kSumSquaresPartial: "sum_squares_partial",
	kSumFinish:         "sum_finish",
	kSumRows:           "sum_rows",
	kSumRowsPartial:    "sum_rows_partial",
	kSumRowsFinish:     "sum_rows_finish",
	kAddBias:           "add_bias",
	kFill:              "fill",
	kAxpby:             "axpby",
	kMul:               "mul",
	kClamp:             "clamp",
	kSGD:               "sgd",
	kAdam:              "adam",
	kRMSprop:           "rmsprop",
	kStepGuard:         "step_guard",
	kLSTMCellFused:     "lstm_cell_fused",
	kGRUCellFused:      "gru_cell_fused",
	kLSTMCellGradFused: "lstm_cell_grad_fused",
	kGRUCellGradFused:  "gru_cell_grad_fused",
	kLSTMWalk:          "lstm_walk",
	kGRUWalk:           "gru_walk",
	kLSTMGradWalk:      "lstm_grad_walk",
	kGRUGradWalk:       "gru_grad_walk",
}

// Launch shapes (ABI.md).
const (
	blockSize   = 256  // threads per block of the 1-D kernels
	maxBlocks   = 4096 // grid-stride kernels loop past this many blocks
	rowsPerBlk  = blockSize / 32
	scanBlock   = 128     // gc_embedding_grad_scan's block
	scanMaxWork = 1 << 26 // vocab·n up to which the scan is used
	maxGridY    = 65535
	maxParts    = 1024 // gc_sum_squares_partial's most blocks
	partWork    = 2048 // elements per block it aims for
	rowSlice    = 64   // rows a block of gc_sum_rows_partial sums, at least
	rowBlocks   = 1024 // blocks SumRows aims for when it slices the rows
	onePassRows = 512  // rows up to which SumRows is one pass (64 a thread)
)

// gridCap is the most blocks a launch of a grid-stride kernel gets:
// grid1's and rowGrid's grids, and SumSquares's partial sums, whose own
// cap (maxParts) is lower. It is maxBlocks, and only tests change it: the
// emulated conformance suite runs once more with it lowered to a block or
// two, so that every grid-stride loop runs many passes over data of
// modest size. Exempt are the two kernels whose grid is sized to the data
// and which do not loop over blocks: gc_sum_rows and gc_sum_rows_partial (a
// block per 32 columns and slice of rows) and gc_embedding_grad_scan (a
// block per 128 columns and table row).
var gridCap = maxBlocks

// grid1 is the grid of a 1-D grid-stride kernel over n elements.
func grid1(n int) [3]uint32 {
	b := (n + blockSize - 1) / blockSize
	return [3]uint32{uint32(max(1, min(b, gridCap))), 1, 1}
}

var block1 = [3]uint32{blockSize, 1, 1}

// Argument slots (ABI.md: every parameter is 8 bytes).
func ptr(b device.Buffer) uint64 { return uint64(b.Addr()) } // the zero Buffer is NULL
func i64(n int) uint64           { return uint64(int64(n)) }
func f64(x float64) uint64       { return math.Float64bits(x) }
func flag(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// typ is the index of dt's variant in Device.fn.
func typ(dt device.DType) int {
	if dt == device.Float64 {
		return 1
	}
	return 0
}

// launchFn queues f on the queue's stream with args in its 8-byte slots.
func (q *queue) launchFn(f cuFunction, grid, block [3]uint32, args ...uint64) error {
	d := q.ln.d
	q.launchMu.Lock()
	n := copy(q.args[:], args)
	err := d.api.Launch(d.ctx, f, grid, block, 0, q.on, q.args[:n])
	q.launchMu.Unlock()
	return err
}

// launch queues kernel k's variant for dt.
func (q *queue) launch(k kernel, dt device.DType, grid, block [3]uint32, args ...uint64) error {
	return q.launchFn(q.ln.d.fn[k][typ(dt)], grid, block, args...)
}

// launchCooperative queues kernel k's variant for dt as a cooperative
// launch (api.LaunchCooperative), each block with shared bytes of dynamic
// shared memory.
func (q *queue) launchCooperative(k kernel, dt device.DType, grid, block [3]uint32, shared uint32, args ...uint64) error {
	d := q.ln.d
	q.launchMu.Lock()
	n := copy(q.args[:], args)
	err := d.api.LaunchCooperative(d.ctx, d.fn[k][typ(dt)], grid, block, shared, q.on, q.args[:n])
	q.launchMu.Unlock()
	return err
}

// allocTemp takes a kernel's temporary of n bytes from the lane's
// allocation scope, on the queue's allocator stream.
func (q *queue) allocTemp(kernel string, n int64) (alloc.Ptr, error) {
	l := q.ln
	p, err := l.d.mem.AllocIn(n, q.temps, alloc.Workspace, l.scope)
	if err != nil {
		return 0, fmt.Errorf("%s: %s: %w", l.name, kernel, err)
	}
	l.allocated(p)
	return p, nil
}

// freeTemp returns p, a temporary the kernel method took from the
// allocator, and joins the error of doing so to *err. It is deferred right
// after the Alloc: the cache hands p out again only to work queued after
// the kernel's launches on the same stream, so freeing it before they ran
// is safe.
func (q *queue) freeTemp(kernel string, p alloc.Ptr, err *error) {
	l := q.ln
	if l.graphs.mem.Keep(p) {
		return
	}
	if ferr := l.d.mem.Free(p); ferr != nil {
		*err = errors.Join(*err, fmt.Errorf("%s: %s: freeing a temporary: %w", l.name, kernel, ferr))
	}
}

// kernels is device.Kernels on a queue: a lane's compute stream (the
// device's or a scope's) or one of its branches. One pointer, so that
// boxing it in the interface allocates nothing.
type kernels struct{ q *queue }

var _ device.Kernels = kernels{}

// check is every kernel's prologue: an open device (and scope) and valid
// arguments, whose buffers all belong to the lane's owner.
//
// It is generic, not over an interface: boxing the argument struct in an
// interface made it escape, a heap allocation per kernel call.
func check[A interface{ Check(device.Device) error }](k kernels, name string, a A) error {
	if err := k.q.checkOpen(name); err != nil {
		return err
	}
	return a.Check(k.q.ln.owner)
}

func (k kernels) Gemm(a device.Gemm) error {
	if err := check(k, "Gemm", a); err != nil {
		return err
	}
	w := a.WithDefaults()
	for _, v := range []int{w.M, w.N, w.K, w.LdA, w.LdB, w.LdC, w.Batch} {
		if v > math.MaxInt32 {
			return fmt.Errorf("cuda: Gemm: a size or leading dimension of %d exceeds cuBLAS's 32-bit int: %w", v, device.ErrShape)
		}
	}
	// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, and a
	// row-major matrix read column-major is its transpose: so cuBLAS gets
	// B as its first operand and A as its second, with the same transpose
	// flags, and m and n swapped.
	g := blasGemm{
		Double: a.DType == device.Float64,
		TransA: w.TransB, TransB: w.TransA,
		M: w.N, N: w.M, K: w.K,
		Alpha: w.Alpha, Beta: w.Beta,
		A: w.B.Addr(), LdA: w.LdB, StrideA: int64(w.StrideB),
		B: w.A.Addr(), LdB: w.LdA, StrideB: int64(w.StrideA),
		C: w.C.Addr(), LdC: w.LdC, StrideC: int64(w.StrideC),
		Batch: w.Batch,
	}
	q := k.q
	q.blasMu.Lock()
	defer q.blasMu.Unlock()
	if err := q.setWorkspace(); err != nil {
		return fmt.Errorf("%s: Gemm: %w", q.ln.name, err)
	}
	return q.ln.d.api.BLASGemm(q.ln.d.ctx, q.blas, g)
}

// fuseThreads is the fused cell kernels' block size (cells.cu's
// GC_FUSE_THREADS).
const fuseThreads = 128

// fuseTile is the fused cell kernels' block for a hidden size: 32 units
// by 4 batch rows, or 16 by 8, or 8 by 16 when the layer has fewer units,
// so that a block's threads are (nearly) all the layer's. The tile changes
// which thread computes an element, never how: each sum runs over k in
// order.
func fuseTile(hidden int) (j, b int) {
	switch {
	case hidden <= 8:
		return 8, fuseThreads / 8
	case hidden <= 16:
		return 16, fuseThreads / 16
	}
	return 32, fuseThreads / 32
}

// fuse reports whether a cell call given its recurrent product runs the
// fused kernel (Config.FuseCellsUpTo): a small enough hidden size and a
// grid whose rows hold the batch. apart reports that the kernel must then
// stop after the product and leave the cell to the cell kernel: when the
// new h overlaps the previous one (the layers' single step writes the
// state in place), which every block reads whole while the others write
// theirs. Both ways compute the same values in the same order, so whether
// h is written in place never changes the results.
func (k kernels) fuse(batch, hidden int, dt device.DType, h, hPrev device.Buffer) (fused, apart bool) {
	n := alloc.Ptr(int64(batch*hidden) * dt.Size())
	_, tb := fuseTile(hidden)
	fused = hidden <= k.q.ln.d.cfg.fuseCellsUpTo() && (batch+tb-1)/tb <= maxGridY
	return fused, h.Addr() < hPrev.Addr()+n && hPrev.Addr() < h.Addr()+n
}

// fuseShape is the fused cell kernels' grid and block.
func fuseShape(batch, hidden int) (grid, block [3]uint32) {
	tj, tb := fuseTile(hidden)
	return [3]uint32{uint32((hidden + tj - 1) / tj), uint32((batch + tb - 1) / tb), 1}, [3]uint32{uint32(tj), uint32(tb), 1}
}

// LSTMCell is the cell kernel, after the recurrent GEMM when the call
// carries it (device.LSTMCell.Fused), or one launch of the fused kernel
// that does both (fuse; two launches, the fused kernel's product and the
// cell kernel, when h is written over hprev).
func (k kernels) LSTMCell(a device.LSTMCell) error {
	if err := check(k, "LSTMCell", a); err != nil {
		return err
	}
	if a.Fused() {
		if fused, apart := k.fuse(a.Batch, a.Hidden, a.DType, a.H, a.HPrev); fused {
			grid, block := fuseShape(a.Batch, a.Hidden)
			err := k.q.launch(kLSTMCellFused, a.DType, grid, block,
				ptr(a.HPrev), ptr(a.W), ptr(a.Pre), ptr(a.BiasIH), ptr(a.BiasHH), ptr(a.CPrev), ptr(a.C), ptr(a.H), ptr(a.Act),
				i64(a.Batch), i64(a.Hidden), flag(!apart))
			if err != nil || !apart {
				return err
			}
		} else if err := k.Gemm(a.RecurrentGemm()); err != nil {
			return err
		}
	}
	return k.q.launch(kLSTMCell, a.DType, grid1(a.Batch*a.Hidden), block1,
		ptr(a.Pre), ptr(a.BiasIH), ptr(a.BiasHH), ptr(a.CPrev), ptr(a.C), ptr(a.H), ptr(a.Act), i64(a.Batch), i64(a.Hidden))
}

// fuseGrad is fuse for a cell gradient given the next step's recurrent
// product: the fused kernel's grid covers rows rows, the more of the
// cell's and the next step's. apart reports that the kernel must stop
// after adding the product into dh: when dNext or w overlaps one of the
// outputs, which the contract allows (the two calls would read the
// product's operands before the cell gradient writes), but which the
// fused kernel's blocks would write while others still read them. Both
// ways compute the same values in the same order.
func (k kernels) fuseGrad(rows, hidden int, dNext, w device.Buffer, dNextN, wN int, dt device.DType, outs ...extent) (fused, apart bool) {
	_, tb := fuseTile(hidden)
	fused = hidden <= k.q.ln.d.cfg.fuseCellsUpTo() && (rows+tb-1)/tb <= maxGridY
	for _, o := range outs {
		apart = apart || o.overlaps(extentOf(dNext, dNextN, dt)) || o.overlaps(extentOf(w, wN, dt))
	}
	return fused, apart
}

// extent is the memory a kernel touches in a buffer: n elements from its
// start.
type extent struct{ lo, hi alloc.Ptr }

func extentOf(b device.Buffer, n int, dt device.DType) extent {
	return extent{b.Addr(), b.Addr() + alloc.Ptr(int64(n)*dt.Size())}
}

func (e extent) overlaps(o extent) bool { return e.lo < o.hi && o.lo < e.hi }

// LSTMCellGrad is the cell gradient kernel, after the recurrent GEMM into
// DH when the call carries the next step's product
// (device.LSTMCellGrad.Fused), or one launch of the fused kernel that does
// both (fuseGrad; two launches, its product and the cell gradient kernel,
// when the product's operands overlap an output).
func (k kernels) LSTMCellGrad(a device.LSTMCellGrad) error {
	if err := check(k, "LSTMCellGrad", a); err != nil {
		return err
	}
	if a.Fused() {
		g := a.RecurrentGemm()
		bh, dt := a.Batch*a.Hidden, a.DType
		if fused, apart := k.fuseGrad(max(a.Batch, g.M), a.Hidden, a.DPreNext, a.W, g.M*g.K, g.K*g.N, dt,
			extentOf(a.DPre, 4*bh, dt), extentOf(a.DCPrev, bh, dt)); fused {
			grid, block := fuseShape(max(a.Batch, g.M), a.Hidden)
			err := k.q.launch(kLSTMCellGradFused, dt, grid, block,
				ptr(a.DPreNext), ptr(a.W), ptr(a.Act), ptr(a.CPrev), ptr(a.C), ptr(a.DH), ptr(a.DC), ptr(a.DPre), ptr(a.DCPrev),
				i64(a.Batch), i64(g.M), i64(a.Hidden), flag(!apart))
			if err != nil || !apart {
				return err
			}
		} else if err := k.Gemm(g); err != nil {
			return err
		}
	}
	return k.q.launch(kLSTMCellGrad, a.DType, grid1(a.Batch*a.Hidden), block1,
		ptr(a.Act), ptr(a.CPrev), ptr(a.C), ptr(a.DH), ptr(a.DC), ptr(a.DPre), ptr(a.DCPrev), i64(a.Batch), i64(a.Hidden))
}

// GRUCell is LSTMCell's counterpart.
func (k kernels) GRUCell(a device.GRUCell) error {
	if err := check(k, "GRUCell", a); err != nil {
		return err
	}
	if a.Fused() {
		if fused, apart := k.fuse(a.Batch, a.Hidden, a.DType, a.H, a.HPrev); fused {
			grid, block := fuseShape(a.Batch, a.Hidden)
			err := k.q.launch(kGRUCellFused, a.DType, grid, block,
				ptr(a.HPrev), ptr(a.W), ptr(a.XPre), ptr(a.HPre), ptr(a.BiasIH), ptr(a.BiasHH), ptr(a.H), ptr(a.Act),
				i64(a.Batch), i64(a.Hidden), flag(!apart))
			if err != nil || !apart {
				return err
			}
		} else if err := k.Gemm(a.RecurrentGemm()); err != nil {
			return err
		}
	}
	return k.q.launch(kGRUCell, a.DType, grid1(a.Batch*a.Hidden), block1,
		ptr(a.XPre), ptr(a.HPre), ptr(a.BiasIH), ptr(a.BiasHH), ptr(a.HPrev), ptr(a.H), ptr(a.Act), i64(a.Batch), i64(a.Hidden))
}

var _ device.Walker = kernels{}

// LSTMWalk is one launch of the persistent walk where walkShape allows
// (Config.WalkCellsUpTo), else the per-step calls it stands for
// (device.LSTMWalk.Queue), each a fused cell kernel or a GEMM and the cell.
func (k kernels) LSTMWalk(a device.LSTMWalk) error {
	if err := check(k, "LSTMWalk", a); err != nil {
		return err
	}
	grid, block, shared, ok := k.walkShape(kLSTMWalk, a.Batch, a.Hidden, a.DType)
	if !ok {
		return a.Queue(k)
	}
	return k.q.launchCooperative(kLSTMWalk, a.DType, grid, block, shared,
		ptr(a.H0), ptr(a.C0), ptr(a.W), ptr(a.Pre), ptr(a.BiasIH), ptr(a.BiasHH), ptr(a.H), ptr(a.C), ptr(a.CLast), ptr(a.Act),
		ptr(a.RowsAt), i64(a.Steps), i64(a.Batch), i64(a.Hidden), flag(a.Reverse), uint64(k.q.bar))
}

// GRUWalk is LSTMWalk's counterpart.
func (k kernels) GRUWalk(a device.GRUWalk) error {
	if err := check(k, "GRUWalk", a); err != nil {
		return err
	}
	grid, block, shared, ok := k.walkShape(kGRUWalk, a.Batch, a.Hidden, a.DType)
	if !ok {
		return a.Queue(k)
	}
	return k.q.launchCooperative(kGRUWalk, a.DType, grid, block, shared,
		ptr(a.H0), ptr(a.W), ptr(a.XPre), ptr(a.HPre), ptr(a.BiasIH), ptr(a.BiasHH), ptr(a.H), ptr(a.Act),
		ptr(a.RowsAt), i64(a.Steps), i64(a.Batch), i64(a.Hidden), flag(a.Reverse), uint64(k.q.bar))
}

// LSTMGradWalk is one launch of the persistent walk back where walkShape
// allows, else the per-step calls it stands for, each a fused cell
// gradient kernel (or a GEMM and the cell gradient, or the plain cell
// gradient for a first step given no product).
func (k kernels) LSTMGradWalk(a device.LSTMGradWalk) error {
	if err := check(k, "LSTMGradWalk", a); err != nil {
		return err
	}
	grid, block, shared, ok := k.walkShape(kLSTMGradWalk, a.Batch, a.Hidden, a.DType)
	if !ok {
		return a.Queue(k)
	}
	return k.q.launchCooperative(kLSTMGradWalk, a.DType, grid, block, shared,
		ptr(a.Act), ptr(a.C), ptr(a.C0), ptr(a.DH), ptr(a.DC), ptr(a.DPre), ptr(a.W), ptr(a.DPreIn),
		ptr(a.RowsAt), i64(a.NextBatch), i64(a.Steps), i64(a.Batch), i64(a.Hidden), flag(a.Reverse), uint64(k.q.bar))
}

// GRUGradWalk is LSTMGradWalk's counterpart.
func (k kernels) GRUGradWalk(a device.GRUGradWalk) error {
	if err := check(k, "GRUGradWalk", a); err != nil {
		return err
	}
	grid, block, shared, ok := k.walkShape(kGRUGradWalk, a.Batch, a.Hidden, a.DType)
	if !ok {
		return a.Queue(k)
	}
	return k.q.launchCooperative(kGRUGradWalk, a.DType, grid, block, shared,
		ptr(a.Act), ptr(a.H), ptr(a.H0), ptr(a.DH), ptr(a.DH0), ptr(a.DXPre), ptr(a.DHPre), ptr(a.W), ptr(a.DHPreIn),
		ptr(a.RowsAt), i64(a.NextBatch), i64(a.Steps), i64(a.Batch), i64(a.Hidden), flag(a.Reverse), uint64(k.q.bar))
}

// GRUCellGrad is LSTMCellGrad's counterpart.
func (k kernels) GRUCellGrad(a device.GRUCellGrad) error {
	if err := check(k, "GRUCellGrad", a); err != nil {
		return err
	}
	if a.Fused() {
		g := a.RecurrentGemm()
		bh, dt := a.Batch*a.Hidden, a.DType
		if fused, apart := k.fuseGrad(max(a.Batch, g.M), a.Hidden, a.DHPreNext, a.W, g.M*g.K, g.K*g.N, dt,
			extentOf(a.DXPre, 3*bh, dt), extentOf(a.DHPre, 3*bh, dt), extentOf(a.DHPrev, bh, dt)); fused {
			grid, block := fuseShape(max(a.Batch, g.M), a.Hidden)
			err := k.q.launch(kGRUCellGradFused, dt, grid, block,
				ptr(a.DHPreNext), ptr(a.W), ptr(a.Act), ptr(a.HPrev), ptr(a.DH), ptr(a.DXPre), ptr(a.DHPre), ptr(a.DHPrev),
				flag(a.Accumulate), i64(a.Batch), i64(g.M), i64(a.Hidden), flag(!apart))
			if err != nil || !apart {
				return err
			}
		} else if err := k.Gemm(g); err != nil {
			return err
		}
	}
	return k.q.launch(kGRUCellGrad, a.DType, grid1(a.Batch*a.Hidden), block1,
		ptr(a.Act), ptr(a.HPrev), ptr(a.DH), ptr(a.DXPre), ptr(a.DHPre), ptr(a.DHPrev), flag(a.Accumulate), i64(a.Batch), i64(a.Hidden))
}

func (k kernels) GatherSeq(a device.GatherSeq) error {
	if err := check(k, "GatherSeq", a); err != nil || a.T == 0 || a.B == 0 {
		return err
	}
	a, q := a.WithDefaults(), k.q
	return q.launch(kGatherSeq, a.DType, grid1(a.T*a.B*a.Cols), block1, ptr(a.Index), ptr(a.Lengths), ptr(a.X), ptr(a.Y),
		i64(a.T), i64(a.B), i64(a.Cols), i64(a.LdX), i64(a.LdY), uint64(q.ln.statusDev))
}

func (k kernels) SeqPool(a device.SeqPool) error {
	if err := check(k, "SeqPool", a); err != nil || a.B == 0 {
		return err
	}
	a = a.WithDefaults()
	var argmax device.Buffer
	if a.Max {
		argmax = a.ArgMax
	}
	return k.q.launch(kSeqPool, a.DType, grid1(a.B*a.Cols), block1, ptr(a.Lengths), ptr(a.Y), ptr(a.Out), ptr(argmax),
		i64(a.T), i64(a.B), i64(a.Cols), i64(a.LdY), i64(a.LdOut), flag(a.Max))
}

func (k kernels) SeqPoolGrad(a device.SeqPoolGrad) error {
	if err := check(k, "SeqPoolGrad", a); err != nil || a.T == 0 || a.B == 0 {
		return err
	}
	a, q := a.WithDefaults(), k.q
	var argmax device.Buffer
	if a.Max {
		argmax = a.ArgMax
	}
	return q.launch(kSeqPoolGrad, a.DType, grid1(a.T*a.B*a.Cols), block1, ptr(a.Lengths), ptr(a.DOut), ptr(argmax), ptr(a.DY),
		i64(a.T), i64(a.B), i64(a.Cols), i64(a.LdDOut), i64(a.LdDY), flag(a.Max), uint64(q.ln.statusDev))
}

func (k kernels) Embedding(a device.Embedding) error {
	if err := check(k, "Embedding", a); err != nil || a.N == 0 {
		return err
	}
	q := k.q
	return q.launch(kEmbedding, a.DType, grid1(a.N*a.Dim), block1,
		ptr(a.Table), ptr(a.IDs), ptr(a.Out), i64(a.N), i64(a.Dim), i64(a.Vocab), uint64(q.ln.statusDev))
}

func (k kernels) EmbeddingGrad(a device.EmbeddingGrad) (err error) {
	if err := check(k, "EmbeddingGrad", a); err != nil || a.N == 0 {
		return err
	}
	q := k.q
	// Distinct ids are checked against a bitmap of the vocabulary, a bit
	// an id, zeroed first: a repeated id raises statusRepeatedID, as the
	// CPU device reports it, rather than racing unseen.
	var seen alloc.Ptr
	if a.Distinct {
		words := (int64(a.Vocab) + 31) / 32
		if seen, err = q.allocTemp("EmbeddingGrad", 4*words); err != nil {
			return err
		}
		defer q.freeTemp("EmbeddingGrad", seen, &err)
		d := q.ln.d
		if err := d.api.MemsetD32Async(d.ctx, seen, 0, words, q.on); err != nil {
			return err
		}
	}
	if err := q.launchFn(q.ln.d.checkID, grid1(a.N), block1,
		ptr(a.IDs), i64(a.N), i64(a.Vocab), uint64(q.ln.statusDev), statusEmbeddingGrad, uint64(seen), statusRepeatedID); err != nil {
		return err
	}
	// Deterministic either way: the scan sums each table row's gradients
	// in order of i, in parallel over rows and columns; for vocabularies
	// too large to scan, the sequential kernel walks the ids in order,
	// in parallel over columns only. Distinct ids add their rows at once.
	if a.Distinct {
		return q.launch(kEmbeddingGradRows, a.DType, grid1(a.N*a.Dim), block1,
			ptr(a.IDs), ptr(a.DOut), ptr(a.DTable), i64(a.N), i64(a.Dim), i64(a.Vocab))
	}
	if a.Vocab <= maxGridY && int64(a.Vocab)*int64(a.N) <= scanMaxWork {
		grid := [3]uint32{uint32((a.Dim + scanBlock - 1) / scanBlock), uint32(a.Vocab), 1}
		return q.launch(kEmbeddingGradScan, a.DType, grid, [3]uint32{scanBlock, 1, 1},
			ptr(a.IDs), ptr(a.DOut), ptr(a.DTable), i64(a.N), i64(a.Dim), i64(a.Vocab))
	}
	return q.launch(kEmbeddingGradSeq, a.DType, grid1(a.Dim), block1,
		ptr(a.IDs), ptr(a.DOut), ptr(a.DTable), i64(a.N), i64(a.Dim), i64(a.Vocab))
}

// rowGrid is the grid of the warp-per-row kernels over n rows.
func rowGrid(n int) [3]uint32 {
	b := (n + rowsPerBlk - 1) / rowsPerBlk
	return [3]uint32{uint32(max(1, min(b, gridCap))), 1, 1}
}

func (k kernels) SoftmaxCrossEntropy(a device.SoftmaxCrossEntropy) (err error) {
	if err := check(k, "SoftmaxCrossEntropy", a); err != nil {
		return err
	}
	q := k.q
	// The row losses go through a temporary of N doubles, summed by one
	// block in a fixed order: deterministic, unlike atomics. Freed at once:
	// the cache hands it out again only to work queued after these
	// kernels.
	rows, err := q.allocTemp("SoftmaxCrossEntropy", int64(a.N)*8)
	if err != nil {
		return err
	}
	defer q.freeTemp("SoftmaxCrossEntropy", rows, &err)
	if err := q.launch(kSoftmaxXent, a.DType, rowGrid(a.N), block1,
		ptr(a.Logits), ptr(a.Targets), i64(a.N), i64(a.Classes), f64(a.Scale), ptr(a.DLogits), uint64(rows), uint64(q.ln.statusDev),
		flag(a.Ignore), i64(int(a.IgnoreIndex)), ptr(a.Weights)); err != nil {
		return err
	}
	return q.launch(kSumFinish, a.DType, [3]uint32{1, 1, 1}, block1,
		uint64(rows), i64(a.N), ptr(a.Loss), f64(a.Scale), flag(a.Accumulate))
}

func (k kernels) Softmax(a device.Softmax) error {
	if err := check(k, "Softmax", a); err != nil {
		return err
	}
	t := a.Temperature
	if t == 0 {
		t = 1
	}
	return k.q.launch(kSoftmax, a.DType, rowGrid(a.N), block1,
		ptr(a.Logits), ptr(a.Probs), i64(a.N), i64(a.Classes), f64(1/t))
}

// Sample is one launch: a block of 256 threads per row (the kernel's
// chunks of the row are its threads), grid-stride over the rows.
func (k kernels) Sample(a device.Sample) error {
	if err := check(k, "Sample", a); err != nil {
		return err
	}
	grid := [3]uint32{uint32(max(1, min(a.N, gridCap))), 1, 1}
	return k.q.launch(kSample, a.DType, grid, block1, ptr(a.Logits), ptr(a.IDs), ptr(a.Tokens), i64(a.N), i64(a.Classes),
		f64(a.Temperature), i64(a.TopK), a.Seed, a.Counter, ptr(a.CounterAt))
}

func (k kernels) Dropout(a device.Dropout) error {
	if err := check(k, "Dropout", a); err != nil || a.N == 0 {
		return err
	}
	return k.q.launch(kDropout, a.DType, grid1(a.N), block1,
		ptr(a.X), ptr(a.Y), ptr(a.Mask), i64(a.N), f64(a.P), a.Seed, a.Offset, ptr(a.StateAt))
}

// Advance is one thread.
func (k kernels) Advance(a device.Advance) error {
	if err := check(k, "Advance", a); err != nil {
		return err
	}
	q := k.q
	return q.launchFn(q.ln.d.advance, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, ptr(a.At), a.Add, ptr(a.Prev))
}

func (k kernels) AddBias(a device.AddBias) error {
	if err := check(k, "AddBias", a); err != nil {
		return err
	}
	return k.q.launch(kAddBias, a.DType, grid1(a.Rows*a.Cols), block1,
		ptr(a.Bias), ptr(a.Y), i64(a.Rows), i64(a.Cols))
}

func (k kernels) SumRows(a device.SumRows) (err error) {
	if err := check(k, "SumRows", a); err != nil {
		return err
	}
	q, colBlocks := k.q, (a.Cols+31)/32
	slices, slice := rowSlices(a.Rows, a.Cols)
	if slices == 1 {
		return q.launch(kSumRows, a.DType, [3]uint32{uint32(colBlocks), 1, 1}, [3]uint32{32, 8, 1},
			ptr(a.X), ptr(a.Out), i64(a.Rows), i64(a.Cols), flag(a.Accumulate))
	}
	// Parallel over rows too: each slice of rows a block per 32 columns,
	// then a column's partial sums added in order of the slice.
	partials, err := q.allocTemp("SumRows", int64(slices*a.Cols)*8)
	if err != nil {
		return err
	}
	defer q.freeTemp("SumRows", partials, &err)
	if err := q.launch(kSumRowsPartial, a.DType, [3]uint32{uint32(colBlocks), uint32(slices), 1}, [3]uint32{32, 8, 1},
		ptr(a.X), uint64(partials), i64(a.Rows), i64(a.Cols), i64(slice)); err != nil {
		return err
	}
	return q.launch(kSumRowsFinish, a.DType, grid1(a.Cols), block1,
		uint64(partials), ptr(a.Out), i64(slices), i64(a.Cols), flag(a.Accumulate))
}

// rowSlices is how SumRows cuts rows rows of cols columns: into slices of
// slice rows (the last shorter), one grid row of blocks each, so that the
// blocks, a block per 32 columns and slice, come to about rowBlocks when
// the columns alone give fewer, and no slice has fewer than rowSlice rows.
// One slice is the one-pass kernel, which up to onePassRows rows (each
// thread adding at most 64) costs less than a second launch: the stacks'
// bias sums, a chunk of about 256 rows at a time, stay one launch, and
// the output layer's, over every row of the window, is cut. The shape
// alone decides, so the order of every sum does too.
func rowSlices(rows, cols int) (slices, slice int) {
	if rows <= onePassRows {
		return 1, rows
	}
	colBlocks := (cols + 31) / 32
	slices = max(1, min((rows+rowSlice-1)/rowSlice, rowBlocks/colBlocks))
	slice = (rows + slices - 1) / slices
	return (rows + slice - 1) / slice, slice
}

func (k kernels) Fill(a device.Fill) error {
	if err := check(k, "Fill", a); err != nil || a.N == 0 {
		return err
	}
	q := k.q
	args := []uint64{ptr(a.X), i64(a.N), f64(a.Value)}
	if a.DType == device.Int32 {
		return q.launchFn(q.ln.d.fillI32, grid1(a.N), block1, args...)
	}
	return q.launch(kFill, a.DType, grid1(a.N), block1, args...)
}

func (k kernels) Copy(a device.Copy) error {
	if err := check(k, "Copy", a); err != nil || a.Src.Len() == 0 {
		return err
	}
	q := k.q
	d := q.ln.d
	return d.api.MemcpyDtoDAsync(d.ctx, a.Dst.Addr(), a.Src.Addr(), a.Src.Len(), q.on)
}

func (k kernels) Axpby(a device.Axpby) error {
	if err := check(k, "Axpby", a); err != nil || a.N == 0 {
		return err
	}
	return k.q.launch(kAxpby, a.DType, grid1(a.N), block1, ptr(a.X), ptr(a.Y), i64(a.N), f64(a.Alpha), f64(a.Beta))
}

func (k kernels) Mul(a device.Mul) error {
	if err := check(k, "Mul", a); err != nil || a.N == 0 {
		return err
	}
	return k.q.launch(kMul, a.DType, grid1(a.N), block1, ptr(a.X), ptr(a.Y), ptr(a.Z), i64(a.N))
}

func (k kernels) Clamp(a device.Clamp) error {
	if err := check(k, "Clamp", a); err != nil || a.N == 0 {
		return err
	}
	return k.q.launch(kClamp, a.DType, grid1(a.N), block1, ptr(a.X), i64(a.N), f64(a.Min), f64(a.Max))
}

func (k kernels) SumSquares(a device.SumSquares) (err error) {
	if err := check(k, "SumSquares", a); err != nil {
		return err
	}
	q := k.q
	// Two passes with a fixed number of blocks for a given N, so the order
	// of the sum, and the result, never vary between runs.
	parts := max(1, min((a.N+partWork-1)/partWork, maxParts, gridCap))
	partial, err := q.allocTemp("SumSquares", int64(parts)*8)
	if err != nil {
		return err
	}
	defer q.freeTemp("SumSquares", partial, &err)
	if err := q.launch(kSumSquaresPartial, a.DType, [3]uint32{uint32(parts), 1, 1}, block1,
		ptr(a.X), i64(a.N), uint64(partial)); err != nil {
		return err
	}
	return q.launch(kSumFinish, a.DType, [3]uint32{1, 1, 1}, block1,
		uint64(partial), i64(parts), ptr(a.Out), f64(1), flag(a.Accumulate))
}

func (k kernels) SGD(a device.SGD) error {
	if err := check(k, "SGD", a); err != nil || a.N == 0 {
		return err
	}
	var velocity device.Buffer
	if a.Momentum != 0 {
		velocity = a.Velocity
	}
	return k.q.launch(kSGD, a.DType, grid1(a.N), block1,
		ptr(a.Param), ptr(a.Grad), ptr(velocity), i64(a.N), f64(a.LR), f64(a.Momentum), f64(a.Dampening),
		f64(a.WeightDecay), flag(a.Nesterov), flag(a.Step == 1), ptr(a.Guard), f64(a.Clip), ptr(a.Rates))
}

func (k kernels) Adam(a device.Adam) error {
	if err := check(k, "Adam", a); err != nil || a.N == 0 {
		return err
	}
	// With Rates the kernel computes these three from the step's rates,
	// with the same roundings (the conversion keeps the product from
	// fusing into the subtraction, as the kernel's __dmul_rn does).
	t := float64(a.Step)
	stepSize := a.LR / (1 - math.Pow(a.Beta1, t))
	bc2Sqrt := math.Sqrt(1 - math.Pow(a.Beta2, t))
	decay := 1 - float64(a.LR*a.WeightDecay)
	coupled := a.WeightDecay != 0 && !a.Decoupled
	shrink := a.WeightDecay != 0 && a.Decoupled
	return k.q.launch(kAdam, a.DType, grid1(a.N), block1,
		ptr(a.Param), ptr(a.Grad), ptr(a.M), ptr(a.V), i64(a.N), f64(stepSize), f64(bc2Sqrt),
		f64(a.Beta1), f64(a.Beta2), f64(a.Eps), f64(a.WeightDecay), f64(decay), flag(coupled), flag(shrink), ptr(a.Guard), f64(a.Clip),
		ptr(a.Rates))
}

func (k kernels) RMSprop(a device.RMSprop) error {
	if err := check(k, "RMSprop", a); err != nil || a.N == 0 {
		return err
	}
	var gradAvg, velocity device.Buffer
	if a.Centered {
		gradAvg = a.GradAvg
	}
	if a.Momentum != 0 {
		velocity = a.Velocity
	}
	return k.q.launch(kRMSprop, a.DType, grid1(a.N), block1,
		ptr(a.Param), ptr(a.Grad), ptr(a.SquareAvg), ptr(gradAvg), ptr(velocity), i64(a.N), f64(a.LR), f64(a.Alpha),
		f64(a.Eps), f64(a.WeightDecay), f64(a.Momentum), flag(a.Centered), ptr(a.Guard), f64(a.Clip), ptr(a.Rates))
}

func (k kernels) StepGuard(a device.StepGuard) error {
	if err := check(k, "StepGuard", a); err != nil {
		return err
	}
	return k.q.launch(kStepGuard, a.DType, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1},
		ptr(a.Loss), ptr(a.NormSq), f64(a.Scale), f64(a.ClipNorm), ptr(a.Record), ptr(a.Guard), uint64(k.q.ln.statusDev),
		ptr(a.Slot), i64(int(a.Record.Len()/24)))
}

func (k kernels) GuardedCopy(a device.GuardedCopy) error {
	if err := check(k, "GuardedCopy", a); err != nil || a.Src.Len() == 0 {
		return err
	}
	q := k.q
	n := int(a.Src.Len() / 4)
	return q.launchFn(q.ln.d.guardedCopy, grid1(n), block1, ptr(a.Dst), ptr(a.Src), i64(n), ptr(a.Guard))
}
