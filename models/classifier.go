package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// ClassifierFormat is the "format" metadata of a classifier checkpoint.
const ClassifierFormat = "gocurrent.classifier/1"

// ClassifierConfig is a sequence classifier's shape: PyTorch's
// nn.Embedding(V, Embed) -> nn.LSTM or nn.GRU(Embed, Hidden, Layers,
// dropout=Dropout, bidirectional=Bidirectional) over packed sequences ->
// pooling -> nn.Linear(Hidden·directions, classes). Its JSON is the
// checkpoint's "config" metadata.
type ClassifierConfig struct {
	Cell          string  `json:"cell"`
	Embed         int     `json:"embed"`
	Hidden        int     `json:"hidden"`
	Layers        int     `json:"layers"`
	Bidirectional bool    `json:"bidirectional"`
	Dropout       float64 `json:"dropout"`
	// Pool is how a sequence becomes one vector of Hidden·directions
	// features:
	//   - "last" (the default): the top layer's final states,
	//     cat(h_n[-2], h_n[-1]) in PyTorch's terms when bidirectional: the
	//     forward direction after each sequence's last token and the
	//     reverse one after its first;
	//   - "mean": the top layer's output (both directions' halves) summed
	//     over the sequence's real positions and divided by its length;
	//   - "max": its maximum over the real positions, feature by feature
	//     (torch.max over time: the gradient goes to the first position of
	//     a tie).
	// Padded positions never enter a mean or a maximum.
	Pool string `json:"pool"`
	// Input says what the vocabulary's tokens are: "words" (the default)
	// or "chars", the characters of a text (every token but "<pad>" and
	// "<unk>" one character). It does not change the network, only how a
	// program turns text into ids.
	Input string `json:"input"`
	// DType is the parameters' type: Float32 (0) or Float64; not recorded.
	DType device.DType `json:"-"`
	// Recompute is the recurrent stack's rnn.Config.Recompute (0 off,
	// rnn.RecomputeAuto); not recorded (SetRecompute sets it on a loaded
	// model).
	Recompute int `json:"-"`
}

// The pooling and input values of ClassifierConfig.
const (
	PoolLast = "last"
	PoolMean = "mean"
	PoolMax  = "max"

	InputWords = "words"
	InputChars = "chars"
)

// Validate checks the configuration without building the model: each
// field in its range, and sizes whose parameters can be counted (at most
// rnn.MaxLayers layers, a count that does not overflow), so that a
// configuration from a flag, a job spec or a checkpoint's metadata is
// refused by name, not after allocating. The vocabulary's size is the
// constructor's to check.
func (c ClassifierConfig) Validate() error {
	switch {
	case c.Cell != "lstm" && c.Cell != "gru":
		return fmt.Errorf("models: classifier cell %q, want lstm or gru", c.Cell)
	case c.Embed <= 0 || c.Hidden <= 0 || c.Layers <= 0:
		return fmt.Errorf("models: classifier embed %d, hidden %d, layers %d; each must be > 0", c.Embed, c.Hidden, c.Layers)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("models: classifier dropout %v, want [0, 1)", c.Dropout)
	case c.Pool != "" && c.Pool != PoolLast && c.Pool != PoolMean && c.Pool != PoolMax:
		return fmt.Errorf("models: classifier pooling %q, want last, mean or max", c.Pool)
	case c.Input != "" && c.Input != InputWords && c.Input != InputChars:
		return fmt.Errorf("models: classifier input %q, want words or chars", c.Input)
	}
	return stackSizes("classifier", "embed", c.Cell, rnn.Config{Input: c.Embed, Hidden: c.Hidden, Layers: c.Layers, Bidirectional: c.Bidirectional})
}

// Classifier labels whole sequences (of words, or of a text's characters):
// embedding, a recurrent stack over each sequence's own length, its top
// layer pooled (the final states, or the mean or maximum of the output over
// the real positions), a linear layer. Its parameter groups are "emb",
// "rnn" and "out", PyTorch's names. It is used by one goroutine at a time
// (a call meeting another is rnn.ErrBusy); goroutines that classify at once
// each use a share of it (Share).
type Classifier struct {
	chain
	cfg    ClassifierConfig
	tokens *loader.Words
	labels *loader.Labels
	dev    device.Device

	// "last": the states of the last training and no-grad forwards.
	st, stWork *rnn.State
	// feat and featWork are [rows, dirs·H], the pooled states of the
	// training and of the no-grad forwards: the output layer keeps a
	// reference to its training input until its Backward (rnn.Linear),
	// which an evaluation in between must leave alone.
	feat, featWork scratch
	zero           scratch // "last": zeros, the gradient of the unused outputs
	// The training forward's shape, for Backward.
	seq, rows int
	// "mean" and "max": the lengths on the device, [rows] Int32, one
	// copy for training forwards (Backward reads it) and one for no-grad
	// ones, so that an evaluation between a training forward and its
	// Backward leaves the training one alone; max's steps, [rows, dirs·H]
	// Int32; the gradient with respect to the stack's output,
	// [seq, rows, dirs·H].
	lens, lensWork, argmax, dy scratch
	hasLens                    bool      // the training forward had lengths
	in                         hostInput // Predict's ids
}

// scratch is a device buffer grown on demand; get with zero fills a fresh
// one with zeros.
type scratch struct {
	buf device.Buffer
}

func (s *scratch) get(d device.Device, cat device.Category, dt device.DType, n int, zero bool) (device.Buffer, error) {
	if s.buf.IsZero() || s.buf.Len() < int64(n)*dt.Size() {
		if !s.buf.IsZero() {
			if err := d.Free(s.buf); err != nil {
				return device.Buffer{}, err
			}
			s.buf = device.Buffer{}
		}
		b, err := d.Alloc(int64(n)*dt.Size(), cat)
		if err != nil {
			return device.Buffer{}, err
		}
		s.buf = b
		if zero {
			if err := d.Kernels().Fill(device.Fill{DType: dt, N: n, X: b}); err != nil {
				return device.Buffer{}, err
			}
		}
	}
	return s.buf.Elems(dt, 0, n), nil
}

// NewClassifier builds a classifier on d over the token and label
// vocabularies, its parameters drawn with PyTorch's initialisation from
// seed.
func NewClassifier(ctx context.Context, d device.Device, cfg ClassifierConfig, tokens *loader.Words, labels *loader.Labels, seed uint64) (_ *Classifier, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tokens == nil || labels == nil {
		return nil, errors.New("models: a classifier needs token and label vocabularies")
	}
	if cfg.Pool == "" {
		cfg.Pool = PoolLast
	}
	if cfg.Input == "" {
		cfg.Input = InputWords
	}
	if cfg.Input == InputChars {
		for _, s := range tokens.Items()[2:] {
			if utf8.RuneCountInString(s) != 1 {
				return nil, fmt.Errorf("models: classifier input chars with the token %q, which is not one character", s)
			}
		}
	}
	if cfg.DType == 0 {
		cfg.DType = device.Float32
	}
	m := &Classifier{chain: chain{model: "Classifier"}, cfg: cfg, tokens: tokens, labels: labels, dev: d}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Close())
		}
	}()
	rc := rnn.Config{Input: cfg.Embed, Hidden: cfg.Hidden, Layers: cfg.Layers, Dropout: cfg.Dropout, Bidirectional: cfg.Bidirectional,
		DType: cfg.DType, Recompute: cfg.Recompute}
	if err := m.build(ctx, d, "classifier", cfg.Cell, tokens.Len(), labels.Len(), rc, seed); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Classifier) directions() int { return m.cfg.directions() }

// directions is the stack's: 2 when bidirectional, else 1.
func (c ClassifierConfig) directions() int {
	if c.Bidirectional {
		return 2
	}
	return 1
}

// Config is the model's shape.
func (m *Classifier) Config() ClassifierConfig { return m.cfg }

// Vocab and Labels are the model's vocabularies: of its tokens (words or
// characters, as Config().Input says) and of its classes.
func (m *Classifier) Vocab() *loader.Words   { return m.tokens }
func (m *Classifier) Labels() *loader.Labels { return m.labels }

// Groups are the parameter groups: "emb", "rnn", "out".
func (m *Classifier) Groups() []train.Group { return m.groups() }

// state is a zero state for rows sequences, detached: the training
// forwards' (whose record Backward reads) or the no-grad forwards', so
// that an evaluation between a training forward and its Backward leaves
// the training state alone. Each keeps the memory of its most rows so far
// (rnn.State.Resize), so bucketed batches allocate nothing after the
// warm-up.
func (m *Classifier) state(mode rnn.Mode, rows int) (*rnn.State, error) {
	p := &m.stWork
	if mode == rnn.Train {
		p = &m.st
	}
	if *p != nil && (*p).Batch() != rows {
		return *p, (*p).Resize(rows)
	}
	if *p == nil {
		st, err := m.rnn.NewState(rows)
		if err != nil {
			return nil, err
		}
		*p = st
		return st, nil
	}
	return *p, (*p).Reset()
}

// Forward returns the class logits of a batch of sequences, [rows,
// classes]: tokens are [seq, rows] ids (as loader.Collate lays them out),
// sequence r of length lengths[r] (nil: all seq). With mean or max
// pooling, putting the lengths on the device waits for the work queued
// before, as the stack's own copy does.
func (m *Classifier) Forward(mode rnn.Mode, tokens device.Buffer, seq, rows int, lengths []int32) (device.Buffer, error) {
	if err := m.g.enter("Classifier", "Forward"); err != nil {
		return device.Buffer{}, err
	}
	defer m.g.leave()
	return m.forward(mode, tokens, seq, rows, lengths)
}

func (m *Classifier) forward(mode rnn.Mode, tokens device.Buffer, seq, rows int, lengths []int32) (device.Buffer, error) {
	if mode == rnn.Train && m.shared {
		return device.Buffer{}, sharedError("Classifier", "Forward(Train)")
	}
	dt, H, D := m.cfg.DType, m.cfg.Hidden, m.directions()
	x, err := m.emb.Forward(mode, tokens, seq*rows)
	if err != nil {
		return device.Buffer{}, err
	}
	if m.cfg.Pool != PoolLast {
		return m.forwardPooled(mode, x, seq, rows, lengths)
	}
	st, err := m.state(mode, rows)
	if err != nil {
		return device.Buffer{}, err
	}
	if _, err := m.rnn.ForwardLengths(mode, x, seq, rows, lengths, st); err != nil {
		return device.Buffer{}, err
	}
	feat, err := m.features(mode, rows*D*H)
	if err != nil {
		return device.Buffer{}, err
	}
	// The top layer's final states, one direction after the other in each
	// row.
	k := m.dev.Kernels()
	for d := range D {
		top := st.H().Elems(dt, ((m.cfg.Layers-1)*D+d)*rows*H, rows*H)
		if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: rows, Cols: H, X: top,
			Y: feat.Elems(dt, d*H, rows*D*H-d*H), LdY: D * H}); err != nil {
			return device.Buffer{}, err
		}
	}
	if mode == rnn.Train {
		m.seq, m.rows = seq, rows
	}
	return m.out.Forward(mode, feat, rows)
}

// forwardPooled is Forward's mean or max pooling of the stack's output x.
func (m *Classifier) forwardPooled(mode rnn.Mode, x device.Buffer, seq, rows int, lengths []int32) (device.Buffer, error) {
	dt, cols := m.cfg.DType, m.directions()*m.cfg.Hidden
	train := mode == rnn.Train
	y, err := m.rnn.ForwardLengths(mode, x, seq, rows, lengths, nil)
	if err != nil {
		return device.Buffer{}, err
	}
	feat, err := m.features(mode, rows*cols)
	if err != nil {
		return device.Buffer{}, err
	}
	a := device.SeqPool{DType: dt, T: seq, B: rows, Cols: cols, Max: m.cfg.Pool == PoolMax, Y: y, Out: feat}
	if lengths != nil {
		lens, cat := &m.lensWork, device.Workspace
		if train {
			lens, cat = &m.lens, device.Activations
		}
		if a.Lengths, err = lens.get(m.dev, cat, device.Int32, rows, false); err != nil {
			return device.Buffer{}, err
		}
		if err := device.UploadSlice(m.dev, a.Lengths, lengths); err != nil {
			return device.Buffer{}, err
		}
	}
	if a.Max && train {
		if a.ArgMax, err = m.argmax.get(m.dev, device.Activations, device.Int32, rows*cols, false); err != nil {
			return device.Buffer{}, err
		}
	}
	if err := m.dev.Kernels().SeqPool(a); err != nil {
		return device.Buffer{}, err
	}
	if train {
		m.seq, m.rows, m.hasLens = seq, rows, lengths != nil
	}
	return m.out.Forward(mode, feat, rows)
}

// features is the buffer of n pooled features for a forward in mode.
func (m *Classifier) features(mode rnn.Mode, n int) (device.Buffer, error) {
	if mode == rnn.Train {
		return m.feat.get(m.dev, device.Activations, m.cfg.DType, n, false)
	}
	return m.featWork.get(m.dev, device.Workspace, m.cfg.DType, n, false)
}

// Classes implements train.SeqModel: the number of labels.
func (m *Classifier) Classes() int { return m.labels.Len() }

// ForwardBatch implements train.SeqModel: Forward on a loader's batch.
func (m *Classifier) ForwardBatch(mode rnn.Mode, b loader.SeqBatch) (device.Buffer, error) {
	if err := m.g.enter("Classifier", "ForwardBatch"); err != nil {
		return device.Buffer{}, err
	}
	defer m.g.leave()
	return m.forward(mode, b.Tokens, b.Host.Seq, b.Host.Rows, b.Host.Lengths)
}

// Predict classifies a batch collated on the host (loader.Collate's, or
// one made by hand: Seq, Rows, Tokens and Lengths) in one call: it checks
// the ids on the host, uploads them, runs a NoGrad forward and downloads
// the logits, [Rows, classes] row by row. The result is the caller's, so
// unlike Forward's it stays valid whatever runs next: a server calls it
// on a share of the model per goroutine (Share), or on one model from one
// goroutine at a time.
func (m *Classifier) Predict(b loader.HostBatch) ([]float64, error) {
	const op = "Classifier.Predict"
	if err := m.g.enter("Classifier", "Predict"); err != nil {
		return nil, err
	}
	defer m.g.leave()
	sb, err := m.in.upload(m.dev, op, b, m.tokens.Len(), 0)
	if err != nil {
		return nil, err
	}
	y, err := m.forward(rnn.NoGrad, sb.Tokens, b.Seq, b.Rows, b.Lengths)
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", op, err)
	}
	v, err := logits(m.dev, m.cfg.DType, y, b.Rows*m.labels.Len())
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", op, err)
	}
	return v, nil
}

// Share returns a classifier over the same parameters with buffers of its
// own (rnn's Share, layer by layer), for NoGrad forwards and Predict from
// another goroutine: the service case, one share per goroutine or in a
// sync.Pool, no weight copied. A share refuses to train (rnn.ErrShared)
// and sees the parameters as they are when its forward runs on the
// stream: training the model meanwhile changes its answers from one call
// to the next. Closing a share frees its buffers; the parameters go with
// the last Close of the model and its shares, in either order.
func (m *Classifier) Share() (*Classifier, error) {
	if err := m.g.enter("Classifier", "Share"); err != nil {
		return nil, err
	}
	defer m.g.leave()
	s := &Classifier{cfg: m.cfg, tokens: m.tokens, labels: m.labels, dev: m.dev}
	if err := m.chain.shareInto(&s.chain); err != nil {
		return nil, err
	}
	return s, nil
}

// Backward differentiates the training Forward, given the gradient with
// respect to its logits, adding into the parameters' gradients.
func (m *Classifier) Backward(dLogits device.Buffer) error {
	if err := m.g.enter("Classifier", "Backward"); err != nil {
		return err
	}
	defer m.g.leave()
	if m.shared {
		return sharedError("Classifier", "Backward")
	}
	dt, H, D := m.cfg.DType, m.cfg.Hidden, m.directions()
	dfeat, err := m.out.Backward(dLogits)
	if err != nil {
		return err
	}
	if m.cfg.Pool != PoolLast {
		return m.backwardPooled(dfeat)
	}
	st, rows := m.st, m.rows
	k := m.dev.Kernels()
	// The pooled gradient is the gradient with respect to the final
	// states; the forward zeroed the state's gradients, the other layers'
	// stay zero.
	for d := range D {
		top := st.GradH().Elems(dt, ((m.cfg.Layers-1)*D+d)*rows*H, rows*H)
		if err := k.GatherSeq(device.GatherSeq{DType: dt, T: 1, B: rows, Cols: H, X: dfeat.Elems(dt, d*H, rows*D*H-d*H), LdX: D * H, Y: top}); err != nil {
			return err
		}
	}
	// The outputs are not used: their gradient is zero.
	dy, err := m.zero.get(m.dev, device.Workspace, dt, m.seq*rows*D*H, true)
	if err != nil {
		return err
	}
	dx, err := m.rnn.Backward(dy)
	if err != nil {
		return err
	}
	return m.emb.Backward(dx)
}

// backwardPooled is Backward's mean or max pooling: the gradient with
// respect to the pooled features spread over the stack's output (zeros at
// padded positions), then through the stack and the embedding.
func (m *Classifier) backwardPooled(dfeat device.Buffer) error {
	dt, cols, rows := m.cfg.DType, m.directions()*m.cfg.Hidden, m.rows
	dy, err := m.dy.get(m.dev, device.Workspace, dt, m.seq*rows*cols, false)
	if err != nil {
		return err
	}
	a := device.SeqPoolGrad{DType: dt, T: m.seq, B: rows, Cols: cols, Max: m.cfg.Pool == PoolMax, DOut: dfeat, DY: dy}
	if m.hasLens {
		a.Lengths = m.lens.buf.Elems(device.Int32, 0, rows)
	}
	if a.Max {
		a.ArgMax = m.argmax.buf.Elems(device.Int32, 0, rows*cols)
	}
	if err := m.dev.Kernels().SeqPoolGrad(a); err != nil {
		return err
	}
	dx, err := m.rnn.Backward(dy)
	if err != nil {
		return err
	}
	return m.emb.Backward(dx)
}

// Close frees the model's device memory (the parameters, once no share
// holds them). Every later call but the getters of the configuration
// (Config, Vocab, Labels, Classes, Groups, Metadata, RandomState) returns
// an error matching rnn.ErrClosed; a second Close does nothing. Close
// during another goroutine's call is rnn.ErrBusy, and closes nothing.
func (m *Classifier) Close() error {
	if first, err := m.g.close("Classifier"); !first {
		return err
	}
	errs := []error{m.close()}
	for _, st := range []*rnn.State{m.st, m.stWork} {
		if st != nil {
			errs = append(errs, st.Free())
		}
	}
	for _, s := range []*scratch{&m.feat, &m.featWork, &m.zero, &m.lens, &m.lensWork, &m.argmax, &m.dy, &m.in.dev} {
		if !s.buf.IsZero() {
			errs = append(errs, m.dev.Free(s.buf))
			s.buf = device.Buffer{}
		}
	}
	return errors.Join(errs...)
}

// Metadata is the checkpoint metadata that describes the model: format,
// config, vocab (the tokens, index = id) and labels (index = id). Pass it
// to train.Config.Metadata or train.SaveWeights so that LoadClassifier can
// rebuild the model.
func (m *Classifier) Metadata() map[string]string {
	cfg, _ := json.Marshal(m.cfg)
	vocab, _ := json.Marshal(m.tokens.Items())
	labels, _ := json.Marshal(m.labels.Items())
	return map[string]string{"format": ClassifierFormat, "config": string(cfg), "vocab": string(vocab), "labels": string(labels)}
}

// LoadClassifier builds the classifier a checkpoint describes (its format,
// config, vocab and labels metadata) on d, in float32, and loads its
// weights; the checkpoint is returned for a caller that resumes training
// from it. A config without "pool" or "input" gets their defaults, "last"
// and "words" (a file written by hand may leave them out). Metadata that
// is missing, of another format or inconsistent (a config the classifier
// does not build, a vocabulary without "<pad>" and "<unk>" first, tokens
// of more than one character for input "chars") is an error wrapping
// train.ErrMismatch, and so are tensors that do not fit the
// configuration; a damaged file is one wrapping train.ErrCorrupt.
func LoadClassifier(ctx context.Context, d device.Device, path string) (*Classifier, *train.Checkpoint, error) {
	ck, err := train.ReadCheckpoint(path)
	if err != nil {
		return nil, nil, err
	}
	m, err := ClassifierFromCheckpoint(ctx, d, ck)
	if err != nil {
		return nil, nil, err
	}
	return m, ck, nil
}

// ClassifierFromCheckpoint is LoadClassifier for a checkpoint already read.
func ClassifierFromCheckpoint(ctx context.Context, d device.Device, ck *train.Checkpoint) (*Classifier, error) {
	bad := func(format string, args ...any) error { return mismatch(ck, format, args...) }
	var cfg ClassifierConfig
	var vocab, labels []string
	if err := decodeMetadata(ck, "classifier", ClassifierFormat, metaPart{"config", &cfg}, metaPart{"vocab", &vocab}, metaPart{"labels", &labels}); err != nil {
		return nil, err
	}
	tv, err := loader.NewWords(vocab)
	if err != nil {
		return nil, bad("vocab metadata: %v", err)
	}
	lv, err := loader.NewLabels(labels)
	if err != nil {
		return nil, bad("labels metadata: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	want := append([]tensorShape{{"emb.weight", []int{tv.Len(), cfg.Embed}}, {"out.weight", []int{lv.Len(), cfg.directions() * cfg.Hidden}}},
		stackTensors("rnn", cfg.Cell, rnn.Config{Input: cfg.Embed, Hidden: cfg.Hidden, Layers: cfg.Layers, Bidirectional: cfg.Bidirectional})...)
	if err := checkShapes(ck, map[string]int{"rnn": cfg.Layers}, want); err != nil {
		return nil, err
	}
	m, err := NewClassifier(ctx, d, cfg, tv, lv, 0)
	if err != nil {
		return nil, built(ck, err)
	}
	if err := ck.LoadWeights(d, m.Groups()); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

var _ train.SeqModel = (*Classifier)(nil)
