package models

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/rnn"
)

// Advice is what the planner says about a run that does not fit: what it
// needs, and the changes that make it fit, each with its planned peak.
type Advice struct {
	// Need is the run as asked, planned without a capacity: what it would
	// reserve at its peak, by category.
	Need alloc.Report
	// Limit is the memory the run may reserve (the target's capacity).
	Limit int64
	// Batch is the largest batch that fits (0: not even one), with its
	// planned peak reserved memory.
	Batch     int
	BatchPeak int64
	// AccumBatch and Accum keep the run's examples per step
	// (Batch·Accum as asked) with more, smaller micro-batches; 0 when no
	// split fits.
	AccumBatch, Accum int
	AccumPeak         int64
	// Recompute is the run as asked with recomputation through time
	// (rnn.RecomputeAuto) when it had none: its planned report, and
	// whether it fits; a zero Report when the run recomputes already.
	Recompute     alloc.Report
	RecomputeFits bool
}

// recompute returns spec with its recurrent stack's Recompute set to k,
// the model's configuration copied, and the value it had.
func (s MemorySpec) recompute(k int) (MemorySpec, int) {
	var was int
	switch {
	case s.CharRNN != nil:
		c := *s.CharRNN
		was, c.Recompute, s.CharRNN = c.Recompute, k, &c
	case s.Tagger != nil:
		c := *s.Tagger
		was, c.Recompute, s.Tagger = c.Recompute, k, &c
	case s.Classifier != nil:
		c := *s.Classifier
		was, c.Recompute, s.Classifier = c.Recompute, k, &c
	}
	return s, was
}

// Advise plans spec on target, whose Capacity is the memory the run may
// reserve (devices.MetaConfig gives an open device's), and says what fits:
// the largest batch, and the accumulation that keeps the examples of a
// step (for a run with Lengths, those whose first epoch fits: EpochBatch).
// It is what an out-of-memory error of the run should say.
func Advise(ctx context.Context, target meta.Config, spec MemorySpec) (Advice, error) {
	limit := target.Capacity
	unlimited := target
	unlimited.Capacity, unlimited.Memory.MemoryLimit, unlimited.Memory.MemoryFraction = 0, 0, 0
	need, err := PlanMemory(ctx, unlimited, spec)
	if err != nil {
		return Advice{}, err
	}
	a := Advice{Need: need.Report, Limit: limit}
	if limit == 0 {
		return a, nil
	}
	if rs, was := spec.recompute(rnn.RecomputeAuto); was == 0 {
		r, err := PlanMemory(ctx, unlimited, rs)
		if err != nil {
			return a, err
		}
		a.Recompute, a.RecomputeFits = r.Report, r.Report.PeakReserved <= limit
	}
	// No margin: the advice is what fits at all; FitBatch keeps one.
	cfg := FitConfig{Margin: -1}
	if r, err := planLargest(ctx, target, spec, cfg); err == nil {
		a.Batch, a.BatchPeak = r.Spec.Batch, r.PeakReserved
	} else if !errors.Is(err, ErrNoBatchFits) {
		return a, err
	}
	if e := spec.Batch * max(spec.Accum, 1); a.Batch > 0 && a.Batch < spec.Batch {
		cfg.Effective = e
		if r, err := planLargest(ctx, target, spec, cfg); err == nil {
			a.AccumBatch, a.Accum, a.AccumPeak = r.Spec.Batch, r.Spec.Accum, r.PeakReserved
		} else if !errors.Is(err, ErrNoBatchFits) {
			return a, err
		}
	}
	return a, nil
}

// planLargest is PlanBatch, then for a run with Lengths EpochBatch.
func planLargest(ctx context.Context, target meta.Config, spec MemorySpec, cfg FitConfig) (FitResult, error) {
	r, err := PlanBatch(ctx, target, spec, cfg)
	if err != nil {
		return r, err
	}
	return EpochBatch(ctx, target, spec, cfg, r)
}

// String says it in a few lines: what the run needs, by category, and the
// batch or accumulation that fits.
func (a Advice) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the run needs %s at its peak (%s allocated: %s)", alloc.FormatSize(a.Need.PeakReserved),
		alloc.FormatSize(a.Need.PeakAllocated), alloc.FormatCategories(a.Need.AtPeak))
	if a.Limit > 0 {
		fmt.Fprintf(&b, "; the device has room for %s", alloc.FormatSize(a.Limit))
	}
	switch {
	case a.Limit == 0:
	case a.Batch == 0:
		b.WriteString(". Not even a batch of 1 fits: use a smaller model, shorter windows or sequences, or a larger device")
	default:
		fmt.Fprintf(&b, ". The largest batch that fits is %d (planned peak %s)", a.Batch, alloc.FormatSize(a.BatchPeak))
		if a.Accum > 1 {
			fmt.Fprintf(&b, "; a batch of %d accumulated %d times keeps the %d examples of a step (planned peak %s)",
				a.AccumBatch, a.Accum, a.AccumBatch*a.Accum, alloc.FormatSize(a.AccumPeak))
		}
	}
	if r := a.Recompute; a.Limit > 0 && r.PeakReserved > 0 {
		verdict := "fits"
		if !a.RecomputeFits {
			verdict = "still does not fit"
		}
		fmt.Fprintf(&b, "; recomputation through time (recompute auto) keeps %s of activations instead of %s, a peak of %s: the batch as asked %s",
			alloc.FormatSize(r.AtPeak[alloc.Activations]), alloc.FormatSize(a.Need.AtPeak[alloc.Activations]),
			alloc.FormatSize(r.PeakReserved), verdict)
	}
	return b.String()
}

// MemoryError is an out-of-memory error of a run with the planner's
// advice. errors.Is(err, alloc.ErrOutOfMemory) and errors.As to
// *alloc.OutOfMemoryError hold for it, through Unwrap.
type MemoryError struct {
	Err    error
	Advice Advice
}

func (e *MemoryError) Error() string { return e.Err.Error() + "\nPlanner: " + e.Advice.String() }
func (e *MemoryError) Unwrap() error { return e.Err }

// CheckFits plans spec's run on the device target describes (PlanMemory)
// and refuses it, before anything is allocated on the device, when its
// planned peak does not fit target's capacity: the error then wraps
// alloc.ErrOutOfMemory, is a *MemoryError carrying Advise's advice, and
// takes milliseconds where the run would have allocated its parameters
// and optimizer state (minutes of initialisation for a large model)
// before failing at its first step. It returns nil when the run fits, and
// when the planner cannot plan it for another reason (the run itself
// then reports what it meets), but for a cancelled ctx.
func CheckFits(ctx context.Context, target meta.Config, spec MemorySpec) error {
	_, err := PlanMemory(ctx, target, spec)
	switch {
	case errors.Is(err, alloc.ErrOutOfMemory):
		return WithAdvice(ctx, fmt.Errorf("models: the run does not fit %s: %w", target.Name, err), target, spec)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return nil
}

// WithAdvice returns err, when it is an out-of-memory error of spec's run
// on the device target describes, as a *MemoryError carrying Advise's
// advice; any other error (or one the planner cannot advise on) as it is.
func WithAdvice(ctx context.Context, err error, target meta.Config, spec MemorySpec) error {
	if !errors.Is(err, alloc.ErrOutOfMemory) {
		return err
	}
	a, aerr := Advise(ctx, target, spec)
	if aerr != nil {
		return err
	}
	return &MemoryError{Err: err, Advice: a}
}
