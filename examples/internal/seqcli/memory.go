package seqcli

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// batching is what a training run's memory depends on besides its model
// and its data: the batches (as train's loader makes them, shuffled by
// Seed) and the update.
type batching struct {
	Batch, Accum, MaxTokens int
	Optimizer               string
	Seed                    uint64
}

// spec is the planner's description of a run batched as b, without the
// model and the data (see dataSpec).
func (b batching) spec() models.MemorySpec {
	return models.MemorySpec{Batch: b.Batch, Accum: b.Accum, MaxTokens: b.MaxTokens, Optimizer: train.Algorithm(b.Optimizer),
		Shuffle: true, Seed: b.Seed}
}

// dataSpec completes spec, whose model is named, with what the data says:
// the vocabularies' sizes (words, or characters for a classifier reading
// them; the characters of a tagger with character features, and its
// longest word), the tags or labels, and every sequence's length, Seq the
// longest. val is the validation data (nil: none), whose lengths the
// planner takes for the validation's batches; Seq covers them too.
//
// The planner makes every word as long as the longest, so a tagger's
// character features are planned for the worst batch.
func dataSpec(spec *models.MemorySpec, data, val *loader.Dataset) {
	spec.Vocab, spec.Classes = data.Words.Len(), data.Labels.Len()
	if c := spec.Classifier; c != nil && c.Input == models.InputChars {
		spec.Vocab = data.Chars.Len()
	}
	if t := spec.Tagger; t != nil && t.CharEmbed > 0 {
		spec.Chars, spec.LongestWord = data.Chars.Len(), data.LongestWord()
	}
	spec.Lengths = lengths(data)
	spec.Seq = slices.Max(spec.Lengths)
	spec.Validate, spec.ValLengths = val != nil, nil
	if val != nil {
		spec.ValLengths = lengths(val)
		spec.Seq = max(spec.Seq, slices.Max(spec.ValLengths))
	}
}

// lengths are the tokens (a text's characters) of data's examples.
func lengths(data *loader.Dataset) []int {
	n := make([]int, data.Len())
	for i := range n {
		n[i] = data.Length(i)
	}
	return n
}

// autoBatch is -batch auto: the largest batch of spec's run that fits,
// within the bounds batchSearch sets, found in two searches. The first
// tries steps on batches of one shape, every sequence the longest: train
// runs them on the device (models.FitBatch, from the planned answer),
// plan plans them (models.PlanBatch). A run's batches come in several
// shapes; the trainer's warm-up allocates for the largest first, so they
// rarely need more than the trials did, but the order of the shapes can
// still fragment the cache past that peak, so the second
// (models.EpochBatch) plans the run's first epoch on target, the device
// the run is on, its real batches in train's order, and lowers the batch
// until that fits. It emits the "batch"
// event and returns spec with the batch and accumulation found.
func autoBatch(ctx context.Context, spec models.MemorySpec, sequences, effective int, target meta.Config, p *printer,
	steps func(models.MemorySpec, models.FitConfig) (models.FitResult, error)) (models.MemorySpec, error) {
	start := time.Now()
	spec, cfg := batchSearch(spec, sequences, effective)
	trials, err := steps(spec, cfg)
	if err != nil {
		return spec, fmt.Errorf("-batch auto: %w", err)
	}
	epoch, err := models.EpochBatch(ctx, target, spec, cfg, trials)
	if err != nil {
		return spec, fmt.Errorf("-batch auto: the first epoch, at most at the batch of the trials (%v): %w", trials, err)
	}
	epochs, peak := "", epoch.PeakReserved
	if spec.Lengths == nil { // plan -vocab: no data, no epoch
		epoch.Trials = nil
	} else {
		epochs = fmt.Sprintf("; %d planned epochs: %v", len(epoch.Trials), epoch)
	}
	spec = epoch.Spec
	spec.Accum = max(spec.Accum, 1)
	elapsed := time.Since(start).Seconds()
	p.Emit(map[string]any{"event": "batch", "batch": spec.Batch, "accum": spec.Accum, "peak_reserved_bytes": peak,
		"limit_bytes": epoch.Limit, "trials": len(trials.Trials), "epoch_trials": len(epoch.Trials), "seconds": elapsed},
		fmt.Sprintf("batch auto: %d x %d accumulated, peak %s of %s (%d trials: %v%s; %.1f s)\n", spec.Batch, spec.Accum,
			alloc.FormatSize(peak), alloc.FormatSize(epoch.Limit), len(trials.Trials), trials, epochs, elapsed))
	return spec, nil
}

// batchSearch is where -batch auto's first search starts (a batch of 8)
// and its bounds: at most the training data's sequences (0: unknown) in a
// micro-batch of the accumulation, or in a step with effective > 0, which
// keeps batch·accum = effective.
func batchSearch(spec models.MemorySpec, sequences, effective int) (models.MemorySpec, models.FitConfig) {
	cfg := models.FitConfig{Effective: effective}
	if sequences > 0 {
		cfg.Max = sequences
		if effective == 0 {
			cfg.Max = max(sequences/max(spec.Accum, 1), 1)
		}
		cfg.Max = min(cfg.Max, 4096)
	}
	spec.Batch = 8
	if cfg.Max > 0 {
		spec.Batch = min(spec.Batch, cfg.Max)
	}
	return spec, cfg
}

// advise gives an out-of-memory error of spec's run on d the planner's
// advice (models.WithAdvice): what the run needs by category, and the
// batch or accumulation that fits. Other errors pass unchanged.
func advise(ctx context.Context, err error, d device.Device, spec models.MemorySpec) error {
	if err == nil {
		return nil
	}
	return models.WithAdvice(ctx, err, devices.MetaConfig(d), spec)
}

// checkBatchAuto checks -effective-batch: only with -batch auto, and not
// with an -accum the command line gave (it sets the accumulation).
func checkBatchAuto(c *flagCheck, auto bool, effective int, accumGiven bool) {
	c.NonNegative("effective-batch", int64(effective))
	switch {
	case effective > 0 && !auto:
		c.Fail("effective-batch", effective, "-batch auto with it (a fixed batch keeps -batch x -accum)")
	case effective > 0 && accumGiven:
		c.Fail("effective-batch", effective, "no -accum with it (it sets the accumulation)")
	}
}
