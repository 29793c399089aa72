package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// CharRNNFormat is the "format" metadata of a char-RNN checkpoint.
const CharRNNFormat = "gocurrent.charrnn/1"

// CharRNNConfig is the char-RNN's shape: PyTorch's nn.Embedding(V, Embed)
// -> nn.LSTM or nn.GRU(Embed, Hidden, Layers, dropout=Dropout) ->
// nn.Linear(Hidden, V), V the vocabulary's size. Its JSON is the
// checkpoint's "config" metadata. There are no defaults: every field is
// set, as the checkpoint records it.
type CharRNNConfig struct {
	// Cell is "lstm" or "gru".
	Cell string `json:"cell"`
	// Embed is the embedding's width, the recurrent stack's input size.
	Embed int `json:"embed"`
	// Hidden is the hidden size of every recurrent layer.
	Hidden int `json:"hidden"`
	// Layers is the number of recurrent layers.
	Layers int `json:"layers"`
	// Dropout, in [0, 1), drops the outputs of every recurrent layer but
	// the last during training, as PyTorch's dropout argument does.
	Dropout float64 `json:"dropout"`
	// Recompute is the recurrent stack's rnn.Config.Recompute: keep the
	// state every k steps and recompute the rest in Backward (0 off,
	// rnn.RecomputeAuto for k = ⌈√T⌉). A way of training, not of the
	// model: not recorded (SetRecompute sets it on a loaded model).
	Recompute int `json:"-"`
	// NoBranches is the recurrent stack's rnn.Config.NoBranches: keep its
	// weight gradients on the compute stream of a device with branches,
	// to compare (the gradients are the same bits either way). A way of
	// running, not of the model: not recorded.
	NoBranches bool `json:"-"`
	// WaveWindows is the recurrent stack's rnn.Config.WaveWindows: the
	// windows its forwards' wavefront cuts the steps into (0: 4; 1: the
	// layers one after the other), to compare. Not recorded either.
	WaveWindows int `json:"-"`
}

// Validate checks the configuration without building the model: each
// field in its range, and sizes whose parameters can be counted (at most
// rnn.MaxLayers layers, a count that does not overflow), so that a
// configuration from a flag, a job spec or a checkpoint's metadata is
// refused by name, not after allocating. The vocabulary's size is the
// constructor's to check.
func (c CharRNNConfig) Validate() error {
	switch {
	case c.Cell != "lstm" && c.Cell != "gru":
		return fmt.Errorf("models: char-RNN cell %q, want lstm or gru", c.Cell)
	case c.Embed <= 0 || c.Hidden <= 0 || c.Layers <= 0:
		return fmt.Errorf("models: char-RNN embed %d, hidden %d, layers %d; each must be > 0", c.Embed, c.Hidden, c.Layers)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("models: char-RNN dropout %v, want [0, 1)", c.Dropout)
	}
	return stackSizes("char-RNN", "embed", c.Cell, rnn.Config{Input: c.Embed, Hidden: c.Hidden, Layers: c.Layers})
}

// stackSizes checks that the recurrent stack of cell of a model (name,
// for the message; input names the field its input size comes from) can
// be counted: at most rnn.MaxLayers layers, and parameters whose count
// does not overflow (what rnn's constructors refuse, said in the model's
// terms before anything is built).
func stackSizes(name, input, cell string, c rnn.Config) error {
	gates := rnn.LSTMGates
	if cell == "gru" {
		gates = rnn.GRUGates
	}
	switch _, ok := c.ParamCount(gates); {
	case c.Layers > rnn.MaxLayers:
		return fmt.Errorf("models: %s layers %d, more than rnn.MaxLayers (%d)", name, c.Layers, rnn.MaxLayers)
	case !ok:
		return fmt.Errorf("models: %s %s %d, hidden %d, layers %d: the recurrent stack's parameters overflow int", name, input, c.Input, c.Hidden, c.Layers)
	}
	return nil
}

// recurrent is what rnn.LSTM and rnn.GRU share.
type recurrent interface {
	Forward(mode rnn.Mode, x device.Buffer, seq, batch int, st *rnn.State) (device.Buffer, error)
	ForwardLengths(mode rnn.Mode, x device.Buffer, seq, batch int, lengths []int32, st *rnn.State) (device.Buffer, error)
	Backward(dy device.Buffer) (device.Buffer, error)
	NewState(batch int) (*rnn.State, error)
	Params() *rnn.Params
	DropoutState() (seed, offset uint64)
	SetDropoutState(seed, offset uint64) error
	Replayed(mode rnn.Mode, seq, batch int)
	Branched() bool
	WaveWindows() int
	SetRecompute(k int) error
	NotifyLayers(done func(layer int) error)
	LayerGrads(l int) (off, n int)
	Close() error
}

// newRecurrent builds the stack cell names. On error it returns a nil
// interface: a nil *rnn.LSTM in a recurrent would be a non-nil interface
// whose Close dereferences nil.
func newRecurrent(ctx context.Context, d device.Device, cell string, c rnn.Config) (recurrent, error) {
	if cell == "gru" {
		g, err := rnn.NewGRU(ctx, d, c)
		if err != nil {
			return nil, err
		}
		return g, nil
	}
	l, err := rnn.NewLSTM(ctx, d, c)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// CharRNN is the character-level language model: a train.Model (and
// train.RandomModel, for its dropout) over a character vocabulary. Its
// parameter groups are "emb", "rnn" and "out", so its checkpoint tensors
// carry PyTorch's names. It is used by one goroutine at a time (a call
// meeting another is rnn.ErrBusy); goroutines that run it at once each use
// a share of it (Share).
type CharRNN struct {
	chain
	cfg   CharRNNConfig
	vocab *loader.Vocab
	dev   device.Device
	in    hostInput // Predict's ids
}

// NewCharRNN builds a float32 char-RNN on d for vocab, its parameters
// drawn with PyTorch's initialisation from seed. An invalid cfg, an empty
// vocabulary or a layer the device cannot hold (an error wrapping
// alloc.ErrOutOfMemory) is an error, and what was built is freed.
func NewCharRNN(ctx context.Context, d device.Device, cfg CharRNNConfig, vocab *loader.Vocab, seed uint64) (_ *CharRNN, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if vocab == nil || vocab.Len() == 0 {
		return nil, errors.New("models: char-RNN of an empty vocabulary")
	}
	m := &CharRNN{chain: chain{model: "CharRNN"}, cfg: cfg, vocab: vocab, dev: d}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Close())
		}
	}()
	rc := rnn.Config{Input: cfg.Embed, Hidden: cfg.Hidden, Layers: cfg.Layers, Dropout: cfg.Dropout, Recompute: cfg.Recompute,
		NoBranches: cfg.NoBranches, WaveWindows: cfg.WaveWindows}
	if err := m.build(ctx, d, "char-RNN", cfg.Cell, vocab.Len(), vocab.Len(), rc, seed); err != nil {
		return nil, err
	}
	return m, nil
}

// Config is the model's shape.
func (m *CharRNN) Config() CharRNNConfig { return m.cfg }

// Vocab is the model's vocabulary.
func (m *CharRNN) Vocab() *loader.Vocab { return m.vocab }

// Groups implements train.Model: "emb", "rnn", "out".
func (m *CharRNN) Groups() []train.Group { return m.groups() }

// Classes implements train.Model: the vocabulary's size.
func (m *CharRNN) Classes() int { return m.vocab.Len() }

// NewState implements train.Model: h (and c) of every layer.
func (m *CharRNN) NewState(rows int) (train.State, error) {
	if err := m.g.enter("CharRNN", "NewState"); err != nil {
		return nil, err
	}
	defer m.g.leave()
	s, err := m.rnn.NewState(rows)
	if err != nil {
		return nil, err
	}
	return train.RecurrentState{State: s}, nil
}

// Forward implements train.Model.
func (m *CharRNN) Forward(mode rnn.Mode, ids device.Buffer, seq, rows int, st train.State) (device.Buffer, error) {
	if err := m.g.enter("CharRNN", "Forward"); err != nil {
		return device.Buffer{}, err
	}
	defer m.g.leave()
	return m.forward(mode, ids, seq, rows, st)
}

func (m *CharRNN) forward(mode rnn.Mode, ids device.Buffer, seq, rows int, st train.State) (device.Buffer, error) {
	if mode == rnn.Train && m.shared {
		return device.Buffer{}, sharedError("CharRNN", "Forward(Train)")
	}
	var rs *rnn.State
	if st != nil {
		r, ok := st.(train.RecurrentState)
		if !ok {
			return device.Buffer{}, fmt.Errorf("models: char-RNN state of type %T, not one NewState made", st)
		}
		rs = r.State
	}
	n := seq * rows
	x, err := m.emb.Forward(mode, ids, n)
	if err != nil {
		return device.Buffer{}, err
	}
	y, err := m.rnn.Forward(mode, x, seq, rows, rs)
	if err != nil {
		return device.Buffer{}, err
	}
	return m.out.Forward(mode, y, n)
}

// Backward implements train.Model.
func (m *CharRNN) Backward(dLogits device.Buffer) error {
	if err := m.g.enter("CharRNN", "Backward"); err != nil {
		return err
	}
	defer m.g.leave()
	if m.shared {
		return sharedError("CharRNN", "Backward")
	}
	return m.backward(dLogits)
}

// Predict runs a NoGrad forward over ids, [seq, rows] (time-major, as
// Forward's), from a zero state, in one call: it checks the ids on the
// host, uploads them, runs the forward and downloads the logits,
// [seq·rows, vocabulary] in the same order. The result is the caller's,
// as Classifier.Predict's is.
func (m *CharRNN) Predict(ids []int32, seq, rows int) ([]float64, error) {
	const op = "CharRNN.Predict"
	if err := m.g.enter("CharRNN", "Predict"); err != nil {
		return nil, err
	}
	defer m.g.leave()
	sb, err := m.in.upload(m.dev, op, loader.HostBatch{Seq: seq, Rows: rows, Tokens: ids}, m.vocab.Len(), 0)
	if err != nil {
		return nil, err
	}
	y, err := m.forward(rnn.NoGrad, sb.Tokens, seq, rows, nil)
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", op, err)
	}
	v, err := logits(m.dev, m.emb.Params().DType(), y, seq*rows*m.vocab.Len())
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", op, err)
	}
	return v, nil
}

// Share returns a char-RNN over the same parameters with buffers of its
// own, for NoGrad forwards, Predict and sampling from another goroutine,
// as Classifier.Share. A share is not Replayable: a capture records the
// device's whole compute stream, other goroutines' work included, so its
// sampling (train.Sample) queues its calls eagerly.
func (m *CharRNN) Share() (*CharRNN, error) {
	if err := m.g.enter("CharRNN", "Share"); err != nil {
		return nil, err
	}
	defer m.g.leave()
	s := &CharRNN{cfg: m.cfg, vocab: m.vocab, dev: m.dev}
	if err := m.chain.shareInto(&s.chain); err != nil {
		return nil, err
	}
	return s, nil
}

// Replayable implements train.Replayable: a forward and a backward queue
// the same calls on the same buffers for the same shapes (the layers'
// buffers grow and stay), so train.Sample records its tokens once and
// replays them, and the trainer its steps (train.Config.Graphs). With
// dropout too: the stack draws its masks where device memory says, and
// every training forward moves that on the device (Replayed). Not a
// share (Share).
func (m *CharRNN) Replayable(rnn.Mode) bool { return !m.shared }

// Replayed implements train.ReplayTracker: the stack's dropout state
// (RandomState) moves as the replayed forward's would.
func (m *CharRNN) Replayed(mode rnn.Mode, seq, rows int) { m.rnn.Replayed(mode, seq, rows) }

// Branched reports whether the recurrent stack has a branch of the
// compute stream for its Backwards' weight gradients and its forwards'
// wavefront (rnn's Branched): false before the first Forward or Backward
// that could use one, with NoBranches, or on a device that has none or
// could not open one.
func (m *CharRNN) Branched() bool { return m.rnn.Branched() }

// WaveWindows is how many windows the recurrent stack's last training
// forward was cut into (rnn's WaveWindows): 1 when it ran its layers one
// after the other, 0 before the first.
func (m *CharRNN) WaveWindows() int { return m.rnn.WaveWindows() }

var (
	_ train.Replayable    = (*CharRNN)(nil)
	_ train.ReplayTracker = (*CharRNN)(nil)
)

// NotifyGrads implements train.GradNotifier: Backward reports the output
// layer's gradient ("out") as soon as it is queued, then each layer of
// the recurrent stack's ("rnn", rnn's NotifyLayers), top first, then the
// embedding's ("emb"), so a data-parallel trainer sums each over the
// ranks while the backward below it runs.
func (m *CharRNN) NotifyGrads(ready func(group, off, n int) error) { m.ready = ready }

var _ train.GradNotifier = (*CharRNN)(nil)

// chain is the layers every model here is built of: an embedding, a
// recurrent stack over it and a linear layer over the stack's output,
// groups "emb", "rnn" and "out".
type chain struct {
	// g is the model's guard: each call that runs layers or touches the
	// model's buffers holds it, so a call meeting another goroutine's is
	// ErrBusy and one after Close is ErrClosed. model names the model in
	// errors ("Classifier"); shared says it is a share (Share), which runs
	// NoGrad forwards only.
	g      guard
	model  string
	shared bool

	emb *rnn.Embedding
	rnn recurrent
	out *rnn.Linear

	ready func(group, off, n int) error // NotifyGrads's callback; nil: none
}

// build makes the chain over vocab ids for classes outputs: an embedding of
// rc.Input features, the stack rc describes (cell "lstm" or "gru") and a
// linear layer over its output, in rc.DType, drawing three seeds from one
// so the layers do not draw the same numbers. name says which model in
// errors. On error the layers built so far stay for close.
func (c *chain) build(ctx context.Context, d device.Device, name, cell string, vocab, classes int, rc rnn.Config, seed uint64) error {
	return c.buildEmbed(ctx, d, name, cell, vocab, rc.Input, classes, rc, seed)
}

// buildEmbed is build with an embedding of embed features, fewer than the
// stack's rc.Input when the model puts more features beside them (the
// tagger's character features).
func (c *chain) buildEmbed(ctx context.Context, d device.Device, name, cell string, vocab, embed, classes int, rc rnn.Config, seed uint64) (err error) {
	if c.emb, err = rnn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: vocab, Dim: embed, DType: rc.DType, Seed: seed*3 + 1}); err != nil {
		return fmt.Errorf("models: %s embedding: %w", name, err)
	}
	rc.Seed = seed*3 + 2
	if c.rnn, err = newRecurrent(ctx, d, cell, rc); err != nil {
		return fmt.Errorf("models: %s %s stack: %w", name, strings.ToUpper(cell), err)
	}
	in := rc.Hidden
	if rc.Bidirectional {
		in *= 2
	}
	if c.out, err = rnn.NewLinear(ctx, d, rnn.LinearConfig{In: in, Out: classes, DType: rc.DType, Seed: seed*3 + 3}); err != nil {
		return fmt.Errorf("models: %s output layer: %w", name, err)
	}
	return nil
}

// groups are the chain's parameter groups: "emb", "rnn", "out".
func (c *chain) groups() []train.Group {
	return []train.Group{{Name: "emb", Params: c.emb.Params()}, {Name: "rnn", Params: c.rnn.Params()}, {Name: "out", Params: c.out.Params()}}
}

// backward differentiates the chain's training forward, given the
// gradient with respect to the logits.
func (c *chain) backward(dLogits device.Buffer) error {
	dy, err := c.out.Backward(dLogits)
	if err == nil {
		err = c.notify(2, 0, c.out.Params().Len())
	}
	if err != nil {
		return err
	}
	if c.ready != nil {
		// Each layer of the stack as soon as its backward is queued.
		c.rnn.NotifyLayers(func(l int) error {
			off, n := c.rnn.LayerGrads(l)
			return c.notify(1, off, n)
		})
		defer c.rnn.NotifyLayers(nil)
	}
	dx, err := c.rnn.Backward(dy)
	if err != nil {
		return err
	}
	if err := c.emb.Backward(dx); err != nil {
		return err
	}
	return c.notify(0, 0, c.emb.Params().Len())
}

// notify tells NotifyGrads's callback that elements off to off+n of
// group i's gradient are queued.
func (c *chain) notify(i, off, n int) error {
	if c.ready == nil {
		return nil
	}
	return c.ready(i, off, n)
}

// close closes the layers that were built.
func (c *chain) close() error {
	var errs []error
	if c.emb != nil {
		errs = append(errs, c.emb.Close())
	}
	if c.rnn != nil {
		errs = append(errs, c.rnn.Close())
	}
	if c.out != nil {
		errs = append(errs, c.out.Close())
	}
	return errors.Join(errs...)
}

// RandomState implements train.RandomModel for every model built on a
// chain: the seed and offset of the stack's dropout masks.
func (c *chain) RandomState() []uint64 {
	seed, off := c.rnn.DropoutState()
	return []uint64{seed, off}
}

// SetRandomState implements train.RandomModel.
func (c *chain) SetRandomState(v []uint64) error {
	if err := c.g.enter(c.model, "SetRandomState"); err != nil {
		return err
	}
	defer c.g.leave()
	if len(v) != 2 {
		return fmt.Errorf("models: random state of %d numbers, want 2 (seed, offset)", len(v))
	}
	if err := c.rnn.SetDropoutState(v[0], v[1]); err != nil {
		return fmt.Errorf("models: %w", err)
	}
	return nil
}

// Metadata is the checkpoint metadata that describes the model: format,
// config and vocabulary. Pass it to train.Config.Metadata or
// train.SaveWeights so that LoadCharRNN can rebuild the model.
func (m *CharRNN) Metadata() map[string]string {
	cfg, _ := json.Marshal(m.cfg)
	vocab, _ := json.Marshal(m.vocab.Strings())
	return map[string]string{"format": CharRNNFormat, "config": string(cfg), "vocab": string(vocab)}
}

// Close frees the model's device memory (the parameters, once no share
// holds them). Every later call but the getters (Config, Vocab, Classes,
// Groups, Metadata, RandomState, Replayable, Branched, WaveWindows)
// returns an error matching rnn.ErrClosed (NotifyGrads and Replayed then
// change nothing that runs); a second Close does nothing. Close during
// another goroutine's call is rnn.ErrBusy, and closes nothing.
func (m *CharRNN) Close() error {
	if first, err := m.g.close("CharRNN"); !first {
		return err
	}
	errs := []error{m.close()}
	if b := m.in.dev.buf; !b.IsZero() {
		errs = append(errs, m.dev.Free(b))
		m.in.dev.buf = device.Buffer{}
	}
	return errors.Join(errs...)
}

// SetRecompute sets the recurrent stack's rnn.Config.Recompute for the
// training forwards to come (CharRNNConfig.Recompute): for a model loaded
// from a checkpoint, which does not record it.
func (c *chain) SetRecompute(k int) error {
	if err := c.g.enter(c.model, "SetRecompute"); err != nil {
		return err
	}
	defer c.g.leave()
	return c.rnn.SetRecompute(k)
}

// LoadCharRNN builds the char-RNN a checkpoint describes (its format,
// config and vocab metadata) on d and loads its weights; the file may
// come from PyTorch (see the package documentation). The checkpoint is
// returned for a caller that resumes training from it (train.Trainer's
// Resume). Metadata that is missing, of another format or inconsistent
// is an error wrapping train.ErrMismatch; a damaged file, one wrapping
// train.ErrCorrupt.
func LoadCharRNN(ctx context.Context, d device.Device, path string) (*CharRNN, *train.Checkpoint, error) {
	ck, err := train.ReadCheckpoint(path)
	if err != nil {
		return nil, nil, err
	}
	m, err := CharRNNFromCheckpoint(ctx, d, ck)
	if err != nil {
		return nil, nil, err
	}
	return m, ck, nil
}

// CharRNNFromCheckpoint is LoadCharRNN for a checkpoint already read, for
// a caller that looks at it first (DescribeCharRNN, its Record).
func CharRNNFromCheckpoint(ctx context.Context, d device.Device, ck *train.Checkpoint) (*CharRNN, error) {
	cfg, vocab, err := DescribeCharRNN(ck)
	if err != nil {
		return nil, err
	}
	v := vocab.Len()
	want := append([]tensorShape{{"emb.weight", []int{v, cfg.Embed}}, {"out.weight", []int{v, cfg.Hidden}}},
		stackTensors("rnn", cfg.Cell, rnn.Config{Input: cfg.Embed, Hidden: cfg.Hidden, Layers: cfg.Layers})...)
	if err := checkShapes(ck, map[string]int{"rnn": cfg.Layers}, want); err != nil {
		return nil, err
	}
	m, err := NewCharRNN(ctx, d, cfg, vocab, 0)
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", ck.Path(), err)
	}
	if err := ck.LoadWeights(d, m.Groups()); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

// DescribeCharRNN reads the model a char-RNN checkpoint holds, its shape
// and vocabulary, without building it. Its errors are LoadCharRNN's.
func DescribeCharRNN(ck *train.Checkpoint) (CharRNNConfig, *loader.Vocab, error) {
	meta := ck.Metadata()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("models: %s: %w: %s", ck.Path(), train.ErrMismatch, fmt.Sprintf(format, args...))
	}
	var cfg CharRNNConfig
	if err := checkFormat(ck, meta, CharRNNFormat); err != nil {
		return cfg, nil, err
	}
	var missing []string
	for _, k := range []string{"format", "config", "vocab"} {
		if _, ok := meta[k]; !ok {
			missing = append(missing, strconv.Quote(k))
		}
	}
	if len(missing) > 0 {
		// Most likely a file PyTorch wrote from a state dict alone.
		return cfg, nil, bad("no %s metadata: a char-RNN checkpoint holds \"format\": %q, \"config\" (the model's shape as JSON) "+
			"and \"vocab\" (its characters as a JSON array); the models package documentation, \"Models from PyTorch, and to it\", "+
			"shows how to write them with safetensors' save_file", strings.Join(missing, ", "), CharRNNFormat)
	}
	if err := json.Unmarshal([]byte(meta["config"]), &cfg); err != nil {
		return cfg, nil, bad("config metadata: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, bad("%v", err)
	}
	var chars []string
	if err := json.Unmarshal([]byte(meta["vocab"]), &chars); err != nil {
		return cfg, nil, bad("vocab metadata: %v", err)
	}
	vocab, err := loader.NewVocab(chars)
	if err != nil {
		return cfg, nil, bad("%v", err)
	}
	return cfg, vocab, nil
}
