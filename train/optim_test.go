package train_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// hostOptimizer is PyTorch's update rules (torch.optim.SGD, Adam, AdamW,
// RMSprop, single-tensor code paths) in float64 on the host: the reference
// the trainer's steps are checked against.
type hostOptimizer struct {
	o     train.Optimizer
	state map[string][][]float64 // per parameter: SGD [buf]; Adam [m, v]; RMSprop [sq, gradAvg, buf]
}

// step returns the parameters after step t (1-based) at rate lr from p and
// the gradient g, and advances the optimizer's state.
func (h *hostOptimizer) step(p, g map[string][]float64, lr float64, t int64) map[string][]float64 {
	if h.state == nil {
		h.state = map[string][][]float64{}
	}
	o := h.o
	out := map[string][]float64{}
	for name, pv := range p {
		gv := g[name]
		st := h.state[name]
		if st == nil {
			st = [][]float64{make([]float64, len(pv)), make([]float64, len(pv)), make([]float64, len(pv))}
			h.state[name] = st
		}
		next := make([]float64, len(pv))
		for i := range pv {
			x, d := pv[i], gv[i]
			switch o.Algorithm {
			case train.SGD:
				d += o.WeightDecay * x
				if o.Momentum != 0 {
					buf := d
					if t > 1 {
						buf = o.Momentum*st[0][i] + (1-o.Dampening)*d
					}
					st[0][i] = buf
					if o.Nesterov {
						d += o.Momentum * buf
					} else {
						d = buf
					}
				}
				x -= lr * d
			case train.Adam, train.AdamW:
				if o.Algorithm == train.AdamW {
					x *= 1 - lr*o.WeightDecay
				} else {
					d += o.WeightDecay * x
				}
				m := o.Beta1*st[0][i] + (1-o.Beta1)*d
				v := o.Beta2*st[1][i] + (1-o.Beta2)*d*d
				st[0][i], st[1][i] = m, v
				bc1 := 1 - math.Pow(o.Beta1, float64(t))
				bc2 := math.Sqrt(1 - math.Pow(o.Beta2, float64(t)))
				x -= lr / bc1 * m / (math.Sqrt(v)/bc2 + o.Eps)
			case train.RMSprop:
				d += o.WeightDecay * x
				sq := o.Alpha*st[0][i] + (1-o.Alpha)*d*d
				st[0][i] = sq
				if o.Centered {
					ga := o.Alpha*st[1][i] + (1-o.Alpha)*d
					st[1][i] = ga
					sq -= ga * ga
				}
				avg := math.Sqrt(sq) + o.Eps
				if o.Momentum != 0 {
					buf := o.Momentum*st[2][i] + d/avg
					st[2][i] = buf
					x -= lr * buf
				} else {
					x -= lr * d / avg
				}
			}
			next[i] = x
		}
		out[name] = next
	}
	return out
}

// TestOptimizers checks every optimizer's update, through the trainer, on
// the test device, against PyTorch's formulas evaluated on the host from
// the parameters and gradients the device holds: the hyperparameters, the
// state slots, the 1-based step (Adam's bias corrections, SGD's first
// momentum step), weight decay and the schedule's rate reach the kernels.
// Steps 1 and 2 run in one trainer and step 3 in another resumed from its
// checkpoint (a model with other initial weights), so each algorithm's
// state must also survive a checkpoint.
//
// optTol, relative to the step's largest update: both sides evaluate the
// same float64 formulas on the same inputs, so they differ by rounding
// only, ≲ 15 operations per element each within 2⁻⁵³ ≈ 1.1e-16 (a GPU
// contracting some into FMAs rounds differently, within the same bound),
// with the state carried over 3 steps: ≲ 45·2⁻⁵³ ≈ 5e-15 of the update.
// Cancellation does not magnify it: a sum that cancels (Adam's M, a
// momentum buffer) errs by ≲ 2⁻⁵³ times its terms' magnitudes, which the
// update scales as it scales the sum's (Adam divides by √V̂ ≥ max|g|/√3
// over 3 steps), and RMSprop's centred SquareAvg - GradAvg² is at least
// Alpha^t·SquareAvg (Cauchy–Schwarz), ≥ 0.73·SquareAvg here. The
// largest update is ≥ 0.005 in every case, so the rounding of a parameter
// itself (2⁻⁵³·|p|, |p| < 2.5) is ≲ 6e-14 of it. 1e-9 is 10⁴ above that and
// far below what a wrong coefficient, slot or step count gives (a rate
// off by 1e-6 relative already fails). The CPU and the emulator, which
// do not contract, agree with the host exactly.
func TestOptimizers(t *testing.T) {
	const optTol = 1e-9
	d := testdevice.Open(t)
	txt := text(t, 600, 6, 5)
	sched := train.Schedule{Warmup: 2} // rates lr/2, lr, lr
	for _, c := range []struct {
		name string
		opt  train.Optimizer
	}{
		{"sgd", train.Optimizer{Algorithm: train.SGD, LR: 0.5}},
		{"sgd momentum dampening decay", train.Optimizer{Algorithm: train.SGD, LR: 0.5, Momentum: 0.8, Dampening: 0.3, WeightDecay: 0.05}},
		{"sgd nesterov", train.Optimizer{Algorithm: train.SGD, LR: 0.5, Momentum: 0.9, Nesterov: true}},
		{"adam decay", train.Optimizer{Algorithm: train.Adam, LR: 0.01, Beta1: 0.8, Beta2: 0.95, Eps: 1e-6, WeightDecay: 0.05}},
		{"adamw", train.Optimizer{Algorithm: train.AdamW, LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}},
		{"rmsprop", train.Optimizer{Algorithm: train.RMSprop, LR: 0.01, Alpha: 0.9, Eps: 1e-8}},
		{"rmsprop momentum centered decay", train.Optimizer{Algorithm: train.RMSprop, LR: 0.01, Alpha: 0.9, Eps: 1e-8, Momentum: 0.5, Centered: true, WeightDecay: 0.05}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref := &hostOptimizer{o: c.opt}
			cfg := lmConfig{vocab: 6, embed: 3, hidden: 4, layers: 1, dtype: device.Float64, seed: 7}
			var prev map[string][]float64
			var steps []int64
			onStep := func(m *lm) func(train.Progress) {
				return func(p train.Progress) {
					steps = append(steps, p.Step)
					rate := c.opt.LR
					if p.Step == 1 {
						rate /= 2
					}
					if p.LR != rate {
						t.Errorf("step %d: rate %v, want %v", p.Step, p.LR, rate)
					}
					want := ref.step(prev, grads(t, m.Groups()), p.LR, p.Step)
					got := values(t, m.Groups())
					largest := 0.0
					for name, w := range want {
						for i := range w {
							largest = max(largest, math.Abs(w[i]-prev[name][i]))
						}
					}
					if largest == 0 {
						t.Fatalf("step %d: the reference update is zero; the test checks nothing", p.Step)
					}
					for name, w := range want {
						for i := range w {
							if diff := math.Abs(got[name][i] - w[i]); !(diff <= optTol*largest) {
								t.Fatalf("step %d: %s[%d] = %v, PyTorch's rule gives %v (from %v, gradient %v); off by %.3g of the largest update %.3g, want ≤ %g",
									p.Step, name, i, got[name][i], w[i], prev[name][i], grads(t, m.Groups())[name][i], diff/largest, largest, optTol)
							}
						}
					}
					prev = got
				}
			}
			lc := loader.Config{Batch: 2, Seq: 5}
			path := filepath.Join(t.TempDir(), "ck.safetensors")
			first := newLM(t, d, cfg)
			prev = values(t, first.Groups())
			tr := newTrainer(t, d, first, newLoader(t, d, txt, lc), train.Config{Optimizer: c.opt, Schedule: sched, Steps: 2,
				Checkpoint: path, OnStep: onStep(first)})
			_, err := tr.Run(context.Background())
			check(t, err)

			other := cfg
			other.seed = 8
			second := newLM(t, d, other)
			tr = newTrainer(t, d, second, newLoader(t, d, txt, lc), train.Config{Optimizer: c.opt, Schedule: sched, Steps: 3,
				OnStep: onStep(second)})
			ck, err := train.ReadCheckpoint(path)
			check(t, err)
			check(t, tr.Resume(ck))
			if diff := maxDiff(t, prev, values(t, second.Groups())); diff != 0 {
				t.Fatalf("the resumed model's weights differ from the saved ones by %g", diff)
			}
			_, err = tr.Run(context.Background())
			check(t, err)
			if len(steps) != 3 || steps[0] != 1 || steps[2] != 3 {
				t.Errorf("steps %v, want [1 2 3]", steps)
			}
		})
	}
}
