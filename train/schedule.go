package train

import (
	"fmt"
	"math"
)

// Schedule scales the learning rate by step. The zero value keeps it
// constant.
//
// With Warmup > 0 the rate rises linearly over the first Warmup steps,
// LR·(t+1)/Warmup at the 0-based step t, then follows Decay:
//
//   - "" or "constant": LR.
//   - "step": LR·Gamma^floor((t-Warmup)/Every), PyTorch's StepLR.
//   - "cosine": from LR down to MinLR over the steps from Warmup to Total,
//     MinLR + (LR-MinLR)·(1+cos(π·(t-Warmup)/(Total-Warmup)))/2, then MinLR
//     (PyTorch's CosineAnnealingLR over one half period).
//
// A checkpoint records the schedule with its fields' JSON names, and
// with the cosine decay's Total resolved (see Trainer.Resume).
type Schedule struct {
	Decay string `json:"decay,omitempty"`
	// Warmup is the number of warm-up steps.
	Warmup int64 `json:"warmup,omitempty"`
	// Every and Gamma are the step decay's period (steps) and factor.
	Every int64   `json:"every,omitempty"`
	Gamma float64 `json:"gamma,omitempty"`
	// Total is the step at which the cosine decay reaches MinLR; 0 means
	// the trainer's Config.Steps.
	Total int64   `json:"total,omitempty"`
	MinLR float64 `json:"min_lr,omitempty"`
}

// resolved is s with a cosine decay's Total 0 replaced by steps: the
// schedule as the trainer runs it.
func (s Schedule) resolved(steps int64) Schedule {
	if s.Decay == "cosine" && s.Total == 0 {
		s.Total = steps
	}
	return s
}

func (s Schedule) validate(steps int64) error {
	switch {
	case s.Warmup < 0:
		return fmt.Errorf("train: schedule warm-up %d steps, want >= 0", s.Warmup)
	case s.MinLR < 0 || math.IsNaN(s.MinLR):
		return fmt.Errorf("train: schedule minimum rate %v, want >= 0", s.MinLR)
	}
	switch s.Decay {
	case "", "constant":
	case "step":
		if s.Every <= 0 || !(s.Gamma > 0 && s.Gamma <= 1) {
			return fmt.Errorf("train: step decay needs Every > 0 (got %d) and Gamma in (0, 1] (got %v)", s.Every, s.Gamma)
		}
	case "cosine":
		total := s.Total
		if total == 0 {
			total = steps
		}
		if total <= s.Warmup {
			return fmt.Errorf("train: cosine decay needs Total (%d, or the trainer's Steps) beyond the %d warm-up steps", total, s.Warmup)
		}
	default:
		return fmt.Errorf("train: unknown schedule %q (want constant, step or cosine)", s.Decay)
	}
	return nil
}

// Rate is the learning rate at the 0-based step t for base rate lr; total
// stands in for a zero Total.
func (s Schedule) Rate(lr float64, t, total int64) float64 {
	if t < s.Warmup {
		return lr * float64(t+1) / float64(s.Warmup)
	}
	u := t - s.Warmup
	switch s.Decay {
	case "step":
		return lr * math.Pow(s.Gamma, float64(u/s.Every))
	case "cosine":
		if s.Total != 0 {
			total = s.Total
		}
		span := total - s.Warmup
		if u >= span {
			return s.MinLR
		}
		return s.MinLR + (lr-s.MinLR)*(1+math.Cos(math.Pi*float64(u)/float64(span)))/2
	}
	return lr
}
