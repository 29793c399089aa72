package models

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// TaggerFormat is the "format" metadata of a tagger checkpoint.
const TaggerFormat = "gocurrent.tagger/1"

// TaggerConfig is a tagger's shape: PyTorch's nn.Embedding(V, Embed) ->
// nn.LSTM or nn.GRU(Embed, Hidden, Layers, dropout=Dropout,
// bidirectional=Bidirectional) over packed sentences -> nn.Linear(Hidden·
// directions, tags) at every token. Its JSON is the checkpoint's "config"
// metadata.
type TaggerConfig struct {
	Cell          string  `json:"cell"`
	Embed         int     `json:"embed"`
	Hidden        int     `json:"hidden"`
	Layers        int     `json:"layers"`
	Bidirectional bool    `json:"bidirectional"`
	Dropout       float64 `json:"dropout"`
	// CharEmbed and CharHidden size the character features (a
	// bidirectional character LSTM over each word); 0 for none, which is
	// all this version builds.
	CharEmbed  int `json:"char_embed"`
	CharHidden int `json:"char_hidden"`
	// DType is the parameters' type: Float32 (0) or Float64 (for checks);
	// not recorded.
	DType device.DType `json:"-"`
}

func (c TaggerConfig) validate() error {
	switch {
	case c.Cell != "lstm" && c.Cell != "gru":
		return fmt.Errorf("models: tagger cell %q, want lstm or gru", c.Cell)
	case c.Embed <= 0 || c.Hidden <= 0 || c.Layers <= 0:
		return fmt.Errorf("models: tagger embed %d, hidden %d, layers %d; each must be > 0", c.Embed, c.Hidden, c.Layers)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("models: tagger dropout %v, want [0, 1)", c.Dropout)
	case c.CharEmbed != 0 || c.CharHidden != 0:
		return errors.New("models: tagger character features (char_embed, char_hidden) are not built yet; set both to 0")
	}
	return nil
}

// Tagger tags every token of a sentence: word embedding, a recurrent
// stack over the sentence (both ways when bidirectional), a linear layer
// per token. Its parameter groups are "emb", "rnn" and "out", so its
// checkpoint tensors carry PyTorch's names (emb.weight,
// rnn.weight_ih_l0_reverse, out.weight, ...). It is not safe for
// concurrent use.
type Tagger struct {
	chain
	cfg   TaggerConfig
	words *loader.Words
	tags  *loader.Labels
}

// NewTagger builds a tagger on d over the word and tag vocabularies, its
// parameters drawn with PyTorch's initialisation from seed. What was built
// is freed on error.
func NewTagger(d device.Device, cfg TaggerConfig, words *loader.Words, tags *loader.Labels, seed uint64) (_ *Tagger, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if words == nil || tags == nil {
		return nil, errors.New("models: a tagger needs word and tag vocabularies")
	}
	m := &Tagger{cfg: cfg, words: words, tags: tags}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Close())
		}
	}()
	rc := rnn.Config{Input: cfg.Embed, Hidden: cfg.Hidden, Layers: cfg.Layers, Dropout: cfg.Dropout, Bidirectional: cfg.Bidirectional,
		DType: cfg.DType}
	if err := m.build(d, "tagger", cfg.Cell, words.Len(), tags.Len(), rc, seed); err != nil {
		return nil, err
	}
	return m, nil
}

// Config is the model's shape.
func (m *Tagger) Config() TaggerConfig { return m.cfg }

// Words and Tags are the model's vocabularies.
func (m *Tagger) Words() *loader.Words { return m.words }
func (m *Tagger) Tags() *loader.Labels { return m.tags }

// Groups are the parameter groups: "emb", "rnn", "out".
func (m *Tagger) Groups() []train.Group { return m.groups() }

// Forward returns the tag logits of a batch of sentences, [seq·rows, tags]
// in the batch's time-major order: tokens are [seq, rows] word ids (as
// loader.Collate lays them out), sentence r of length lengths[r]. Logits
// at padded positions are the output layer's bias (the stack's output is
// zero there); the loss leaves them out (rnn.CrossEntropyConfig.Ignore
// with loader.IgnoreLabel).
func (m *Tagger) Forward(mode rnn.Mode, tokens device.Buffer, seq, rows int, lengths []int32) (device.Buffer, error) {
	n := seq * rows
	x, err := m.emb.Forward(mode, tokens, n)
	if err != nil {
		return device.Buffer{}, err
	}
	y, err := m.rnn.ForwardLengths(mode, x, seq, rows, lengths, nil)
	if err != nil {
		return device.Buffer{}, err
	}
	return m.out.Forward(mode, y, n)
}

// Classes implements train.SeqModel: the number of tags.
func (m *Tagger) Classes() int { return m.tags.Len() }

// ForwardBatch implements train.SeqModel: Forward on a loader's batch.
func (m *Tagger) ForwardBatch(mode rnn.Mode, b loader.SeqBatch) (device.Buffer, error) {
	return m.Forward(mode, b.Tokens, b.Host.Seq, b.Host.Rows, b.Host.Lengths)
}

// Backward differentiates the training Forward, given the gradient with
// respect to its logits, adding into the parameters' gradients.
func (m *Tagger) Backward(dLogits device.Buffer) error {
	return m.backward(dLogits)
}

// Metadata is the checkpoint metadata that describes the model: format,
// config, words and tags.
func (m *Tagger) Metadata() map[string]string {
	cfg, _ := json.Marshal(m.cfg)
	words, _ := json.Marshal(m.words.Items())
	tags, _ := json.Marshal(m.tags.Items())
	return map[string]string{"format": TaggerFormat, "config": string(cfg), "words": string(words), "tags": string(tags)}
}

// Close frees the model's device memory.
func (m *Tagger) Close() error { return m.close() }

// LoadTagger builds the tagger a checkpoint describes (its format, config,
// words and tags metadata) on d and loads its weights. Metadata that is
// missing, of another format or inconsistent is an error wrapping
// train.ErrMismatch; a damaged file, one wrapping train.ErrCorrupt.
func LoadTagger(d device.Device, path string) (*Tagger, *train.Checkpoint, error) {
	ck, err := train.ReadCheckpoint(path)
	if err != nil {
		return nil, nil, err
	}
	meta := ck.Metadata()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("models: %s: %w: %s", path, train.ErrMismatch, fmt.Sprintf(format, args...))
	}
	if f := meta["format"]; f != TaggerFormat {
		return nil, nil, bad("format %q, want %q", f, TaggerFormat)
	}
	var cfg TaggerConfig
	var words, tags []string
	for _, part := range []struct {
		key string
		v   any
	}{{"config", &cfg}, {"words", &words}, {"tags", &tags}} {
		if err := json.Unmarshal([]byte(meta[part.key]), part.v); err != nil {
			return nil, nil, bad("%s metadata: %v", part.key, err)
		}
	}
	wv, err := loader.NewWords(words)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	tv, err := loader.NewLabels(tags)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	m, err := NewTagger(d, cfg, wv, tv, 0)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	if err := ck.LoadWeights(d, m.Groups()); err != nil {
		return nil, nil, errors.Join(err, m.Close())
	}
	return m, ck, nil
}

var (
	_ train.SeqModel    = (*Tagger)(nil)
	_ train.RandomModel = (*CharRNN)(nil)
)
