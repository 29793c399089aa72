package train

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
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
	// the file (".NAME.lock") until Close, which removes it: a second
	// trainer on the same file, in any process, fails with
	// ErrCheckpointInUse. Metadata is added to every checkpoint's
	// metadata (a model's format, configuration, vocabulary); keys
	// starting with "crc32c." are the checkpoint's checksums, an error.
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

	// Pipeline is how many steps the trainer queues on the device before
	// it reads back their losses and gradient norms, all in one copy that
	// it does not wait for while the device has work: a steady step then
	// never waits for the device (device.Counts.Syncs), and the host
	// queues the next steps while the device runs the last. 0 or 1 reads
	// each step's back at its end, waiting for it. Whatever the setting,
	// the steps taken, their results and the checkpoints are the same:
	// clipping and the non-finite check are decided on the device
	// (device.StepGuard), a step found non-finite when read back voids
	// the steps queued after it (they change nothing, and are run again
	// after a skip: up to Pipeline-1 steps of work lost), and the trainer
	// reads back at once at every step a validation, a checkpoint or the
	// end of the run is due. What changes: OnStep is called for a step
	// when it is read back, up to Pipeline-1 steps late, a run cancelled
	// ends after the steps already queued (cancelling from OnStep
	// included), and Save from OnStep is refused while later steps are
	// queued (CheckpointEvery saves at its step). Memory: three float64
	// per pipelined step. At most MaxPipeline.
	Pipeline int

	// Graphs records the device work of a step's micro-batches once, as
	// device graphs (device.Grapher), and replays them at every later
	// steady step: one launch for each micro-batch where its forward and
	// backward made hundreds of calls, which on a GPU is most of a small
	// model's step time; the step's end (norm, verdict, update) is in the
	// last micro-batch's graph, reading the step's rate and number from
	// device memory. It applies to New's trainers of a model that is
	// Replayable in training (with dropout too: ReplayTracker) on a device
	// that records graphs, and is ignored otherwise; the first step, and a
	// step whose micro-batches start a stream afresh, run eagerly. The
	// steps, their results and the checkpoints are the same bits either
	// way. Costs: the batches are copied into the graphs' own buffers
	// (two device copies a micro-batch) and the step's values from the
	// host (one copy of 40 bytes a step), and device memory freed while a
	// graph lives stays allocated until the trainer closes
	// (device.Grapher).
	Graphs bool

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

	// Comm, when it has more than one rank, makes the run data-parallel
	// (package dist): each rank trains on its own share of every step's
	// batch, which its loader reads (loader.Config.Shard or
	// loader.SeqConfig.Shard, rank r of Comm.Size(): its own streams or
	// windows, its own part of each batch of sequences, whose step's mean
	// counts the whole batch's rows), and the ranks' gradients and losses are summed at
	// every step, after the last micro-batch's backward (a GradNotifier
	// model's group by group, while the backward of the layers below
	// runs), before the norm, the clipping and the verdict. Each rank's
	// loss is weighted 1/Size, so the sum is the mean of the undivided
	// batch and the step is the one a single process with the whole
	// batch takes, up to the order of the sums. Every rank then decides
	// and takes the same steps. The first Run broadcasts rank 0's weights
	// and optimizer state, and checks that every rank stands at the same
	// step. Rank 0 alone writes the checkpoints (and locks the file),
	// with the carried state of the whole batch gathered from the ranks;
	// such a checkpoint resumes on any number of ranks whose shares make
	// the same batch, and on one. A rank whose ctx is cancelled stops the
	// whole job after the same step on every rank: each votes at every
	// step's end, the votes are summed with the gradients, and Run
	// returns an error wrapping ErrRankStopped (and context.Canceled) on
	// every rank once the step that counted the vote is read back; the
	// checkpoint holds that step. (A rank waiting for data while another
	// is stopped keeps waiting for it: its reads are not cancelled.)
	// Graphs is ignored. Nil means one rank.
	Comm dist.Comm
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
// across processes. A Trainer is used by one goroutine at a time: a call
// meeting another is rnn.ErrBusy (Save from OnStep or OnEval excepted).
type Trainer struct {
	g      guard
	dev    device.Device
	src    source
	cfg    Config
	warmed bool  // the warm-up ran (or was not wanted)
	saved  int64 // the step of the checkpoint on disk at Config.Checkpoint (SaveError.Saved)
	groups []Group

	opt    *optimizer
	ce     *rnn.CrossEntropy
	norm   device.Buffer // one element: the gradient's squared norm
	states []State       // one per micro-batch group; nil when nothing is carried
	backup [][]device.Buffer

	// The steps decided on the device (Config.Pipeline).
	guard    device.Buffer     // device.StepGuard's verdict: two float64
	records  device.Buffer     // a step's device.StepGuard record per slot, a slot per step queued
	stage    device.HostBuffer // where records is read back
	queue    []queued          // steps queued and not yet read back, oldest first
	queued   int64             // steps queued so far: the next one's slot is queued % slots
	sent     int               // queue[:sent] are the steps the readback in flight covers
	readback device.Event      // that readback; nil when none is in flight
	ahead    int               // steps queued after the one OnStep is told of, while it is

	step, skipped int64
	sg            stepGraphs // Config.Graphs's recording (graph.go)
	pos           loader.Position

	skipRun  int64 // steps skipped in a row, for Config.MaxSkips
	lastSkip error // the last skipped step's *NonFiniteError

	random0 []uint64 // the model's random state when the step began; nil: it has none

	unlock func() error // releases Config.Checkpoint's lock; nil: none held

	par *parallel // Config.Comm of more than one rank (dist.go); nil otherwise
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
	t := &Trainer{dev: d, src: src, cfg: cfg, groups: groups, saved: -1}
	if len(t.groups) == 0 {
		return nil, errors.New("train: the model has no parameters")
	}
	dt := t.groups[0].Params.DType()
	for _, g := range t.groups {
		if g.Params.DType() != dt {
			return nil, fmt.Errorf("train: parameter groups of types %v and %v; one type per model", dt, g.Params.DType())
		}
	}
	if cfg.Checkpoint != "" && (cfg.Comm == nil || cfg.Comm.Rank() == 0) {
		unlock, err := lockCheckpoint(cfg.Checkpoint)
		if err != nil {
			return nil, err
		}
		t.unlock = unlock
	}
	t.graphsFor()
	err := t.allocate(dt, classes)
	if err == nil {
		err = t.allocValues()
	}
	if err != nil {
		return nil, errors.Join(err, t.Close())
	}
	if err := t.newParallel(); err != nil {
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
	if t.guard, err = d.Alloc(16, device.Workspace); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if err := d.Kernels().Fill(device.Fill{DType: device.Float64, N: 2, X: t.guard}); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if t.records, err = d.Alloc(t.recordsLen(), device.Workspace); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if t.stage, err = d.Staging(t.recordsLen()); err != nil {
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

// MaxPipeline bounds Config.Pipeline: a few thousand steps in flight
// gain nothing over eight, and each holds device memory and a graph slot.
const MaxPipeline = 4096

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
	case c.Pipeline < 0 || c.Pipeline > MaxPipeline:
		return fmt.Errorf("train: Pipeline %d; want 0 to %d", c.Pipeline, MaxPipeline)
	}
	// At New, not at the first checkpoint, which encode would refuse
	// after the run had trained its steps.
	for k := range c.Metadata {
		if strings.HasPrefix(k, checksumPrefix) {
			return fmt.Errorf("train: Metadata key %q: keys starting with %q hold the checkpoint's checksums", k, checksumPrefix)
		}
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
// error wrapping ctx.Err(); with Config.Pipeline above 1, the steps
// already queued are taken first. A failed step (a data error, a
// non-finite loss or gradient, decided on the device) leaves the
// parameters, optimizer state, carried state, the model's random state and
// the position as they were before it, however many steps were queued
// after it.
func (t *Trainer) Run(ctx context.Context) (Summary, error) {
	if err := t.g.enter("Run", false); err != nil {
		return Summary{Loss: math.NaN()}, err
	}
	defer t.g.leave()
	r := t.newRun()
	var err error
	switch {
	case t.cfg.Steps > 0 && t.step >= t.cfg.Steps:
	case ctx.Err() != nil && t.par == nil:
		// A data-parallel rank goes on to the first step's stop vote.
		err = fmt.Errorf("train: stopped before step %d: %w", t.step+1, ctx.Err())
	default:
		if err = t.syncRanks(); err == nil {
			err = t.warmUp(ctx)
		}
		if err == nil {
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
	stop   bool // a data-parallel rank was asked to stop: its vote at the next step's end (dist.go)
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
// one is, and the run ends at a step boundary either way. A step found
// non-finite when read back voids the steps queued after it; the data is
// then read again from the position after it.
func (t *Trainer) steps(ctx context.Context, r *run) error {
	// The verdict starts clear, whatever a failed run left in it.
	if err := t.dev.Kernels().Fill(device.Fill{DType: device.Float64, N: 2, X: t.guard}); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	for {
		again, err := t.pass(ctx, r)
		if err != nil {
			return err
		}
		if !again {
			r.sum.Tokens = r.tokens
			return nil
		}
	}
}

// pass is steps over one iteration of the data from t.pos. It returns
// again when a skipped step voided steps queued after it, whose data is to
// be read again.
func (t *Trainer) pass(ctx context.Context, r *run) (again bool, err error) {
	inStep := false
	data := ctx
	if t.par != nil {
		// A rank stops at the step the ranks agree on (stop votes), not
		// where its own ctx says, and its data must last until then.
		data = context.WithoutCancel(ctx)
	}
	for b, err := range t.src.batches(data, t.pos) {
		if err == nil && t.par == nil {
			err = ctx.Err()
		}
		if t.par != nil && ctx.Err() != nil {
			r.stop = true
		}
		if err == nil {
			inStep, err = t.feed(r, b, inStep)
		}
		if err == nil && b.last {
			if err = t.endStep(r, b.next); err == nil {
				inStep = false
			}
		}
		if err != nil {
			return false, t.fail(ctx, r, err, inStep)
		}
		if !b.last {
			continue
		}
		n := t.step + int64(len(t.queue)) // the step just queued, if none before it is refused
		due := t.cfg.Steps > 0 && n >= t.cfg.Steps ||
			t.src.hasValidation() && t.cfg.EvalEvery > 0 && n%t.cfg.EvalEvery == 0 ||
			t.cfg.Checkpoint != "" && t.cfg.CheckpointEvery > 0 && n%t.cfg.CheckpointEvery == 0
		var o outcome
		if due || t.cfg.Pipeline <= 1 {
			o, err = t.drain(r)
		} else {
			o, err = t.poll(r)
		}
		switch {
		case err != nil:
			return false, t.fail(ctx, r, err, false)
		case o.refused != nil:
			return false, o.refused
		case o.stop:
			return false, t.stopVoted(r)
		case o.skipped:
			if err := t.afterSkip(ctx); err != nil {
				return false, err
			}
			if o.voided {
				return true, nil
			}
		case o.taken && len(t.queue) == 0:
			done, err := t.afterStep(ctx, r)
			if err != nil || done {
				return false, err
			}
		}
	}
	o, err := t.drain(r)
	if err != nil {
		return false, t.fail(ctx, r, err, false)
	}
	if o.refused != nil {
		return false, o.refused
	}
	if o.stop {
		return false, t.stopVoted(r)
	}
	if o.skipped {
		if err := t.afterSkip(ctx); err != nil {
			return false, err
		}
		return o.voided, nil
	}
	if o.taken {
		_, err := t.afterStep(ctx, r)
		return false, err
	}
	return false, nil
}

// fail ends a pass that stopped with err: it reads back the steps queued
// before (they stand, unless one is refused), rolls back the step under
// way when inStep, and returns the run's error.
func (t *Trainer) fail(ctx context.Context, r *run, err error, inStep bool) error {
	o, derr := t.drain(r)
	switch {
	case derr != nil:
		err = errors.Join(derr, err)
	case o.refused != nil:
		// A step queued before the failure was refused: it failed first.
		err = errors.Join(o.refused, err)
	case !o.skipped && inStep:
		// Nothing refused: the step under way is undone alone.
		err = errors.Join(err, t.rollBack(t.random0))
	}
	if c := ctx.Err(); c != nil && errors.Is(err, c) {
		err = fmt.Errorf("train: stopped before step %d: %w", t.step+1, err)
	}
	return err
}

// feed runs micro-batch b, beginning a step first unless one is under
// way, and reports whether a step is under way after it.
func (t *Trainer) feed(r *run, b micro, inStep bool) (bool, error) {
	if !inStep && b.group != 0 {
		return false, fmt.Errorf("train: the loader started at micro-batch %d of a step", b.group)
	}
	if !inStep {
		t.beginHost()
	}
	r.tokens += b.tokens
	replayed, err := t.replay(b)
	if err != nil || replayed {
		// A replay of group 0 began the step on the device; a failed one
		// queued nothing.
		return inStep || replayed, err
	}
	if !inStep {
		if err := t.beginDevice(); err != nil {
			return false, err
		}
	}
	return true, t.microBatch(b)
}

// report completes the figures of a step taken or skipped, keeps a taken
// step's loss for the summary, and calls OnStep. tokens is the run's count
// at the end of the step.
func (t *Trainer) report(r *run, p *Progress, tokens int64) {
	elapsed := time.Since(r.start)
	p.Tokens, p.Elapsed = tokens, elapsed
	p.TokensPerSecond = float64(tokens) / elapsed.Seconds()
	p.DataWait = float64(t.src.wait()-r.wait0) / float64(elapsed)
	p.Skipped, p.SkippedInARow, p.Memory = t.skipped, t.skipRun, t.dev.MemStats()
	r.sum.Tokens = tokens
	if p.NonFinite == nil {
		r.sum.Loss = p.Loss
	}
	if t.cfg.OnStep != nil {
		t.g.beginCallback()
		t.cfg.OnStep(*p)
		t.g.endCallback()
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
		if err := t.save(t.cfg.Checkpoint, ""); err != nil {
			return false, t.saveError(err)
		}
	}
	if t.cfg.Steps > 0 && t.step >= t.cfg.Steps {
		return true, nil
	}
	if err := ctx.Err(); err != nil && t.par == nil {
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
	if err := ctx.Err(); err != nil && t.par == nil {
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
		serr := t.saveError(t.save(t.cfg.Checkpoint, mark))
		switch {
		case serr != nil:
			err = errors.Join(err, serr)
		case diverged:
			err = fmt.Errorf("%w; the state before step %d is saved in %s", err, nf.Step, t.cfg.Checkpoint)
		}
	}
	return r.sum, err
}

// beginHost and beginDevice begin a step: they zero the gradients and the
// loss and copy the carried state and the model's random state aside, so a
// failed step can put them back. The copy of the carried state is guarded:
// while a step queued before is refused (device.StepGuard), the copy made
// at that step's start is kept. beginDevice's work is what a step's
// recording holds (Config.Graphs).
func (t *Trainer) beginHost() {
	t.sg.ended = false
	t.random0 = nil
	if r := t.src.random(); r != nil {
		t.random0 = r.RandomState()
	}
}

func (t *Trainer) beginDevice() error {
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
			if err := k.GuardedCopy(device.GuardedCopy{Dst: t.backup[i][j], Src: c.Buffer, Guard: t.guard}); err != nil {
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

// rollBack puts the carried state back as the backup holds it, the
// model's random state (the dropout masks drawn) to random0, and clears
// the guard's verdict.
func (t *Trainer) rollBack(random0 []uint64) error {
	if r := t.src.random(); r != nil && random0 != nil {
		if err := r.SetRandomState(random0); err != nil {
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
	if err := k.Fill(device.Fill{DType: device.Float64, N: 2, X: t.guard}); err != nil {
		return fmt.Errorf("%w: the step guard: %w", errRollBack, err)
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
	run := func() error { return t.src.run(b, t.ce, st) }
	if t.par != nil && b.last {
		if err := t.lastBackward(run); err != nil {
			return err
		}
	} else if err := run(); err != nil {
		return err
	}
	if st != nil {
		st.Detach()
	}
	return nil
}

// queued is a step queued on the device and not yet read back.
type queued struct {
	slot    int             // its loss and norm in records
	next    loader.Position // the position after it
	random0 []uint64        // the model's random state at its start
	lr      float64
	tokens  int64 // the run's tokens at its end
}

// recordSize is the bytes of a step's record: device.StepGuard's loss,
// norm and skip flag, float64s.
const recordSize = 24

// slots is the number of steps records holds.
func (t *Trainer) slots() int { return max(1, t.cfg.Pipeline) }

// recordsLen is the bytes of records: a record per slot and, in a
// data-parallel run, after them the stop votes of each slot's step (a
// float64 each, dist.go).
func (t *Trainer) recordsLen() int64 {
	n := recordSize * int64(t.slots())
	if c := t.cfg.Comm; c != nil && c.Size() > 1 {
		n += 8 * int64(t.slots())
	}
	return n
}

// endStep queues the end of a step: the gradient's norm, the verdict on
// the device (device.StepGuard: the non-finite check and the clipping
// coefficient), the update, which obeys it, and the step's place in the
// queue. Nothing waits for the device.
func (t *Trainer) endStep(r *run, next loader.Position) error {
	slot, n, lr := t.nextStep()
	if t.par != nil {
		// Before the norm, which must be of the summed gradient (graphs,
		// which end the step inside, are off).
		if err := t.reduceStep(r.stop, slot); err != nil {
			return err
		}
	}
	if !t.sg.ended {
		if err := t.norms(); err != nil {
			return err
		}
		if err := t.decide(slot, lr, int(n+1), device.Buffer{}); err != nil {
			return err
		}
	}
	t.sg.ended, t.sg.warm = false, true
	t.queue = append(t.queue, queued{slot: slot, next: next, random0: t.random0, lr: lr, tokens: r.tokens})
	t.queued++
	return nil
}

// nextStep is the step about to be queued: its record's slot, the steps
// before it (if no step queued before it is refused) and its rate.
func (t *Trainer) nextStep() (slot int, n int64, lr float64) {
	n = t.step + int64(len(t.queue))
	return int(t.queued % int64(t.slots())), n, t.cfg.Schedule.Rate(t.cfg.Optimizer.LR, n, t.cfg.Steps)
}

// decide queues the verdict on the step (device.StepGuard) and the
// update, which obeys it: the step's record slot, rate and 1-based number
// are the arguments, or with values (a recorded step's, stepGraphs) read
// from device memory as the kernels run.
func (t *Trainer) decide(slot int, lr float64, step int, values device.Buffer) error {
	k := t.dev.Kernels()
	dt := t.groups[0].Params.DType()
	// A source whose micro-batches add sums (sequences) makes them the
	// step's mean here: the norm and loss by scale, the gradient by the
	// coefficient, which includes it.
	g := device.StepGuard{DType: dt, Loss: t.ce.Total(), NormSq: t.norm, Scale: t.src.scale(), ClipNorm: t.cfg.ClipNorm,
		Record: t.records.Slice(int64(slot)*recordSize, recordSize), Guard: t.guard}
	var rates device.Buffer
	if !values.IsZero() {
		g.Record, g.Slot = t.records.Slice(0, recordSize*int64(t.slots())), values.Slice(0, 8)
		rates = values.Slice(8, device.RatesSize)
	}
	if err := k.StepGuard(g); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return t.opt.step(t.dev, t.groups, lr, step, t.guard, t.cfg.ClipValue, rates)
}

// norms queues the gradient's squared norm into t.norm.
func (t *Trainer) norms() error {
	k := t.dev.Kernels()
	dt := t.groups[0].Params.DType()
	for i, g := range t.groups {
		_, grad := g.Params.Flat()
		if err := k.SumSquares(device.SumSquares{DType: dt, N: g.Params.Len(), X: grad, Out: t.norm, Accumulate: i > 0}); err != nil {
			return fmt.Errorf("train: gradient norm: %w", err)
		}
	}
	return nil
}

// outcome is what reading back steps found.
type outcome struct {
	taken   bool            // the last step read back was taken
	skipped bool            // a step was skipped (Config.SkipNonFinite)
	voided  bool            // the skip voided steps queued after it
	refused *NonFiniteError // a step refused without SkipNonFinite: the run's error
	stop    bool            // a rank voted to stop at a step read back (dist.go)
}

// poll reads back what the readback in flight brought if it is done, and
// starts the next one when Config.Pipeline steps wait for it (waiting for
// the one in flight first only if it is not done yet).
func (t *Trainer) poll(r *run) (outcome, error) {
	var o outcome
	if t.readback != nil {
		done, err := t.readback.Done()
		if err != nil && !done {
			err = t.readback.Wait()
		}
		if done || err != nil {
			if o, err = t.collect(r, err); err != nil || o.skipped || o.refused != nil {
				return o, err
			}
		}
	}
	if len(t.queue)-t.sent < t.slots() {
		return o, nil
	}
	if t.readback != nil {
		// The device is Pipeline steps behind: wait for it.
		var err error
		if o, err = t.collect(r, t.readback.Wait()); err != nil || o.skipped || o.refused != nil {
			return o, err
		}
	}
	return o, t.send()
}

// drain reads back every step queued, waiting for the device.
func (t *Trainer) drain(r *run) (outcome, error) {
	var o outcome
	if t.readback != nil {
		var err error
		if o, err = t.collect(r, t.readback.Wait()); err != nil || o.skipped || o.refused != nil {
			return o, err
		}
	}
	if len(t.queue) == 0 {
		return o, nil
	}
	if err := t.send(); err != nil {
		return o, err
	}
	return t.collect(r, t.readback.Wait())
}

// send queues the copy of records into stage that reads back every step
// queued, on the compute stream after them.
func (t *Trainer) send() error {
	ev, err := t.dev.CopyToHost(t.stage, t.records, t.dev.Stream())
	if err != nil {
		return fmt.Errorf("train: reading back the steps: %w", err)
	}
	t.readback, t.sent = ev, len(t.queue)
	return nil
}

// collect settles the steps the readback covers, once it completed with
// werr (its Wait's or Done's error), in order: one the guard let through is taken (reported to
// OnStep); the first it refused voids every step queued after it (the
// guard made them change nothing), and the carried state, the model's
// random state and the guard are put back as they were at its start.
// Refused for a non-finite loss or norm, it is skipped
// (Config.SkipNonFinite: its data consumed) or the run's error; refused
// for its data (an index out of range), the device's error is the run's.
func (t *Trainer) collect(r *run, werr error) (outcome, error) {
	var o outcome
	t.readback = nil
	if werr != nil && !errors.Is(werr, device.ErrIndex) {
		// Not an error of the data, which the guard refuses: the device
		// failed, and what the steps did is not known.
		return o, fmt.Errorf("train: %w", werr)
	}
	mem := t.stage.Bytes()
	field := func(slot, i int) float64 {
		return math.Float64frombits(binary.LittleEndian.Uint64(mem[slot*recordSize+8*i:]))
	}
	for i, q := range t.queue[:t.sent] {
		loss, norm := field(q.slot, 0), field(q.slot, 1)
		if t.par != nil && math.Float64frombits(binary.LittleEndian.Uint64(mem[t.slots()*recordSize+8*q.slot:])) > 0 {
			o.stop = true
		}
		if field(q.slot, 2) == 0 {
			t.step++
			t.skipRun = 0
			t.pos = q.next
			o.taken = true
			t.ahead = len(t.queue) - i - 1
			t.report(r, &Progress{Step: t.step, Steps: t.cfg.Steps, Position: q.next, Loss: loss, GradNorm: norm, LR: q.lr}, q.tokens)
			t.ahead = 0
			continue
		}
		o.taken, o.voided = false, i+1 < len(t.queue)
		t.queue, t.sent = t.queue[:0], 0
		if err := t.rollBack(q.random0); err != nil {
			return o, errors.Join(werr, err)
		}
		if finite(loss) && finite(norm) {
			// Refused for its data: the device's error, taken from it (an
			// event may only look at it).
			if err := t.dev.Synchronize(); err != nil {
				werr = err
			}
			if werr == nil {
				werr = fmt.Errorf("train: the device refused the step with a finite loss %v and gradient norm %v, and no error", loss, norm)
			}
			return o, fmt.Errorf("train: step %d: %w", t.step+1, werr)
		}
		nf := &NonFiniteError{Step: t.step + 1, Loss: loss, GradNorm: norm}
		if werr != nil {
			return o, errors.Join(nf, fmt.Errorf("train: %w", werr))
		}
		if !t.cfg.SkipNonFinite {
			o.refused = nf
			return o, nil
		}
		o.skipped = true
		r.tokens = q.tokens
		t.skipped++
		t.skipRun++
		t.lastSkip = nf
		t.pos = q.next
		if t.cfg.Logger != nil && t.skipRun&(t.skipRun-1) == 0 {
			// The 1st, 2nd, 4th, 8th... skip of a run of them: a run
			// that diverged for good logs a few lines, not one a step.
			t.cfg.Logger.Warn("train: skipped a step", "error", nf, "skipped", t.skipped, "in_a_row", t.skipRun)
		}
		t.report(r, &Progress{Step: t.step, Steps: t.cfg.Steps, Position: q.next, Loss: loss, GradNorm: norm, LR: q.lr, NonFinite: nf}, q.tokens)
		return o, nil
	}
	t.queue = t.queue[:copy(t.queue, t.queue[t.sent:])]
	t.sent = 0
	if werr != nil {
		if err := t.dev.Synchronize(); err != nil {
			werr = err // taken from the device, not only looked at
		}
		// The data of work after the steps read back was bad: the step
		// under way's, which the caller undoes.
		return o, fmt.Errorf("train: %w", werr)
	}
	return o, nil
}

func (t *Trainer) validate(ctx context.Context) (Evaluation, error) {
	ev, err := t.src.validate(ctx)
	if err != nil {
		return ev, fmt.Errorf("train: validation after step %d: %w", t.step, err)
	}
	ev.Step = t.step
	if t.cfg.OnEval != nil {
		t.g.beginCallback()
		t.cfg.OnEval(ev)
		t.g.endCallback()
	}
	return ev, nil
}

// Close frees the trainer's device memory (not the model's or the
// loader's). Run, Save and Resume then return an error matching
// rnn.ErrClosed; Step, Position and Skipped keep reporting where the
// trainer stood; a second Close does nothing. Close during Run (from
// another goroutine, or from OnStep) is rnn.ErrBusy, and closes nothing:
// cancel Run's ctx, then Close.
func (t *Trainer) Close() error {
	if first, err := t.g.close(); !first {
		return err
	}
	errs := []error{t.closeGraphs(), t.freeValues(), t.closeParallel()}
	if t.opt != nil {
		errs = append(errs, t.opt.free(t.dev))
		t.opt = nil
	}
	if t.ce != nil {
		errs = append(errs, t.ce.Close())
		t.ce = nil
	}
	for _, b := range []*device.Buffer{&t.norm, &t.guard, &t.records} {
		if !b.IsZero() {
			errs = append(errs, t.dev.Free(*b))
			*b = device.Buffer{}
		}
	}
	if t.stage.Len() > 0 {
		errs = append(errs, t.dev.FreeStaging(t.stage))
		t.stage = device.HostBuffer{}
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
