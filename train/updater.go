package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/inuse"
	"github.com/gocurrent/gocurrent/rnn"
)

// Updater is an optimizer at work in a training loop of one's own, as
// PyTorch's torch.optim with clip_grad_norm_: the optimizer's state on the
// device over a model's parameter groups, the step count, and the step's
// verdict decided on the device as the Trainer decides it (device.
// StepGuard: the clipping coefficient, and a step whose loss or gradient is
// not finite changing nothing). A step of the loop:
//
//	u.ZeroGrad()
//	// the forward, the loss into a one-element buffer, the backward
//	res, err := u.Step(train.StepConfig{Loss: loss, ClipNorm: 5})
//
// Save writes the weights and the state in the Trainer's layout, and Load
// restores both, so that a loop resumed from its checkpoint takes the
// steps it would have taken without stopping, bit for bit. An Updater is
// used by one goroutine at a time (a second goroutine's call is
// rnn.ErrBusy); after Close every method but the getters returns an error
// matching rnn.ErrClosed.
type Updater struct {
	dev    device.Device
	cfg    Optimizer
	groups []Group
	opt    *optimizer
	steps  int64
	// norm is the gradient's squared norm (one element of the groups'
	// dtype), zero a zero loss where the step gives none, guard
	// device.StepGuard's verdict, record its figures: loss, norm, skip.
	norm, zero, guard, record device.Buffer
	g                         inuse.Word
}

// StepConfig is one step of an Updater.
type StepConfig struct {
	// Loss, when set, is one element of the parameters' dtype on the
	// device: the step's loss, reported back and checked with the
	// gradient's norm (a NaN or infinite loss skips the step). Without it
	// only the gradient is checked.
	Loss device.Buffer
	// LR is the step's learning rate; 0 means the Optimizer's LR.
	// Schedule.Rate gives a schedule's.
	LR float64
	// ClipNorm clips the gradients' global norm to it (PyTorch's
	// clip_grad_norm_), ClipValue each element to ±ClipValue
	// (clip_grad_value_); 0 leaves them.
	ClipNorm, ClipValue float64
	// Scale multiplies the loss and the gradient before the step (1/N
	// makes N micro-batches' summed losses their mean, as accumulation
	// over micro-batches of sums wants); 0 means 1.
	Scale float64
}

// StepResult is what a step found, read back from the device.
type StepResult struct {
	// Step is the steps taken so far, this one included when it was.
	Step int64
	// Loss and GradNorm are the step's (scaled), before clipping.
	Loss, GradNorm float64
	// Skipped says the loss or the gradient was not finite: nothing
	// changed, and the step count did not move.
	Skipped bool
}

// updaterKey is the checkpoint metadata an Updater writes: JSON
// {"version", "step", "optimizer"}.
const updaterKey = "updater"

type updaterState struct {
	Version   int       `json:"version"`
	Step      int64     `json:"step"`
	Optimizer Optimizer `json:"optimizer"`
}

// NewUpdater makes cfg's state for groups on d: every slot zero, step 0.
// The groups' parameters must be of one dtype.
func NewUpdater(d device.Device, cfg Optimizer, groups []Group) (_ *Updater, err error) {
	if d == nil || len(groups) == 0 {
		return nil, errors.New("train: NewUpdater needs a device and parameter groups")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dt := groups[0].Params.DType()
	for _, g := range groups {
		if g.Params == nil || g.Params.DType() != dt {
			return nil, fmt.Errorf("train: NewUpdater: group %q is not of the first group's dtype %v", g.Name, dt)
		}
	}
	u := &Updater{dev: d, cfg: cfg, groups: groups}
	defer func() {
		if err != nil {
			err = errors.Join(err, u.free())
		}
	}()
	if u.opt, err = newOptimizer(d, cfg, groups); err != nil {
		return nil, err
	}
	k := d.Kernels()
	for _, b := range []struct {
		buf   *device.Buffer
		bytes int64
		dt    device.DType
	}{{&u.norm, dt.Size(), dt}, {&u.zero, dt.Size(), dt}, {&u.guard, 16, device.Float64}, {&u.record, 24, device.Float64}} {
		if *b.buf, err = d.Alloc(b.bytes, device.Workspace); err != nil {
			return nil, fmt.Errorf("train: NewUpdater: %w", err)
		}
		if err = k.Fill(device.Fill{DType: b.dt, N: int(b.bytes / b.dt.Size()), X: *b.buf}); err != nil {
			return nil, fmt.Errorf("train: NewUpdater: %w", err)
		}
	}
	return u, nil
}

// Optimizer is the configuration the Updater was made with.
func (u *Updater) Optimizer() Optimizer { return u.cfg }

// Steps is the number of steps taken (skipped ones aside).
func (u *Updater) Steps() int64 { return u.steps }

func (u *Updater) enter(method string) error {
	switch u.g.Enter() {
	case inuse.Closed:
		return fmt.Errorf("train: Updater.%s: %w", method, rnn.ErrClosed)
	case inuse.Busy:
		return fmt.Errorf("train: Updater.%s: %w (one goroutine at a time)", method, rnn.ErrBusy)
	}
	return nil
}

// ZeroGrad queues zeroing every group's gradients (Backward adds into
// them).
func (u *Updater) ZeroGrad() error {
	if err := u.enter("ZeroGrad"); err != nil {
		return err
	}
	defer u.g.Leave()
	for _, g := range u.groups {
		if err := g.Params.ZeroGrad(); err != nil {
			return fmt.Errorf("train: Updater.ZeroGrad: %q: %w", g.Name, err)
		}
	}
	return nil
}

// Step decides the step on the device from its loss and gradients (the
// non-finite check, the clipping coefficient), queues the update of every
// group, which obeys the verdict, and reads the verdict back (one wait for
// the device). A skipped step changes nothing and is not counted.
func (u *Updater) Step(c StepConfig) (StepResult, error) {
	if err := u.enter("Step"); err != nil {
		return StepResult{}, err
	}
	defer u.g.Leave()
	scale, lr := c.Scale, c.LR
	if scale == 0 {
		scale = 1
	}
	if lr == 0 {
		lr = u.cfg.LR
	}
	if !(lr > 0) || math.IsInf(lr, 0) || !(scale > 0) || math.IsInf(scale, 0) ||
		!(c.ClipNorm >= 0) || math.IsInf(c.ClipNorm, 0) || !(c.ClipValue >= 0) || math.IsInf(c.ClipValue, 0) {
		return StepResult{}, fmt.Errorf("train: Updater.Step: LR %v, Scale %v, ClipNorm %v, ClipValue %v: want finite, the first two > 0, the clips >= 0: %w",
			lr, scale, c.ClipNorm, c.ClipValue, device.ErrShape)
	}
	k := u.dev.Kernels()
	dt := u.groups[0].Params.DType()
	loss := c.Loss
	if loss.IsZero() {
		loss = u.zero
	}
	// A fresh verdict each step: a refused step does not refuse the next
	// one here, as it does among a trainer's queued steps.
	if err := k.Fill(device.Fill{DType: device.Float64, N: 2, X: u.guard}); err != nil {
		return StepResult{}, fmt.Errorf("train: Updater.Step: %w", err)
	}
	for i, g := range u.groups {
		_, grad := g.Params.Flat()
		if err := k.SumSquares(device.SumSquares{DType: dt, N: g.Params.Len(), X: grad, Out: u.norm, Accumulate: i > 0}); err != nil {
			return StepResult{}, fmt.Errorf("train: Updater.Step: the gradient's norm: %w", err)
		}
	}
	if err := k.StepGuard(device.StepGuard{DType: dt, Loss: loss, NormSq: u.norm, Scale: scale, ClipNorm: c.ClipNorm,
		Record: u.record, Guard: u.guard}); err != nil {
		return StepResult{}, fmt.Errorf("train: Updater.Step: %w", err)
	}
	if err := u.opt.step(u.dev, u.groups, lr, int(u.steps+1), u.guard, c.ClipValue, device.Buffer{}); err != nil {
		return StepResult{}, fmt.Errorf("train: Updater.Step: %w", err)
	}
	rec := make([]float64, 3)
	if err := device.DownloadSlice(u.dev, rec, u.record); err != nil {
		return StepResult{}, fmt.Errorf("train: Updater.Step: %w", err)
	}
	r := StepResult{Loss: rec[0], GradNorm: rec[1], Skipped: rec[2] != 0}
	if !r.Skipped {
		u.steps++
	}
	r.Step = u.steps
	return r, nil
}

// Save writes a checkpoint of the groups' weights, the optimizer's state
// ("optim.<group>.<slot>", PyTorch's slot names, as the Trainer writes
// them) and the step count (the "updater" metadata key), with meta added
// to the metadata (a model's format and configuration), atomically
// (WriteFile).
func (u *Updater) Save(path string, meta map[string]string) error {
	if err := u.enter("Save"); err != nil {
		return err
	}
	defer u.g.Leave()
	f := &tensorFile{meta: maps.Clone(meta), tensors: map[string]tensorData{}}
	if f.meta == nil {
		f.meta = map[string]string{}
	}
	if err := addWeights(u.dev, f, u.groups); err != nil {
		return err
	}
	dt := safeDType(u.groups[0].Params.DType())
	for i, g := range u.groups {
		for s, name := range u.opt.names {
			b, err := downloadBytes(u.dev, u.opt.state[i][s].Slice(0, int64(g.Params.Len())*g.Params.DType().Size()))
			if err != nil {
				return fmt.Errorf("train: Updater.Save: %w", err)
			}
			f.tensors[optimPrefix+g.Name+"."+name] = tensorData{dtype: dt, shape: []int{g.Params.Len()}, data: b}
		}
	}
	js, err := json.Marshal(updaterState{Version: 1, Step: u.steps, Optimizer: u.cfg})
	if err != nil {
		return fmt.Errorf("train: Updater.Save: %w", err)
	}
	f.meta[updaterKey] = string(js)
	return WriteFile(path, f.encode)
}

// Load restores what Save wrote into the groups and the Updater: the
// weights, every slot of the optimizer's state and the step count. The
// checkpoint must hold the same groups and the same optimizer (its
// algorithm and the slots it keeps); any difference is an error wrapping
// ErrMismatch, and nothing is changed unless everything fits.
func (u *Updater) Load(c *Checkpoint) error {
	if err := u.enter("Load"); err != nil {
		return err
	}
	defer u.g.Leave()
	js, ok := c.file.meta[updaterKey]
	if !ok {
		return c.mismatch("no %q metadata: not a checkpoint an Updater saved", updaterKey)
	}
	var st updaterState
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		return fmt.Errorf("%s: %w: updater state: %v", c.path, ErrCorrupt, err)
	}
	switch {
	case st.Version != 1:
		return c.mismatch("updater state version %d, this Updater reads 1", st.Version)
	case st.Step < 0:
		return fmt.Errorf("%s: %w: a negative step count in the updater state", c.path, ErrCorrupt)
	case st.Optimizer.Algorithm != u.cfg.Algorithm:
		return c.mismatch("optimizer %s, the Updater's is %s", st.Optimizer.Algorithm, u.cfg.Algorithm)
	}
	type load struct {
		dst device.Buffer
		src []byte
	}
	var loads []load
	for i, g := range u.groups {
		for s, name := range u.opt.names {
			tn := optimPrefix + g.Name + "." + name
			t, ok := c.file.tensors[tn]
			if !ok {
				return c.mismatch("no tensor %q (the Updater's %s keeps %v)", tn, u.cfg.Algorithm, u.opt.names)
			}
			if len(t.shape) != 1 || t.shape[0] != g.Params.Len() || t.dtype != safeDType(g.Params.DType()) {
				return c.mismatch("tensor %q is %s %v, the Updater's slot %s [%d]", tn, t.dtype, t.shape, safeDType(g.Params.DType()), g.Params.Len())
			}
			if err := c.checkFinite(tn, t); err != nil {
				return err
			}
			loads = append(loads, load{u.opt.state[i][s], t.data})
		}
	}
	if err := c.LoadWeights(u.dev, u.groups); err != nil {
		return err
	}
	for _, l := range loads {
		if err := u.dev.Upload(l.dst, l.src); err != nil {
			return fmt.Errorf("train: Updater.Load: %w", err)
		}
	}
	u.steps = st.Step
	return nil
}

// Close frees the optimizer's state; the groups are the caller's.
func (u *Updater) Close() error {
	first, r := u.g.Close()
	if r == inuse.Busy {
		return fmt.Errorf("train: Updater.Close: %w (a call of another goroutine is inside)", rnn.ErrBusy)
	}
	if !first {
		return nil
	}
	return u.free()
}

func (u *Updater) free() error {
	var errs []error
	if u.opt != nil {
		errs = append(errs, u.opt.free(u.dev))
	}
	for _, b := range []*device.Buffer{&u.norm, &u.zero, &u.guard, &u.record} {
		if !b.IsZero() {
			errs = append(errs, u.dev.Free(*b))
			*b = device.Buffer{}
		}
	}
	return errors.Join(errs...)
}
