package train

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
)

// source is what a Trainer's steps are made of: the micro-batches of its
// data and what the model does with each. windows (a language model on a
// loader.Loader: the next token of every position is the target) and
// sequences (a SeqModel on a loader.SeqLoader: a tag per token or a label
// per sequence, as the batch says) are the two. The trainer's step
// machinery (clipping, non-finite handling, the optimizer, schedules,
// checkpoints) is the same for both.
type source interface {
	// batches yields the micro-batches from position from on.
	batches(ctx context.Context, from loader.Position) iter.Seq2[micro, error]
	// run queues the forward, loss and backward of mb into ce, reading and
	// leaving the carried state st (nil: none).
	run(mb micro, ce *rnn.CrossEntropy, st State) error
	// scale is what the step's summed gradient and loss are multiplied by
	// to make them the step's mean: 1 when each micro-batch's loss is
	// already weighted (windows).
	scale() float64
	// lossConfig is the loss's configuration for classes classes.
	lossConfig(classes int, dt device.DType) rnn.CrossEntropyConfig
	// states makes the carried states, one per micro-batch group; nil
	// when nothing is carried.
	states() ([]State, error)
	// accum is the number of micro-batches of a full step.
	accum() int
	// stepStart reports whether a step starts at pos.
	stepStart(pos loader.Position) bool
	// epochs is the number of epochs the data has (0: no end).
	epochs() int
	// record describes how the data is cut, for checkpoints.
	record() DataRecord
	// wait is the time spent waiting for batches so far.
	wait() time.Duration
	// validate evaluates the validation data; hasValidation says whether
	// there is any.
	hasValidation() bool
	validate(ctx context.Context) (Evaluation, error)
	// random is the model's random state, nil if it draws none.
	random() randomState
	// warm runs the warm-up's passes (Config.WarmUp) into ce; nothing for
	// a source whose batches are all one shape. A cancelled ctx ends it.
	warm(ctx context.Context, ce *rnn.CrossEntropy) error
}

// randomState is the part of RandomModel a checkpoint records; a SeqModel
// with dropout has it too.
type randomState interface {
	RandomState() []uint64
	SetRandomState([]uint64) error
}

// micro is one micro-batch of a step: its place in the step, the
// position after it, the tokens it trains on, and its batch (win for
// windows, seq for sequences).
type micro struct {
	group  int  // index in its step
	last   bool // the step's last micro-batch
	next   loader.Position
	tokens int64
	reset  bool // the carried state starts from zeros
	win    loader.Batch
	seq    loader.SeqBatch
}

// windows is the language model's source: windows of token ids whose
// targets are the next tokens, every micro-batch of a step the same size,
// each weighted 1/Accum.
type windows struct {
	ranks int // of a data-parallel job (Config.Comm); 0 means 1
	dev   device.Device
	data  *loader.Loader
	model Model
	val   *loader.Loader
}

func (w *windows) batches(ctx context.Context, from loader.Position) iter.Seq2[micro, error] {
	n := w.accum()
	return func(yield func(micro, error) bool) {
		for b, err := range w.data.Batches(ctx, from) {
			mb := micro{group: b.Group, last: b.Group == n-1, next: b.Next, tokens: int64(b.Seq * b.Rows * max(w.ranks, 1)), reset: b.Reset, win: b}
			if !yield(mb, err) {
				return
			}
		}
	}
}

func (w *windows) run(mb micro, ce *rnn.CrossEntropy, st State) error {
	b := mb.win
	logits, err := w.model.Forward(rnn.Train, b.Inputs, b.Seq, b.Rows, st)
	if err != nil {
		return fmt.Errorf("train: forward: %w", err)
	}
	if err := ce.Forward(rnn.Train, logits, b.Targets, b.Seq*b.Rows, 1/float64(w.accum()*max(w.ranks, 1))); err != nil {
		return fmt.Errorf("train: loss: %w", err)
	}
	return backward(ce, w.model.Backward)
}

// backward runs the loss's backward, then the model's.
func backward(ce *rnn.CrossEntropy, model func(device.Buffer) error) error {
	dl, err := ce.Backward()
	if err != nil {
		return fmt.Errorf("train: loss: %w", err)
	}
	if err := model(dl); err != nil {
		return fmt.Errorf("train: backward: %w", err)
	}
	return nil
}

func (w *windows) scale() float64 { return 1 }

func (w *windows) lossConfig(classes int, dt device.DType) rnn.CrossEntropyConfig {
	return rnn.CrossEntropyConfig{Classes: classes, DType: dt}
}

func (w *windows) states() ([]State, error) { return carriedStates(w.model, w.data.Config()) }

func (w *windows) accum() int {
	if lc := w.data.Config(); lc.Mode == loader.Streams {
		return lc.Accum
	}
	return 1
}

func (w *windows) stepStart(pos loader.Position) bool { return pos.Batch%int64(w.accum()) == 0 }
func (w *windows) epochs() int                        { return w.data.Config().Epochs }
func (w *windows) record() DataRecord                 { return signature(w.data) }
func (w *windows) wait() time.Duration                { return w.data.Stats().Wait }
func (w *windows) hasValidation() bool                { return w.val != nil }

func (w *windows) validate(ctx context.Context) (Evaluation, error) {
	return Evaluate(ctx, w.dev, w.model, w.val)
}

func (w *windows) warm(context.Context, *rnn.CrossEntropy) error { return nil }

func (w *windows) random() randomState {
	r, _ := w.model.(randomState)
	return r
}

// SeqOptions configures what only a trainer of labelled sequences (NewSeq)
// has.
//
// The number of batches a step accumulates is the loader's
// (loader.BucketConfig.Accum): a step's loss is the mean over every real
// token (tagging) or sequence (classification) of its batches, so batches
// of 8 accumulated 4 at a time train as batches of 32 would. An epoch's
// last step takes the batches that are left when they are fewer.
type SeqOptions struct {
	// Weights, when set, weights each class's rows in the loss (PyTorch's
	// CrossEntropyLoss weight): the step's loss is then Σ w[y]·loss /
	// Σ w[y] over its rows.
	Weights []float64
	// Validation, when set, is evaluated as Config.Validation is (which
	// must be nil for NewSeq).
	Validation *loader.SeqLoader
	// PerClass asks validations for per-class figures
	// (Evaluation.Confusion is always filled).
	PerClass bool
}

// sequences is a labelled dataset's source: batches of variable-length
// sequences, each micro-batch's loss a sum over its real rows, the step's
// scaled by the total of its rows' weights at its end.
type sequences struct {
	dev   device.Device
	data  *loader.SeqLoader
	model SeqModel
	opts  SeqOptions
	denom float64       // Σ weights of the step's rows so far
	spent time.Duration // waiting for batches
}

func (s *sequences) batches(ctx context.Context, from loader.Position) iter.Seq2[micro, error] {
	return func(yield func(micro, error) bool) {
		var done time.Time // when the last loop body ended
		for b, err := range s.data.Batches(ctx, from) {
			if !done.IsZero() {
				s.spent += time.Since(done)
			}
			mb := micro{group: b.Group, last: b.Last, next: b.Next, tokens: int64(b.Host.Real), seq: b}
			if b.WholeLabels != nil {
				mb.tokens = int64(b.WholeReal) // the job's
			}
			if !yield(mb, err) {
				return
			}
			done = time.Now()
		}
	}
}

func (s *sequences) run(mb micro, ce *rnn.CrossEntropy, _ State) error {
	b := mb.seq
	if mb.group == 0 {
		s.denom = 0
	}
	rows, err := targets(b.Host)
	if err != nil {
		return err
	}
	// The step's mean is over the job's rows: a data-parallel rank counts
	// the whole batch's, and its sums are added to the other ranks'.
	counted := rows
	if b.WholeLabels != nil {
		counted = b.WholeLabels
	}
	for _, y := range counted {
		switch {
		case y < 0:
		case s.opts.Weights != nil:
			s.denom += s.opts.Weights[y]
		default:
			s.denom++
		}
	}
	if len(rows) == 0 {
		// A rank's empty share of a batch smaller than the job: it adds
		// nothing to the sums.
		return nil
	}
	return s.pass(rnn.Train, b, ce, len(rows))
}

// targets is a batch's labels, one per row of its logits: per token
// (IgnoreLabel at padding) or per sequence.
func targets(hb loader.HostBatch) ([]int32, error) {
	switch len(hb.Labels) {
	case hb.Seq * hb.Rows, hb.Rows:
		return hb.Labels, nil
	}
	return nil, fmt.Errorf("train: a batch of %d×%d tokens with %d labels: neither one per token nor one per sequence", hb.Seq, hb.Rows, len(hb.Labels))
}

func (s *sequences) scale() float64 {
	if s.denom == 0 {
		// Nothing counted (every weight zero): the loss and gradient are
		// zero sums, and stay zero.
		return 1
	}
	return 1 / s.denom
}

func (s *sequences) lossConfig(classes int, dt device.DType) rnn.CrossEntropyConfig {
	return rnn.CrossEntropyConfig{Classes: classes, DType: dt, Ignore: true, IgnoreIndex: loader.IgnoreLabel, Weights: s.opts.Weights}
}

func (s *sequences) states() ([]State, error)           { return nil, nil }
func (s *sequences) accum() int                         { return s.data.Config().Bucket.Accum }
func (s *sequences) stepStart(pos loader.Position) bool { return s.data.StepStart(pos) }
func (s *sequences) epochs() int                        { return s.data.Config().Epochs }
func (s *sequences) record() DataRecord                 { return seqSignature(s.data, s.accum()) }
func (s *sequences) wait() time.Duration                { return s.spent }
func (s *sequences) hasValidation() bool                { return s.opts.Validation != nil }

func (s *sequences) validate(ctx context.Context) (Evaluation, error) {
	return EvaluateSeq(ctx, s.dev, s.model, s.opts.Validation, EvalConfig{})
}

// warm trains on the largest batches of the data, and evaluates the
// validation's largest with a loss of its own, as EvaluateSeq does.
func (s *sequences) warm(ctx context.Context, ce *rnn.CrossEntropy) error {
	pass := func(l *loader.SeqLoader, mode rnn.Mode, ce *rnn.CrossEntropy) error {
		for _, examples := range l.Largest() {
			b, release, err := l.Load(ctx, examples)
			if err != nil {
				return err
			}
			rows, err := targets(b.Host)
			if err == nil {
				err = s.pass(mode, b, ce, len(rows))
			}
			if err = errors.Join(err, release()); err != nil {
				return err
			}
		}
		return nil
	}
	if err := pass(s.data, rnn.Train, ce); err != nil {
		return err
	}
	if s.opts.Validation == nil {
		return nil
	}
	groups := s.model.Groups()
	eval, err := rnn.NewCrossEntropyConfig(s.dev, rnn.CrossEntropyConfig{Classes: s.model.Classes(), DType: groups[0].Params.DType(),
		Ignore: true, IgnoreIndex: loader.IgnoreLabel})
	if err != nil {
		return err
	}
	return errors.Join(pass(s.opts.Validation, rnn.NoGrad, eval), eval.Close())
}

// pass runs the model and the loss over b, and in training the backward.
func (s *sequences) pass(mode rnn.Mode, b loader.SeqBatch, ce *rnn.CrossEntropy, rows int) error {
	logits, err := s.model.ForwardBatch(mode, b)
	if err != nil {
		return fmt.Errorf("train: forward: %w", err)
	}
	if err := ce.ForwardSum(mode, logits, b.Labels, rows, 1); err != nil {
		return fmt.Errorf("train: loss: %w", err)
	}
	if mode == rnn.NoGrad {
		return nil
	}
	return backward(ce, s.model.Backward)
}

func (s *sequences) random() randomState {
	r, _ := s.model.(randomState)
	return r
}

// NewSeq returns a trainer of m on the batches of a labelled dataset's
// loader: each batch's labels say what a position means (a tag per token,
// padding ignored, or a label per sequence) and the loss is softmax
// cross-entropy over them (ignore index loader.IgnoreLabel, optional class
// weights). Everything else — accumulation, clipping, schedules,
// non-finite handling, validation, checkpoints and exact resume — is as
// for New; cfg.Validation must be nil (opts.Validation is the one).
func NewSeq(d device.Device, m SeqModel, data *loader.SeqLoader, cfg Config, opts SeqOptions) (*Trainer, error) {
	switch {
	case data == nil || m == nil:
		return nil, errors.New("train: NewSeq needs a model and a loader")
	case cfg.Validation != nil:
		return nil, errors.New("train: NewSeq validates on SeqOptions.Validation; Config.Validation must be nil")
	case opts.Weights != nil && len(opts.Weights) != m.Classes():
		return nil, fmt.Errorf("train: %d class weights for %d classes", len(opts.Weights), m.Classes())
	}
	for i, w := range opts.Weights {
		if !(w >= 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("train: class weight %d is %v; want finite and >= 0", i, w)
		}
	}
	return newTrainer(d, m.Groups(), m.Classes(), &sequences{dev: d, data: data, model: m, opts: opts}, cfg)
}

// seqSignature describes how a SeqLoader cuts its dataset.
func seqSignature(l *loader.SeqLoader, accum int) DataRecord {
	c := l.Config()
	return DataRecord{Mode: "sequences", Batch: c.Bucket.Batch, Accum: accum, Seed: c.Bucket.Seed, PerEpoch: l.PerEpoch(0),
		MaxTokens: c.Bucket.MaxTokens, Pool: c.Bucket.Pool, Shuffle: c.Bucket.Shuffle, Examples: l.Dataset().Len()}
}
