package charrnn

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// Format is the "format" metadata of the example's checkpoints.
const Format = "gocurrent.charrnn/1"

// Config is the model's shape: PyTorch's nn.Embedding(V, Embed) ->
// nn.LSTM or nn.GRU(Embed, Hidden, Layers, dropout=Dropout) ->
// nn.Linear(Hidden, V). Its JSON is the checkpoint's "config" metadata.
type Config struct {
	Cell    string  `json:"cell"` // "lstm" or "gru"
	Embed   int     `json:"embed"`
	Hidden  int     `json:"hidden"`
	Layers  int     `json:"layers"`
	Dropout float64 `json:"dropout"`
}

func (c Config) validate() error {
	switch {
	case c.Cell != "lstm" && c.Cell != "gru":
		return fmt.Errorf("charrnn: cell %q, want lstm or gru", c.Cell)
	case c.Embed <= 0 || c.Hidden <= 0 || c.Layers <= 0:
		return fmt.Errorf("charrnn: embed %d, hidden %d, layers %d; each must be > 0", c.Embed, c.Hidden, c.Layers)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("charrnn: dropout %v, want [0, 1)", c.Dropout)
	}
	return nil
}

// recurrent is what LSTM and GRU share.
type recurrent interface {
	Forward(mode rnn.Mode, x device.Buffer, seq, batch int, st *rnn.State) (device.Buffer, error)
	Backward(dy device.Buffer) (device.Buffer, error)
	NewState(batch int) (*rnn.State, error)
	Params() *rnn.Params
	DropoutState() (seed, offset uint64)
	SetDropoutState(seed, offset uint64)
	Close() error
}

// Model is the char-RNN: a train.Model (and train.RandomModel, for its
// dropout) over a character vocabulary. Its parameter groups are "emb",
// "rnn" and "out", so its checkpoint tensors carry PyTorch's names.
type Model struct {
	cfg   Config
	vocab *loader.Vocab
	emb   *rnn.Embedding
	rnn   recurrent
	out   *rnn.Linear
}

var _ train.RandomModel = (*Model)(nil)

// NewModel builds a float32 model on d for vocab, its parameters drawn
// with PyTorch's initialisation from seed.
func NewModel(d device.Device, cfg Config, vocab *loader.Vocab, seed uint64) (_ *Model, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if vocab == nil || vocab.Len() == 0 {
		return nil, errors.New("charrnn: empty vocabulary")
	}
	m := &Model{cfg: cfg, vocab: vocab}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	// Three seeds from one, so the layers do not draw the same numbers.
	if m.emb, err = rnn.NewEmbedding(d, rnn.EmbeddingConfig{Vocab: vocab.Len(), Dim: cfg.Embed, Seed: seed*3 + 1}); err != nil {
		return nil, fmt.Errorf("charrnn: %w", err)
	}
	rc := rnn.Config{Input: cfg.Embed, Hidden: cfg.Hidden, Layers: cfg.Layers, Dropout: cfg.Dropout, Seed: seed*3 + 2}
	if cfg.Cell == "lstm" {
		m.rnn, err = rnn.NewLSTM(d, rc)
	} else {
		m.rnn, err = rnn.NewGRU(d, rc)
	}
	if err != nil {
		return nil, fmt.Errorf("charrnn: %w", err)
	}
	if m.out, err = rnn.NewLinear(d, rnn.LinearConfig{In: cfg.Hidden, Out: vocab.Len(), Seed: seed*3 + 3}); err != nil {
		return nil, fmt.Errorf("charrnn: %w", err)
	}
	return m, nil
}

// Config is the model's shape.
func (m *Model) Config() Config { return m.cfg }

// Vocab is the model's vocabulary.
func (m *Model) Vocab() *loader.Vocab { return m.vocab }

// Groups implements train.Model: "emb", "rnn", "out".
func (m *Model) Groups() []train.Group {
	return []train.Group{{Name: "emb", Params: m.emb.Params()}, {Name: "rnn", Params: m.rnn.Params()}, {Name: "out", Params: m.out.Params()}}
}

// Classes implements train.Model: the vocabulary's size.
func (m *Model) Classes() int { return m.vocab.Len() }

// NewState implements train.Model: h (and c) of every layer.
func (m *Model) NewState(rows int) (train.State, error) {
	s, err := m.rnn.NewState(rows)
	if err != nil {
		return nil, err
	}
	return train.RecurrentState{State: s}, nil
}

// Forward implements train.Model.
func (m *Model) Forward(mode rnn.Mode, ids device.Buffer, seq, rows int, st train.State) (device.Buffer, error) {
	var rs *rnn.State
	if st != nil {
		r, ok := st.(train.RecurrentState)
		if !ok {
			return device.Buffer{}, fmt.Errorf("charrnn: state of type %T, not one NewState made", st)
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
func (m *Model) Backward(dLogits device.Buffer) error {
	dy, err := m.out.Backward(dLogits)
	if err != nil {
		return err
	}
	dx, err := m.rnn.Backward(dy)
	if err != nil {
		return err
	}
	return m.emb.Backward(dx)
}

// RandomState implements train.RandomModel: the seed and offset of the
// dropout masks.
func (m *Model) RandomState() []uint64 {
	seed, off := m.rnn.DropoutState()
	return []uint64{seed, off}
}

// SetRandomState implements train.RandomModel.
func (m *Model) SetRandomState(v []uint64) error {
	if len(v) != 2 {
		return fmt.Errorf("charrnn: random state of %d numbers, want 2 (seed, offset)", len(v))
	}
	m.rnn.SetDropoutState(v[0], v[1])
	return nil
}

// Metadata is the checkpoint metadata that describes the model: format,
// config and vocabulary.
func (m *Model) Metadata() map[string]string {
	cfg, _ := json.Marshal(m.cfg)
	vocab, _ := json.Marshal(m.vocab.Strings())
	return map[string]string{"format": Format, "config": string(cfg), "vocab": string(vocab)}
}

// Close frees the model's device memory.
func (m *Model) Close() error {
	var errs []error
	if m.emb != nil {
		errs = append(errs, m.emb.Close())
	}
	if m.rnn != nil {
		errs = append(errs, m.rnn.Close())
	}
	if m.out != nil {
		errs = append(errs, m.out.Close())
	}
	return errors.Join(errs...)
}

// Load builds the model a checkpoint describes (its format, config and
// vocab metadata) on d and loads its weights. The checkpoint is returned
// for a caller that resumes training from it.
func Load(d device.Device, path string) (*Model, *train.Checkpoint, error) {
	ck, err := train.ReadCheckpoint(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, vocab, err := describe(ck)
	if err != nil {
		return nil, nil, err
	}
	m, err := NewModel(d, cfg, vocab, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("charrnn: %s: %w", path, err)
	}
	if err := ck.LoadWeights(d, m.Groups()); err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, ck, nil
}

// describe reads a checkpoint's model metadata.
func describe(ck *train.Checkpoint) (Config, *loader.Vocab, error) {
	meta := ck.Metadata()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("charrnn: %s: %w: %s", ck.Path(), train.ErrMismatch, fmt.Sprintf(format, args...))
	}
	var cfg Config
	if f := meta["format"]; f != Format {
		return cfg, nil, bad("format %q, want %q", f, Format)
	}
	if err := json.Unmarshal([]byte(meta["config"]), &cfg); err != nil {
		return cfg, nil, bad("config metadata: %v", err)
	}
	if err := cfg.validate(); err != nil {
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
