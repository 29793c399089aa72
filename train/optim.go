package train

import (
	"errors"
	"fmt"
	"math"

	"github.com/gocurrent/gocurrent/device"
)

// Algorithm names an optimizer.
type Algorithm string

// The optimizers, with PyTorch's update rules (torch.optim.SGD, Adam,
// AdamW, RMSprop; the device kernels document the formulas).
const (
	SGD     Algorithm = "sgd"
	Adam    Algorithm = "adam"
	AdamW   Algorithm = "adamw"
	RMSprop Algorithm = "rmsprop"
)

// Optimizer configures the update. Every field is used as given, so a
// literal zero means zero; NewOptimizer fills PyTorch's defaults for an
// algorithm and a learning rate.
type Optimizer struct {
	Algorithm Algorithm `json:"algorithm"`
	// LR is the base learning rate; the Schedule scales it per step.
	LR float64 `json:"lr"`
	// WeightDecay: L2 penalty added to the gradient (SGD, Adam, RMSprop),
	// decoupled decay of the weights (AdamW).
	WeightDecay float64 `json:"weight_decay,omitempty"`
	// Momentum (SGD, RMSprop), Dampening and Nesterov (SGD).
	Momentum  float64 `json:"momentum,omitempty"`
	Dampening float64 `json:"dampening,omitempty"`
	Nesterov  bool    `json:"nesterov,omitempty"`
	// Beta1, Beta2 (Adam, AdamW), Alpha (RMSprop's smoothing), Eps (Adam,
	// AdamW, RMSprop).
	Beta1 float64 `json:"beta1,omitempty"`
	Beta2 float64 `json:"beta2,omitempty"`
	Alpha float64 `json:"alpha,omitempty"`
	Eps   float64 `json:"eps,omitempty"`
	// Centered normalises RMSprop by the variance estimate.
	Centered bool `json:"centered,omitempty"`
}

// NewOptimizer returns PyTorch's defaults for alg at learning rate lr:
// Adam and AdamW betas (0.9, 0.999), eps 1e-8, AdamW weight decay 0.01;
// RMSprop alpha 0.99, eps 1e-8; SGD without momentum.
func NewOptimizer(alg Algorithm, lr float64) (Optimizer, error) {
	o := Optimizer{Algorithm: alg, LR: lr}
	switch alg {
	case SGD:
	case Adam:
		o.Beta1, o.Beta2, o.Eps = 0.9, 0.999, 1e-8
	case AdamW:
		o.Beta1, o.Beta2, o.Eps, o.WeightDecay = 0.9, 0.999, 1e-8, 0.01
	case RMSprop:
		o.Alpha, o.Eps = 0.99, 1e-8
	default:
		return o, fmt.Errorf("train: unknown optimizer %q (want sgd, adam, adamw or rmsprop)", alg)
	}
	return o, o.validate()
}

func (o Optimizer) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("train: optimizer %s: "+format, append([]any{o.Algorithm}, args...)...)
	}
	switch o.Algorithm {
	case SGD, Adam, AdamW, RMSprop:
	default:
		return fmt.Errorf("train: unknown optimizer %q (want sgd, adam, adamw or rmsprop)", o.Algorithm)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !finite(o.LR) || o.LR <= 0:
		return bad("learning rate %v, want > 0", o.LR)
	case !finite(o.WeightDecay) || o.WeightDecay < 0:
		return bad("weight decay %v, want >= 0", o.WeightDecay)
	case !finite(o.Momentum) || o.Momentum < 0:
		return bad("momentum %v, want >= 0", o.Momentum)
	case o.Nesterov && (o.Momentum == 0 || o.Dampening != 0):
		return bad("Nesterov momentum needs a momentum and zero dampening")
	}
	switch o.Algorithm {
	case Adam, AdamW:
		if !(o.Beta1 >= 0 && o.Beta1 < 1) || !(o.Beta2 >= 0 && o.Beta2 < 1) {
			return bad("betas (%v, %v), want each in [0, 1)", o.Beta1, o.Beta2)
		}
	case RMSprop:
		if !(o.Alpha >= 0 && o.Alpha < 1) {
			return bad("alpha %v, want [0, 1)", o.Alpha)
		}
	}
	if o.Algorithm != SGD && !(o.Eps > 0 && finite(o.Eps)) {
		return bad("eps %v, want > 0", o.Eps)
	}
	return nil
}

// slots names the per-parameter state the algorithm keeps, with PyTorch's
// state names; checkpoints store slot s of group g as "optim.g.s".
func (o Optimizer) slots() []string {
	switch o.Algorithm {
	case SGD:
		if o.Momentum != 0 {
			return []string{"momentum_buffer"}
		}
	case Adam, AdamW:
		return []string{"exp_avg", "exp_avg_sq"}
	case RMSprop:
		s := []string{"square_avg"}
		if o.Momentum != 0 {
			s = append(s, "momentum_buffer")
		}
		if o.Centered {
			s = append(s, "grad_avg")
		}
		return s
	}
	return nil
}

// optimizer holds the device state of an Optimizer over a model's groups.
type optimizer struct {
	cfg   Optimizer
	names []string
	// state[g][s] is slot s of group g, as long as the group.
	state [][]device.Buffer
}

func newOptimizer(d device.Device, cfg Optimizer, groups []Group) (*optimizer, error) {
	o := &optimizer{cfg: cfg, names: cfg.slots()}
	k := d.Kernels()
	for _, g := range groups {
		p := g.Params
		bufs := make([]device.Buffer, len(o.names))
		// fail frees the state made so far, the group's first made buffers
		// included.
		fail := func(made int, err error) error {
			o.state = append(o.state, bufs[:made])
			return fmt.Errorf("train: optimizer state for %q: %w", g.Name, errors.Join(err, o.free(d)))
		}
		for s := range bufs {
			b, err := d.Alloc(int64(p.Len())*p.DType().Size(), device.OptimizerState)
			if err != nil {
				return nil, fail(s, err)
			}
			bufs[s] = b
			if err := k.Fill(device.Fill{DType: p.DType(), N: p.Len(), X: b}); err != nil {
				return nil, fail(s+1, err)
			}
		}
		o.state = append(o.state, bufs)
	}
	return o, nil
}

// step queues the update of every group at learning rate lr; t is the
// 1-based step number (Adam's bias correction, SGD's first momentum step).
// With rates (device.Rates in device memory) the kernels read the rate
// and number there instead. The updates obey guard (device.StepGuard:
// skipped when it refuses the step, the gradient scaled by its
// coefficient) and clamp the gradient to ±clip when clip > 0.
func (o *optimizer) step(d device.Device, groups []Group, lr float64, t int, guard device.Buffer, clip float64, rates device.Buffer) error {
	k, c := d.Kernels(), o.cfg
	for i, g := range groups {
		p, s := g.Params, o.state[i]
		value, grad := p.Flat()
		dt, n := p.DType(), p.Len()
		var err error
		switch c.Algorithm {
		case SGD:
			a := device.SGD{DType: dt, N: n, LR: lr, Momentum: c.Momentum, Dampening: c.Dampening,
				WeightDecay: c.WeightDecay, Nesterov: c.Nesterov, Step: t, Param: value, Grad: grad, Guard: guard, Clip: clip, Rates: rates}
			if c.Momentum != 0 {
				a.Velocity = s[0]
			}
			err = k.SGD(a)
		case Adam, AdamW:
			err = k.Adam(device.Adam{DType: dt, N: n, LR: lr, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps,
				WeightDecay: c.WeightDecay, Decoupled: c.Algorithm == AdamW, Step: t,
				Param: value, Grad: grad, M: s[0], V: s[1], Guard: guard, Clip: clip, Rates: rates})
		case RMSprop:
			a := device.RMSprop{DType: dt, N: n, LR: lr, Alpha: c.Alpha, Eps: c.Eps, WeightDecay: c.WeightDecay,
				Momentum: c.Momentum, Centered: c.Centered, Param: value, Grad: grad, SquareAvg: s[0], Guard: guard, Clip: clip, Rates: rates}
			next := 1
			if c.Momentum != 0 {
				a.Velocity = s[next]
				next++
			}
			if c.Centered {
				a.GradAvg = s[next]
			}
			err = k.RMSprop(a)
		}
		if err != nil {
			return fmt.Errorf("train: %s step on %q: %w", c.Algorithm, g.Name, err)
		}
	}
	return nil
}

// free returns the state's memory.
func (o *optimizer) free(d device.Device) error {
	var errs []error
	for _, bufs := range o.state {
		for _, b := range bufs {
			errs = append(errs, d.Free(b))
		}
	}
	o.state = nil
	return errors.Join(errs...)
}
