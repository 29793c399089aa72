package train

import (
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/nn"
	"github.com/gocurrent/gocurrent/rnn"
)

// Model is what the trainer trains, evaluates and samples from: a network
// that maps windows of token ids to next-token logits. The char model
// (Embedding, an LSTM or GRU stack, Linear) is one; the trainer knows
// nothing more about a model than this.
//
// The trainer owns the loss (softmax cross-entropy over Classes), the
// optimizer and the carried state; the model owns its parameters and what
// its forward saves for its backward.
type Model interface {
	// Groups lists the parameters, in a fixed order. A checkpoint names a
	// tensor Group.Name + "." + the parameter's name.
	Groups() []Group
	// Classes is the number of logits per position (the vocabulary).
	Classes() int
	// NewState returns the state carried from window to window for a
	// batch of rows, starting at zeros; nil for a model that carries none.
	NewState(rows int) (State, error)
	// Forward queues the forward pass of a window: ids are [seq, rows]
	// device.Int32, time-major; st (nil: zeros, nothing carried) is read
	// as the initial state and left holding the final one. The logits,
	// [seq·rows, Classes] in the parameters' DType, belong to the model and
	// stay valid until its next Forward. In rnn.Train mode the model saves
	// what Backward needs.
	Forward(mode rnn.Mode, ids device.Buffer, seq, rows int, st State) (logits device.Buffer, err error)
	// Backward queues the backward pass of the last training forward for
	// the gradient of the loss with respect to its logits, adding the
	// parameters' gradients into their gradient buffers.
	Backward(dLogits device.Buffer) error
}

// Replayable is implemented by a model whose passes in a mode may be
// recorded once in a device graph (device.Grapher) and replayed: for the
// same shapes, state and ids buffers, its Forward (and, in rnn.Train, its
// Backward) queues the same kernels with the same arguments on the same
// buffers every time, and its Go side keeps nothing that must change from
// one call to the next, or only what Replayed moves (ReplayTracker).
// Sample records the tokens of a chunk once, and replays them, for a
// model Replayable in rnn.NoGrad on a device that can; the tokens are the
// same bits either way.
type Replayable interface {
	Replayable(mode rnn.Mode) bool
}

// ReplayTracker is implemented by a Replayable model whose Go side keeps
// count of what its training forwards do on the device: where the next
// dropout masks start, which the device moves as it runs the forward
// (rnn's stacks), and which the model's RandomState reports without
// reading the device. A replay queues a forward's device work again but
// runs none of its Go code, so after each launch of a graph recorded from
// a micro-batch (a Forward in rnn.Train over seq·rows ids, and its
// Backward), other than the launch right after the recording, the trainer
// calls Replayed(rnn.Train, seq, rows): the Go side then moves as that
// Forward's would have.
type ReplayTracker interface {
	Replayed(mode rnn.Mode, seq, rows int)
}

// Group is a named set of parameters, e.g. "emb", "rnn", "out": nn's
// (a module's Groups are a model's).
type Group = nn.Group

// State is the recurrent state a model carries between the windows of one
// stream of batches (truncated backpropagation through time).
type State interface {
	// Detach keeps the values and cuts the gradient path into the window
	// that produced them.
	Detach()
	// Reset sets the values to zeros.
	Reset() error
	// Carried lists the buffers that carry values from window to window,
	// by name, so the trainer can checkpoint them and put them back when
	// a step fails.
	Carried() []Carried
	// Free releases the state's memory.
	Free() error
}

// Carried is one buffer of a State: Len elements of DType, laid out
// [Outer, Rows, Len/(Outer·Rows)] where Rows is the batch's rows (h of a
// stack: [layers, batch, hidden]). A data-parallel trainer gathers the
// ranks' rows into a checkpoint by that layout; 0 for Outer means 1, and
// a state whose Rows is 0 cannot be trained data-parallel.
type Carried struct {
	Name   string
	DType  device.DType
	Len    int
	Buffer device.Buffer
	Outer  int
	Rows   int
}

// outer is Outer, or 1.
func (c Carried) outer() int { return max(c.Outer, 1) }

// RandomModel is a model that draws random numbers in training (dropout
// masks). A checkpoint records RandomState and resuming restores it with
// SetRandomState, so a resumed run draws what an uninterrupted one would,
// whatever seed the resumed model was built with.
type RandomModel interface {
	Model
	RandomState() []uint64
	SetRandomState([]uint64) error
}

// RecurrentState adapts an rnn.State to State: it carries h (and c for an
// LSTM). Models built from rnn stacks return one from NewState, and their
// Forward takes the rnn.State back from its State field (a type assertion
// on the State the trainer hands them).
type RecurrentState struct {
	// State is the stack's state; the RecurrentState's methods act on it.
	State *rnn.State
}

// Detach implements State.
func (r RecurrentState) Detach() { r.State.Detach() }

// Reset implements State.
func (r RecurrentState) Reset() error { return r.State.Reset() }

// Free implements State.
func (r RecurrentState) Free() error { return r.State.Free() }

// Carried implements State: "h", and "c" when the stack is an LSTM.
func (r RecurrentState) Carried() []Carried {
	h, dt := r.State.H(), r.State.DType()
	n := int(h.Len() / dt.Size())
	outer, rows := r.State.Layers(), r.State.Batch()
	out := []Carried{{Name: "h", DType: dt, Len: n, Buffer: h, Outer: outer, Rows: rows}}
	if c := r.State.C(); !c.IsZero() {
		out = append(out, Carried{Name: "c", DType: dt, Len: n, Buffer: c, Outer: outer, Rows: rows})
	}
	return out
}

// SeqModel is what the trainer trains on a labelled dataset: a network
// that maps a batch of variable-length sequences (loader.SeqBatch) to
// logits, one row per token when the batch carries a tag per token
// (tagging), one row per sequence when it carries a label per sequence
// (classification). The batch decides which; the model must agree with
// it. The tagger and classifier of the models package are two.
type SeqModel interface {
	// Groups lists the parameters, in a fixed order, as Model's.
	Groups() []Group
	// Classes is the number of logits per row (tags or labels).
	Classes() int
	// ForwardBatch queues the forward pass of b: logits [Seq·Rows,
	// Classes] (time-major, as b.Tokens) for tagging, [Rows, Classes] for
	// classification, in the parameters' DType, owned by the model until
	// its next forward. In rnn.Train mode the model saves what Backward
	// needs.
	ForwardBatch(mode rnn.Mode, b loader.SeqBatch) (logits device.Buffer, err error)
	// Backward is Model's.
	Backward(dLogits device.Buffer) error
}
