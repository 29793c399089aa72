package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
)

// ErrNonFinite is wrapped by the error of a step whose loss or gradient is
// NaN or infinite.
var ErrNonFinite = errors.New("train: non-finite loss or gradient")

// Config configures a Trainer. The zero value trains with Adam at 2e-3,
// a constant rate and no clipping until the loader's epochs end.
type Config struct {
	// Optimizer is the update; a zero Algorithm means NewOptimizer(Adam,
	// 2e-3).
	Optimizer Optimizer
	// Schedule scales the learning rate per step.
	Schedule Schedule
	// Steps is the number of optimizer steps to reach, counting the steps
	// of the run a Resume continues; 0 means until the loader's epochs end
	// (the loader then needs Epochs > 0).
	Steps int64
	// ClipNorm rescales the gradient when its global L2 norm exceeds it,
	// as torch.nn.utils.clip_grad_norm_ does; 0 means off.
	ClipNorm float64
	// ClipValue clamps every gradient element to [-ClipValue, ClipValue]
	// after any norm clipping (char-rnn's clipping); 0 means off.
	ClipValue float64
	// SkipNonFinite skips a step whose loss or gradient is not finite
	// (counted in Progress.Skipped) instead of returning an error; either
	// way the parameters, optimizer state and carried state stay as they
	// were before the step.
	SkipNonFinite bool
	// MaxSkips is how many steps in a row SkipNonFinite may skip before
	// Run stops with the last step's *NonFiniteError, so a run that has
	// diverged for good ends instead of skipping to the end of its data.
	// 0 means 100; a negative value means no limit.
	MaxSkips int64

	// Validation, when set, is evaluated every EvalEvery steps (0: only
	// when the run ends) and reported to OnEval. A NewSeq trainer takes
	// SeqOptions.Validation instead, on the same schedule.
	Validation *loader.Loader
	EvalEvery  int64

	// Checkpoint, when set, is the file the trainer saves to every
	// CheckpointEvery steps (0: never on a schedule), when the run ends,
	// when it is cancelled, and when a step's loss or gradient is not
	// finite (the state before that step, marked in the "trainer" metadata
	// as "stopped": "non-finite step N"). New takes an advisory lock beside
	// the file (".NAME.lock") until Close: a second trainer on the same
	// file, in any process, fails with ErrCheckpointInUse. Metadata is added to every checkpoint's
	// metadata (a model's format, configuration, vocabulary).
	Checkpoint      string
	CheckpointEvery int64
	Metadata        map[string]string

	// OnStep is called after every optimizer step, and after every step
	// SkipNonFinite skipped (Progress.NonFinite set), and OnEval after
	// every validation, on the goroutine that called Run.
	OnStep func(Progress)
	OnEval func(Evaluation)
	// Logger receives diagnostics (checkpoints written, skipped steps);
	// nil means none.
	Logger *slog.Logger

	// WarmUp says whether the first Run begins with a warm-up (a warm-up
	// that failed or was cancelled is tried again by the next Run): the
	// training forward and backward of the largest batches the data makes
	// (loader.SeqLoader.Largest), and a no-grad forward of the
	// validation's, before the first step. It changes nothing but the
	// device memory: gradients are zeroed, the loss reset, the model's
	// random state restored, no step taken. What the run will need is then
	// allocated up front, the largest first, so the cache does not
	// fragment as larger batches come, the run makes no new device
	// allocations after it, and a batch too large for the device fails at
	// once rather than hours in. WarmUpAuto (the zero value) warms up when
	// batch shapes vary (a NewSeq trainer); New's windows are all one
	// shape, and warm up with their first step.
	WarmUp WarmUp
}

// WarmUp is Config.WarmUp's setting.
type WarmUp uint8

const (
	// WarmUpAuto warms up when the batches' shapes vary.
	WarmUpAuto WarmUp = iota
	// WarmUpOff never warms up.
	WarmUpOff
)

// Progress describes the trainer after an optimizer step, or after a step
// Config.SkipNonFinite skipped: NonFinite tells them apart.
type Progress struct {
	// Step is the number of optimizer steps taken, and Steps the target
	// (0 when the loader's epochs decide). A skipped step is not one of
	// them: its Progress has the Step of the step before it.
	Step, Steps int64
	// Position is where in the data the next step starts (after a
	// skipped step too: its data is consumed).
	Position loader.Position
	// Loss is the step's mean cross-entropy in nats per token.
	Loss float64
	// GradNorm is the gradient's global L2 norm before clipping.
	GradNorm float64
	// LR is the learning rate the step used, or for a skipped step would
	// have used.
	LR float64
	// Skipped counts the steps skipped for a non-finite loss or gradient,
	// the reported one included.
	Skipped int64
	// NonFinite is nil when the step was taken. When it was skipped, it
	// is the step's error (its Step is the skipped step's number,
	// Progress.Step+1), Loss and GradNorm are its values (one of them NaN
	// or infinite), and nothing of it was applied: a loss curve or a
	// count of steps leaves it out.
	NonFinite *NonFiniteError
	// SkippedInARow is the number of steps skipped in a row up to this
	// one (what Config.MaxSkips bounds); 0 after a step taken.
	SkippedInARow int64
	// Tokens is the number of tokens trained on in this run, Elapsed the
	// run's wall time, TokensPerSecond their ratio.
	Tokens          int64
	Elapsed         time.Duration
	TokensPerSecond float64
	// DataWait is the fraction of Elapsed spent waiting for batches.
	DataWait float64
	// Memory is the device allocator's figures.
	Memory alloc.Stats
}

// Summary is what a run did.
type Summary struct {
	Steps, Skipped int64 // the trainer's totals
	Tokens         int64 // trained on in this run
	Elapsed        time.Duration
	Loss           float64 // the last step's, NaN if none
	// Validation is the last validation, nil if none ran.
	Validation *Evaluation
}

// Trainer trains a model on the batches of a loader. It keeps the
// optimizer state, the state carried between windows (one per micro-batch
// group of a step) and the position in the data, so Run can be called
// again to continue, and Save and Resume make the continuation exact
// across processes. A Trainer is used by one goroutine at a time.
type Trainer struct {
	dev    device.Device
	src    source
	cfg    Config
	warmed bool // the warm-up ran (or was not wanted)
	groups []Group

	opt    *optimizer
	ce     *rnn.CrossEntropy
	norm   device.Buffer // one element: the gradient's squared norm
	states []State       // one per micro-batch group; nil when nothing is carried
	backup [][]device.Buffer

	step, skipped int64
	pos           loader.Position

	skipRun  int64 // steps skipped in a row, for Config.MaxSkips
	lastSkip error // the last skipped step's *NonFiniteError

	random0 []uint64 // the model's random state when the step began; nil: it has none

	unlock func() error // releases Config.Checkpoint's lock; nil: none held
}

// New returns a trainer of the language model m on the batches of data,
// allocating the optimizer state and one carried state per micro-batch
// group on d.
func New(d device.Device, m Model, data *loader.Loader, cfg Config) (*Trainer, error) {
	if data == nil || m == nil {
		return nil, errors.New("train: New needs a model and a loader")
	}
	return newTrainer(d, m.Groups(), m.Classes(), &windows{dev: d, data: data, model: m, val: cfg.Validation}, cfg)
}

// newTrainer is New and NewSeq once they made their source.
func newTrainer(d device.Device, groups []Group, classes int, src source, cfg Config) (*Trainer, error) {
	if cfg.Optimizer.Algorithm == "" {
		var err error
		if cfg.Optimizer, err = NewOptimizer(Adam, 2e-3); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(src); err != nil {
		return nil, err
	}
	t := &Trainer{dev: d, src: src, cfg: cfg, groups: groups}
	if len(t.groups) == 0 {
		return nil, errors.New("train: the model has no parameters")
	}
	dt := t.groups[0].Params.DType()
	for _, g := range t.groups {
		if g.Params.DType() != dt {
			return nil, fmt.Errorf("train: parameter groups of types %v and %v; one type per model", dt, g.Params.DType())
		}
	}
	if cfg.Checkpoint != "" {
		unlock, err := lockCheckpoint(cfg.Checkpoint)
		if err != nil {
			return nil, err
		}
		t.unlock = unlock
	}
	if err := t.allocate(dt, classes); err != nil {
		return nil, errors.Join(err, t.Close())
	}
	return t, nil
}

// allocate makes the trainer's device state: the optimizer's, the loss,
// the norm's scalar, the carried states and their backups. On error the
// caller frees what was made with Close.
func (t *Trainer) allocate(dt device.DType, classes int) error {
	d := t.dev
	var err error
	if t.opt, err = newOptimizer(d, t.cfg.Optimizer, t.groups); err != nil {
		return err
	}
	if t.ce, err = rnn.NewCrossEntropyConfig(d, t.src.lossConfig(classes, dt)); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if t.norm, err = d.Alloc(dt.Size(), device.Workspace); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	t.states, err = t.src.states()
	if err != nil {
		return fmt.Errorf("train: carried state: %w", err)
	}
	t.backup = make([][]device.Buffer, len(t.states))
	for i, st := range t.states {
		for _, c := range st.Carried() {
			b, err := d.Alloc(int64(c.Len)*c.DType.Size(), device.State)
			if err != nil {
				return fmt.Errorf("train: carried state: %w", err)
			}
			t.backup[i] = append(t.backup[i], b)
		}
	}
	return nil
}

// carriedStates returns one state per micro-batch group of a loader in
// Streams mode, nil in Windows mode (nothing is carried between its
// batches) or for a model that carries no state. On error it returns the
// states made so far, for the caller to free.
func carriedStates(m Model, lc loader.Config) ([]State, error) {
	if lc.Mode != loader.Streams {
		return nil, nil
	}
	var states []State
	for range lc.Accum {
		st, err := m.NewState(lc.Batch)
		if err != nil || st == nil {
			return states, err
		}
		states = append(states, st)
	}
	return states, nil
}

func (c Config) validate(src source) error {
	if err := c.Optimizer.validate(); err != nil {
		return err
	}
	if err := c.Schedule.validate(c.Steps); err != nil {
		return err
	}
	bad := func(v float64) bool { return v < 0 || math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case c.Steps < 0 || c.EvalEvery < 0 || c.CheckpointEvery < 0:
		return fmt.Errorf("train: Steps %d, EvalEvery %d, CheckpointEvery %d; none may be negative", c.Steps, c.EvalEvery, c.CheckpointEvery)
	case c.Steps == 0 && src.epochs() == 0:
		return errors.New("train: neither Steps nor the loader's Epochs say when to stop")
	case bad(c.ClipNorm) || bad(c.ClipValue):
		return fmt.Errorf("train: ClipNorm %v, ClipValue %v; want finite and >= 0", c.ClipNorm, c.ClipValue)
	}
	return nil
}

// Step is the number of optimizer steps taken.
func (t *Trainer) Step() int64 { return t.step }

// Position is where in the data the next step starts.
func (t *Trainer) Position() loader.Position { return t.pos }

// Skipped is the number of steps skipped for a non-finite loss or gradient.
func (t *Trainer) Skipped() int64 { return t.skipped }

// Run trains until Config.Steps steps are taken or the loader's epochs
// end. A cancelled ctx is noticed after every step, taken or skipped,
// before every micro-batch of a step, and while the loader waits for data
// (however long a read of the data blocks): the run ends at a step
// boundary, a step cut short rolled back as a failed one is, the
// checkpoint is written if Config.Checkpoint is set, and Run returns an
// error wrapping ctx.Err(). A failed step (a data error, a device error, a
// non-finite loss or gradient) leaves the parameters, optimizer state,
// carried state, the model's random state and the position as they were
// before it.
func (t *Trainer) Run(ctx context.Context) (Summary, error) {
	r := t.newRun()
	var err error
	switch {
	case t.cfg.Steps > 0 && t.step >= t.cfg.Steps:
	case ctx.Err() != nil:
		err = fmt.Errorf("train: stopped before step %d: %w", t.step+1, ctx.Err())
	default:
		if err = t.warmUp(ctx); err == nil {
			err = t.steps(ctx, r)
		}
	}
	return t.finish(ctx, r, err)
}

// warmUp runs the warm-up (Config.WarmUp) before the first step, until it
// has run through once: a warm-up that failed or was cancelled runs again
// at the next Run.
func (t *Trainer) warmUp(ctx context.Context) error {
	if t.warmed || t.cfg.WarmUp == WarmUpOff {
		return nil
	}
	r := t.src.random()
	var saved []uint64
	if r != nil {
		saved = r.RandomState()
	}
	err := t.src.warm(ctx, t.ce)
	for _, g := range t.groups {
		err = errors.Join(err, g.Params.ZeroGrad())
	}
	err = errors.Join(err, t.ce.ResetLoss())
	if r != nil {
		err = errors.Join(err, r.SetRandomState(saved))
	}
	if err != nil {
		return fmt.Errorf("train: warming up: %w", err)
	}
	t.warmed = true
	return nil
}

// run is the bookkeeping of one Run, for its Progress and its Summary.
type run struct {
	start  time.Time
	wait0  time.Duration // the wait for data before the run
	tokens int64         // trained on so far
	sum    Summary
}

func (t *Trainer) newRun() *run {
	return &run{start: time.Now(), wait0: t.src.wait(), sum: Summary{Loss: math.NaN()}}
}

// steps takes steps until the target is reached, the data ends, ctx is
// cancelled or a step fails. The loader sees ctx, so a cancellation ends a
// wait for data however long its read blocks, and ctx is checked before
// every micro-batch: a step begun and cut short is rolled back as a failed
// one is, and the run ends at a step boundary either way.
func (t *Trainer) steps(ctx context.Context, r *run) error {
	inStep := false
	for b, err := range t.src.batches(ctx, t.pos) {
		if err == nil {
			err = ctx.Err()
		}
		if err == nil {
			inStep, err = t.feed(r, b, inStep)
		}
		if err != nil {
			if inStep {
				err = errors.Join(err, t.rollBack())
			}
			if c := ctx.Err(); c != nil && errors.Is(err, c) {
				err = fmt.Errorf("train: stopped before step %d: %w", t.step+1, err)
			}
			return err
		}
		if !b.last {
			continue
		}
		inStep = false
		p, err := t.endStep(b.next)
		if err != nil {
			return err
		}
		t.report(r, &p)
		if p.NonFinite != nil {
			if err := t.afterSkip(ctx); err != nil {
				return err
			}
			continue
		}
		done, err := t.afterStep(ctx, r)
		if err != nil {
			return err
		}
		if done {
			break
		}
	}
	r.sum.Tokens = r.tokens
	return nil
}

// feed runs micro-batch b, beginning a step first unless one is under
// way, and reports whether a step is under way after it.
func (t *Trainer) feed(r *run, b micro, inStep bool) (bool, error) {
	if !inStep {
		if b.group != 0 {
			return false, fmt.Errorf("train: the loader started at micro-batch %d of a step", b.group)
		}
		if err := t.beginStep(); err != nil {
			return false, err
		}
	}
	r.tokens += b.tokens
	return true, t.microBatch(b)
}

// report completes the figures of a step taken or skipped, keeps a taken
// step's loss for the summary, and calls OnStep.
func (t *Trainer) report(r *run, p *Progress) {
	elapsed := time.Since(r.start)
	p.Tokens, p.Elapsed = r.tokens, elapsed
	p.TokensPerSecond = float64(r.tokens) / elapsed.Seconds()
	p.DataWait = float64(t.src.wait()-r.wait0) / float64(elapsed)
	p.Skipped, p.SkippedInARow, p.Memory = t.skipped, t.skipRun, t.dev.MemStats()
	r.sum.Tokens = r.tokens
	if p.NonFinite == nil {
		r.sum.Loss = p.Loss
	}
	if t.cfg.OnStep != nil {
		t.cfg.OnStep(*p)
	}
}

// afterStep validates and checkpoints after a step taken when they are
// due. It returns whether the run reached its target, and an error when
// ctx was cancelled.
func (t *Trainer) afterStep(ctx context.Context, r *run) (done bool, err error) {
	if t.src.hasValidation() && t.cfg.EvalEvery > 0 && t.step%t.cfg.EvalEvery == 0 {
		ev, err := t.validate(ctx)
		if err != nil {
			return false, err
		}
		r.sum.Validation = &ev
	}
	if t.cfg.Checkpoint != "" && t.cfg.CheckpointEvery > 0 && t.step%t.cfg.CheckpointEvery == 0 {
		if err := t.Save(t.cfg.Checkpoint); err != nil {
			return false, err
		}
	}
	if t.cfg.Steps > 0 && t.step >= t.cfg.Steps {
		return true, nil
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("train: stopped after step %d: %w", t.step, err)
	}
	return false, nil
}

// afterSkip ends the run after a skipped step when ctx is cancelled or the
// steps skipped in a row reach Config.MaxSkips.
func (t *Trainer) afterSkip(ctx context.Context) error {
	limit := t.cfg.MaxSkips
	if limit == 0 {
		limit = defaultMaxSkips
	}
	if limit > 0 && t.skipRun >= limit {
		return fmt.Errorf("train: %d steps in a row skipped (Config.MaxSkips), the last: %w", t.skipRun, t.lastSkip)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("train: stopped after a skipped step (step %d done): %w", t.step, err)
	}
	return nil
}

// defaultMaxSkips is Config.MaxSkips's zero value's meaning.
const defaultMaxSkips = 100

// finish ends a run that stopped with err (nil: it reached its end): it
// fills in the summary, validates if the last step was not validated, and
// writes the checkpoint unless the run failed (a cancellation is not a
// failure).
func (t *Trainer) finish(ctx context.Context, r *run, err error) (Summary, error) {
	r.sum.Steps, r.sum.Skipped, r.sum.Elapsed = t.step, t.skipped, time.Since(r.start)
	if err == nil && t.src.hasValidation() && (r.sum.Validation == nil || r.sum.Validation.Step != t.step) {
		var ev Evaluation
		if ev, err = t.validate(ctx); err == nil {
			r.sum.Validation = &ev
		}
	}
	stopped := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	var nf *NonFiniteError
	diverged := errors.As(err, &nf)
	whole := !errors.Is(err, errRollBack) // the state is one a step boundary left
	if t.cfg.Checkpoint != "" && whole && (err == nil || stopped || diverged) {
		mark := ""
		if diverged {
			// A refused step changed nothing: the state before it is
			// whole, and worth keeping.
			mark = fmt.Sprintf("non-finite step %d", nf.Step)
		}
		serr := t.save(t.cfg.Checkpoint, mark)
		switch {
		case serr != nil:
			err = errors.Join(err, serr)
		case diverged:
			err = fmt.Errorf("%w; the state before step %d is saved in %s", err, nf.Step, t.cfg.Checkpoint)
		}
	}
	return r.sum, err
}

// beginStep zeroes the gradients and the loss and copies the carried state
// and the model's random state aside, so a failed step can put them back.
func (t *Trainer) beginStep() error {
	if r := t.src.random(); r != nil {
		t.random0 = r.RandomState()
	}
	for _, g := range t.groups {
		if err := g.Params.ZeroGrad(); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	if err := t.ce.ResetLoss(); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	k := t.dev.Kernels()
	for i, st := range t.states {
		for j, c := range st.Carried() {
			if err := k.Copy(device.Copy{Dst: t.backup[i][j], Src: c.Buffer}); err != nil {
				return fmt.Errorf("train: %w", err)
			}
		}
	}
	return nil
}

// errRollBack is wrapped by the error of a rollBack that failed: the state
// is then not the state before the step, and no checkpoint is written of
// it.
var errRollBack = errors.New("train: restoring the state before the step failed")

// rollBack puts the carried state and the model's random state (the
// dropout masks drawn) back as beginStep found them.
func (t *Trainer) rollBack() error {
	if r := t.src.random(); r != nil && t.random0 != nil {
		if err := r.SetRandomState(t.random0); err != nil {
			return fmt.Errorf("%w: the random state: %w", errRollBack, err)
		}
	}
	k := t.dev.Kernels()
	for i, st := range t.states {
		st.Detach()
		for j, c := range st.Carried() {
			if err := k.Copy(device.Copy{Dst: c.Buffer, Src: t.backup[i][j]}); err != nil {
				return fmt.Errorf("%w: the carried state: %w", errRollBack, err)
			}
		}
	}
	return nil
}

// microBatch runs the forward, loss and backward of one micro-batch of a
// step, adding its gradient into the step's.
func (t *Trainer) microBatch(b micro) error {
	var st State
	if t.states != nil {
		st = t.states[b.group]
		if b.reset {
			if err := st.Reset(); err != nil {
				return fmt.Errorf("train: %w", err)
			}
		}
	}
	if err := t.src.run(b, t.ce, st); err != nil {
		return err
	}
	if st != nil {
		st.Detach()
	}
	return nil
}

// endStep checks the loss and the gradient, clips and updates. It returns
// the step's Progress, NonFinite set for a skipped step, for report to
// complete.
func (t *Trainer) endStep(next loader.Position) (Progress, error) {
	// A source whose micro-batches add sums (sequences) makes them the
	// step's mean here: the norm and loss by scale, the gradient in clip.
	scale := t.src.scale()
	norm, err := t.gradNorm()
	var loss float64
	if err == nil {
		loss, err = t.ce.Loss()
	}
	norm, loss = norm*scale, loss*scale
	lr := t.cfg.Schedule.Rate(t.cfg.Optimizer.LR, t.step, t.cfg.Steps)
	if err == nil && (!finite(loss) || !finite(norm)) {
		nf := &NonFiniteError{Step: t.step + 1, Loss: loss, GradNorm: norm}
		err = nf
		if t.cfg.SkipNonFinite {
			if err := t.rollBack(); err != nil {
				return Progress{}, err
			}
			t.skipped++
			t.skipRun++
			t.lastSkip = nf
			t.pos = next
			if t.cfg.Logger != nil && t.skipRun&(t.skipRun-1) == 0 {
				// The 1st, 2nd, 4th, 8th... skip of a run of them: a run
				// that diverged for good logs a few lines, not one a step.
				t.cfg.Logger.Warn("train: skipped a step", "error", nf, "skipped", t.skipped, "in_a_row", t.skipRun)
			}
			return Progress{Step: t.step, Steps: t.cfg.Steps, Position: next, Loss: loss, GradNorm: norm, LR: lr, NonFinite: nf}, nil
		}
	}
	if err == nil {
		err = t.clip(norm, scale)
	}
	if err == nil {
		err = t.opt.step(t.dev, t.groups, lr, int(t.step+1))
	}
	if err != nil {
		return Progress{}, errors.Join(err, t.rollBack())
	}
	t.step++
	t.skipRun = 0
	t.pos = next
	return Progress{Step: t.step, Steps: t.cfg.Steps, Position: next, Loss: loss, GradNorm: norm, LR: lr}, nil
}

// gradNorm is the global L2 norm of every gradient.
func (t *Trainer) gradNorm() (float64, error) {
	k := t.dev.Kernels()
	dt := t.groups[0].Params.DType()
	for i, g := range t.groups {
		_, grad := g.Params.Flat()
		if err := k.SumSquares(device.SumSquares{DType: dt, N: g.Params.Len(), X: grad, Out: t.norm, Accumulate: i > 0}); err != nil {
			return 0, fmt.Errorf("train: gradient norm: %w", err)
		}
	}
	sq, err := readScalar(t.dev, dt, t.norm)
	if err != nil {
		return 0, fmt.Errorf("train: gradient norm: %w", err)
	}
	return math.Sqrt(sq), nil
}

// clip multiplies the gradients by scale (the source's, making a sum a
// mean) and applies ClipNorm (PyTorch's coefficient max/(norm+1e-6),
// applied only when below 1) to the scaled gradient, whose norm is norm,
// in one pass; then ClipValue.
func (t *Trainer) clip(norm, scale float64) error {
	k := t.dev.Kernels()
	dt := t.groups[0].Params.DType()
	coef := scale
	if c := t.cfg.ClipNorm; c > 0 && c/(norm+1e-6) < 1 {
		coef *= c / (norm + 1e-6)
	}
	if coef != 1 {
		for _, g := range t.groups {
			_, grad := g.Params.Flat()
			if err := k.Axpby(device.Axpby{DType: dt, N: g.Params.Len(), Alpha: coef, X: grad, Y: grad}); err != nil {
				return fmt.Errorf("train: clipping: %w", err)
			}
		}
	}
	if c := t.cfg.ClipValue; c > 0 {
		for _, g := range t.groups {
			_, grad := g.Params.Flat()
			if err := k.Clamp(device.Clamp{DType: dt, N: g.Params.Len(), Min: -c, Max: c, X: grad}); err != nil {
				return fmt.Errorf("train: clipping: %w", err)
			}
		}
	}
	return nil
}

func (t *Trainer) validate(ctx context.Context) (Evaluation, error) {
	ev, err := t.src.validate(ctx)
	if err != nil {
		return ev, fmt.Errorf("train: validation after step %d: %w", t.step, err)
	}
	ev.Step = t.step
	if t.cfg.OnEval != nil {
		t.cfg.OnEval(ev)
	}
	return ev, nil
}

// Close frees the trainer's device memory (not the model's or the
// loader's).
func (t *Trainer) Close() error {
	var errs []error
	if t.opt != nil {
		errs = append(errs, t.opt.free(t.dev))
		t.opt = nil
	}
	if t.ce != nil {
		errs = append(errs, t.ce.Close())
		t.ce = nil
	}
	if !t.norm.IsZero() {
		errs = append(errs, t.dev.Free(t.norm))
		t.norm = device.Buffer{}
	}
	for _, st := range t.states {
		errs = append(errs, st.Free())
	}
	for _, bufs := range t.backup {
		for _, b := range bufs {
			errs = append(errs, t.dev.Free(b))
		}
	}
	t.states, t.backup = nil, nil
	if t.unlock != nil {
		errs = append(errs, t.unlock())
		t.unlock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("train: Close: %w", err)
	}
	return nil
}

// NonFiniteError reports a step whose loss or gradient norm is NaN or
// infinite. It wraps ErrNonFinite.
type NonFiniteError struct {
	Step           int64
	Loss, GradNorm float64
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("train: step %d: loss %v, gradient norm %v (the step was not applied)", e.Step, e.Loss, e.GradNorm)
}

func (e *NonFiniteError) Unwrap() error { return ErrNonFinite }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// readScalar downloads one element of dt.
func readScalar(d device.Device, dt device.DType, b device.Buffer) (float64, error) {
	if dt == device.Float64 {
		v := []float64{0}
		err := device.DownloadSlice(d, v, b.Slice(0, 8))
		return v[0], err
	}
	v := []float32{0}
	err := device.DownloadSlice(d, v, b.Slice(0, 4))
	return float64(v[0]), err
}
