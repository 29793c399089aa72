package train

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
)

// Evaluation is the loss of a model over one epoch of a loader.
type Evaluation struct {
	// Step is the trainer's step count when it ran (0 outside a run).
	Step int64
	// Loss is the mean cross-entropy over every predicted token, in nats;
	// BitsPerToken is Loss/ln 2 (bits per character for a char model).
	Loss, BitsPerToken float64
	// Tokens and Batches are what was evaluated.
	Tokens, Batches int64

	// For labelled sequences (EvaluateSeq): Sequences is the number of
	// sequences evaluated; Accuracy is the token accuracy (tagging) or the
	// sequence accuracy (classification); MacroF1 is the mean F1 over the
	// classes seen; Confusion holds the counts, for per-class figures.
	// Loss is then the mean cross-entropy over the real tokens (tagging)
	// or sequences, unweighted.
	Sequences int64
	Accuracy  float64
	MacroF1   float64
	Confusion *Confusion
}

// evalFlush is how many batches' losses add up on the device before one
// is read into a float64 sum: few reads, and no float32 total over a long
// text.
const evalFlush = 32

// Evaluate computes the model's loss over one epoch of data without
// gradients (rnn.NoGrad: no activations saved, memory independent of the
// data's length). In Streams mode each micro-batch group carries its own
// state from window to window, starting from zeros, as in training;
// dropout is off. data's iteration starts at its first batch; its Epochs
// setting is ignored after the first epoch.
func Evaluate(ctx context.Context, d device.Device, m Model, data *loader.Loader) (Evaluation, error) {
	return EvaluateWith(ctx, d, m, data, EvalConfig{})
}

// EvalConfig configures EvaluateWith.
type EvalConfig struct {
	// OnBatch, when set, is called after each batch's forward pass with
	// the batches done and the epoch's total (loader.PerEpoch): progress
	// for a long text. The losses are read from the device every 32
	// batches, so a call does not wait for the device.
	OnBatch func(done, total int64)
}

// EvaluateWith is Evaluate configured by cfg.
func EvaluateWith(ctx context.Context, d device.Device, m Model, data *loader.Loader, cfg EvalConfig) (ev Evaluation, err error) {
	groups := m.Groups()
	if len(groups) == 0 {
		return ev, errors.New("train: Evaluate: the model has no parameters")
	}
	ce, err := rnn.NewCrossEntropy(d, m.Classes(), groups[0].Params.DType())
	if err != nil {
		return ev, fmt.Errorf("train: Evaluate: %w", err)
	}
	states, err := carriedStates(m, data.Config())
	defer func() {
		for _, st := range states {
			err = errors.Join(err, st.Free())
		}
		err = errors.Join(err, ce.Close())
	}()
	if err != nil {
		return ev, fmt.Errorf("train: Evaluate: %w", err)
	}
	perEpoch := data.PerEpoch()
	var sum float64
	pending := 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		v, err := ce.Loss()
		if err == nil {
			err = ce.ResetLoss()
		}
		sum += v
		pending = 0
		return err
	}
	for b, err := range data.Batches(ctx, loader.Position{}) {
		if err != nil {
			return ev, fmt.Errorf("train: Evaluate: %w", err)
		}
		if b.Epoch > 0 {
			break
		}
		var st State
		if states != nil {
			st = states[b.Group]
			if b.Reset {
				if err := st.Reset(); err != nil {
					return ev, fmt.Errorf("train: Evaluate: %w", err)
				}
			}
		}
		logits, err := m.Forward(rnn.NoGrad, b.Inputs, b.Seq, b.Rows, st)
		if err != nil {
			return ev, fmt.Errorf("train: Evaluate: %w", err)
		}
		if err := ce.Forward(rnn.NoGrad, logits, b.Targets, b.Seq*b.Rows, 1); err != nil {
			return ev, fmt.Errorf("train: Evaluate: %w", err)
		}
		ev.Batches++
		ev.Tokens += int64(b.Seq * b.Rows)
		if cfg.OnBatch != nil {
			cfg.OnBatch(ev.Batches, perEpoch)
		}
		if pending++; pending == evalFlush {
			if err := flush(); err != nil {
				return ev, fmt.Errorf("train: Evaluate: %w", err)
			}
		}
		if ev.Batches == perEpoch {
			break
		}
	}
	if err := flush(); err != nil {
		return ev, fmt.Errorf("train: Evaluate: %w", err)
	}
	if ev.Batches == 0 {
		return ev, errors.New("train: Evaluate: the loader gave no batch")
	}
	// Every batch has the same number of tokens, so the mean of the batch
	// means is the mean over all tokens.
	ev.Loss = sum / float64(ev.Batches)
	ev.BitsPerToken = ev.Loss / math.Ln2
	return ev, nil
}

// EvaluateSeq computes a sequence model's loss and metrics over one epoch
// of a labelled dataset's loader without gradients: the mean
// cross-entropy over the real tokens (a tag per token, padding left out)
// or over the sequences (a label per sequence), the accuracy, the
// macro-F1 and the confusion counts. Dropout is off. data's iteration
// starts at its first batch; its Epochs setting is ignored after the
// first epoch. The logits are read back every batch for the predictions.
func EvaluateSeq(ctx context.Context, d device.Device, m SeqModel, data *loader.SeqLoader, cfg EvalConfig) (ev Evaluation, err error) {
	const op = "train: EvaluateSeq"
	groups := m.Groups()
	if len(groups) == 0 {
		return ev, fmt.Errorf("%s: the model has no parameters", op)
	}
	dt := groups[0].Params.DType()
	classes := m.Classes()
	ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: classes, DType: dt, Ignore: true, IgnoreIndex: loader.IgnoreLabel})
	if err != nil {
		return ev, fmt.Errorf("%s: %w", op, err)
	}
	defer func() { err = errors.Join(err, ce.Close()) }()
	ev.Confusion = NewConfusion(classes)
	perEpoch := data.PerEpoch(0)
	var sum float64
	var host []float64
	for b, err := range data.Batches(ctx, loader.Position{}) {
		if err != nil {
			return ev, fmt.Errorf("%s: %w", op, err)
		}
		if b.Epoch > 0 {
			break
		}
		labels, err := targets(b.Host)
		if err != nil {
			return ev, err
		}
		logits, err := m.ForwardBatch(rnn.NoGrad, b)
		if err != nil {
			return ev, fmt.Errorf("%s: %w", op, err)
		}
		if err := ce.ForwardSum(rnn.NoGrad, logits, b.Labels, len(labels), 1); err != nil {
			return ev, fmt.Errorf("%s: %w", op, err)
		}
		if host, err = downloadFloats(d, dt, logits, len(labels)*classes, host); err != nil {
			return ev, fmt.Errorf("%s: %w", op, err)
		}
		if err := ev.Confusion.Add(host, labels); err != nil {
			return ev, fmt.Errorf("%s: %w", op, err)
		}
		ev.Batches++
		ev.Sequences += int64(b.Host.Rows)
		if cfg.OnBatch != nil {
			cfg.OnBatch(ev.Batches, perEpoch)
		}
		if ev.Batches%evalFlush == 0 {
			v, err := ce.Loss()
			if err == nil {
				err = ce.ResetLoss()
			}
			if err != nil {
				return ev, fmt.Errorf("%s: %w", op, err)
			}
			sum += v
		}
		if ev.Batches == perEpoch {
			break
		}
	}
	v, err := ce.Loss()
	if err != nil {
		return ev, fmt.Errorf("%s: %w", op, err)
	}
	sum += v
	if ev.Batches == 0 {
		return ev, fmt.Errorf("%s: the loader gave no batch", op)
	}
	ev.Tokens = ev.Confusion.Total()
	ev.Loss = sum / float64(ev.Tokens)
	ev.BitsPerToken = ev.Loss / math.Ln2
	ev.Accuracy = ev.Confusion.Accuracy()
	ev.MacroF1 = ev.Confusion.MacroF1()
	return ev, nil
}

// downloadFloats reads n elements of dt from b as float64s, into buf
// when it is large enough.
func downloadFloats(d device.Device, dt device.DType, b device.Buffer, n int, buf []float64) ([]float64, error) {
	if cap(buf) < n {
		buf = make([]float64, n)
	}
	buf = buf[:n]
	if dt == device.Float64 {
		return buf, device.DownloadSlice(d, buf, b.Slice(0, int64(n)*8))
	}
	f := make([]float32, n)
	if err := device.DownloadSlice(d, f, b.Slice(0, int64(n)*4)); err != nil {
		return buf, err
	}
	for i, v := range f {
		buf[i] = float64(v)
	}
	return buf, nil
}
