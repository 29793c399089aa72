package rnn

import (
	"context"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
)

// EmbeddingConfig describes an embedding table, as PyTorch's
// nn.Embedding(Vocab, Dim).
type EmbeddingConfig struct {
	Vocab, Dim int
	// DType is Float32 (the default) or Float64.
	DType device.DType
	// Seed draws the initial table from N(0, 1), as PyTorch's.
	Seed uint64
}

// Embedding maps token ids to rows of a table, parameter "weight"
// [Vocab, Dim]. It is used by one goroutine at a time (a call meeting
// another is ErrBusy); goroutines that look up ids at once each use a
// share (Share).
type Embedding struct {
	g      guard
	share  bool // made by Share: NoGrad forwards only
	dev    device.Device
	cfg    EmbeddingConfig
	params *Params
	// out is a NoGrad forward's output, trainOut a training forward's:
	// apart, so that a layer above may keep a reference to the training
	// output until its Backward whatever NoGrad forwards run meanwhile.
	out, trainOut scratch
	ids           scratch // the ids of the saved training forward
	n             int     // rows saved, 0 when none
	spent         bool
}

// NewEmbedding allocates an embedding table on d and initialises it; the
// initialisation stops with ctx (an error wrapping ctx.Err(), nothing left
// allocated). A table whose size overflows is refused before anything is
// allocated.
func NewEmbedding(ctx context.Context, d device.Device, c EmbeddingConfig) (*Embedding, error) {
	if d == nil {
		return nil, fmt.Errorf("rnn: NewEmbedding: no device")
	}
	dt, err := floatType(c.DType)
	if err != nil {
		return nil, err
	}
	c.DType = dt
	if c.Vocab <= 0 || c.Dim <= 0 {
		return nil, fmt.Errorf("rnn: NewEmbedding: vocab %d, dim %d: each must be positive: %w", c.Vocab, c.Dim, device.ErrShape)
	}
	if _, ok := checked.Mul(c.Vocab, c.Dim); !ok {
		return nil, fmt.Errorf("rnn: NewEmbedding: vocab %d × dim %d overflows int: %w", c.Vocab, c.Dim, device.ErrShape)
	}
	p, err := newParams(ctx, d, dt, c.Seed, []paramSpec{{name: "weight", shape: []int{c.Vocab, c.Dim}, normal: true}})
	if err != nil {
		return nil, err
	}
	return &Embedding{dev: d, cfg: c, params: p}, nil
}

// Config returns the configuration, with defaults filled in.
func (e *Embedding) Config() EmbeddingConfig { return e.cfg }

// Params returns the table, which its shares hold too (freed at the last
// Close of the layer and its shares).
func (e *Embedding) Params() *Params { return e.params }

// Share returns an embedding over the same table with buffers of its own,
// for NoGrad forwards from another goroutine: a share copies no
// parameter, refuses Train forwards and Backward (ErrShared), and reads
// the table as it is when its forward runs on the stream. Closing a share
// frees its buffers; the table is freed at the last Close of the layer
// and its shares, in either order.
func (e *Embedding) Share() (*Embedding, error) {
	if err := e.g.enter("Embedding", "Share"); err != nil {
		return nil, err
	}
	defer e.g.leave()
	return &Embedding{share: true, dev: e.dev, cfg: e.cfg, params: e.params.retain()}, nil
}

// Forward looks up n ids (Int32, in [0, Vocab)) and returns their rows,
// [n, Dim]: a NoGrad forward's valid until the next NoGrad forward, a
// training forward's until the next training forward (the two write
// different buffers, so a stack over the embedding may keep a reference to
// its training input until its Backward). An id outside the vocabulary
// gives a zero row and device.ErrIndex from the next synchronisation of
// the compute stream (naming the id and its position on the CPU device).
// In Train mode the ids are copied for Backward (4 bytes a token): they
// are the model's own input, which a caller of train.Model's Forward may
// reuse once Forward returns, unlike the activations between layers.
func (e *Embedding) Forward(mode Mode, ids device.Buffer, n int) (device.Buffer, error) {
	const op = "Embedding.Forward"
	if err := e.g.enter("Embedding", "Forward"); err != nil {
		return device.Buffer{}, err
	}
	defer e.g.leave()
	if err := checkMode(op, mode); err != nil {
		return device.Buffer{}, err
	}
	if mode == Train && e.share {
		return device.Buffer{}, sharedError("Embedding", "Forward(Train)")
	}
	if err := positive(op, []string{"n"}, n); err != nil {
		return device.Buffer{}, err
	}
	if err := input(op, "ids", e.dev, ids, device.Int32, n, shapeOf("n")); err != nil {
		return device.Buffer{}, err
	}
	if err := sizeOK(op, shapeOf("n·dim", n, e.cfg.Dim)); err != nil {
		return device.Buffer{}, err
	}
	dt, k := e.cfg.DType, e.dev.Kernels()
	buf, cat := &e.out, device.Workspace
	if mode == Train {
		// The stack above keeps it for its Backward (device.Activations).
		buf, cat = &e.trainOut, device.Activations
	}
	out, err := buf.get(e.dev, cat, int64(n*e.cfg.Dim)*dt.Size())
	if err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
	}
	ids = ids.Slice(0, int64(n)*4)
	table, _ := e.params.Flat()
	var q queue
	q.add(k.Embedding(device.Embedding{DType: dt, N: n, Dim: e.cfg.Dim, Vocab: e.cfg.Vocab, Table: table, IDs: ids, Out: out}))
	if mode == Train {
		e.n, e.spent = 0, false
		saved, err := e.ids.get(e.dev, device.Activations, int64(n)*4)
		if err != nil {
			return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, err)
		}
		q.add(k.Copy(device.Copy{Dst: saved, Src: ids}))
		if q.err == nil {
			e.n = n
		}
	}
	if q.err != nil {
		return device.Buffer{}, fmt.Errorf("rnn: %s: %w", op, q.err)
	}
	return out, nil
}

// Backward adds the gradient of the table, given dOut [n, Dim] for the
// saved training forward, into the "weight" gradient (a deterministic
// scatter-add). Ids carry no gradient. Calling it without a training
// forward, or twice for one, returns ErrNoForward.
func (e *Embedding) Backward(dOut device.Buffer) error {
	const op = "Embedding.Backward"
	if err := e.g.enter("Embedding", "Backward"); err != nil {
		return err
	}
	defer e.g.leave()
	if e.share {
		return sharedError("Embedding", "Backward")
	}
	if e.n == 0 {
		return noForward(op, e.spent)
	}
	n, dt := e.n, e.cfg.DType
	if err := input(op, "dOut", e.dev, dOut, dt, n*e.cfg.Dim, shapeOf("n·dim", n, e.cfg.Dim)); err != nil {
		return err
	}
	e.n, e.spent = 0, true
	_, grad := e.params.Flat()
	err := e.dev.Kernels().EmbeddingGrad(device.EmbeddingGrad{DType: dt, N: n, Dim: e.cfg.Dim, Vocab: e.cfg.Vocab,
		IDs: e.ids.buf, DOut: dOut, DTable: grad})
	if err != nil {
		return fmt.Errorf("rnn: %s: %w", op, err)
	}
	return nil
}

// Close frees the layer's buffers, and the table unless a share still
// holds it. Every later call but Config and Params returns an error
// matching ErrClosed; a second Close does nothing. Close during another
// goroutine's call is ErrBusy, and closes nothing.
func (e *Embedding) Close() error {
	if first, err := e.g.close("Embedding"); !first {
		return err
	}
	var q queue
	q.add(e.out.free(e.dev))
	q.add(e.trainOut.free(e.dev))
	q.add(e.ids.free(e.dev))
	if e.params != nil {
		q.add(e.params.release())
	}
	return q.err
}

// noForward is the error of a Backward with nothing saved to consume.
func noForward(op string, spent bool) error {
	if spent {
		return fmt.Errorf("%w: %s called twice for one training forward; the first call consumed "+
			"what the forward saved: run Forward with Train again", ErrNoForward, op)
	}
	return fmt.Errorf("%w: %s without a training forward to differentiate: "+
		"run Forward with Train first (a NoGrad forward saves nothing)", ErrNoForward, op)
}
