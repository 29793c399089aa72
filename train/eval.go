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
