package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// TaggerFormat is the "format" metadata of a tagger checkpoint.
const TaggerFormat = "gocurrent.tagger/1"

// TaggerConfig is a tagger's shape: PyTorch's nn.Embedding(V, Embed) ->
// nn.LSTM or nn.GRU(Embed, Hidden, Layers, dropout=Dropout,
// bidirectional=Bidirectional) over packed sentences -> nn.Linear(Hidden·
// directions, tags) at every token, with optional character features
// beside the word embedding. Its JSON is the checkpoint's "config"
// metadata.
type TaggerConfig struct {
	Cell          string  `json:"cell"`
	Embed         int     `json:"embed"`
	Hidden        int     `json:"hidden"`
	Layers        int     `json:"layers"`
	Bidirectional bool    `json:"bidirectional"`
	Dropout       float64 `json:"dropout"`
	// CharEmbed and CharHidden, both > 0, add character features:
	// PyTorch's char_emb = nn.Embedding(C, CharEmbed) over each word's
	// characters (C the character vocabulary's size) and char_rnn =
	// nn.LSTM(CharEmbed, CharHidden, 1, bidirectional=True) over them,
	// packed by word length; a token's features are then cat(emb(word),
	// h_n[0], h_n[1]), the forward direction's final state after the
	// word's last character and the reverse one's after its first, and
	// the recurrent stack reads Embed + 2·CharHidden features. Both 0 (the
	// default): the word embedding alone.
	CharEmbed  int `json:"char_embed"`
	CharHidden int `json:"char_hidden"`
	// DType is the parameters' type: Float32 (0) or Float64 (for checks);
	// not recorded.
	DType device.DType `json:"-"`
	// Recompute is the sentence stack's rnn.Config.Recompute (0 off,
	// rnn.RecomputeAuto; the character LSTM, over words, does without);
	// not recorded (SetRecompute sets it on a loaded model).
	Recompute int `json:"-"`
}

// Validate checks the configuration without building the model: each
// field in its range, and sizes whose parameters can be counted (at most
// rnn.MaxLayers layers, a count that does not overflow), so that a
// configuration from a flag, a job spec or a checkpoint's metadata is
// refused by name, not after allocating. The vocabulary's size is the
// constructor's to check.
func (c TaggerConfig) Validate() error {
	switch {
	case c.Cell != "lstm" && c.Cell != "gru":
		return fmt.Errorf("models: tagger cell %q, want lstm or gru", c.Cell)
	case c.Embed <= 0 || c.Hidden <= 0 || c.Layers <= 0:
		return fmt.Errorf("models: tagger embed %d, hidden %d, layers %d; each must be > 0", c.Embed, c.Hidden, c.Layers)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("models: tagger dropout %v, want [0, 1)", c.Dropout)
	case c.CharEmbed < 0 || c.CharHidden < 0 || (c.CharEmbed == 0) != (c.CharHidden == 0):
		return fmt.Errorf("models: tagger char_embed %d, char_hidden %d; both > 0 for character features, or both 0 for none", c.CharEmbed, c.CharHidden)
	}
	input, ok := checked.Add(c.Embed, 2*c.CharHidden)
	if !ok || c.CharHidden > math.MaxInt/2 {
		return fmt.Errorf("models: tagger embed %d + 2 × char_hidden %d overflows int", c.Embed, c.CharHidden)
	}
	if c.hasChars() {
		if err := stackSizes("tagger's character", "char_embed", "lstm", rnn.Config{Input: c.CharEmbed, Hidden: c.CharHidden, Bidirectional: true}); err != nil {
			return err
		}
	}
	return stackSizes("tagger", "embed + 2·char_hidden", c.Cell, rnn.Config{Input: input, Hidden: c.Hidden, Layers: c.Layers, Bidirectional: c.Bidirectional})
}

// hasChars reports whether the config asks for character features.
func (c TaggerConfig) hasChars() bool { return c.CharEmbed > 0 }

// Tagger tags every token of a sentence: word embedding (beside it, with
// character features, the final states of a bidirectional LSTM over the
// word's characters), a recurrent stack over the sentence (both ways when
// bidirectional), a linear layer per token. Its parameter groups are
// "emb", "rnn" and "out", then "char_emb" and "char_rnn" with character
// features, so its checkpoint tensors carry PyTorch's names (emb.weight,
// rnn.weight_ih_l0_reverse, out.weight, char_emb.weight,
// char_rnn.weight_hh_l0_reverse, ...). It is used by one goroutine at a
// time (a call meeting another is rnn.ErrBusy); goroutines that tag at
// once each use a share of it (Share).
type Tagger struct {
	chain
	cfg   TaggerConfig
	words *loader.Words
	tags  *loader.Labels
	dev   device.Device

	// With character features: the character vocabulary and layers, and
	// the character LSTM's state, for the last batch's number of words;
	// all nil without.
	chars   *loader.Words
	charEmb *rnn.Embedding
	charRNN *rnn.LSTM
	charSt  *rnn.State
	// feat is [positions, 2·CharHidden]: the words' features in the
	// words' order, then zero rows for the padded positions (in Backward,
	// their gradients); cat and catWork the stack's input [positions,
	// Embed + 2·CharHidden] of the training and of the no-grad forwards
	// (apart: without lengths the stack keeps a reference to its training
	// input until its Backward, rnn.LSTM.Forward); dEmb the word embedding's gradient [positions,
	// Embed]; zero zeros, the gradient of the character LSTM's outputs,
	// which nothing uses; positions the training forward's word
	// positions (loader.HostBatch.WordPositions), for Backward.
	feat, cat, catWork, dEmb, zero, positions scratch
	// The training forward's positions (Seq·Rows), words and steps of
	// characters, for Backward.
	trainN, trainWords, trainSteps int
	in                             hostInput // Predict's ids
}

// NewTagger builds a tagger on d over the word and tag vocabularies, its
// parameters drawn with PyTorch's initialisation from seed. What was built
// is freed on error. A config with character features needs
// NewTaggerChars.
func NewTagger(ctx context.Context, d device.Device, cfg TaggerConfig, words *loader.Words, tags *loader.Labels, seed uint64) (*Tagger, error) {
	return NewTaggerChars(ctx, d, cfg, words, nil, tags, seed)
}

// NewTaggerChars is NewTagger for a config with character features
// (CharEmbed, CharHidden > 0) over the character vocabulary chars (id 0
// "<pad>", 1 "<unk>": a dataset's loader.Dataset.Chars, or a checkpoint's);
// chars must be nil for a config without. The character layers' seeds
// are drawn from seed too, differing from the other layers'.
func NewTaggerChars(ctx context.Context, d device.Device, cfg TaggerConfig, words, chars *loader.Words, tags *loader.Labels, seed uint64) (_ *Tagger, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case words == nil || tags == nil:
		return nil, errors.New("models: a tagger needs word and tag vocabularies")
	case cfg.hasChars() && chars == nil:
		return nil, errors.New("models: a tagger with character features (char_embed, char_hidden) needs a character vocabulary: NewTaggerChars")
	case !cfg.hasChars() && chars != nil:
		return nil, errors.New("models: a character vocabulary for a tagger without character features (char_embed, char_hidden 0)")
	}
	m := &Tagger{chain: chain{model: "Tagger"}, cfg: cfg, words: words, tags: tags, dev: d, chars: chars}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Close())
		}
	}()
	rc := rnn.Config{Input: cfg.Embed + 2*cfg.CharHidden, Hidden: cfg.Hidden, Layers: cfg.Layers, Dropout: cfg.Dropout,
		Bidirectional: cfg.Bidirectional, DType: cfg.DType, Recompute: cfg.Recompute}
	if err := m.buildEmbed(ctx, d, "tagger", cfg.Cell, words.Len(), cfg.Embed, tags.Len(), rc, seed); err != nil {
		return nil, err
	}
	if !cfg.hasChars() {
		return m, nil
	}
	// The chain drew seed·3 + 1, 2, 3; seed·5 + 4 and 5 are none of those
	// (for seeds below 2^61).
	if m.charEmb, err = rnn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: chars.Len(), Dim: cfg.CharEmbed, DType: cfg.DType, Seed: seed*5 + 4}); err != nil {
		return nil, fmt.Errorf("models: tagger character embedding: %w", err)
	}
	if m.charRNN, err = rnn.NewLSTM(ctx, d, rnn.Config{Input: cfg.CharEmbed, Hidden: cfg.CharHidden, Layers: 1, Bidirectional: true,
		DType: cfg.DType, Seed: seed*5 + 5}); err != nil {
		return nil, fmt.Errorf("models: tagger character LSTM: %w", err)
	}
	return m, nil
}

// Config is the model's shape.
func (m *Tagger) Config() TaggerConfig { return m.cfg }

// Words and Tags are the model's vocabularies; Chars its character
// vocabulary, nil without character features.
func (m *Tagger) Words() *loader.Words { return m.words }
func (m *Tagger) Tags() *loader.Labels { return m.tags }
func (m *Tagger) Chars() *loader.Words { return m.chars }

// Groups are the parameter groups: "emb", "rnn", "out", and with
// character features "char_emb" and "char_rnn".
func (m *Tagger) Groups() []train.Group {
	g := m.groups()
	if m.charEmb != nil {
		g = append(g, train.Group{Name: "char_emb", Params: m.charEmb.Params()}, train.Group{Name: "char_rnn", Params: m.charRNN.Params()})
	}
	return g
}

// dtype is the parameters' type, the default filled in.
func (m *Tagger) dtype() device.DType {
	if m.cfg.DType == 0 {
		return device.Float32
	}
	return m.cfg.DType
}

// Forward returns the tag logits of a batch of sentences, [seq·rows, tags]
// in the batch's time-major order: tokens are [seq, rows] word ids (as
// loader.Collate lays them out), sentence r of length lengths[r]. Logits
// at padded positions are the output layer's bias (the stack's output is
// zero there); the loss leaves them out (rnn.CrossEntropyConfig.Ignore
// with loader.IgnoreLabel). A tagger with character features needs its
// words' characters too, which ForwardBatch takes: Forward returns an
// error for it.
func (m *Tagger) Forward(mode rnn.Mode, tokens device.Buffer, seq, rows int, lengths []int32) (device.Buffer, error) {
	if err := m.g.enter("Tagger", "Forward"); err != nil {
		return device.Buffer{}, err
	}
	defer m.g.leave()
	return m.forward(mode, tokens, seq, rows, lengths)
}

func (m *Tagger) forward(mode rnn.Mode, tokens device.Buffer, seq, rows int, lengths []int32) (device.Buffer, error) {
	if mode == rnn.Train && m.shared {
		return device.Buffer{}, sharedError("Tagger", "Forward(Train)")
	}
	if m.charEmb != nil {
		return device.Buffer{}, errors.New("models: the tagger has character features and Forward has no characters to give them: " +
			"use ForwardBatch, with a batch that carries its words' characters (loader.SeqConfig's Chars)")
	}
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

// ForwardBatch implements train.SeqModel: Forward on a loader's batch. A
// tagger with character features reads the batch's characters too
// (b.Chars, b.WordIndex, b.WordPositions, b.Host.WordLen and
// b.Host.CharLengths, laid out as loader.HostBatch says); a batch without
// them is an error. A batch made by hand must hold those buffers until
// the kernels of Backward are queued: b.WordPositions is read there.
func (m *Tagger) ForwardBatch(mode rnn.Mode, b loader.SeqBatch) (device.Buffer, error) {
	if err := m.g.enter("Tagger", "ForwardBatch"); err != nil {
		return device.Buffer{}, err
	}
	defer m.g.leave()
	return m.forwardBatch(mode, b)
}

// Predict tags a batch collated on the host (loader.Collate's; with
// character features, collated with loader.CollateConfig.Chars) in one
// call: it checks the ids on the host, uploads them, runs a NoGrad
// forward and downloads the logits, [Seq·Rows, tags] in the batch's
// time-major order (position t of row r at t·Rows + r). The result is the
// caller's, as Classifier.Predict's is.
func (m *Tagger) Predict(b loader.HostBatch) ([]float64, error) {
	const op = "Tagger.Predict"
	if err := m.g.enter("Tagger", "Predict"); err != nil {
		return nil, err
	}
	defer m.g.leave()
	chars := 0
	if m.chars != nil {
		chars = m.chars.Len()
	}
	sb, err := m.in.upload(m.dev, op, b, m.words.Len(), chars)
	if err != nil {
		return nil, err
	}
	y, err := m.forwardBatch(rnn.NoGrad, sb)
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", op, err)
	}
	v, err := logits(m.dev, m.dtype(), y, b.Seq*b.Rows*m.tags.Len())
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", op, err)
	}
	return v, nil
}

// Share returns a tagger over the same parameters with buffers of its
// own, for NoGrad forwards and Predict from another goroutine, as
// Classifier.Share.
func (m *Tagger) Share() (_ *Tagger, err error) {
	if err := m.g.enter("Tagger", "Share"); err != nil {
		return nil, err
	}
	defer m.g.leave()
	s := &Tagger{cfg: m.cfg, words: m.words, tags: m.tags, dev: m.dev, chars: m.chars}
	if err := m.chain.shareInto(&s.chain); err != nil {
		return nil, err
	}
	if m.charEmb == nil {
		return s, nil
	}
	if s.charEmb, err = m.charEmb.Share(); err == nil {
		s.charRNN, err = m.charRNN.Share()
	}
	if err != nil {
		return nil, fmt.Errorf("models: Tagger.Share: %w", errors.Join(err, s.Close()))
	}
	return s, nil
}

func (m *Tagger) forwardBatch(mode rnn.Mode, b loader.SeqBatch) (device.Buffer, error) {
	h := b.Host
	if m.charEmb == nil {
		return m.forward(mode, b.Tokens, h.Seq, h.Rows, h.Lengths)
	}
	if mode == rnn.Train && m.shared {
		return device.Buffer{}, sharedError("Tagger", "ForwardBatch(Train)")
	}
	n := h.Seq * h.Rows
	switch {
	case h.WordLen == 0 || b.Chars.IsZero() || b.WordIndex.IsZero() || b.WordPositions.IsZero():
		return device.Buffer{}, errors.New("models: the tagger has character features and the batch carries no characters: " +
			"ask the loader for them (loader.SeqConfig's Chars)")
	case len(h.CharLengths) != h.Real || h.Real < 1 || h.Real > n:
		return device.Buffer{}, fmt.Errorf("models: a batch of %d positions, %d real tokens and %d words' character lengths; want one per real token: %w",
			n, h.Real, len(h.CharLengths), device.ErrShape)
	case b.WordIndex.Len() < int64(n)*4 || b.WordPositions.Len() < int64(n)*4:
		return device.Buffer{}, fmt.Errorf("models: word index of %d bytes and positions of %d for %d positions of Int32: %w",
			b.WordIndex.Len(), b.WordPositions.Len(), n, device.ErrShape)
	}
	m.trainN = 0
	x, err := m.features(mode, b)
	if err != nil {
		return device.Buffer{}, err
	}
	y, err := m.rnn.ForwardLengths(mode, x, h.Seq, h.Rows, h.Lengths, nil)
	if err != nil {
		return device.Buffer{}, err
	}
	return m.out.Forward(mode, y, n)
}

// charState is a zero state for words sequences of characters, detached.
// Its memory is that of the most words so far (rnn.State.Resize): the
// words of a batch vary, and a state allocated anew for each count would
// make bucketed training allocate after its warm-up.
func (m *Tagger) charState(words int) (*rnn.State, error) {
	if m.charSt != nil && m.charSt.Batch() != words {
		return m.charSt, m.charSt.Resize(words)
	}
	if m.charSt == nil {
		st, err := m.charRNN.NewState(words)
		if err != nil {
			return nil, err
		}
		m.charSt = st
		return st, nil
	}
	return m.charSt, m.charSt.Reset()
}

// features is the stack's input for a batch with characters, [Seq·Rows,
// Embed + 2·CharHidden]: at each position the word's embedding, then the
// character LSTM's final states over the word's characters (zeros at
// padded positions).
//
// The character LSTM runs over the batch's real words only (Real
// sequences of up to WordLen characters, packed by length), so its work
// is the batch's characters, not its positions times the longest word.
// Its final states, [2, Real, CharHidden], become feat's first Real rows,
// forward then reverse in each; the rows after them are zero, and
// WordIndex, a permutation of the positions, gathers feat into the
// positions' order: word j's row at its position, a zero row at each
// padded one. Backward gathers the other way with WordPositions.
func (m *Tagger) features(mode rnn.Mode, b loader.SeqBatch) (device.Buffer, error) {
	h := b.Host
	dt, E, CH := m.dtype(), m.cfg.Embed, m.cfg.CharHidden
	n, W, L, in := h.Seq*h.Rows, h.Real, h.WordLen, m.cfg.Embed+2*m.cfg.CharHidden
	fail := func(err error) (device.Buffer, error) {
		return device.Buffer{}, fmt.Errorf("models: tagger character features: %w", err)
	}
	cx, err := m.charEmb.Forward(mode, b.Chars, L*W)
	if err != nil {
		return fail(err)
	}
	st, err := m.charState(W)
	if err != nil {
		return fail(err)
	}
	if _, err := m.charRNN.ForwardLengths(mode, cx, L, W, h.CharLengths, st); err != nil {
		return fail(err)
	}
	feat, err := m.feat.get(m.dev, device.Workspace, dt, n*2*CH, false)
	if err != nil {
		return fail(err)
	}
	k := m.dev.Kernels()
	for d := range 2 {
		if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: W, Cols: CH, X: st.H().Elems(dt, d*W*CH, W*CH),
			Y: feat.Elems(dt, d*CH, n*2*CH-d*CH), LdY: 2 * CH}); err != nil {
			return fail(err)
		}
	}
	if n > W {
		if err := k.Fill(device.Fill{DType: dt, N: (n - W) * 2 * CH, X: feat.Elems(dt, W*2*CH, (n-W)*2*CH)}); err != nil {
			return fail(err)
		}
	}
	x, err := m.emb.Forward(mode, b.Tokens, n)
	if err != nil {
		return device.Buffer{}, err
	}
	catBuf := &m.catWork
	if mode == rnn.Train {
		catBuf = &m.cat
	}
	// Workspace: with the batch's lengths, as the loader's batches have,
	// the stack reads it into a sorted copy of its own.
	cat, err := catBuf.get(m.dev, device.Workspace, dt, n*in, false)
	if err != nil {
		return fail(err)
	}
	if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: n, Cols: E, X: x, Y: cat, LdY: in}); err != nil {
		return fail(err)
	}
	if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: n, Cols: 2 * CH, Index: b.WordIndex.Elems(device.Int32, 0, n), X: feat,
		Y: cat.Elems(dt, E, n*in-E), LdY: in}); err != nil {
		return fail(err)
	}
	if mode == rnn.Train {
		pos, err := m.positions.get(m.dev, device.Activations, device.Int32, n, false)
		if err != nil {
			return fail(err)
		}
		if err := k.Copy(device.Copy{Dst: pos, Src: b.WordPositions.Elems(device.Int32, 0, n)}); err != nil {
			return fail(err)
		}
		m.trainN, m.trainWords, m.trainSteps = n, W, L
	}
	return cat, nil
}

// Backward differentiates the training Forward (or ForwardBatch), given
// the gradient with respect to its logits, adding into the parameters'
// gradients.
func (m *Tagger) Backward(dLogits device.Buffer) error {
	if err := m.g.enter("Tagger", "Backward"); err != nil {
		return err
	}
	defer m.g.leave()
	if m.shared {
		return sharedError("Tagger", "Backward")
	}
	if m.charEmb == nil {
		return m.backward(dLogits)
	}
	dy, err := m.out.Backward(dLogits)
	if err != nil {
		return err
	}
	dx, err := m.rnn.Backward(dy)
	if err != nil {
		return err
	}
	n, W, L := m.trainN, m.trainWords, m.trainSteps
	if n == 0 {
		// The stack's Backward checked there was a training forward.
		return errors.New("models: tagger Backward: the training forward left no character features")
	}
	m.trainN = 0
	dt, E, CH, in := m.dtype(), m.cfg.Embed, m.cfg.CharHidden, m.cfg.Embed+2*m.cfg.CharHidden
	fail := func(err error) error { return fmt.Errorf("models: tagger Backward: %w", err) }
	k := m.dev.Kernels()
	dEmb, err := m.dEmb.get(m.dev, device.Workspace, dt, n*E, false)
	if err != nil {
		return fail(err)
	}
	if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: n, Cols: E, X: dx, LdX: in, Y: dEmb}); err != nil {
		return fail(err)
	}
	if err := m.emb.Backward(dEmb); err != nil {
		return err
	}
	// The features' gradients in the words' order (the padded positions'
	// after them, unused), then each direction's half into the gradient
	// with respect to the character LSTM's final states; the forward
	// zeroed the rest of the state's gradients (its cell states').
	dfeat, err := m.feat.get(m.dev, device.Workspace, dt, n*2*CH, false)
	if err != nil {
		return fail(err)
	}
	if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: n, Cols: 2 * CH, Index: m.positions.buf.Elems(device.Int32, 0, n),
		X: dx.Elems(dt, E, n*in-E), LdX: in, Y: dfeat}); err != nil {
		return fail(err)
	}
	st := m.charSt
	for d := range 2 {
		if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: W, Cols: CH, X: dfeat.Elems(dt, d*CH, n*2*CH-d*CH), LdX: 2 * CH,
			Y: st.GradH().Elems(dt, d*W*CH, W*CH)}); err != nil {
			return fail(err)
		}
	}
	// The character LSTM's outputs are not used: their gradient is zero.
	zero, err := m.zero.get(m.dev, device.Workspace, dt, L*W*2*CH, true)
	if err != nil {
		return fail(err)
	}
	dcx, err := m.charRNN.Backward(zero)
	if err != nil {
		return err
	}
	return m.charEmb.Backward(dcx)
}

// Metadata is the checkpoint metadata that describes the model: format,
// config, words and tags, and with character features chars (the
// character vocabulary, a JSON array, index = id).
func (m *Tagger) Metadata() map[string]string {
	cfg, _ := json.Marshal(m.cfg)
	words, _ := json.Marshal(m.words.Items())
	tags, _ := json.Marshal(m.tags.Items())
	meta := map[string]string{"format": TaggerFormat, "config": string(cfg), "words": string(words), "tags": string(tags)}
	if m.chars != nil {
		chars, _ := json.Marshal(m.chars.Items())
		meta["chars"] = string(chars)
	}
	return meta
}

// Close frees the model's device memory (the parameters, once no share
// holds them). Every later call but the getters of the configuration
// (Config, Words, Tags, Chars, Classes, Groups, Metadata, RandomState)
// returns an error matching rnn.ErrClosed; a second Close does nothing.
// Close during another goroutine's call is rnn.ErrBusy, and closes
// nothing.
func (m *Tagger) Close() error {
	if first, err := m.g.close("Tagger"); !first {
		return err
	}
	errs := []error{m.close()}
	if m.charEmb != nil {
		errs = append(errs, m.charEmb.Close())
	}
	if m.charRNN != nil {
		errs = append(errs, m.charRNN.Close())
	}
	if m.charSt != nil {
		errs = append(errs, m.charSt.Free())
		m.charSt = nil
	}
	for _, s := range []*scratch{&m.feat, &m.cat, &m.catWork, &m.dEmb, &m.zero, &m.positions, &m.in.dev} {
		if !s.buf.IsZero() {
			errs = append(errs, m.dev.Free(s.buf))
			s.buf = device.Buffer{}
		}
	}
	return errors.Join(errs...)
}

// LoadTagger builds the tagger a checkpoint describes (its format, config,
// words and tags metadata, and chars with character features) on d and loads its weights. Metadata that is
// missing, of another format or inconsistent is an error wrapping
// train.ErrMismatch; a damaged file, one wrapping train.ErrCorrupt.
func LoadTagger(ctx context.Context, d device.Device, path string) (*Tagger, *train.Checkpoint, error) {
	ck, err := train.ReadCheckpoint(path)
	if err != nil {
		return nil, nil, err
	}
	m, err := TaggerFromCheckpoint(ctx, d, ck)
	if err != nil {
		return nil, nil, err
	}
	return m, ck, nil
}

// TaggerFromCheckpoint is LoadTagger for a checkpoint already read.
func TaggerFromCheckpoint(ctx context.Context, d device.Device, ck *train.Checkpoint) (*Tagger, error) {
	bad := func(format string, args ...any) error { return mismatch(ck, format, args...) }
	var cfg TaggerConfig
	var words, tags []string
	if err := decodeMetadata(ck, "tagger", TaggerFormat, metaPart{"config", &cfg}, metaPart{"words", &words}, metaPart{"tags", &tags}); err != nil {
		return nil, err
	}
	meta := ck.Metadata()
	wv, err := loader.NewWords(words)
	if err != nil {
		return nil, bad("%v", err)
	}
	tv, err := loader.NewLabels(tags)
	if err != nil {
		return nil, bad("%v", err)
	}
	var cv *loader.Words
	charMeta, ok := meta["chars"]
	switch {
	case cfg.hasChars() && !ok:
		return nil, bad("no chars metadata (the character vocabulary, a JSON array) for a config with character features")
	case !cfg.hasChars() && ok:
		return nil, bad("chars metadata for a config without character features (char_embed, char_hidden 0)")
	case ok:
		var chars []string
		if err := json.Unmarshal([]byte(charMeta), &chars); err != nil {
			return nil, bad("chars metadata: %v", err)
		}
		if cv, err = loader.NewWords(chars); err != nil {
			return nil, bad("chars metadata: %v", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	dirs := 1
	if cfg.Bidirectional {
		dirs = 2
	}
	want := append([]tensorShape{{"emb.weight", []int{wv.Len(), cfg.Embed}}, {"out.weight", []int{tv.Len(), dirs * cfg.Hidden}}},
		stackTensors("rnn", cfg.Cell, rnn.Config{Input: cfg.Embed + 2*cfg.CharHidden, Hidden: cfg.Hidden, Layers: cfg.Layers, Bidirectional: cfg.Bidirectional})...)
	stacks := map[string]int{"rnn": cfg.Layers}
	if cv != nil {
		want = append(append(want, tensorShape{"char_emb.weight", []int{cv.Len(), cfg.CharEmbed}}),
			stackTensors("char_rnn", "lstm", rnn.Config{Input: cfg.CharEmbed, Hidden: cfg.CharHidden, Bidirectional: true})...)
		stacks["char_rnn"] = 1
	}
	if err := checkShapes(ck, stacks, want); err != nil {
		return nil, err
	}
	m, err := NewTaggerChars(ctx, d, cfg, wv, cv, tv, 0)
	if err != nil {
		return nil, built(ck, err)
	}
	if err := ck.LoadWeights(d, m.Groups()); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

var (
	_ train.SeqModel    = (*Tagger)(nil)
	_ train.RandomModel = (*CharRNN)(nil)
)
