package rnn

import (
	"context"
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
)

// Config describes a stack of recurrent layers with the arguments of
// PyTorch's nn.LSTM and nn.GRU. The zero value of every optional field
// works.
type Config struct {
	// Input is the number of features of the input at each step
	// (input_size); Hidden is the size of h and c (hidden_size).
	Input, Hidden int
	// Layers is the number of stacked layers (num_layers); 0 means 1, at
	// most MaxLayers.
	Layers int
	// Dropout is the probability of zeroing each output of every layer
	// but the last during Train forwards, in [0, 1). It has no effect on
	// a single layer, as in PyTorch.
	Dropout float64
	// NoBias leaves out both biases of every layer (bias=False).
	NoBias bool
	// DType is Float32 (the default) or Float64 (for gradient checks).
	DType device.DType
	// Seed draws the initial parameters, U(-1/sqrt(Hidden),
	// 1/sqrt(Hidden)) as PyTorch's, and the dropout masks.
	Seed uint64
	// Bidirectional adds to every layer a reverse direction with its own
	// parameters (PyTorch's bidirectional=True, names ending in
	// "_reverse"): the output is [T, B, 2·Hidden], the forward direction's
	// features first, a layer above the first reads 2·Hidden features, and
	// the state holds Layers·2 rows, layer l's direction d at l·2 + d.
	Bidirectional bool
	// Recompute trades time for memory in training forwards over long
	// sequences (activation checkpointing through time), a complement of
	// truncated backpropagation, which bounds memory by cutting the
	// gradient instead: 0, the default, keeps every step's activations for
	// Backward (about 6·B·H values a step per LSTM layer, for a batch of B
	// and H = Hidden); k > 0 cuts the steps in segments of k and keeps only
	// what starts each segment, and Backward runs each segment's forward
	// again, the last segment first, just before differentiating it;
	// RecomputeAuto sets k = ⌈√T⌉ for each forward over T steps. A
	// unidirectional LSTM layer then needs about 2·B·H·T/k values kept and
	// 6·B·H·k of workspace, a bidirectional layer keeps its outputs too
	// (B·H·T). k is rounded up to a multiple of the stack's chunk, ⌈R/B⌉
	// steps for the device's device.ProductRows R (256 on the CPU), and a
	// k that reaches T keeps everything, as 0 does.
	// The gradients are those of Recompute 0 (bit for bit on the CPU
	// device) and a training step costs about one more forward. The
	// package documentation, "Recomputation", has the details; NoGrad
	// forwards ignore the field. Values below RecomputeAuto are an error.
	Recompute int
	// NoBranches keeps all the work on the compute stream on a device
	// with branches (device.Brancher), where by default each layer's
	// weight and bias gradients run on a branch beside the walk back of
	// the layer below (branch.go), the layers of a unidirectional stack
	// overlap in a wavefront (WaveWindows) and a bidirectional layer's two
	// directions run side by side (wave.go): for comparison. The
	// results are the same bits either way but where a wavefront's
	// windows cut the products over steps otherwise (wave.go: not on the
	// CPU device in the char-RNN's shapes). A way of running, not of the
	// model: no checkpoint records it.
	NoBranches bool
	// WaveWindows is how many windows of steps the forward and Backward
	// of a unidirectional stack of two layers or more are cut into on a
	// device with branches, so that layer l+1's walk over a window runs on
	// the branch beside layer l's walk over the next one (the wavefront,
	// wave.go): 0 means 4, 1 runs the layers one after the other (with the
	// weight gradients on the branch). Not with Recompute. A
	// way of running, not of the model, like NoBranches; negative values
	// are an error.
	WaveWindows int
}

// LSTMGates and GRUGates are the gate blocks of H rows in an LSTM's and a
// GRU's weights (Config.ParamCount).
const (
	LSTMGates = 4
	GRUGates  = 3
)

// ParamCount is the number of parameters of a stack of c whose cells
// have gates gate blocks (LSTMGates, GRUGates), computed without building
// it, with Layers 0 read as 1; false when the count overflows int, which
// NewLSTM and NewGRU refuse. For gates·H rows of weights a layer and
// direction, it is D·(G·H·(Input + H) + b) + (Layers-1)·D·(G·H·(D·H + H)
// + b), with D the directions and b = 2·G·H the biases (0 with NoBias).
func (c Config) ParamCount(gates int) (int, bool) {
	layers, dirs, bias := max(c.Layers, 1), 1, 2
	if c.Bidirectional {
		dirs = 2
	}
	if c.NoBias {
		bias = 0
	}
	var first, above checked.Sum
	first.AddMul(gates, c.Hidden, c.Input)
	first.AddMul(gates, c.Hidden, c.Hidden)
	first.AddMul(bias, gates, c.Hidden)
	above.AddMul(gates, c.Hidden, dirs, c.Hidden)
	above.AddMul(gates, c.Hidden, c.Hidden)
	above.AddMul(bias, gates, c.Hidden)
	f, okFirst := first.Total()
	a, okAbove := above.Total()
	var total checked.Sum
	total.AddMul(dirs, f)
	total.AddMul(dirs, layers-1, a)
	n, ok := total.Total()
	return n, ok && okFirst && okAbove
}

// MaxLayers is the most layers a stack takes: far past any recurrent
// stack that trains (published ones have tens), and each layer costs
// host memory to describe and a launch a step whatever its size, so a
// larger count is a mistake to report, not a model to build. It also
// bounds what one pass costs the host, which a cancelled run waits for
// (a trainer checks its context between micro-batches): 1,024 layers of
// 64 steps plan in 71 ms on the meta device, 65,536 took 3.6 s.
const MaxLayers = 1 << 10

// RecomputeAuto is the Config.Recompute that chooses the segment length
// of each training forward from its number of steps T: k = ⌈√T⌉, which
// makes what the stack keeps (about 2·T/k states per layer) and what it
// recomputes at once (k steps) grow alike, as √T.
const RecomputeAuto = -1

// The execution of a stack.
//
// A stack runs layer by layer, and within a layer direction by direction
// (forward, then with Bidirectional the reverse). Everything about one
// direction's walk over a window of steps is a layerPass: its parameters,
// its views of the pass's memory, its input and the rows each step
// covers. The stack owns what the cells share (the initial and final
// state, the input projection, dropout between layers, the order of the
// sequences, and in Backward the weight and input gradients, which are a
// few large GEMMs, the weight gradients on a branch of the compute stream
// where the device has one, branch.go); a cell (lstmCell, gruCell) owns
// what differs, its per-step forward and backward kernels and the buffers
// they need.
//
// The reverse direction walks the steps from the last to the first with
// its own "_reverse" parameters; its states are stored in time order too
// (the state after step t at position t, its initial state at position
// T), so both directions' outputs are [T, B, H] sequences, and the layer
// above reads the two as its 2H input features, through the two column
// halves of its input weights.
//
// With variable lengths the sequences are sorted by length, longest first,
// once per forward (batchShape): the rows still running at step t are then
// a prefix of the step's rows, and every per-step kernel covers that
// prefix only. A sequence's reverse walk starts at its own last step, with
// its initial state (put at every position of its row, the padded one the
// step reads among them, by one gather for all the sequences, or, without
// a state, zeros there from the start: initial); its forward walk's final
// state is gathered from its own last step's position, one call for all
// (final). Backward adds the final states' gradients, and takes the
// initial ones', at the same positions, one call each (finalGrads,
// initialGrads). (With Recompute, whose states hold a segment's
// positions, the final states are gathered segment by segment, end, and
// a bidirectional stack's reverse walks find their initial c where one
// gather a segment put it at every position: recomputedEntries.) Padded
// positions of the stack's own sequences are never read: the input
// projection and Backward's GEMMs over steps run on the running rows
// (project, packed where they are not a chunk's first rows), and the
// caller's output and input gradient
// are gathered with zeros at padded positions. Only the gradients flowing
// into a layer's outputs (dh) start at zero there, where the reverse walk
// adds up the gradients of the initial states.
//
// Windows, chunks and recomputation. The products over many steps (the
// input projection in forward, the weight gradients and bias sums in
// Backward) run one chunk of steps at a time, ⌈chunkRows/B⌉ steps, in a
// fixed order: the projection in time order, the gradient sums in the
// order the backward walk reaches them. A walk runs over windows of
// whole chunks: one window of all T steps without recomputation; with
// Recompute, segments (recompute.go). A window's per-step buffers hold its
// steps only, and a window's walk hands the gradient flowing into the
// step before it to the next window through an edge (cell.saveEdge,
// cell.applyEdge), applied once the gradient it is added to is complete,
// so that every value is summed in the same order however the steps are
// cut. A step's recurrent product (its recurrent pre-activation gradient
// times W_hh, its part of the gradient with respect to the state entering
// it) is added by the cell gradient of the step it flows into, the next
// one walked back, in one call (product): the same sum in the same place
// as a Gemm after the step's own cell gradient, one call fewer per step,
// and on the CUDA device one launch where there were a GEMM and a kernel.
// Since both the plain and the recomputed execution make the same
// kernel calls on the same values in the same order, or products whose
// rows do not depend on how many rows a call has, their results are the
// same bits on a device that gives the same bits for the same call.

// stack is what LSTM and GRU share: the fused execution of L layers.
type stack struct {
	g      guard
	share  bool // made by Share: NoGrad forwards only, parameters held
	dev    device.Device
	cell   cell
	cfg    Config
	params *Params
	// layers are the parameters of every layer and direction, layer l's
	// direction d at l·dirs + d.
	layers []layerParams

	// rec is the saved training forward, nil when there is none; spent
	// says the last one was consumed by Backward.
	rec   *record
	spent bool
	// reserve holds what a training forward saves for Backward; work the
	// temporaries of one pass (with Recompute, a segment of every layer);
	// out the output of a forward with Recompute (Backward does not need
	// it); grads the gradients flowing between layers in Backward; dx the
	// gradient with respect to the input. (With lengths the device copy
	// of the order lies in the reserve, or in work without grad: pass.idx.)
	reserve, work, out, grads, dx scratch
	lay                           []layerBufs // reused views, as layers
	chunkRows                     int         // rows of a chunk of steps: the device's device.ProductRows
	// stepwise queues every step's calls, as on Kernels without walks
	// (device.Walker), for the tests that compare the two.
	stepwise bool

	// dropSeed and drawn are the Go side of where the dropout masks come
	// from (DropoutState): the seed, and the mask elements drawn so far.
	// dropState is the device's side, three uint64 that the kernels read
	// (device.Dropout's StateAt, device.Advance), when the stack drops
	// (dropping): the seed, where the masks of the last training forward
	// start (its dropouts read it, and its Backward's draw them again
	// there), and where the next one's start. A training forward queues
	// the Advance that moves the next start to the current one and on by
	// what it draws, so a replay of its work in a graph (device.Grapher)
	// draws new masks, and drawn moves with it (Forward, Replayed): the
	// two sides agree in stream order.
	dropSeed, drawn uint64
	dropState       device.Buffer

	layerDone func(layer int) error // NotifyLayers's callback; nil: none

	// branch is where Backward queues the weight and bias gradients
	// (side), and where forward and Backward queue the upper layers of
	// their wavefront and a bidirectional layer's reverse direction
	// (wave.go), opened at the first Forward or Backward that can use one,
	// nil without; branchTried says it was tried, so that a device that
	// failed to open one is not asked again.
	branch      device.Branch
	branchTried bool
	// waved is the windows of the last training forward (WaveWindows).
	waved int
}

// cell is what differs between the LSTM and the GRU: the size of a layer,
// the buffers a pass needs beyond the stack's, and the kernels of one time
// step in each direction of the gradient. The stack's time loops call the
// step functions and hold no per-cell branch.
type cell interface {
	// name is "LSTM" or "GRU", for messages.
	name() string
	// gates is the number of gate blocks of H rows in the weights.
	gates() int
	// carriesC reports whether the state holds a cell state c besides h.
	carriesC() bool

	// planPass takes the temporaries that the layers of a pass share in
	// turn, for windows of steps steps; planLayer takes the buffers of a
	// layer's direction dir beyond h and the saved activations, for
	// windows of steps steps; planGrads takes Backward's per-step
	// temporaries, for windows of steps steps, sets times where walks of
	// alternate parity need their own (layerGrads.set; 1 or 2).
	planPass(tmp *arena, train bool, steps, B, H int, p *pass)
	planLayer(a *arena, train bool, dir, steps, B, H int, b *layerBufs)
	planGrads(g *arena, steps, B, H, sets int, gb *gradBufs)

	// projection is where the input projection of the window's steps
	// goes, [steps, B, gates·H], for forwardStep to read.
	projection(lp *layerPass) device.Buffer
	// forwardStep queues step t over lp.rows(t) rows: h and c entering the
	// step (hIn, cIn) and the step's input projection in, h and c leaving
	// it (hOut, cOut) out, plus the activations Backward needs in
	// training.
	forwardStep(q *queue, lp *layerPass, t int)
	// forwardWalk queues the window's whole walk, every one of its steps
	// over all lp.B rows (no lengths), as one call on kernels that take
	// walks: what forwardStep queues step by step, in one device.LSTMWalk
	// or GRUWalk.
	forwardWalk(q *queue, lp *layerPass, w device.Walker)
	// backwardWalk queues the window's whole walk back as one call, what
	// backwardStep queues step by step (in for the first step walked back,
	// as the walk back hands the others theirs), in one
	// device.LSTMGradWalk or GRUGradWalk, and then what backwardStep
	// queues after the forward's first step of a tied walk.
	backwardWalk(q *queue, lp *layerPass, lg *layerGrads, w device.Walker, in product)

	// gradViews sets lg.dPre and lg.dHPre to the window's pre-activation
	// gradients. beginBackward starts any gradient the cell carries from
	// step to step, before the first window of a direction's walk back;
	// endBackward finishes it after the last.
	gradViews(lp *layerPass, lg *layerGrads)
	beginBackward(q *queue, lp *layerPass, lg *layerGrads)
	endBackward(q *queue, lp *layerPass, lg *layerGrads)
	// backwardStep queues step t of the walk back: from the gradient with
	// respect to the step's output, lg.dh's step t, into which the cell
	// gradient first adds in, the recurrent product of the step walked
	// back before t, when given (in.from >= 0; the fused form of
	// device.LSTMCellGrad and GRUCellGrad), to the pre-activation
	// gradients of step t and the gradient with respect to the state
	// entering it. Its direct part (the GRU's) is added into lg.dh's
	// step lp.prev(t) when the window holds it; for the first step of a
	// tied walk the whole of it, recurrent product included, is written
	// to the state's gradient; otherwise the step's recurrent product is
	// left to the walk (backwardWindow), and to the edge beyond the
	// window.
	backwardStep(q *queue, lp *layerPass, lg *layerGrads, t int, in product)
	// edgeSize is the number of elements saveEdge keeps for a batch of B
	// (kept: with lg.kept, the scratch applyEdge needs). saveEdge copies into
	// lg.edge (with lg.kept, keeps in lg.own views of) what step t of lp's
	// window (whose predecessor lies in the next window of the walk back)
	// needs to add its part of the gradient with respect to the state
	// entering it; applyEdge, lp now being that next window, once the
	// gradient in lg.dh's step lp.prev(t) holds what flows from above,
	// adds what the step's cell gradient adds there (the GRU's direct
	// part) and returns the step's saved recurrent pre-activation
	// gradient, whose product the walk then adds as it does within a
	// window. edgeReadsDH says the edge reads the step's gradient with
	// respect to its output, which must then stay in place with lg.kept.
	edgeSize(B, H int, kept bool) int
	edgeReadsDH() bool
	saveEdge(q *queue, lp *layerPass, lg *layerGrads, t int)
	applyEdge(q *queue, lp *layerPass, lg *layerGrads, t int) device.Buffer
}

// product is the recurrent part of the gradient flowing from step from
// of a walk back into the state entering it, not yet added: dHPre, the
// step's recurrent pre-activation gradient over its rows, [rows, G·H],
// times W_hh, which belongs in lg.dh's step lp.prev(from). The walk hands
// it to the cell gradient of that step, which adds it before it reads
// lg.dh there (the fused form of the cell gradients, one call where there
// were the cell gradient and a Gemm: on the CUDA device one launch for
// small layers), or adds it with a Gemm where no cell gradient of that
// step follows in the window. from is -1 for none.
type product struct {
	from  int
	dHPre device.Buffer
	rows  int
}

// noProduct is the product of no step.
var noProduct = product{from: -1}

// keep says what a forward keeps for Backward.
type keep uint8

const (
	// keepNothing is a NoGrad forward.
	keepNothing keep = iota
	// keepSteps keeps every step's activations: Recompute off, or a
	// segment as long as the sequence.
	keepSteps
	// keepOutputs keeps each layer's outputs and, for the LSTM, its cell
	// states at the segment boundaries: Recompute in a bidirectional
	// stack, whose layers' walks each need the whole output of the layer
	// below. Backward recomputes each segment's gates and cells.
	keepOutputs
	// keepBoundaries keeps every layer's states at the segment
	// boundaries: Recompute in a unidirectional stack. Backward
	// recomputes every layer of each segment, the last segment first.
	keepBoundaries
)

// record is one training forward: its shape, the state it read, what it
// kept and the length of its segments (its dropout masks start where the
// stack's dropState says); without lengths, x is the caller's input, which
// Backward reads again (Forward's contract: unchanged until then).
type record struct {
	sh    batchShape
	state *State
	keep  keep
	seg   int
	br    branching // how the forward used the stack's branch
	x     device.Buffer
}

// layerParams are one layer's parameters and gradients in one direction,
// views of the stack's Params.
type layerParams struct {
	in                     int // input features of the layer
	wih, whh, bih, bhh     device.Buffer
	gwih, gwhh, gbih, gbhh device.Buffer
}

// layerBufs are one layer's regions of a pass in one direction.
type layerBufs struct {
	// hseq is [T+1, B, H]: the states in time order, the initial one at
	// position 0 for the forward direction (h0, h1..hT) and at position T
	// for the reverse one; the other T positions are the output. With
	// keepBoundaries, a segment's positions only.
	hseq device.Buffer
	// cseq is the LSTM's cells, placed as hseq in training (with
	// Recompute, a segment's positions); without grad two [B, H] slots
	// used in turn, and a third holding the reverse direction's initial
	// state.
	cseq device.Buffer
	// gates is [T, B, 4H] (with Recompute, a segment's steps): the LSTM's
	// pre-activations, then activations in place (and their gradients in
	// Backward); the GRU's activations r, z, n and h_n+bh_n (training
	// only).
	gates device.Buffer
	// mask and drop are the dropout mask and the dropped output [T, B, H]
	// (with keepBoundaries, a segment's steps), for layers below the top
	// in training with Dropout > 0 (keepSteps and keepBoundaries).
	mask, drop device.Buffer
	// ckH and ckC are the states at the segment boundaries with Recompute,
	// [S+1, B, H] for S segments: the state at position i·seg at i, and
	// at position T at S. keepBoundaries keeps both, keepOutputs the
	// LSTM's ckC (its hseq holds h).
	ckH, ckC device.Buffer
}

// pass is the layout of one forward.
type pass struct {
	// x is the input [T, B, I] as the stack reads it: with lengths sorted
	// (padding zeroed); in training without lengths the caller's x itself,
	// as the record keeps it (Backward's); nil without grad or lengths.
	x device.Buffer
	// idx holds the device copy of the order and lengths with lengths
	// (batchShape.idx).
	idx  device.Buffer
	xpre device.Buffer // GRU: the input projection [steps, B, 3H]
	hpre device.Buffer // GRU: one step's recurrent product [B, 3H]
	pre  device.Buffer // LSTM without grad: the gate pre-activations [T, B, 4H]
	// With lengths, the input projection's operands packed, one chunk's
	// running rows (stack.project): the input's parts (a chunk's rows of
	// a part's width at part.off times the rows, as gradBufs.pk.in) and
	// the product.
	pkIn, pkPre device.Buffer
	// out is the output [T, B, dirs·H] in the caller's order, when it is
	// not the top layer's own sequence (bidirectional, with lengths, or
	// with Recompute, where it is workspace: Backward does not read it).
	out device.Buffer
	// hEnd and cEnd are [B, H] per layer with keepBoundaries, one [B, H]
	// with keepOutputs: with lengths and Recompute, the forward
	// direction's final states, each taken after its sequence's last step
	// (without Recompute they are gathered from their positions:
	// layerPass.gathers).
	hEnd, cEnd device.Buffer
	// With keepOutputs and dropout, inDrop are a segment's input of a
	// layer above the first, dropped, one [seg, B, H] per part, and
	// inMask the mask drawn for it.
	inDrop [2]device.Buffer
	inMask device.Buffer
	// state is the state a NoGrad forward without lengths reads and
	// writes in place (layerPass's stateH), nil otherwise.
	state *State
	// second holds a second set of the cell's pass temporaries (pre,
	// xpre, hpre) for the walks the forward runs on the branch (wave.go:
	// pass.twin); nil without.
	second *pass
}

// gradBufs are Backward's buffers, shared by the layers in turn but for
// those with one entry per layer and direction.
type gradBufs struct {
	// dh are two sets of [steps, B, H] sequences (all T steps, or a
	// segment's with keepBoundaries), one per direction, used in turn: the
	// gradient with respect to one layer's outputs, then the layer
	// below's. The wavefront's Backward uses three, with a cell whose
	// edges read dh (wave.go).
	dh [3][2]device.Buffer
	// rows are one [B, H] row per layer and direction, rows[l·dirs+dir]:
	// the LSTM's dc carried from step to step, the GRU's scratch for a
	// gradient nobody reads.
	rows []device.Buffer
	// edges are one cell.edgeSize buffer per layer and direction, for the
	// gradient crossing a window's boundary into the next window walked
	// back (with Recompute, and the wavefront's, whose edges are mostly
	// views: layerGrads.kept).
	edges []device.Buffer
	// dxp and dhp are the GRU's gradients with respect to the input-side
	// and recurrent pre-activations, [steps, B, 3H]: set i for the walks
	// of parity i (layerGrads.set), two sets when a branch reads one
	// walk's while the next walk writes its own (branch.go), else the
	// same buffers twice.
	dxp, dhp [2]device.Buffer
	// With lengths: stH and stC are one [B, H] row per layer and
	// direction, the state gradients in the sorted order, and dxs is the
	// input's gradient [T, B, I] before it is put back in the caller's
	// order.
	stH, stC []device.Buffer
	dxs      device.Buffer
	// With lengths, one chunk of the operands of the GEMMs over steps
	// packed (packBufs): pk[0] for the compute stream, pk[1] for the
	// weight gradients on the branch (without one, the same as pk[0]).
	pk [2]packBufs
}

// packBufs are one chunk of the operands of the GEMMs over steps with
// lengths, packed (the running rows of every step of the chunk, one step
// after the other, PyTorch's PackedSequence data), so that their work is
// the sum of the lengths: the pre-activation gradients (pre, and the
// GRU's recurrent ones hpre), the layer's input (in, a part's width·rows
// elements at part.off times a chunk's rows), the states entering the
// steps (h), and the input's gradient (dst, as in; the compute stream's
// only).
type packBufs struct {
	pre, hpre, in, h, dst device.Buffer
}

// inPart is one part of a layer's input: width features, read through
// columns [off, off+width) of the input weights. A layer reads one part
// (the input, or the layer below's output), or two above a bidirectional
// layer (its two directions' outputs).
type inPart struct {
	buf        device.Buffer // the window's steps, [steps, B, width]
	width, off int
}

// layerPass is one layer's walk over a window of steps in one direction:
// the layer's parameters and buffers, the pass's shared temporaries, and
// the shape of every step.
type layerPass struct {
	k       device.Kernels
	dt      device.DType
	T, B, H int
	train   bool
	kp      keep
	sh      *batchShape
	dir     int // 0 forward, 1 reverse
	w       *layerParams
	// b are the layer's buffers as the window sees them: step t of a
	// per-step buffer at t-t0, position p of hseq and cseq at p-t0.
	b  layerBufs
	p  *pass
	in []inPart
	// t0 and t1 bound the window, [t0, t1): all T steps, or a segment of
	// seg steps (where its checkpoints are).
	t0, t1, seg int
	// pre is the input projection of the window's steps.
	pre device.Buffer
	// h0 and c0 are where the direction's initial state is, [B, H].
	h0, c0 device.Buffer
	// hEnd and cEnd are the layer's rows of the pass's, with Recompute
	// (where the walks do not keep every position: gathers).
	hEnd, cEnd device.Buffer
	// zeroEntry says the reverse walk's states start zero everywhere
	// (initial): with lengths and no state, the rows where a sequence's
	// walk enters then hold its initial state already (enter).
	zeroEntry bool
	// stateH and stateC are the direction's rows of the pass's state when
	// the walk works in place (a NoGrad forward without lengths, given a
	// state): its first step reads the initial state there, and its last
	// step writes the final cell state there, and the final hidden state
	// too when the window is one step long (which is then the walk's
	// output). So nothing is copied in, and nothing out but h after a walk
	// of more than one step. No Backward reads these steps, and the
	// state's rows are the walk's alone (one row per layer and direction).
	// A one-step LSTM step then reads and writes c in the same row
	// (LSTMCell's C may be CPrev), and a GRU's h (GRUCell's H may be
	// HPrev); the recurrent product reads h before the cell writes it, in
	// stream order.
	stateH, stateC device.Buffer
}

// rows is the number of rows step t covers: the batch, or the prefix of
// the sorted batch still running at t.
func (lp *layerPass) rows(t int) int { return lp.sh.rows(t) }

// gathers reports whether, with lengths, the walks' states are kept at
// every position (keepSteps, keepNothing: not with Recompute), so that
// the sequences' final and initial states are gathered from and put at
// their positions by one call for all (Embedding, at batchShape's
// devEnds and devEntries: stack.final, stack.initial), not per window
// (end) nor copied per length as each walk reaches them (enter). Without
// grad, c is then updated in place, in the initial state's slot (cAt),
// where each sequence's row keeps its final c once it ends and holds its
// initial c until the reverse walk reaches it.
func (lp *layerPass) gathers() bool {
	return lp.sh.varlen && (lp.kp == keepSteps || lp.kp == keepNothing)
}

// recomputedEntries says lp is a reverse walk with lengths and Recompute
// (keepOutputs), whose sequences find their initial h where they enter
// because it was put at every position of their rows once (initial), and
// their initial c because it is put at every position of each window
// (forwardWindow): no copy a length (enter).
func (lp *layerPass) recomputedEntries() bool {
	return lp.sh.varlen && lp.kp == keepOutputs && lp.dir == 1
}

// step returns step t's [B, width] block of a per-step buffer of the
// window (position t of hseq or cseq).
func (lp *layerPass) step(buf device.Buffer, t, width int) device.Buffer {
	n := lp.B * width
	return buf.Elems(lp.dt, (t-lp.t0)*n, n)
}

// steps returns steps [a, b) of a per-step buffer of the window.
func (lp *layerPass) steps(buf device.Buffer, a, b, width int) device.Buffer {
	n := lp.B * width
	return buf.Elems(lp.dt, (a-lp.t0)*n, (b-a)*n)
}

// span returns rows [r0, r1) of a [B, width] block.
func (lp *layerPass) span(block device.Buffer, r0, r1, width int) device.Buffer {
	return block.Elems(lp.dt, r0*width, (r1-r0)*width)
}

// walk lists the window's steps in the order the direction visits them,
// up to the longest sequence.
func (lp *layerPass) walk() []int {
	a, b := lp.t0, min(lp.t1, lp.sh.maxLen)
	ts := make([]int, 0, max(b-a, 0))
	for i := range max(b-a, 0) {
		if lp.dir == 1 {
			ts = append(ts, b-1-i)
		} else {
			ts = append(ts, a+i)
		}
	}
	return ts
}

// prev is the step the walk visits before t, -1 for none: the step whose
// output is the state entering t. (For the reverse direction with
// lengths, rows of step t+1 that are padding stand for the initial
// states of the sequences that start at t.)
func (lp *layerPass) prev(t int) int {
	if lp.dir == 0 {
		return t - 1
	}
	if t+1 < lp.T {
		return t + 1
	}
	return -1
}

// walkEnd is the end of the window's steps walked: the window's end, or
// the longest sequence's if it is before.
func (lp *layerPass) walkEnd() int { return min(lp.t1, lp.sh.maxLen) }

// walkRows is the rows each of the window's steps walked runs, on the
// host and on the device (a walk's Rows and RowsAt), with lengths; none
// without.
func (lp *layerPass) walkRows() ([]int, device.Buffer) {
	if !lp.sh.varlen {
		return nil, device.Buffer{}
	}
	b := lp.walkEnd()
	return lp.sh.active[lp.t0:b], lp.sh.devRows(lp.t0, b)
}

// holds reports whether step t is in the window.
func (lp *layerPass) holds(t int) bool { return t >= lp.t0 && t < lp.t1 }

// hIn and hOut are the hidden states entering and leaving step t.
func (lp *layerPass) hIn(t int) device.Buffer  { return lp.hAt(t + lp.dir) }
func (lp *layerPass) hOut(t int) device.Buffer { return lp.hAt(t + 1 - lp.dir) }

// hAt is position pos of the hidden states: of hseq, or of the state when
// the walk works in place (the initial position, and the final one of a
// single step).
func (lp *layerPass) hAt(pos int) device.Buffer {
	if !lp.stateH.IsZero() && (pos == lp.dir*lp.T || lp.T == 1) {
		return lp.stateH
	}
	return lp.step(lp.b.hseq, pos, lp.H)
}

// entry is the position of the state entering the window's walk, exit
// that of the state leaving it.
func (lp *layerPass) entry() int { return lp.t0 + lp.dir*(lp.t1-lp.t0) }
func (lp *layerPass) exit() int  { return lp.t1 - lp.dir*(lp.t1-lp.t0) }

// cIn and cOut are hIn and hOut for the cell state; none for a cell
// without one. Without grad two slots serve every step in turn, and a
// third holds the reverse direction's initial state.
func (lp *layerPass) cIn(t int) device.Buffer  { return lp.cAt(t + lp.dir) }
func (lp *layerPass) cOut(t int) device.Buffer { return lp.cAt(t + 1 - lp.dir) }

func (lp *layerPass) cAt(pos int) device.Buffer {
	if lp.b.cseq.IsZero() {
		return device.Buffer{}
	}
	if !lp.stateC.IsZero() && (pos == 0 || pos == lp.T) {
		return lp.stateC
	}
	if !lp.train {
		if lp.gathers() {
			// In place, where the initial state is.
			return lp.c0
		}
		// Two slots in turn, whatever the window.
		return lp.b.cseq.Elems(lp.dt, pos%2*lp.B*lp.H, lp.B*lp.H)
	}
	return lp.step(lp.b.cseq, pos, lp.H)
}

// output is the direction's output over the window, [steps, B, H] in
// time order.
func (lp *layerPass) output() device.Buffer {
	if !lp.stateH.IsZero() && lp.T == 1 {
		return lp.stateH
	}
	return lp.steps(lp.b.hseq, lp.t0+1-lp.dir, lp.t1+1-lp.dir, lp.H)
}

// layerGrads are one layer's gradients in Backward, in one direction.
type layerGrads struct {
	gradBufs
	// dh is the gradient with respect to the direction's output over the
	// window, [steps, B, H]; the walk back adds the recurrent part into it
	// step by step. dhAll is the whole of it, all T steps, where Backward
	// holds them (not with keepBoundaries): initialGrads gathers there.
	dh, dhAll device.Buffer
	// dPre and dHPre are the gradients with respect to the input-side and
	// recurrent pre-activations of the window's steps, [steps, B, G·H]
	// (the same for the LSTM).
	dPre, dHPre device.Buffer
	// row is the layer's direction's rows entry; edge its edges entry.
	row, edge device.Buffer
	// set is the parity of the walk (l·dirs + dir): which of the GRU's
	// pre-activation gradient sets (gradBufs.dxp, dhp) it uses.
	set int
	// tied says the forward's state is still tied to it: stH and stC are
	// then the direction's rows of the state's gradients (in the sorted
	// order with lengths), the gradient with respect to the final state on
	// entry and the initial one on return.
	tied     bool
	stH, stC device.Buffer
	// kept says the walk's per-step buffers stay where they are until
	// the walk and its weight gradients are done (the wavefront's
	// Backward, wave.go): an edge is then kept as views of the step's own
	// buffers, own (cell.saveEdge), not copied into edge, which serves as
	// scratch only.
	kept bool
	own  [3]device.Buffer
}

func newStack(ctx context.Context, d device.Device, c Config, kind cell) (*stack, error) {
	s := &stack{dev: d, cell: kind, dropSeed: c.Seed, chunkRows: device.ProductRows(d)}
	name := kind.name()
	if d == nil {
		return nil, fmt.Errorf("rnn: New%s: no device", name)
	}
	if c.Layers == 0 {
		c.Layers = 1
	}
	dt, err := floatType(c.DType)
	if err != nil {
		return nil, err
	}
	c.DType = dt
	switch {
	case c.Input <= 0 || c.Hidden <= 0 || c.Layers < 0:
		return nil, fmt.Errorf("rnn: New%s: input %d, hidden %d, layers %d: each must be positive: %w",
			name, c.Input, c.Hidden, c.Layers, device.ErrShape)
	case c.Layers > MaxLayers:
		return nil, fmt.Errorf("rnn: New%s: layers %d, more than MaxLayers (%d): %w", name, c.Layers, MaxLayers, device.ErrShape)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return nil, fmt.Errorf("rnn: New%s: dropout %v, want [0, 1)", name, c.Dropout)
	case c.Recompute < RecomputeAuto:
		return nil, fmt.Errorf("rnn: New%s: recompute %d, want 0 (off), a segment length > 0 or RecomputeAuto (%d)",
			name, c.Recompute, RecomputeAuto)
	case c.WaveWindows < 0:
		return nil, fmt.Errorf("rnn: New%s: wave windows %d, want 0 (the default, 4), 1 (off) or more", name, c.WaveWindows)
	}
	s.cfg = c
	if _, ok := s.paramCount(); !ok {
		return nil, fmt.Errorf("rnn: New%s: input %d, hidden %d, layers %d: its parameters, %d·hidden·(input + hidden) "+
			"and %d·hidden·(%d·hidden + hidden) a layer and direction above the first, overflow int: %w",
			name, c.Input, c.Hidden, c.Layers, kind.gates(), kind.gates(), s.dirs(), device.ErrShape)
	}
	if s.params, err = newParams(ctx, d, dt, c.Seed, s.paramSpecs()); err != nil {
		return nil, err
	}
	if s.dropping() {
		if s.dropState, err = d.Alloc(24, device.Workspace); err == nil {
			err = s.writeDropoutState()
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("rnn: New%s: the dropout state: %w", name, err), s.Close())
		}
	}
	for l := range c.Layers {
		for dir := range s.dirs() {
			s.layers = append(s.layers, s.layerParams(l, dir))
		}
	}
	s.lay = make([]layerBufs, c.Layers*s.dirs())
	return s, nil
}

// paramCount is the number of parameters, and false when it overflows
// int: what the configuration asks for, computed before the layers'
// lists are built (a count of layers in the trillions would otherwise
// take all the host's memory to describe).
func (s *stack) paramCount() (int, bool) { return s.cfg.ParamCount(s.cell.gates()) }

// dirs is the number of directions: 2 for a bidirectional stack, else 1.
func (s *stack) dirs() int {
	if s.cfg.Bidirectional {
		return 2
	}
	return 1
}

// layerInput is the number of input features of layer l.
func (s *stack) layerInput(l int) int {
	if l > 0 {
		return s.dirs() * s.cfg.Hidden
	}
	return s.cfg.Input
}

// suffix is PyTorch's suffix of direction dir's parameter names.
func suffix(dir int) string {
	if dir == 1 {
		return "_reverse"
	}
	return ""
}

// paramSpecs lists the parameters in PyTorch's order: layer by layer, in
// each the forward direction's, then the reverse one's.
func (s *stack) paramSpecs() []paramSpec {
	c := s.cfg
	gh, bound := s.cell.gates()*c.Hidden, uniformBound(c.Hidden)
	var specs []paramSpec
	for l := range c.Layers {
		for dir := range s.dirs() {
			sfx := suffix(dir)
			specs = append(specs,
				paramSpec{name: fmt.Sprintf("weight_ih_l%d%s", l, sfx), shape: []int{gh, s.layerInput(l)}, bound: bound},
				paramSpec{name: fmt.Sprintf("weight_hh_l%d%s", l, sfx), shape: []int{gh, c.Hidden}, bound: bound})
			if !c.NoBias {
				specs = append(specs,
					paramSpec{name: fmt.Sprintf("bias_ih_l%d%s", l, sfx), shape: []int{gh}, bound: bound},
					paramSpec{name: fmt.Sprintf("bias_hh_l%d%s", l, sfx), shape: []int{gh}, bound: bound})
			}
		}
	}
	return specs
}

// layerParams returns the views of layer l's parameters in direction dir;
// the biases are zero Buffers without bias.
func (s *stack) layerParams(l, dir int) layerParams {
	lp := layerParams{in: s.layerInput(l)}
	get := func(name string) (v, g device.Buffer) {
		q, _ := s.params.Lookup(fmt.Sprintf("%s_l%d%s", name, l, suffix(dir)))
		return q.Value, q.Grad
	}
	lp.wih, lp.gwih = get("weight_ih")
	lp.whh, lp.gwhh = get("weight_hh")
	lp.bih, lp.gbih = get("bias_ih")
	lp.bhh, lp.gbhh = get("bias_hh")
	return lp
}

// Config returns the configuration, with defaults filled in.
func (s *stack) Config() Config { return s.cfg }

// SetRecompute changes Config.Recompute for the training forwards to come
// (a model loaded from a checkpoint, say, trained over longer windows). It
// refuses while a training forward waits for its Backward, whose saved
// activations follow the setting it was made with.
func (s *stack) SetRecompute(k int) error {
	if err := s.g.enter(s.cell.name(), "SetRecompute"); err != nil {
		return err
	}
	defer s.g.leave()
	switch {
	case k < RecomputeAuto:
		return fmt.Errorf("rnn: SetRecompute(%d): want 0 (off), a segment length > 0 or RecomputeAuto (%d)", k, RecomputeAuto)
	case s.rec != nil:
		return fmt.Errorf("rnn: SetRecompute(%d): a training forward waits for its Backward", k)
	}
	s.cfg.Recompute = k
	return nil
}

// Params returns the parameters, which the stack's shares hold too (freed
// at the last Close of the stack and its shares).
func (s *stack) Params() *Params { return s.params }

// NotifyLayers makes every later Backward call done(l) once the work that
// writes layer l's parameter gradients (LayerGrads, both directions) is
// queued in full, so that work queued on the compute stream after the
// call (or on a stream that waits for an event recorded on it then) sees
// them complete: top layer first, as soon as its backward is queued, or
// with Config.Recompute, whose backward walks every layer a segment at a
// time, for every layer once the last segment is. When the weight
// gradients run on a branch (a device.Brancher, without
// Config.NoBranches; branch.go says when), done(l) comes after
// the compute stream has been made to wait for them, which the stack
// queues once the walk back of the layer below is queued (or at the end):
// one walk later. An error done returns ends the Backward with it. A nil
// done stops the calls. A data-parallel trainer sums each layer's
// gradient over the ranks this way while the layers below run their
// backward (train.GradNotifier).
func (s *stack) NotifyLayers(done func(layer int) error) { s.layerDone = done }

// LayerGrads is where layer l's parameters (both directions) lie in the
// flat buffers (Params.Flat): elements off to off+n, in PyTorch's order.
// It is a function of the configuration: the parameters lie one after the
// other in that order (newParams).
func (s *stack) LayerGrads(l int) (off, n int) {
	per := 2 * s.dirs()
	if !s.cfg.NoBias {
		per *= 2
	}
	i := 0
	for p := range s.params.All() {
		switch {
		case i < l*per:
			off += p.Len()
		case i < (l+1)*per:
			n += p.Len()
		}
		i++
	}
	return off, n
}

// notifyLayer queues nothing: it tells NotifyLayers's callback that layer
// l's gradients are queued.
func (s *stack) notifyLayer(q *queue, l int) {
	if s.layerDone != nil && q.err == nil {
		q.add(s.layerDone(l))
	}
}

// DropoutState is where the stack's dropout masks come from: the seed they
// are drawn with (Config.Seed at first) and how many mask elements have
// been drawn so far, so where the next training forward's masks start.
// Only training forwards with Dropout > 0 and more than one layer advance
// it, and their replays (Replayed). A checkpoint records it so that a
// resumed run draws the masks an uninterrupted one would. It reads no
// device memory.
func (s *stack) DropoutState() (seed, offset uint64) { return s.dropSeed, s.drawn }

// SetDropoutState sets the seed and offset of the next training forward's
// dropout masks (values DropoutState returned), on the Go side and, queued
// on the compute stream, in the device memory the kernels read: the
// training forwards queued after it, replayed or not, draw there; the
// Backward of one queued before it, which with Recompute draws its masks
// again, draws them at its own offset with the seed set here. An error is
// the device's: the device's copy is then unknown, and must be set again.
func (s *stack) SetDropoutState(seed, offset uint64) error {
	if err := s.g.enter(s.cell.name(), "SetDropoutState"); err != nil {
		return err
	}
	defer s.g.leave()
	if s.share {
		return sharedError(s.cell.name(), "SetDropoutState")
	}
	s.dropSeed, s.drawn = seed, offset
	if !s.dropping() {
		return nil
	}
	if err := s.writeDropoutState(); err != nil {
		return fmt.Errorf("rnn: SetDropoutState: %w", err)
	}
	return nil
}

// Replayed tells the stack that a device graph holding one of its
// training forwards over seq steps of batch sequences (Forward or
// ForwardLengths in mode Train; Backward changes nothing here) was queued
// again (device.Grapher's Launch, not the one that follows the recording:
// the recorded forward ran its Go side then). The replay moved where the
// next masks start on the device; Replayed moves DropoutState with it, as
// the forward itself would. Other modes draw nothing: Replayed does
// nothing for them.
func (s *stack) Replayed(mode Mode, seq, batch int) {
	if mode == Train && s.dropping() {
		s.drawn += s.draws(seq, batch)
	}
}

// dropping reports whether training forwards drop the outputs of the
// layers below the top: Dropout > 0 and more than one layer.
func (s *stack) dropping() bool { return s.cfg.Dropout > 0 && s.cfg.Layers > 1 }

// draws is how many mask elements a training forward over seq steps of
// batch sequences draws: seq·batch·Hidden for every layer below the top
// and direction.
func (s *stack) draws(seq, batch int) uint64 {
	return uint64((s.cfg.Layers - 1) * s.dirs() * seq * batch * s.cfg.Hidden)
}

// writeDropoutState queues writing the seed and the next training
// forward's offset into dropState, each a uint64 as two Int32 words (low
// first), four Fills in stream order.
func (s *stack) writeDropoutState() error {
	k := s.dev.Kernels()
	for i, v := range [4]uint64{s.dropSeed, s.dropSeed >> 32, s.drawn, s.drawn >> 32} {
		at := int64(4 * i)
		if i >= 2 {
			at += 8 // past the current forward's offset
		}
		if err := k.Fill(device.Fill{DType: device.Int32, N: 1, X: s.dropState.Slice(at, 4), Value: float64(int32(uint32(v)))}); err != nil {
			return err
		}
	}
	return nil
}

// NewState allocates a zero state for batch sequences: Layers·2 rows of
// each for a bidirectional stack, layer l's direction d at l·2 + d, as
// PyTorch's h_n.
func (s *stack) NewState(batch int) (*State, error) {
	if err := s.g.enter(s.cell.name(), "NewState"); err != nil {
		return nil, err
	}
	defer s.g.leave()
	return newState(s.dev, s.cfg.DType, s.cell.carriesC(), s.cfg.Layers*s.dirs(), batch, s.cfg.Hidden)
}

// Close frees every buffer the stack holds, and the parameters unless a
// share still holds them, and closes its branch (the CPU device's a
// goroutine) if a call opened one. Every later call returns an error
// matching ErrClosed but Config, Params, LayerGrads, DropoutState,
// Branched and WaveWindows, which report the configuration and what was
// (NotifyLayers and Replayed then change nothing that runs); a second
// Close does nothing. Close during another goroutine's call is ErrBusy,
// and closes nothing.
func (s *stack) Close() error {
	if first, err := s.g.close(s.cell.name()); !first {
		return err
	}
	s.rec = nil
	var q queue
	if s.branch != nil {
		// After its work queued so far, which the last Backward joined.
		q.add(s.branch.Close())
		s.branch = nil
	}
	for _, b := range []*scratch{&s.reserve, &s.work, &s.out, &s.grads, &s.dx} {
		q.add(b.free(s.dev))
	}
	if !s.dropState.IsZero() {
		q.add(s.dev.Free(s.dropState))
		s.dropState = device.Buffer{}
	}
	if s.params != nil {
		q.add(s.params.release())
	}
	return q.err
}

// plan lays out a forward of shape sh that keeps kp, with segments of seg
// steps, using the stack's branch as br says: what Backward needs from res,
// the output of a forward with Recompute from out, temporaries from tmp
// (res is tmp without grad).
func (s *stack) plan(res, tmp, out *arena, kp keep, sh *batchShape, seg int, br branching) pass {
	T, B, H, L, D := sh.T, sh.B, s.cfg.Hidden, s.cfg.Layers, s.dirs()
	train := kp != keepNothing
	// steps is how many steps a window's per-step temporaries hold.
	steps := T
	switch {
	case kp == keepOutputs || kp == keepBoundaries:
		steps = seg
	case br.wave > 0:
		steps = br.wave
	}
	var p pass
	if sh.varlen {
		// The order, lengths and packing maps (batchShape.upload), Int32s
		// in elements of dt, and the sorted input; what Backward reads in
		// res, which is tmp without grad.
		dt := s.cfg.DType.Size()
		p.idx = res.take(int((sh.idxBytes(s.idxSegments(kp, sh, seg), s.chunkSteps(B)) + dt - 1) / dt))
		p.x = res.take(T * B * s.cfg.Input)
	}
	s.cell.planPass(tmp, train, steps, B, H, &p)
	if br.wave > 0 || br.dirs {
		p.second = &pass{}
		s.cell.planPass(tmp, train, steps, B, H, p.second)
	}
	if sh.varlen && !train && sh.projectsPacked() {
		// The projection's packed operands, the rows of the largest chunk
		// (packRoom), for each stream that projects; none when no chunk
		// is packed. A training forward packs into Backward's
		// (packInGrads).
		rows, GH, in := sh.packRoom(), s.cell.gates()*H, max(s.cfg.Input, D*H)
		for _, q := range []*pass{&p, p.second} {
			if q != nil {
				q.pkIn, q.pkPre = tmp.take(rows*in), tmp.take(rows*GH)
			}
		}
	}
	switch {
	case kp == keepBoundaries || kp == keepOutputs:
		// Backward recomputes from what it keeps, not from the output.
		p.out = out.take(T * B * D * H)
	case D == 2 || sh.varlen:
		p.out = res.take(T * B * D * H)
	}
	if sh.varlen && (kp == keepBoundaries || kp == keepOutputs) {
		// Where the sequences' final states are copied as the walks reach
		// them (layerPass.gathers): layer by layer one row serves every
		// layer in turn; time-major, each layer has its own.
		ends := 1
		if kp == keepBoundaries {
			ends = L
		}
		p.hEnd = tmp.take(ends * B * H)
		if s.cell.carriesC() {
			p.cEnd = tmp.take(ends * B * H)
		}
	}
	dropped := s.cfg.Dropout > 0 && L > 1
	// With keepOutputs, the layers share in turn one segment's cells and
	// gates, and the dropped input of a segment.
	var shared layerBufs
	if kp == keepOutputs {
		s.cell.planLayer(tmp, true, 0, seg, B, H, &shared)
		shared.gates = tmp.take(seg * B * 4 * H)
		if dropped {
			for dir := range D {
				p.inDrop[dir] = tmp.take(seg * B * H)
			}
			p.inMask = tmp.take(seg * B * H)
		}
	}
	boundaries := (T+seg-1)/seg + 1
	for l := range L {
		for dir := range D {
			b := &s.lay[l*D+dir]
			below := dropped && l < L-1
			switch kp {
			case keepSteps:
				*b = layerBufs{hseq: res.take((T + 1) * B * H)}
				s.cell.planLayer(res, true, dir, T, B, H, b)
				b.gates = res.take(T * B * 4 * H)
				if below {
					b.mask, b.drop = res.take(T*B*H), res.take(T*B*H)
				}
			case keepOutputs:
				*b = layerBufs{hseq: res.take((T + 1) * B * H), cseq: shared.cseq, gates: shared.gates}
				if s.cell.carriesC() {
					b.ckC = res.take(boundaries * B * H)
				}
			case keepBoundaries:
				*b = layerBufs{ckH: res.take(boundaries * B * H)}
				if s.cell.carriesC() {
					b.ckC = res.take(boundaries * B * H)
				}
				b.hseq = tmp.take((seg + 1) * B * H)
				s.cell.planLayer(tmp, true, dir, seg, B, H, b)
				b.gates = tmp.take(seg * B * 4 * H)
				if below {
					b.mask, b.drop = tmp.take(seg*B*H), tmp.take(seg*B*H)
				}
			default:
				// Without grad two layers' sequences serve every layer in turn.
				if l < 2 {
					*b = layerBufs{hseq: tmp.take((T + 1) * B * H)}
					s.cell.planLayer(tmp, false, dir, T, B, H, b)
				} else {
					below := s.lay[(l-2)*D+dir]
					*b = layerBufs{hseq: below.hseq, cseq: below.cseq}
				}
			}
		}
	}
	return p
}

// layout sizes the arenas for a forward, takes their memory from the
// stack's scratch buffers and lays the pass out in it; with lengths it
// also puts their order on the device.
func (s *stack) layout(kp keep, sh *batchShape, seg int, br branching) (pass, error) {
	res, tmp, out, err := s.arenas(kp, sh, seg, br)
	if err != nil {
		return pass{}, err
	}
	p := s.plan(res, tmp, out, kp, sh, seg, br)
	if sh.varlen {
		segs, c := s.idxSegments(kp, sh, seg), s.chunkSteps(sh.B)
		if err := sh.upload(s.dev, p.idx.Slice(0, sh.idxBytes(segs, c)), seg, segs, c); err != nil {
			return pass{}, err
		}
	}
	return p, nil
}

// idxSegments is the number of segments whose lengths past their start a
// forward that keeps kp puts on the device (batchShape.upload).
func (s *stack) idxSegments(kp keep, sh *batchShape, seg int) int {
	if kp != keepBoundaries {
		return 0
	}
	return len(s.windows(sh, kp, seg))
}

// layoutSaved lays out the saved training forward rec again, in the memory
// that holds it.
func (s *stack) layoutSaved(rec *record) (pass, error) {
	res, tmp, out, err := s.arenas(rec.keep, &rec.sh, rec.seg, rec.br)
	if err != nil {
		return pass{}, err
	}
	p := s.plan(res, tmp, out, rec.keep, &rec.sh, rec.seg, rec.br)
	if !rec.sh.varlen {
		p.x = rec.x
	}
	return p, nil
}

// arenas sizes the arenas of a pass and gives them the memory of the
// stack's scratch buffers, ready to be laid out from their start.
func (s *stack) arenas(kp keep, sh *batchShape, seg int, br branching) (res, tmp, out *arena, err error) {
	dt := s.cfg.DType
	res, tmp, out = &arena{dt: dt}, &arena{dt: dt}, &arena{dt: dt}
	if kp == keepNothing {
		res = tmp
	}
	s.plan(res, tmp, out, kp, sh, seg, br)
	if kp != keepNothing {
		if res.buf, err = s.reserve.get(s.dev, device.Activations, int64(res.off)*dt.Size()); err != nil {
			return nil, nil, nil, err
		}
	}
	if out.off > 0 {
		if out.buf, err = s.out.get(s.dev, device.Workspace, int64(out.off)*dt.Size()); err != nil {
			return nil, nil, nil, err
		}
	}
	if tmp.buf, err = s.work.get(s.dev, device.Workspace, int64(max(tmp.off, 1))*dt.Size()); err != nil {
		return nil, nil, nil, err
	}
	res.off, tmp.off, out.off = 0, 0, 0
	return res, tmp, out, nil
}

// layerPass returns the walk of layer l in direction dir over window w of
// a pass of shape sh that keeps kp, with segments of seg steps. The
// caller sets its input.
func (s *stack) layerPass(p *pass, sh *batchShape, kp keep, seg, l, dir int, w span) *layerPass {
	D, dt, BH := s.dirs(), s.cfg.DType, sh.B*s.cfg.Hidden
	lp := &layerPass{k: s.dev.Kernels(), dt: dt, T: sh.T, B: sh.B, H: s.cfg.Hidden, train: kp != keepNothing, kp: kp, sh: sh, dir: dir,
		w: &s.layers[l*D+dir], b: s.lay[l*D+dir], p: p, t0: w.t0, t1: w.t1, seg: seg}
	if !p.hEnd.IsZero() {
		row := 0
		if kp == keepBoundaries {
			row = l
		}
		lp.hEnd = p.hEnd.Elems(dt, row*BH, BH)
		if !p.cEnd.IsZero() {
			lp.cEnd = p.cEnd.Elems(dt, row*BH, BH)
		}
	}
	all := lp.b.hseq
	switch kp {
	case keepOutputs:
		lp.b.hseq = all.Elems(dt, w.t0*BH, (w.t1-w.t0+1)*BH)
		lp.h0 = all.Elems(dt, dir*sh.T*BH, BH)
		lp.c0 = checkpoint(lp, lp.b.ckC, dir*sh.T)
	case keepBoundaries:
		lp.h0 = checkpoint(lp, lp.b.ckH, 0)
		lp.c0 = checkpoint(lp, lp.b.ckC, 0)
	case keepNothing:
		if st := p.state; st != nil {
			i := l*D + dir
			lp.stateH, lp.stateC = st.layerH(i, BH), st.layerC(i, BH)
			lp.h0, lp.c0 = lp.stateH, lp.stateC
			break
		}
		fallthrough
	default:
		lp.h0 = all.Elems(dt, dir*sh.T*BH, BH)
		switch {
		case lp.b.cseq.IsZero():
		case kp == keepNothing:
			// The first slot, or the reverse direction's third.
			lp.c0 = lp.b.cseq.Elems(dt, 2*dir*BH, BH)
		default:
			lp.c0 = lp.b.cseq.Elems(dt, dir*sh.T*BH, BH)
		}
	}
	if (kp == keepSteps || kp == keepNothing) && (w.t0 > 0 || w.t1 < sh.T) {
		lp.b = windowBufs(lp.b, dt, w, BH, lp.train)
	}
	return lp
}

// checkpoint is the [B, H] slot of ck (ckH or ckC) holding the state at
// position pos, a segment boundary; none without ck.
func checkpoint(lp *layerPass, ck device.Buffer, pos int) device.Buffer {
	if ck.IsZero() {
		return device.Buffer{}
	}
	BH := lp.B * lp.H
	return ck.Elems(lp.dt, (pos+lp.seg-1)/lp.seg*BH, BH)
}

// Forward runs the stack over x, [seq, batch, Input] (PyTorch's layout
// without batch_first), every sequence of length seq, and returns the last
// layer's output h_1..h_seq, [seq, batch, Hidden], or [seq, batch,
// 2·Hidden] for a bidirectional stack (the forward direction's Hidden
// features first, then the reverse direction's).
//
// s, when not nil, is the initial state on entry and the final state on
// return (h_n and c_n, [Layers·dirs, batch, Hidden]); nil means a zero
// initial state and no final state. The reverse direction's final state is
// the one after its last step, at the first position.
//
// In Train mode the forward saves what Backward needs and ties s to itself;
// a state still tied to an earlier training forward is refused: call
// State.Detach between windows. Without lengths the stack keeps a
// reference to x, not a copy, and Backward reads x again: the caller must
// leave x as it is until it has called Backward (work queued after that
// call may overwrite it: the stream runs in order). The models of this
// module pass an Embedding's training output, which only the Embedding's
// next training forward writes, or a buffer of their own that only their
// training forward writes. ForwardLengths gathers x into a sorted copy of
// its own, and the caller may reuse x at once.
//
// In NoGrad mode nothing is saved and the saved training forward, if any,
// is left for Backward; without lengths, a NoGrad forward reads the
// initial state from s and writes the final cell state into it in place,
// with no copy (sampling, one step at a time, copies nothing).
//
// The output belongs to the stack: it is valid until the stack's next
// Forward, and must not be written while a training forward waits for its
// Backward. A training forward's output stays valid longer, until the
// stack's next training forward: it lies in memory that only training
// forwards write (NoGrad forwards and Backward write other buffers), so a
// layer above may keep a reference to it until its own Backward. One
// exception to the first rule: the output of a NoGrad forward of a
// unidirectional stack over one step with a state s (sampling) is the top
// layer's row of s.H() itself, where the step wrote it, so it also
// changes when s does. The work is queued on the compute stream.
func (s *stack) Forward(mode Mode, x device.Buffer, seq, batch int, st *State) (device.Buffer, error) {
	if err := s.g.enter(s.cell.name(), "Forward"); err != nil {
		return device.Buffer{}, err
	}
	defer s.g.leave()
	return s.forwardLengths(mode, x, seq, batch, nil, st)
}

// ForwardLengths is Forward over sequences of different lengths, PyTorch's
// packed sequences: sequence b (the batch's row b) has lengths[b] steps, 1
// ≤ lengths[b] ≤ seq, in any order, and x's positions past its end are
// padding, never read. Each sequence's final state (in s) is the state
// after its own last step; the reverse direction starts it at its own last
// step, from its initial state; the output at padded positions is zero,
// and Backward sends no gradient there (the gradient it returns is zero at
// padded positions, and dy is not read there). Nil lengths is Forward.
//
// The sequences run sorted by length, so every step's kernels cover only
// the sequences still running: the work is the sum of the lengths, not
// seq·batch. Putting the order on the device waits for the work queued
// before (one host synchronisation per call).
func (s *stack) ForwardLengths(mode Mode, x device.Buffer, seq, batch int, lengths []int32, st *State) (device.Buffer, error) {
	if err := s.g.enter(s.cell.name(), "ForwardLengths"); err != nil {
		return device.Buffer{}, err
	}
	defer s.g.leave()
	return s.forwardLengths(mode, x, seq, batch, lengths, st)
}

func (s *stack) forwardLengths(mode Mode, x device.Buffer, seq, batch int, lengths []int32, st *State) (device.Buffer, error) {
	op := s.cell.name() + ".Forward"
	if err := s.checkForward(op, mode, x, seq, batch, st); err != nil {
		return device.Buffer{}, err
	}
	if mode == Train && s.share {
		return device.Buffer{}, sharedError(s.cell.name(), "Forward(Train)")
	}
	if st != nil {
		if err := st.use(op); err != nil {
			return device.Buffer{}, err
		}
		defer st.g.leave()
	}
	sh, err := newShape(op, seq, batch, lengths)
	if err != nil {
		return device.Buffer{}, err
	}
	kp, seg := s.schedule(mode == Train, sh.T, sh.B)
	if kp != keepNothing {
		// The reserve is about to be overwritten.
		s.rec, s.spent = nil, false
	}
	br := s.branching(kp, &sh)
	if sh.varlen && br.wave%s.chunkSteps(sh.B) != 0 {
		// The windows' projections (and Backward's products) pack their
		// parts of chunks apart.
		sh.wave = br.wave
	}
	// The chunks of steps (upload's packing maps, chunkAt), known to plan.
	sh.chunk = s.chunkSteps(sh.B)
	// The steps of the windows Backward walks back (finalGrads).
	switch {
	case kp == keepOutputs || kp == keepBoundaries:
		sh.win = seg
	case br.wave > 0:
		sh.win = br.wave
	default:
		sh.win = sh.T
	}
	// The reverse walks' initial states are put at every position of
	// their rows (initial).
	sh.entries = sh.varlen && st != nil && s.dirs() == 2 && (kp == keepSteps || kp == keepNothing || kp == keepOutputs)
	// With Recompute they keep h whole and c a window at a time: c's are
	// put in each window (forwardWindow).
	sh.cEntries = sh.varlen && s.dirs() == 2 && kp == keepOutputs && s.cell.carriesC()
	p, err := s.layout(kp, &sh, seg, br)
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	if kp == keepNothing && !sh.varlen {
		p.state = st
	}
	if kp != keepNothing && sh.varlen {
		if err := s.packInGrads(&p, &record{sh: sh, keep: kp, seg: seg, br: br}); err != nil {
			return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
		}
	}
	var q queue
	if kp != keepNothing && s.dropping() {
		// The masks of this forward start where the next ones were to
		// (where its dropouts and its Backward find them), and the next
		// ones after what it draws.
		q.add(s.dev.Kernels().Advance(device.Advance{At: s.dropState.Slice(16, 8), Add: s.draws(sh.T, sh.B), Prev: s.dropState.Slice(8, 8)}))
		if q.err != nil {
			return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
		}
		s.drawn += s.draws(sh.T, sh.B)
	}
	var out device.Buffer
	switch {
	case kp == keepBoundaries:
		out = s.forwardBoundaries(&q, &p, &sh, seg, x, st)
	case br.wave > 0:
		out = s.forwardWave(&q, &p, &sh, kp, br.wave, x, st)
	default:
		out = s.forwardLayers(&q, &p, &sh, kp, seg, br.dirs, x, st)
	}
	if q.err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	if kp != keepNothing {
		rec := &record{sh: sh, state: st, keep: kp, seg: seg, br: br}
		s.waved = 1
		if br.wave > 0 {
			s.waved = (sh.T + br.wave - 1) / br.wave
		}
		if !sh.varlen {
			rec.x = p.x
		}
		s.save(&q, rec)
	}
	if q.err != nil {
		s.rec = nil
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	return out, nil
}

// packInGrads gives a training forward with lengths (rec, before it runs)
// the buffers its projections pack into (pass.pkIn, pkPre): Backward's
// (gradBufs.pk, the compute stream's and the branch's), which its
// Backward would allocate anyway, so that a training step's peak is not
// raised by a chunk of packed operands of its own per stream (NoGrad's
// are in its temporaries, plan). Backward's recomputed windows pack into
// them too (recompute); a forward's packing is done before its Backward
// packs anything.
func (s *stack) packInGrads(p *pass, rec *record) error {
	gb, err := s.gradLayout(rec, s.side(rec).branched())
	if err != nil {
		return err
	}
	p.packInto(gb)
	return nil
}

// packInto makes gb's pack buffers p's projections': the compute
// stream's for p, the branch's for its second set.
func (p *pass) packInto(gb gradBufs) {
	p.pkIn, p.pkPre = gb.pk[0].in, gb.pk[0].pre
	if p.second != nil {
		p.second.pkIn, p.second.pkPre = gb.pk[1].in, gb.pk[1].pre
	}
}

// checkForward validates a Forward's arguments.
func (s *stack) checkForward(op string, mode Mode, x device.Buffer, seq, batch int, st *State) error {
	if err := checkMode(op, mode); err != nil {
		return err
	}
	if err := positive(op, []string{"seq", "batch"}, seq, batch); err != nil {
		return err
	}
	c, dt := s.cfg, s.cfg.DType
	// The stack's buffers are a few gate blocks of seq·batch·hidden for
	// every layer and direction.
	if err := sizeOK(op, shapeOf("seq·batch·(layers·directions·gates)·max(input, hidden)", seq, batch,
		c.Layers*s.dirs()*s.cell.gates(), max(c.Input, c.Hidden))); err != nil {
		return err
	}
	if err := input(op, "x", s.dev, x, dt, seq*batch*c.Input, shapeOf("seq·batch·input", seq, batch, c.Input)); err != nil {
		return err
	}
	if st == nil {
		return nil
	}
	if err := st.check(op, s.dev, dt, s.cell.carriesC(), c.Layers*s.dirs(), batch, c.Hidden); err != nil {
		return err
	}
	if mode == Train && st.tie != nil {
		return fmt.Errorf("rnn: %s: the state still carries the gradient path of an earlier training forward, "+
			"whose saved activations this forward replaces; call State.Detach between windows "+
			"(truncated backpropagation through time, like PyTorch's h.detach())", op)
	}
	return nil
}

// input queues reading x, [T, B, Input], as the stack keeps it: sorted
// with lengths; it returns the stack's input. Without lengths that is x
// itself, which a training forward keeps by reference, not copied
// (Forward's contract: the caller leaves x unchanged until Backward).
func (s *stack) input(q *queue, p *pass, sh *batchShape, train bool, x device.Buffer) device.Buffer {
	dt, k := s.cfg.DType, s.dev.Kernels()
	in := x.Slice(0, int64(sh.T*sh.B*s.cfg.Input)*dt.Size())
	switch {
	case sh.varlen:
		q.add(k.GatherSeq(sh.toSorted(dt, sh.T, s.cfg.Input, in, p.x)))
		return p.x
	case train:
		p.x = in
	}
	return in
}

// forwardLayers queues the layers' forwards over x, [T, B, Input], one
// layer after the other (every kept but keepBoundaries), and returns the
// output: the top layer's (which has no dropout), in the caller's order
// and with both directions interleaved. With dirs, the reverse direction
// of each (bidirectional) layer runs on the stack's branch, forked when
// the layer begins and joined when it ends, beside the forward direction
// (the two read the layer's input and write their own buffers, the
// reverse one with the second set of the pass temporaries): the same
// calls, so the same bits.
func (s *stack) forwardLayers(q *queue, p *pass, sh *batchShape, kp keep, seg int, dirs bool, x device.Buffer, st *State) device.Buffer {
	dt, T, B, H, L, D := s.cfg.DType, sh.T, sh.B, s.cfg.Hidden, s.cfg.Layers, s.dirs()
	k := s.dev.Kernels()
	in := s.input(q, p, sh, kp != keepNothing, x)
	var twin *pass
	if dirs {
		twin = p.twin()
	}
	for l := range L {
		if dirs {
			q.add(s.branch.Fork())
		}
		for dir := range D {
			wins := s.windows(sh, kp, seg)
			if dir == 1 {
				wins = reversed(wins)
			}
			for i, w := range wins {
				lp := s.layerPass(p, sh, kp, seg, l, dir, w)
				if dirs && dir == 1 {
					lp.k, lp.p = s.branch.Kernels(), twin
				}
				lp.in = s.windowInputs(q, p, sh, kp, seg, l, w, in)
				if i == 0 {
					s.initial(q, lp, st, l)
				}
				s.forwardWindow(q, lp, st != nil)
				s.saveExit(q, lp)
				if i == len(wins)-1 {
					s.final(q, lp, st, l)
				}
				if kp == keepSteps {
					// The whole layer is one window: keep its dropped output.
					s.dropWindow(q, lp, s.maskOffset(l, dir, T, B), lp.output(), lp.b.drop, lp.b.mask)
				}
			}
		}
		if dirs {
			// Queued even after an error: the branch's work must not
			// outlive the forward unjoined.
			q.add(s.branch.Join())
		}
	}
	top := make([]device.Buffer, D)
	for dir := range D {
		top[dir] = s.layerPass(p, sh, kp, seg, L-1, dir, span{0, T}).output()
	}
	if D == 1 && !sh.varlen {
		return top[0]
	}
	for dir := range D {
		g := sh.fromSorted(dt, T, H, top[dir], p.out.Elems(dt, dir*H, T*B*D*H-dir*H))
		g.LdY = D * H
		q.add(k.GatherSeq(g))
	}
	return p.out.Elems(dt, 0, T*B*D*H)
}

// windowInputs returns the input of layer l over window w, one part per
// direction of the layer below: x (the stack's input, in), or the outputs
// of the layer below, dropped when they are in training. With keepOutputs
// it queues drawing the window's dropout again (into p.inDrop).
func (s *stack) windowInputs(q *queue, p *pass, sh *batchShape, kp keep, seg, l int, w span, in device.Buffer) []inPart {
	dt, B, H, I := s.cfg.DType, sh.B, s.cfg.Hidden, s.cfg.Input
	if l == 0 {
		return []inPart{{buf: in.Elems(dt, w.t0*B*I, (w.t1-w.t0)*B*I), width: I}}
	}
	var parts []inPart
	for dir := range s.dirs() {
		below := s.layerPass(p, sh, kp, seg, l-1, dir, w)
		buf := below.output()
		switch {
		case kp == keepSteps && !below.b.drop.IsZero():
			buf = below.b.drop
		case kp == keepOutputs && !p.inMask.IsZero():
			buf = s.dropWindow(q, below, s.maskOffset(l-1, dir, sh.T, B), buf, p.inDrop[dir], p.inMask)
		}
		parts = append(parts, inPart{buf: buf, width: H, off: dir * H})
	}
	return parts
}

// maskOffset is where the dropout mask of layer l's direction dir starts
// in a forward of T steps of B sequences, from where the forward's masks
// start: the layers below the top draw T·B·H elements each, in order.
func (s *stack) maskOffset(l, dir, T, B int) uint64 {
	return uint64((l*s.dirs() + dir) * T * B * s.cfg.Hidden)
}

// dropWindow queues the dropout of x, the direction's output over lp's
// window, into y with its mask, the masks of the layer starting at base
// from the forward's start, and returns y; with no y (no dropout) it
// returns x. The seed and the forward's start are the device's
// (dropState), so a replay draws where the replayed forward's masks are.
func (s *stack) dropWindow(q *queue, lp *layerPass, base uint64, x, y, mask device.Buffer) device.Buffer {
	if y.IsZero() {
		return x
	}
	n := (lp.t1 - lp.t0) * lp.B * lp.H
	q.add(lp.k.Dropout(device.Dropout{DType: lp.dt, N: n, P: s.cfg.Dropout, Offset: base + uint64(lp.t0*lp.B*lp.H),
		StateAt: s.dropState.Slice(0, 16), X: x, Y: y.Elems(lp.dt, 0, n), Mask: mask.Elems(lp.dt, 0, n)}))
	return y.Elems(lp.dt, 0, n)
}

// forwardWindow queues lp's walk over its window: the state entering it
// from the checkpoints when the window does not hold it, the input
// projection of its steps, and the steps; with ends, the final states of
// the sequences that end in it (lengths, forward direction).
func (s *stack) forwardWindow(q *queue, lp *layerPass, ends bool) {
	if lp.recomputedEntries() && !lp.zeroEntry && !lp.b.cseq.IsZero() {
		// Each sequence's initial c (the sorted one, at the reverse walk's
		// entry checkpoint) at every position of the window, where the
		// sequences starting in it read it; the entry, loaded next, then
		// holds the c of those running into it (and the initial c of those
		// that have not started, which the windows walked before left
		// there).
		rows := (lp.t1 - lp.t0 + 1) * lp.B
		q.add(lp.k.Embedding(device.Embedding{DType: lp.dt, N: rows, Dim: lp.H, Vocab: lp.B, Table: lp.c0,
			IDs: lp.sh.devCEntries().Elems(device.Int32, 0, rows), Out: lp.b.cseq.Elems(lp.dt, 0, rows*lp.H)}))
	}
	s.loadEntry(q, lp)
	lp.pre = s.cell.projection(lp)
	s.project(q, lp)
	ends = ends && lp.dir == 0 && lp.sh.varlen && !lp.gathers()
	ts := lp.walk()
	if w, ok := lp.k.(device.Walker); ok && !s.stepwise && len(ts) > 1 {
		// One call for the window's steps, each over its running rows:
		// the sequences a reverse walk starts at each step find their
		// initial state where they read it, put there first, and those
		// ending are kept after, from where the walk leaves them. A
		// sequence's rows are written only by the steps that run it, so
		// both stay there until read. Without grad the walk carries c
		// in one slot (the one the steps would leave it in: the last's
		// cOut), which every step writes and every step after the first
		// reads.
		cIn := lp.cIn
		if !lp.train {
			carried := lp.cOut(ts[len(ts)-1])
			cIn = func(t int) device.Buffer {
				if t == ts[0] {
					return lp.cIn(t)
				}
				return carried
			}
		}
		if lp.dir == 1 {
			for _, t := range ts {
				s.enterInto(q, lp, t, lp.hIn(t), cIn(t))
			}
		}
		s.cell.forwardWalk(q, lp, w)
	} else {
		for _, t := range ts {
			if lp.dir == 1 {
				s.enter(q, lp, t)
			}
			s.cell.forwardStep(q, lp, t)
		}
	}
	if ends {
		s.end(q, lp)
	}
}

// end queues keeping the final states of the sequences that end in lp's
// window (training with Recompute: the walk's states hold the window's
// positions only, layerPass.gathers), sorted rows [rows(t1), rows(t0)),
// from their lengths' positions in the window (batchShape.devLasts, one
// past): one gather each for h and c, not a copy per length.
func (s *stack) end(q *queue, lp *layerPass) {
	r0, r1 := lp.rows(lp.walkEnd()), lp.rows(lp.t0)
	if r1 <= r0 {
		return
	}
	rows, BH := (lp.t1-lp.t0)*lp.B, lp.B*lp.H
	for _, part := range [][2]device.Buffer{{lp.hEnd, lp.b.hseq}, {lp.cEnd, lp.b.cseq}} {
		if part[0].IsZero() {
			continue
		}
		q.add(lp.k.Embedding(device.Embedding{DType: lp.dt, N: r1 - r0, Dim: lp.H, Vocab: rows, Table: part[1].Elems(lp.dt, BH, rows*lp.H),
			IDs: lp.sh.devLasts().Elems(device.Int32, r0, r1-r0), Out: lp.span(part[0], r0, r1, lp.H)}))
	}
}

// project queues the input projection of lp's window, one product per
// chunk of steps. With lengths a chunk's product covers its running rows
// alone, the work of the sum of the lengths where the padded product
// cost T·B rows: where they are the first rows of the chunk (every step
// but its last runs all B sequences; the sequences run sorted, longest
// first), the product over those rows; else its input packed (one gather
// a part), the product into the pass's packed buffer, and put back into
// the window's steps (zeros at the padded rows). A chunk past the longest
// length has no product (no step reads it). The chunks are those of the
// packing maps (batchShape.upload: from step 0, or with the wavefront's
// windows within chunks their pieces); steps that are neither take the
// padded product.
func (s *stack) project(q *queue, lp *layerPass) {
	GH, c := s.cell.gates()*lp.H, s.chunkSteps(lp.B)
	for a := lp.t0; a < lp.t1; {
		ch := span{a, min(a+c, lp.t1)}
		if lp.sh.varlen {
			ch = lp.sh.chunkAt(a, lp.t1)
		}
		a = ch.t1
		rows := (ch.t1 - ch.t0) * lp.B
		if lp.sh.varlen {
			n, packed := lp.sh.projection(ch)
			switch {
			case n == 0:
				continue
			case packed:
				s.projectPacked(q, lp, ch, n)
				continue
			}
			rows = n
		}
		for j, part := range lp.in {
			q.add(lp.k.Gemm(device.Gemm{DType: lp.dt, TransB: true, M: rows, N: GH, K: part.width,
				Alpha: 1, Beta: float64(min(j, 1)), A: lp.steps(part.buf, ch.t0, ch.t1, part.width),
				B: weightCols(lp.dt, lp.w.wih, part.off), LdB: lp.w.in, C: lp.steps(lp.pre, ch.t0, ch.t1, GH)}))
		}
	}
}

// projectPacked is project's product over chunk ch's n running rows.
func (s *stack) projectPacked(q *queue, lp *layerPass, ch span, n int) {
	GH, room := s.cell.gates()*lp.H, lp.sh.packRoom()
	for j, part := range lp.in {
		pIn := lp.p.pkIn.Elems(lp.dt, room*part.off, room*part.width)
		s.pack(q, lp.k, lp, ch, part.buf, pIn, part.width, true)
		q.add(lp.k.Gemm(device.Gemm{DType: lp.dt, TransB: true, M: n, N: GH, K: part.width, Alpha: 1, Beta: float64(min(j, 1)),
			A: pIn, B: weightCols(lp.dt, lp.w.wih, part.off), LdB: lp.w.in, C: lp.p.pkPre}))
	}
	s.pack(q, lp.k, lp, ch, lp.pre, lp.p.pkPre, GH, false)
}

// loadEntry queues copying the state entering lp's window from the
// checkpoints into the window's buffers, where they are apart; saveExit
// copies the state leaving it into the checkpoints.
func (s *stack) loadEntry(q *queue, lp *layerPass) { s.checkpoints(q, lp, lp.entry(), false) }
func (s *stack) saveExit(q *queue, lp *layerPass)  { s.checkpoints(q, lp, lp.exit(), true) }

func (s *stack) checkpoints(q *queue, lp *layerPass, pos int, save bool) {
	for _, c := range []struct{ ck, at device.Buffer }{{lp.b.ckH, lp.step(lp.b.hseq, pos, lp.H)}, {lp.b.ckC, lp.cAt(pos)}} {
		if c.ck.IsZero() {
			continue
		}
		slot := checkpoint(lp, c.ck, pos)
		if save {
			q.add(lp.k.Copy(device.Copy{Dst: slot, Src: c.at}))
		} else {
			q.add(lp.k.Copy(device.Copy{Dst: c.at, Src: slot}))
		}
	}
}

// weightCols is the view of a [rows, in] weight that starts at column off:
// with LdB = in, the columns [off, off+width) of every row.
func weightCols(dt device.DType, w device.Buffer, off int) device.Buffer {
	return w.Slice(int64(off)*dt.Size(), w.Len()-int64(off)*dt.Size())
}

// enter queues, before step t of the reverse walk, the initial states of
// the sequences whose walk starts at t (those of length t+1, rows
// [rows(t+1), rows(t)) of the sorted batch) into the state entering t,
// unless that is where they are, or they are put there otherwise: with
// lengths at every position (gathers, recomputedEntries), or, with
// Recompute, by the window's entry (loadEntry: without lengths the
// reverse walk's first window enters with its initial c, from the
// checkpoint that holds it).
func (s *stack) enter(q *queue, lp *layerPass, t int) { s.enterInto(q, lp, t, lp.hIn(t), lp.cIn(t)) }

// enterInto is enter with the places the step reads its state from, h
// and c (none for no c).
func (s *stack) enterInto(q *queue, lp *layerPass, t int, h, c device.Buffer) {
	e0, e1 := lp.rows(t+1), lp.rows(t)
	if e1 <= e0 || lp.zeroEntry || lp.gathers() || lp.kp == keepOutputs {
		return
	}
	for _, c := range [][2]device.Buffer{{h, lp.h0}, {c, lp.c0}} {
		if !c[0].IsZero() && c[0] != c[1] {
			q.add(lp.k.Copy(device.Copy{Dst: lp.span(c[0], e0, e1, lp.H), Src: lp.span(c[1], e0, e1, lp.H)}))
		}
	}
}

// initial queues writing the initial state of layer l's direction into
// its place (lp.h0, lp.c0): the state's values (sorted with lengths), or
// zeros without a state.
func (s *stack) initial(q *queue, lp *layerPass, st *State, l int) {
	if !lp.stateH.IsZero() {
		// The walk reads the state where it lies.
		return
	}
	n, idx := lp.B*lp.H, l*s.dirs()+lp.dir
	if st == nil && lp.sh.varlen && lp.dir == 1 && lp.t0 == 0 && lp.t1 == lp.T {
		// A zero initial state, and the reverse walk over all steps: zero
		// every position of its states (their initial ones among them),
		// one Fill each, and no copy into the rows where each sequence's
		// walk enters (one a length and state, enter). The walk writes
		// no row before the step that reads it.
		lp.zeroEntry = true
		for _, b := range []device.Buffer{lp.b.hseq, lp.b.cseq} {
			if !b.IsZero() {
				q.add(lp.k.Fill(device.Fill{DType: lp.dt, N: int(b.Len() / lp.dt.Size()), X: b}))
			}
		}
		return
	}
	// all is where the reverse walk with lengths keeps each part at every
	// position (gathers): not c without grad, carried in place in its
	// initial slot; with Recompute h alone, its outputs kept whole (the
	// layer's, lp's window's are a part).
	entries := st != nil && lp.dir == 1 && (lp.gathers() || lp.recomputedEntries())
	parts := []struct{ dst, src, all device.Buffer }{{lp.h0, st.layerH(idx, n), lp.b.hseq}, {lp.c0, st.layerC(idx, n), lp.b.cseq}}
	if !lp.train {
		parts[1].all = device.Buffer{}
	}
	if lp.recomputedEntries() {
		parts[0].all, parts[1].all = s.lay[idx].hseq, device.Buffer{}
		if st == nil {
			// Zeros at every position, the initial one (h0) among them.
			rows := (lp.T + 1) * lp.B
			q.add(lp.k.Fill(device.Fill{DType: lp.dt, N: rows * lp.H, X: parts[0].all.Elems(lp.dt, 0, rows*lp.H)}))
			parts[0].dst = device.Buffer{}
		}
	}
	for _, part := range parts {
		switch {
		case part.dst.IsZero():
		case entries && !part.all.IsZero():
			// Each sequence's initial state at every position of its row,
			// the one its walk enters at among them (whose rows no step
			// writes before it reads them), the initial position too: one
			// call, not a copy per length (enter). The others are written
			// by the walk, or padding it never reads.
			rows := (lp.T + 1) * lp.B
			q.add(lp.k.Embedding(device.Embedding{DType: lp.dt, N: rows, Dim: lp.H, Vocab: lp.B, Table: part.src,
				IDs: lp.sh.devEntries(), Out: part.all.Elems(lp.dt, 0, rows*lp.H)}))
		case st == nil:
			q.add(lp.k.Fill(device.Fill{DType: lp.dt, N: n, X: part.dst}))
		case lp.sh.varlen:
			q.add(lp.k.GatherSeq(lp.sh.toSorted(lp.dt, 1, lp.H, part.src, part.dst)))
		default:
			q.add(lp.k.Copy(device.Copy{Dst: part.dst, Src: part.src}))
		}
	}
}

// final queues copying the final state of layer l's direction into the
// state, if there is one: the state leaving the walk's last step (the
// forward direction's with lengths, each sequence's: gathered from their
// positions, gatherEnds, or with Recompute kept in hEnd and cEnd), in the
// caller's order. lp is the walk's last window.
func (s *stack) final(q *queue, lp *layerPass, st *State, l int) {
	if st == nil {
		return
	}
	n, idx := lp.B*lp.H, l*s.dirs()+lp.dir
	if lp.dir == 0 && lp.gathers() {
		s.gatherEnds(q, lp, st, l)
		return
	}
	var hT, cT device.Buffer
	switch {
	case lp.dir == 1:
		hT, cT = lp.hOut(0), lp.cOut(0)
	case lp.sh.varlen:
		hT, cT = lp.hEnd, lp.cEnd
	default:
		hT, cT = lp.hOut(lp.T-1), lp.cOut(lp.T-1)
	}
	for _, part := range []struct{ dst, src device.Buffer }{{st.layerH(idx, n), hT}, {st.layerC(idx, n), cT}} {
		switch {
		case part.dst.IsZero(), part.src == part.dst:
			// None, or written in place by the walk's last step.
		case lp.sh.varlen:
			q.add(lp.k.GatherSeq(lp.sh.fromSorted(lp.dt, 1, lp.H, part.src, part.dst)))
		default:
			q.add(lp.k.Copy(device.Copy{Dst: part.dst, Src: part.src.Elems(lp.dt, 0, n)}))
		}
	}
}

// gatherEnds queues final's part for the forward direction of layer l with
// lengths and the states at every position (layerPass.gathers): each
// sequence's final state, from its length's position (or, for c without
// grad, from the row where it was updated in place), into the state in
// the caller's order, one call per part.
func (s *stack) gatherEnds(q *queue, lp *layerPass, st *State, l int) {
	n, idx := lp.B*lp.H, l*s.dirs()
	all := s.lay[idx] // the layer's buffers, every position (lp's are its last window's)
	rows := (lp.T + 1) * lp.B
	gather := func(dst, src device.Buffer) {
		q.add(lp.k.Embedding(device.Embedding{DType: lp.dt, N: lp.B, Dim: lp.H, Vocab: rows, Table: src.Elems(lp.dt, 0, rows*lp.H),
			IDs: lp.sh.devEnds(), Out: dst}))
	}
	gather(st.layerH(idx, n), all.hseq)
	switch c := st.layerC(idx, n); {
	case c.IsZero():
	case lp.train:
		gather(c, all.cseq)
	default:
		q.add(lp.k.GatherSeq(lp.sh.fromSorted(lp.dt, 1, lp.H, lp.c0, c)))
	}
}

// save records a training forward for Backward and ties the state to it,
// zeroing the state's gradients for the caller to write into.
func (s *stack) save(q *queue, rec *record) {
	s.rec = rec
	st := rec.state
	if st == nil {
		return
	}
	st.tie = rec
	k, dt := s.dev.Kernels(), s.cfg.DType
	for _, g := range []device.Buffer{st.dh, st.dc} {
		if !g.IsZero() {
			q.add(k.Fill(device.Fill{DType: dt, N: s.cfg.Layers * s.dirs() * rec.sh.B * s.cfg.Hidden, X: g}))
		}
	}
}

// Backward differentiates the saved training forward, given dy, the
// gradient of the loss with respect to its output, [seq, batch, dirs·Hidden]
// (read, not written; with lengths, not read at padded positions). It adds
// the parameter gradients into Params' Grad buffers, replaces the gradient
// in the forward's state, if that state is still tied to it, with the
// gradient with respect to the initial state, and returns the gradient with
// respect to x, [seq, batch, Input] (zero at padded positions), valid
// until the next Backward. With Config.Recompute it first runs the
// forward of each segment again, as the training forward did.
//
// Backward consumes what the forward saved: calling it without a training
// forward, or twice for one, returns ErrNoForward.
func (s *stack) Backward(dy device.Buffer) (device.Buffer, error) {
	if err := s.g.enter(s.cell.name(), "Backward"); err != nil {
		return device.Buffer{}, err
	}
	defer s.g.leave()
	if s.share {
		return device.Buffer{}, sharedError(s.cell.name(), "Backward")
	}
	op := s.cell.name() + ".Backward"
	rec := s.rec
	if rec == nil {
		return device.Buffer{}, noForward(op, s.spent)
	}
	if st := rec.state; st != nil && st.tie == rec {
		// Backward writes the state's gradient.
		if err := st.use(op); err != nil {
			return device.Buffer{}, err
		}
		defer st.g.leave()
	}
	c, dt := s.cfg, s.cfg.DType
	T, B, H, I, D := rec.sh.T, rec.sh.B, c.Hidden, c.Input, s.dirs()
	names := "seq·batch·hidden"
	if D == 2 {
		names = "seq·batch·2·hidden"
	}
	if err := input(op, "dy", s.dev, dy, dt, T*B*D*H, shapeOf(names, T, B, D*H)); err != nil {
		return device.Buffer{}, err
	}
	s.rec, s.spent = nil, true
	p, err := s.layoutSaved(rec)
	sd := s.side(rec)
	var gb gradBufs
	if err == nil {
		gb, err = s.gradLayout(rec, sd.branched())
	}
	if err == nil {
		if rec.sh.varlen {
			// The windows recomputed pack their projections there too.
			p.packInto(gb)
		}
		var q queue
		switch {
		case rec.keep == keepBoundaries:
			s.backwardBoundaries(&q, &p, rec, dy, gb, sd)
		case rec.br.wave > 0:
			s.backwardWave(&q, &p, rec, dy, gb, sd)
		default:
			s.backwardLayers(&q, &p, rec, dy, gb, sd)
		}
		sd.join(&q)
		err = q.err
	}
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	return s.dx.buf.Elems(dt, 0, T*B*I), nil
}

// gradLayout takes Backward's buffers from the stack's scratch: the
// gradients flowing between layers and the gradient with respect to x;
// branched says the weight gradients run on a branch, which reads one
// walk's per-step gradients while the next walk writes its own.
func (s *stack) gradLayout(rec *record, branched bool) (gradBufs, error) {
	c, dt, sh := s.cfg, s.cfg.DType, &rec.sh
	T, B, H, LD := sh.T, sh.B, c.Hidden, c.Layers*s.dirs()
	// dh holds all T steps but with keepBoundaries, which walks back a
	// segment of every layer at a time; the cells' per-step gradients
	// hold one window's steps.
	steps, window := T, T
	switch rec.keep {
	case keepBoundaries:
		steps, window = rec.seg, rec.seg
	case keepOutputs:
		window = rec.seg
	}
	g := &arena{dt: dt}
	take := func() (gb gradBufs) {
		BH := B * H
		slots := 2
		if rec.br.wave > 0 && s.cell.edgeReadsDH() {
			slots = 3
		}
		for slot := range slots {
			for dir := range s.dirs() {
				gb.dh[slot][dir] = g.take(steps * BH)
			}
		}
		for range LD {
			gb.rows = append(gb.rows, g.take(BH))
			if rec.keep != keepSteps || rec.br.wave > 0 {
				// The wavefront's Backward keeps its edges as views
				// (layerGrads.kept; it runs only over keepSteps).
				gb.edges = append(gb.edges, g.take(s.cell.edgeSize(B, H, rec.br.wave > 0)))
			}
		}
		sets := 1
		if branched && LD > 1 {
			sets = 2
		}
		s.cell.planGrads(g, window, B, H, sets, &gb)
		if sh.varlen {
			for range LD {
				gb.stH = append(gb.stH, g.take(BH))
				if s.cell.carriesC() {
					gb.stC = append(gb.stC, g.take(BH))
				}
			}
			gb.dxs = g.take(T * B * c.Input)
			// A chunk's rows, ⌈chunkRows/B⌉·B, are below chunkRows + B: sized
			// so, the buffers of a batch of B rows serve every smaller one
			// (⌈256/15⌉·15 = 270 rows outgrow 16's 256), so a warm-up on
			// the batch with the most rows has allocated them for all.
			rows, GH, in := s.chunkRows+B-1, s.cell.gates()*H, max(c.Input, s.dirs()*H)
			for i := range 2 {
				if i == 1 && !branched {
					gb.pk[1] = gb.pk[0]
					break
				}
				pk := &gb.pk[i]
				pk.pre, pk.in, pk.h = g.take(rows*GH), g.take(rows*in), g.take(rows*H)
				if i == 0 || rec.br.wave > 0 {
					// The wavefront's lower layers put their input
					// gradients on the branch too.
					pk.dst = g.take(rows * in)
				}
				if !s.cell.carriesC() {
					pk.hpre = g.take(rows * GH)
				}
			}
		}
		return gb
	}
	take()
	var err error
	if g.buf, err = s.grads.get(s.dev, device.Workspace, int64(g.off)*dt.Size()); err != nil {
		return gradBufs{}, err
	}
	g.off = 0
	gb := take()
	if _, err := s.dx.get(s.dev, device.Workspace, int64(T*B*c.Input)*dt.Size()); err != nil {
		return gradBufs{}, err
	}
	return gb, nil
}

// backwardLayers differentiates a forward that ran one layer after the
// other (keepSteps, keepOutputs): layer by layer from the top, each
// direction walking back its windows (with keepOutputs recomputing each
// window's gates and cells first).
func (s *stack) backwardLayers(q *queue, p *pass, rec *record, dy device.Buffer, gb gradBufs, sd *side) {
	c, dt, sh := s.cfg, s.cfg.DType, &rec.sh
	T, B, H, I, L, D := sh.T, sh.B, c.Hidden, c.Input, c.Layers, s.dirs()
	k := s.dev.Kernels()
	st := rec.state
	tied := st != nil && st.tie == rec
	// The gradient with respect to the top layer's output, in the stack's
	// order, one sequence per direction.
	top := gb.dh[(L-1)%2]
	if D == 1 && !sh.varlen {
		q.add(k.Copy(device.Copy{Dst: top[0], Src: dy.Slice(0, int64(T*B*H)*dt.Size())}))
	} else {
		for dir := range D {
			g := sh.toSorted(dt, T, H, dy.Elems(dt, dir*H, T*B*D*H-dir*H), top[dir])
			g.LdX = D * H
			q.add(k.GatherSeq(g))
		}
	}
	if tied && sh.varlen {
		s.sortStateGrads(q, sh, st, gb, true)
	}
	wins := s.windows(sh, rec.keep, rec.seg)
	// A bidirectional forward that ran its directions side by side walks
	// them back side by side too (backwardDirs), when Backward has the
	// branch.
	split := rec.br.dirs && sd.branched()
	for l := L - 1; l >= 0; l-- {
		// dst receives the gradient with respect to each part of the input.
		dst := []device.Buffer{s.dx.buf}
		if sh.varlen {
			dst[0] = gb.dxs
		}
		if l > 0 {
			dst = gb.dh[(l-1)%2][:D]
		}
		if split {
			s.backwardDirs(q, p, rec, gb, sd, l, dst, tied)
		} else {
			for dir := range D {
				lg := s.layerGrads(gb, st, tied, sh, l, dir)
				order := wins
				if dir == 0 {
					order = reversed(wins)
				}
				edge := -1
				for i, w := range order {
					lp := s.layerPass(p, sh, rec.keep, rec.seg, l, dir, w)
					lp.in = s.windowInputs(q, p, sh, rec.keep, rec.seg, l, w, p.x)
					if rec.keep == keepOutputs {
						s.forwardWindow(q, lp, false)
					}
					lg.dhAll = gb.dh[l%2][dir]
					lg.dh = lg.dhAll.Elems(dt, w.t0*B*H, (w.t1-w.t0)*B*H)
					edge = s.backwardWindow(q, lp, &lg, i == 0, i == len(order)-1, edge)
					if i == len(order)-1 {
						s.initialGrads(q, lp, &lg)
					}
					s.paramGrads(q, lp, &lg, windowViews(dt, dst, lp.in, w, B), dir > 0, sd)
				}
				s.sharedBiasGrad(q, sd.k, &lg, l, dir)
			}
		}
		sd.notify(q, l)
		if l > 0 {
			s.dropoutGrads(q, p, rec, l, dst)
		}
	}
	if tied && sh.varlen {
		s.sortStateGrads(q, sh, st, gb, false)
	}
	if sh.varlen {
		q.add(k.GatherSeq(sh.fromSorted(dt, T, I, gb.dxs, s.dx.buf)))
	}
}

// windowViews returns window w's steps of each buffer of dst, the
// gradients with respect to the parts of a layer's input.
func windowViews(dt device.DType, dst []device.Buffer, in []inPart, w span, B int) []device.Buffer {
	views := make([]device.Buffer, len(dst))
	for j, part := range in {
		views[j] = dst[j].Elems(dt, w.t0*B*part.width, (w.t1-w.t0)*B*part.width)
	}
	return views
}

// dropoutGrads queues the backward of the dropout between layer l-1 and
// layer l, multiplying dst, the gradients with respect to layer l's
// input parts, by the masks: the kept ones, or with keepOutputs the same
// masks drawn again window by window.
func (s *stack) dropoutGrads(q *queue, p *pass, rec *record, l int, dst []device.Buffer) {
	dt, sh, H := s.cfg.DType, &rec.sh, s.cfg.Hidden
	k := s.dev.Kernels()
	for dir := range s.dirs() {
		if m := s.lay[(l-1)*s.dirs()+dir].mask; !m.IsZero() {
			q.add(k.Mul(device.Mul{DType: dt, N: sh.T * sh.B * H, X: dst[dir], Y: m, Z: dst[dir]}))
		}
		if rec.keep != keepOutputs || p.inMask.IsZero() {
			continue
		}
		for _, w := range s.windows(sh, rec.keep, rec.seg) {
			below := s.layerPass(p, sh, rec.keep, rec.seg, l-1, dir, w)
			n := (w.t1 - w.t0) * sh.B * H
			s.dropWindow(q, below, s.maskOffset(l-1, dir, sh.T, sh.B), below.output(), p.inDrop[dir], p.inMask)
			g := dst[dir].Elems(dt, w.t0*sh.B*H, n)
			q.add(k.Mul(device.Mul{DType: dt, N: n, X: g, Y: p.inMask, Z: g}))
		}
	}
}

// layerGrads returns layer l's direction dir's gradients: its row and
// edge, and, when the forward's state is still tied to it, that
// direction's rows of the state's gradients (sorted with lengths).
func (s *stack) layerGrads(gb gradBufs, st *State, tied bool, sh *batchShape, l, dir int) layerGrads {
	i, BH := l*s.dirs()+dir, sh.B*s.cfg.Hidden
	lg := layerGrads{gradBufs: gb, row: gb.rows[i], tied: tied, set: i % 2}
	if gb.edges != nil {
		lg.edge = gb.edges[i]
	}
	switch {
	case !tied:
	case sh.varlen:
		lg.stH = gb.stH[i]
		if gb.stC != nil {
			lg.stC = gb.stC[i]
		}
	default:
		lg.stH, lg.stC = st.layerGradH(i, BH), st.layerGradC(i, BH)
	}
	return lg
}

// sortStateGrads queues gathering the state's gradients into the sorted
// order (gb.stH, gb.stC), with toSorted, or back.
func (s *stack) sortStateGrads(q *queue, sh *batchShape, st *State, gb gradBufs, toSorted bool) {
	k, dt, H := s.dev.Kernels(), s.cfg.DType, s.cfg.Hidden
	for i := range gb.stH {
		pairs := [][2]device.Buffer{{st.layerGradH(i, sh.B*H), gb.stH[i]}}
		if gb.stC != nil {
			pairs = append(pairs, [2]device.Buffer{st.layerGradC(i, sh.B*H), gb.stC[i]})
		}
		for _, pr := range pairs {
			if toSorted {
				q.add(k.GatherSeq(sh.toSorted(dt, 1, H, pr[0], pr[1])))
			} else {
				q.add(k.GatherSeq(sh.fromSorted(dt, 1, H, pr[1], pr[0])))
			}
		}
	}
}

// backwardWindow queues the walk back over lp's window, whose gradient
// with respect to the output, lg.dh, holds what flows from above: the
// gradients with respect to the final state join it, the edge of the
// window walked back before (the step edgeIn, -1 for none) is added, the
// steps go back, and the edge of this window's last step back, whose
// predecessor lies in the next window, is saved. first and last say the
// window starts or ends the direction's walk back. It returns the step
// whose edge it saved, -1 for none.
func (s *stack) backwardWindow(q *queue, lp *layerPass, lg *layerGrads, first, last bool, edgeIn int) int {
	s.cell.gradViews(lp, lg)
	if first {
		s.cell.beginBackward(q, lp, lg)
	}
	if lg.tied {
		s.finalGrads(q, lp, lg)
	}
	// pending is the recurrent product of the step walked back last (or
	// of the edge's step), which the cell gradient of the step it flows
	// into takes, the next one walked back; a Gemm adds it where that
	// step is not walked (past the longest sequence).
	pending := noProduct
	if edgeIn >= 0 {
		pending = product{from: edgeIn, dHPre: s.cell.applyEdge(q, lp, lg, edgeIn), rows: lp.rows(edgeIn)}
	}
	walk := lp.walk()
	if w, ok := lp.k.(device.Walker); ok && !s.stepwise && len(walk) > 1 {
		// One call for the window's steps, as forwardWindow's: each step
		// walked back takes the product of the one before it (over that
		// step's rows), and the last (whose forward predecessor is
		// outside the window) leaves none pending.
		in := noProduct
		if t := walk[len(walk)-1]; pending.from >= 0 && lp.prev(pending.from) == t {
			in = pending
		} else {
			s.addProduct(q, lp, lg, pending)
		}
		s.cell.backwardWalk(q, lp, lg, w, in)
		if t := walk[0]; lg.tied && lp.prev(t) >= 0 && lp.holds(lp.prev(t)) {
			// A tied reverse walk with lengths whose forward's first step
			// walked is before the window's last: its product goes into
			// the gradient entering it (the step past the longest
			// sequence), as walkBack's last, which initialGrads reads.
			s.addProduct(q, lp, lg, product{from: t, dHPre: lp.step(lg.dHPre, t, s.cell.gates()*lp.H), rows: lp.rows(t)})
		}
	} else {
		s.walkBack(q, lp, lg, walk, pending)
	}
	edge := -1
	if len(walk) > 0 {
		if t := walk[0]; lp.prev(t) >= 0 && !lp.holds(lp.prev(t)) {
			s.cell.saveEdge(q, lp, lg, t)
			edge = t
		}
	}
	if last {
		s.cell.endBackward(q, lp, lg)
	}
	return edge
}

// walkBack queues the walk back over lp's window step by step, pending
// the product the first step walked back takes, when it is its.
func (s *stack) walkBack(q *queue, lp *layerPass, lg *layerGrads, walk []int, pending product) {
	GH := s.cell.gates() * lp.H
	for i := len(walk) - 1; i >= 0; i-- {
		t := walk[i]
		in := noProduct
		if pending.from >= 0 && lp.prev(pending.from) == t {
			in = pending
		} else {
			s.addProduct(q, lp, lg, pending)
		}
		s.cell.backwardStep(q, lp, lg, t, in)
		pending = noProduct
		if p := lp.prev(t); p >= 0 && lp.holds(p) {
			pending = product{from: t, dHPre: lp.step(lg.dHPre, t, GH), rows: lp.rows(t)}
		}
	}
	s.addProduct(q, lp, lg, pending)
}

// addProduct queues adding pr, when it is one, into lg.dh's step
// lp.prev(pr.from) as a Gemm, for a step whose cell gradient does not
// follow in lp's window to take it.
func (s *stack) addProduct(q *queue, lp *layerPass, lg *layerGrads, pr product) {
	if pr.from < 0 {
		return
	}
	H := lp.H
	q.add(lp.k.Gemm(device.Gemm{DType: lp.dt, M: pr.rows, N: H, K: s.cell.gates() * H, Alpha: 1, Beta: 1, A: pr.dHPre,
		B: lp.w.whh, C: lp.step(lg.dh, lp.prev(pr.from), H)}))
}

// finalGrads queues adding the gradient with respect to a final state into
// that of the output of the step that produced it, for the steps of lp's
// window. With lengths, the forward direction's sequences ending in the
// window (sorted rows [rows(t1), rows(t0)), their lengths in (t0, t1])
// add theirs at their last steps in one call (a scatter of distinct rows,
// EmbeddingGrad, at batchShape's devLasts), not one a length: once the
// window's dh holds what flows from above (the wavefront's layer above
// writes it window by window), and writing no other row.
func (s *stack) finalGrads(q *queue, lp *layerPass, lg *layerGrads) {
	H := lp.H
	if lp.dir == 0 && lp.sh.varlen {
		r0, r1 := lp.rows(lp.walkEnd()), lp.rows(lp.t0)
		if r1 > r0 {
			rows := (lp.t1 - lp.t0) * lp.B
			q.add(lp.k.EmbeddingGrad(device.EmbeddingGrad{DType: lp.dt, N: r1 - r0, Dim: H, Vocab: rows,
				IDs: lp.sh.devLasts().Elems(device.Int32, r0, r1-r0), DOut: lp.span(lg.stH, r0, r1, H),
				DTable: lg.dh.Elems(lp.dt, 0, rows*H), Distinct: true}))
		}
		return
	}
	for _, t := range lp.walk() {
		e0, e1 := lp.rows(t+1), lp.rows(t)
		if lp.dir == 1 {
			if t != 0 {
				continue
			}
			e0 = 0
		}
		if e1 > e0 {
			q.add(lp.k.Axpby(device.Axpby{DType: lp.dt, N: (e1 - e0) * H, Alpha: 1, X: lp.span(lg.stH, e0, e1, H), Beta: 1,
				Y: lp.span(lp.step(lg.dh, t, H), e0, e1, H)}))
		}
	}
}

// initialGrads queues, after the whole walk back of a reverse direction
// with lengths tied to the state (lp its last window, lg.dhAll its
// gradients with respect to the outputs, all T steps), gathering the
// gradient with respect to the initial state of each sequence shorter than
// T from where its walk entered (dh at its length's position, a padded row
// there, which the walk back leaves complete: batchShape.devSortedEnds)
// into its row of the state's gradient (sorted): one call, not a copy per
// length. The sequences of length T got theirs from the walk's first step
// (backwardStep, backwardWalk).
func (s *stack) initialGrads(q *queue, lp *layerPass, lg *layerGrads) {
	if !lg.tied || lp.dir != 1 || !lp.sh.varlen {
		return
	}
	r0, B, H := lp.rows(lp.T-1), lp.B, lp.H
	if r0 == B {
		return
	}
	q.add(lp.k.Embedding(device.Embedding{DType: lp.dt, N: B - r0, Dim: H, Vocab: lp.T * B, Table: lg.dhAll.Elems(lp.dt, 0, lp.T*B*H),
		IDs: lp.sh.devSortedEnds().Elems(device.Int32, r0, B-r0), Out: lp.span(lg.stH, r0, B, H)}))
}

// paramGrads queues the gradients of a direction's weights and biases over
// lp's window, added chunk by chunk in the order the walk back reaches
// them, on sd (forked after the walk), and the gradient with respect to
// each part of the window's input into dst (one buffer per part, the
// window's steps), added to what dst holds with accumulate (the other
// direction's). With lengths, every product runs on the chunk's running
// rows packed, on the compute stream (sd is then never a branch).
func (s *stack) paramGrads(q *queue, lp *layerPass, lg *layerGrads, dst []device.Buffer, accumulate bool, sd *side) {
	chunks := s.gradChunks(lp)
	if lp.sh.varlen {
		// The chunks' rows of dst are written whole (zeros at padded
		// ones): zero those past them.
		end := lp.t0
		for _, ch := range chunks {
			end = max(end, ch.t1)
		}
		if !accumulate && end < lp.t1 {
			for j, part := range lp.in {
				q.add(lp.k.Fill(device.Fill{DType: lp.dt, N: (lp.t1 - end) * lp.B * part.width, X: lp.steps(dst[j], end, lp.t1, part.width)}))
			}
		}
		if !sd.branched() {
			// One packing of the pre-activation gradients serves both.
			for _, ch := range chunks {
				pk := &lg.pk[0]
				s.pack(q, lp.k, lp, ch, lg.dPre, pk.pre, s.cell.gates()*lp.H, true)
				s.packedWeightGrads(q, lp.k, lp, lg, ch, pk, false)
				s.packedInputGrads(q, lp, lg, ch, dst, accumulate, pk, false)
			}
			return
		}
		// The branch packs its own operands (the pre-activation gradients
		// a second time): the compute stream's pack buffers are rewritten
		// by its next chunk, and next walk, while the branch still reads.
		sd.fork(q)
		for _, ch := range chunks {
			s.packedWeightGrads(q, sd.k, lp, lg, ch, &lg.pk[1], true)
		}
		for _, ch := range chunks {
			s.packedInputGrads(q, lp, lg, ch, dst, accumulate, &lg.pk[0], true)
		}
		return
	}
	sd.fork(q)
	for _, ch := range chunks {
		s.weightGrads(q, sd.k, lp, lg, ch)
	}
	s.inputGrads(q, lp, lg, dst, accumulate)
}

// gradChunks are the chunks of lp's window in the order its walk back
// reaches them: the order paramGrads adds their weight gradients in.
func (s *stack) gradChunks(lp *layerPass) []span {
	var chunks []span
	for a, c := lp.t0, s.chunkSteps(lp.B); a < min(lp.t1, lp.sh.maxLen); a += c {
		chunks = append(chunks, span{a, min(a+c, lp.t1)})
	}
	if lp.dir == 0 {
		chunks = reversed(chunks)
	}
	return chunks
}

// weightGrads queues on k the gradients of a direction's weights and
// biases over the steps of chunk ch: a few products and two row sums,
// added into the gradient buffers.
func (s *stack) weightGrads(q *queue, k device.Kernels, lp *layerPass, lg *layerGrads, ch span) {
	GH, rows, dt, w := s.cell.gates()*lp.H, (ch.t1-ch.t0)*lp.B, lp.dt, lp.w
	dPre, dHPre := lp.steps(lg.dPre, ch.t0, ch.t1, GH), lp.steps(lg.dHPre, ch.t0, ch.t1, GH)
	for _, part := range lp.in {
		q.add(k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: part.width, K: rows, Alpha: 1, Beta: 1, A: dPre,
			B: lp.steps(part.buf, ch.t0, ch.t1, part.width), C: weightCols(dt, w.gwih, part.off), LdC: w.in}))
	}
	hIns := lp.steps(lp.b.hseq, ch.t0+lp.dir, ch.t1+lp.dir, lp.H)
	q.add(k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: lp.H, K: rows, Alpha: 1, Beta: 1, A: dHPre, B: hIns, C: w.gwhh}))
	s.biasGrads(q, k, lp, lg, rows, dPre, dHPre)
}

// biasGrads queues on k the biases' gradients over rows rows of dPre and
// dHPre, added into the gradient buffers. An LSTM's two biases enter every
// gate alike (dHPre is dPre), so their gradients are equal: zeroed
// together, then added the same sums. Only the input-side one is summed
// here; sharedBiasGrad copies it over once the walk has added every chunk.
func (s *stack) biasGrads(q *queue, k device.Kernels, lp *layerPass, lg *layerGrads, rows int, dPre, dHPre device.Buffer) {
	if s.cfg.NoBias {
		return
	}
	GH, dt, w := s.cell.gates()*lp.H, lp.dt, lp.w
	q.add(k.SumRows(device.SumRows{DType: dt, Rows: rows, Cols: GH, X: dPre, Out: w.gbih, Accumulate: true}))
	if lg.dHPre != lg.dPre {
		q.add(k.SumRows(device.SumRows{DType: dt, Rows: rows, Cols: GH, X: dHPre, Out: w.gbhh, Accumulate: true}))
	}
}

// sharedBiasGrad queues on k, after the last chunk of the walk back of
// layer l's direction dir (lg its gradients), copying the input-side bias
// gradient into the recurrent one when the two are the same sums (an
// LSTM's, biasGrads): one copy a Backward, not one a chunk. The two hold
// the same values before Backward (Params.ZeroGrad zeroes both, and every
// Backward adds both the same sums), so copying the whole accumulated
// gradient once gives the values two row sums would.
func (s *stack) sharedBiasGrad(q *queue, k device.Kernels, lg *layerGrads, l, dir int) {
	if s.cfg.NoBias || lg.dHPre != lg.dPre {
		return
	}
	w, GH := &s.layers[l*s.dirs()+dir], s.cell.gates()*s.cfg.Hidden
	q.add(k.Copy(device.Copy{Src: w.gbih.Elems(s.cfg.DType, 0, GH), Dst: w.gbhh}))
}

// inputGrads queues the gradient with respect to each part of a
// direction's input over lp's window into dst: through the input weights'
// columns of the part, added to what dst holds with accumulate. (Each row
// of the product depends on its own row of dPre only, so the window's
// product gives every step the bits one product over all steps gives.)
func (s *stack) inputGrads(q *queue, lp *layerPass, lg *layerGrads, dst []device.Buffer, accumulate bool) {
	GH, dt, w := s.cell.gates()*lp.H, lp.dt, lp.w
	beta := 0.0
	if accumulate {
		beta = 1
	}
	for j, part := range lp.in {
		q.add(lp.k.Gemm(device.Gemm{DType: dt, M: (lp.t1 - lp.t0) * lp.B, N: part.width, K: GH, Alpha: 1, Beta: beta,
			A: lp.steps(lg.dPre, lp.t0, lp.t1, GH), B: weightCols(dt, w.wih, part.off), LdB: w.in, C: dst[j]}))
	}
}

// packedWeightGrads is weightGrads with lengths, queued on k: over the
// running rows of chunk ch packed into pk (with packPre, the
// pre-activation gradients too; else pk.pre holds them), the same
// products and row sums.
func (s *stack) packedWeightGrads(q *queue, k device.Kernels, lp *layerPass, lg *layerGrads, ch span, pk *packBufs, packPre bool) {
	GH, dt, w, n := s.cell.gates()*lp.H, lp.dt, lp.w, lp.sh.running(ch)
	dPre, dHPre := pk.pre, pk.pre
	if packPre {
		s.pack(q, k, lp, ch, lg.dPre, dPre, GH, true)
	}
	if lg.dHPre != lg.dPre {
		dHPre = pk.hpre
		s.pack(q, k, lp, ch, lg.dHPre, dHPre, GH, true)
	}
	// hIns is the states entering the steps: step t at position t+dir.
	hIns := lp.steps(lp.b.hseq, lp.t0+lp.dir, lp.t1+lp.dir, lp.H)
	s.pack(q, k, lp, ch, hIns, pk.h, lp.H, true)
	room := s.chunkSteps(lp.B) * lp.B
	for _, part := range lp.in {
		pIn := pk.in.Elems(dt, room*part.off, room*part.width)
		s.pack(q, k, lp, ch, part.buf, pIn, part.width, true)
		q.add(k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: part.width, K: n, Alpha: 1, Beta: 1, A: dPre, B: pIn,
			C: weightCols(dt, w.gwih, part.off), LdC: w.in}))
	}
	q.add(k.Gemm(device.Gemm{DType: dt, TransA: true, M: GH, N: lp.H, K: n, Alpha: 1, Beta: 1, A: dHPre, B: pk.h, C: w.gwhh}))
	s.biasGrads(q, k, lp, lg, n, dPre, dHPre)
}

// packedInputGrads is inputGrads with lengths over chunk ch, on the
// compute stream: the pre-activation gradients packed into pk.pre (with
// packPre; else it holds them), the product over the running rows into
// pk.dst (dst's rows packed there first with accumulate), and put back
// into dst, whose padded rows are written zeros.
func (s *stack) packedInputGrads(q *queue, lp *layerPass, lg *layerGrads, ch span, dst []device.Buffer, accumulate bool, pk *packBufs, packPre bool) {
	GH, dt, w, n := s.cell.gates()*lp.H, lp.dt, lp.w, lp.sh.running(ch)
	if packPre {
		s.pack(q, lp.k, lp, ch, lg.dPre, pk.pre, GH, true)
	}
	beta, room := 0.0, s.chunkSteps(lp.B)*lp.B
	if accumulate {
		beta = 1
	}
	for j, part := range lp.in {
		pDst := pk.dst.Elems(dt, room*part.off, room*part.width)
		if accumulate {
			s.pack(q, lp.k, lp, ch, dst[j], pDst, part.width, true)
		}
		q.add(lp.k.Gemm(device.Gemm{DType: dt, M: n, N: part.width, K: GH, Alpha: 1, Beta: beta, A: pk.pre,
			B: weightCols(dt, w.wih, part.off), LdB: w.in, C: pDst}))
		s.pack(q, lp.k, lp, ch, dst[j], pDst, part.width, false)
	}
}

// pack queues on k packing the running rows of the steps of chunk ch of
// seq, a per-step buffer of lp's window (width features a row), into
// packed one step after the other; with pack false, back (zeros at the
// padded rows). One GatherSeq (batchShape.packSeq), whatever the steps.
func (s *stack) pack(q *queue, k device.Kernels, lp *layerPass, ch span, seq, packed device.Buffer, width int, pack bool) {
	q.add(k.GatherSeq(lp.sh.packSeq(lp.dt, ch, width, lp.steps(seq, ch.t0, ch.t1, width), packed, pack)))
}
