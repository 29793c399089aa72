package models

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/meta"
)

// FitConfig configures FitBatch and PlanBatch.
type FitConfig struct {
	// Limit is the memory the run may reserve, in bytes. 0 means the
	// device's: its allocator's limit when one is set, else what is free
	// on it plus what its allocator already holds.
	Limit int64
	// Margin is the fraction of Limit kept free (0 means 0.05, a negative
	// value none): a batch fits when its trial's peak reserved memory
	// stays within Limit·(1−Margin), so that what the trial did not meet
	// (a longer run's fragmentation, another process) has room.
	Margin float64
	// Max is the largest batch tried; 0 means 4096.
	Max int
	// Effective, when > 0, keeps the examples of an optimizer step: the
	// result's Batch·Accum is Effective, with Accum the fewest
	// micro-batches whose batch fits (and divides Effective).
	Effective int
	// Plan, when set, describes the device for a planned search
	// (PlanBatch; devices.MetaConfig gives it) that FitBatch runs first:
	// its answer and the next batch are then the first trials, so that a
	// plan that is right (as it is to the byte on the CPU and CUDA devices)
	// costs two trials instead of a dozen. The answer is still only a
	// batch that was tried.
	Plan *meta.Config
	// Epoch makes each trial the spec's first epoch as PlanMemory plans
	// it, its real batches in the run's order (Lengths, ValLengths,
	// MaxTokens, Shuffle and Seed kept), instead of steps on sequences
	// all Seq tokens long: for PlanBatch, to find the batch whose epoch
	// fits, the cache's fragmentation by batches of several shapes
	// included, which steps of one shape do not show. (FitBatch would
	// train an epoch per trial.)
	Epoch bool
}

// Trial is one batch size tried.
type Trial struct {
	Batch, Accum int
	// Fits says the trial ran its steps within the limit and margin.
	Fits bool
	// PeakReserved is the trial's peak reserved memory, 0 when it ran out
	// of memory.
	PeakReserved int64
}

// FitResult is what FitBatch found.
type FitResult struct {
	// Spec is the spec asked for with the batch (and accumulation) found.
	Spec MemorySpec
	// PeakReserved is the chosen size's trial peak; Limit the limit it was
	// held to (before the margin).
	PeakReserved, Limit int64
	// Trials lists every size tried, in order; the chosen one is among
	// them.
	Trials  []Trial
	Elapsed time.Duration
}

// ErrNoBatchFits is matched by the error of FitBatch and PlanBatch when
// not even a batch of one fits.
var ErrNoBatchFits = errors.New("not even a batch of one fits")

// FitBatch finds the largest batch of spec's run that fits on d: it grows
// the batch from spec.Batch by doubling, then bisects, and each trial is
// the run's real training steps on d (a fresh model, trainer and loader,
// closed after, the cache emptied) at the longest sequence length, every
// sequence spec.Seq tokens long (spec.Lengths, ValLengths and MaxTokens
// are set aside), so that the largest activations and the optimizer's
// state exist. A trial that runs out of memory is recognised by the
// allocator's typed error. The batch returned is one that was tried and
// fitted. The device is left with its cache empty and its peaks and
// counters reset.
func FitBatch(ctx context.Context, d device.Device, spec MemorySpec, cfg FitConfig) (FitResult, error) {
	limit := cfg.Limit
	if limit == 0 {
		limit = deviceLimit(d)
	}
	m, measured := memoryOf(d)
	if measured {
		// The run's figures start after the search: its trials' peaks,
		// allocations and out-of-memory errors are not the run's.
		defer func() {
			m.resetPeak()
			m.resetAccumulated()
		}()
	}
	start, hint := time.Now(), 0
	if cfg.Plan != nil {
		target := *cfg.Plan
		target.Memory.MemoryLimit, target.Memory.MemoryFraction = 0, 0
		planned, err := PlanBatch(ctx, target, spec, FitConfig{Limit: limit, Margin: cfg.Margin, Max: cfg.Max})
		if err != nil && !errors.Is(err, ErrNoBatchFits) {
			return FitResult{}, err
		}
		hint = planned.Spec.Batch
	}
	res, err := fit(spec, cfg, limit, hint, func(s MemorySpec) (int64, error) {
		if measured {
			if err := m.emptyCache(); err != nil {
				return 0, err
			}
			m.resetPeak()
		}
		_, err := runSpec(ctx, d, s, nil)
		if !measured {
			return 0, err
		}
		peak := d.MemStats().ReservedBytes[alloc.AllPools].Peak
		return peak, errors.Join(err, m.emptyCache())
	})
	res.Elapsed = time.Since(start) // the planned search's time included
	return res, err
}

// PlanBatch is FitBatch with planned trials (PlanMemory on the device
// target describes, held to target.Capacity or cfg.Limit): no device
// memory is touched and nothing is computed, so it takes a fraction of a
// second; what it returns is what FitBatch would on that device, as far
// as the plan is exact.
func PlanBatch(ctx context.Context, target meta.Config, spec MemorySpec, cfg FitConfig) (FitResult, error) {
	limit := cfg.Limit
	if limit == 0 {
		limit = target.Capacity
	}
	if limit == 0 {
		return FitResult{}, errors.New("models: PlanBatch needs a limit: FitConfig.Limit or the target's capacity")
	}
	target.Capacity = limit
	return fit(spec, cfg, limit, 0, func(s MemorySpec) (int64, error) {
		p, err := PlanMemory(ctx, target, s)
		return p.Report.PeakReserved, err
	})
}

// EpochBatch is the second search of a sequence model's batch, after
// FitBatch's or PlanBatch's (trials, made with spec and cfg): trials are
// steps on batches of one shape, every sequence the longest, but a run's
// batches come in several shapes (bucketed by length, a last smaller
// one), which can fragment the cache past the trials' peak. From the
// largest batch trials fitted at spec's accumulation, EpochBatch plans
// the run's first epoch on target (cfg.Epoch: its real batches in the
// run's order) and lowers the batch until that fits, keeping
// cfg.Effective as PlanBatch does. Without spec.Lengths (the char-RNN's
// windows all have one shape) it returns trials.
func EpochBatch(ctx context.Context, target meta.Config, spec MemorySpec, cfg FitConfig, trials FitResult) (FitResult, error) {
	if spec.Lengths == nil {
		return trials, nil
	}
	largest := 0
	for _, t := range trials.Trials {
		if t.Fits && t.Accum == max(spec.Accum, 1) {
			largest = max(largest, t.Batch)
		}
	}
	if largest == 0 {
		return trials, fmt.Errorf("models: %w in the trials", ErrNoBatchFits)
	}
	spec.Batch = largest
	cfg.Max, cfg.Limit, cfg.Epoch = largest, trials.Limit, true
	return PlanBatch(ctx, target, spec, cfg)
}

// deviceLimit is the memory a run on d may reserve: the allocator's limit,
// else what is free plus what the allocator holds.
// memory is what FitBatch does to the memory figures between trials: the
// device's, or only a scope's, so that a job's search leaves its
// neighbours' cache and peaks alone.
type memory struct {
	resetPeak, resetAccumulated func()
	emptyCache                  func() error
}

// memoryOf returns d's memory operations; false for a device (or a scope
// of one) without the Allocator capability.
func memoryOf(d device.Device) (memory, bool) {
	if s, ok := d.(device.Scope); ok {
		a, ok := s.Parent().(device.Allocator)
		if !ok {
			return memory{}, false
		}
		c, id := a.Memory(), s.ID()
		return memory{
			resetPeak:        func() { c.ResetScopePeak(id) },
			resetAccumulated: func() { c.ResetScopeAccumulated(id) },
			emptyCache:       func() error { return c.EmptyScopeCache(id) },
		}, true
	}
	a, ok := d.(device.Allocator)
	if !ok {
		return memory{}, false
	}
	c := a.Memory()
	return memory{resetPeak: c.ResetPeak, resetAccumulated: c.ResetAccumulated, emptyCache: c.EmptyCache}, true
}

func deviceLimit(d device.Device) int64 {
	r, ok := device.MemoryReport(d)
	if !ok {
		return 0
	}
	if r.Limit > 0 {
		return r.Limit
	}
	return r.DeviceFree + r.Reserved
}

// fit is the search: try runs a spec and returns its peak reserved bytes,
// or an error, which matches alloc.ErrOutOfMemory when the run did not
// fit. hint, when > 0, is the batch a planned search found: it and the
// next are tried first.
func fit(spec MemorySpec, cfg FitConfig, limit int64, hint int, try func(MemorySpec) (int64, error)) (FitResult, error) {
	start := time.Now()
	if err := spec.check(); err != nil {
		return FitResult{}, err
	}
	margin, most := cfg.Margin, cfg.Max
	switch {
	case margin == 0:
		margin = 0.05
	case margin < 0:
		margin = 0
	}
	if most == 0 {
		most = 4096
	}
	switch {
	case !(margin >= 0 && margin < 1):
		return FitResult{}, fmt.Errorf("models: margin %v, want [0, 1)", margin)
	case most < 1 || cfg.Effective < 0:
		return FitResult{}, fmt.Errorf("models: max batch %d, effective batch %d; want max ≥ 1", most, cfg.Effective)
	case limit <= 0:
		return FitResult{}, errors.New("models: no memory limit to fit the batch to (the device reports none)")
	}
	budget := int64(float64(limit) * (1 - margin))
	res := FitResult{Limit: limit}
	base := spec
	if !cfg.Epoch {
		base.Lengths, base.ValLengths, base.MaxTokens = nil, nil, 0
	}
	peaks := map[[2]int]int64{}
	fits := func(batch, accum int) (bool, error) {
		s := base
		s.Batch, s.Accum = batch, accum
		peak, err := try(s)
		var oom *alloc.OutOfMemoryError
		switch {
		case errors.As(err, &oom) || errors.Is(err, alloc.ErrOutOfMemory):
			res.Trials = append(res.Trials, Trial{Batch: batch, Accum: accum})
			return false, nil
		case err != nil:
			return false, fmt.Errorf("models: the trial of batch %d: %w", batch, err)
		}
		ok := peak <= budget
		res.Trials = append(res.Trials, Trial{Batch: batch, Accum: accum, Fits: ok, PeakReserved: peak})
		if ok {
			peaks[[2]int{batch, accum}] = peak
		}
		return ok, nil
	}
	accum := max(spec.Accum, 1)
	lo, hi := 0, most+1                    // the largest batch known to fit, the smallest known not to
	first := min(max(spec.Batch, 1), most) // where growing starts, 0 for none
	if g := min(hint, most); g > 0 {
		// The planned answer first: it fits, and one more does not, in two
		// trials; otherwise the search goes on from what they showed.
		ok, err := fits(g, accum)
		if err != nil {
			return res, err
		}
		if !ok {
			hi, first = g, 0
		} else if lo, first = g, 0; g < most {
			if ok, err = fits(g+1, accum); err != nil {
				return res, err
			}
			if ok {
				lo, first = g+1, min(2*(g+1), most)
			} else {
				hi = g + 1
			}
		}
	}
	for b := first; b > 0 && lo < b && b < hi; b = min(2*b, most) {
		ok, err := fits(b, accum)
		if err != nil {
			return res, err
		}
		if !ok {
			hi = b
			break
		}
		lo = b
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := fits(mid, accum)
		if err != nil {
			return res, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return res, fmt.Errorf("models: %w within %s (%s less a margin of %.0f%%)", ErrNoBatchFits,
			alloc.FormatSize(budget), alloc.FormatSize(limit), 100*margin)
	}
	chosen := [2]int{lo, accum}
	if e := cfg.Effective; e > 0 {
		// The fewest micro-batches that divide e and whose batch fits,
		// confirmed by a trial of their own (the state carried per
		// micro-batch grows with them).
		chosen = [2]int{}
		for a := (e + lo - 1) / lo; a <= e; a++ {
			if e%a != 0 {
				continue
			}
			if _, tried := peaks[[2]int{e / a, a}]; !tried {
				ok, err := fits(e/a, a)
				if err != nil {
					return res, err
				}
				if !ok {
					continue
				}
			}
			chosen = [2]int{e / a, a}
			break
		}
		if chosen[0] == 0 {
			return res, fmt.Errorf("models: %w with an effective batch of %d", ErrNoBatchFits, e)
		}
	}
	res.Spec = spec
	res.Spec.Batch, res.Spec.Accum = chosen[0], chosen[1]
	res.PeakReserved = peaks[chosen]
	res.Elapsed = time.Since(start)
	return res, nil
}

// String lists the trials: "batch 32: 1.20 GiB fits; batch 64: out of
// memory; ...".
func (r FitResult) String() string {
	var parts []string
	for _, t := range r.Trials {
		s := fmt.Sprintf("batch %d", t.Batch)
		if t.Accum > 1 {
			s += fmt.Sprintf("x%d", t.Accum)
		}
		switch {
		case t.Fits:
			s += ": " + alloc.FormatSize(t.PeakReserved) + " fits"
		case t.PeakReserved > 0:
			s += ": " + alloc.FormatSize(t.PeakReserved) + " is over the margin"
		default:
			s += ": out of memory"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
