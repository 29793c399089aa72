package charrnn

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/dist/launch"
	"github.com/gocurrent/gocurrent/examples/charrnn/internal/progress"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/internal/plot"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// TrainFlags are the train command's settings, one field per flag.
type TrainFlags struct {
	Data                     string
	Model                    models.CharRNNConfig
	Batch, Seq, Accum        int
	BatchAuto                bool     // -batch auto: the largest batch that fits
	EffectiveBatch           int      // with BatchAuto, keep Batch·Accum by raising Accum
	MemoryLimit              cli.Size // the allocator's limit, 0: none
	Optimizer                string
	LR, Clip                 float64
	Schedule                 string
	Warmup                   int64
	Steps                    int64
	Epochs                   int
	ValFrac                  float64
	ValTokens                int64
	EvalEvery, LogEvery      int64
	Device                   string
	TF32                     bool // cuda.Config.TF32
	Seed                     uint64
	Init, Resume, Checkpoint string
	Force                    bool   // replace an existing -checkpoint
	SkipNonFinite            bool   // train.Config.SkipNonFinite
	MaxSkips                 int64  // train.Config.MaxSkips
	Graphs                   string // -graphs: auto, on or off (useGraphs)
	Pipeline                 int    // train.Config.Pipeline
	PipelineAuto             bool   // -pipeline auto: 8 on a GPU, 1 on the CPU
	CheckpointEvery          int64
	Plot                     string
	MemStats, JSON           bool
	SampleN                  int
	SampleTemperature        float64
	SamplePrime              string
	Dist                     string        // -dist: auto or none
	DistTimeout              time.Duration // dist.Config.Timeout
	// Explicit names the flags the command line gave (parseTrain fills
	// it). With -init or -resume the others take the checkpoint's values
	// where it records them, and one named here that contradicts the
	// checkpoint is an error (see fromCheckpoint).
	Explicit map[string]bool
}

func (f *TrainFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Data, "data", "", "training text, a file or a directory tree, whose files that are not text (binary, checkpoints) are left out with a warning (default: the hand-written, ASCII-only Go files of the standard library under $(go env GOROOT)/src, outside testdata and without generated files; nothing to download)")
	registerModel(fs, &f.Model)
	cli.BatchVar(fs, &f.Batch, &f.BatchAuto, "batch", 32, "streams per micro-batch, or auto: the largest that fits the device (or -memory-limit), found by training steps at -seq")
	fs.IntVar(&f.EffectiveBatch, "effective-batch", 0, "with -batch auto, keep this many streams per optimizer step, raising -accum as the batch that fits needs (0: keep -accum)")
	fs.Var(&f.MemoryLimit, "memory-limit", "hold the device memory the run reserves to this size, e.g. 6GiB (0: the device's own)")
	fs.IntVar(&f.Seq, "seq", 64, "characters per window (truncated backpropagation length)")
	fs.IntVar(&f.Accum, "accum", 1, "micro-batches per optimizer step (gradient accumulation)")
	fs.StringVar(&f.Optimizer, "optimizer", "adam", "adam, adamw, sgd or rmsprop")
	fs.Float64Var(&f.LR, "lr", 2e-3, "learning rate")
	fs.Float64Var(&f.Clip, "clip", 5, "clip the gradient to this global L2 norm (0: off)")
	fs.StringVar(&f.Schedule, "schedule", "constant", "learning-rate schedule: constant or cosine (to 0 at -steps)")
	fs.Int64Var(&f.Warmup, "warmup", 0, "linear learning-rate warm-up steps")
	fs.Int64Var(&f.Steps, "steps", 0, "optimizer steps to reach, counting resumed ones, > 0 (default: -epochs decides, and without it 1000 steps)")
	fs.IntVar(&f.Epochs, "epochs", 0, "passes over the training text, > 0 (default: -steps decides)")
	fs.Float64Var(&f.ValFrac, "val-frac", 0.05, "fraction of the text, at its end, held out for validation")
	fs.Int64Var(&f.ValTokens, "val-tokens", 1<<18, "validate on at most this many characters, the last, of the held-out text (0: all)")
	fs.Int64Var(&f.EvalEvery, "eval-every", 200, "validate every this many steps (0: at the end only)")
	fs.Int64Var(&f.LogEvery, "log-every", 100, "with -json or without a terminal, report every this many steps")
	fs.StringVar(&f.Device, "device", "auto", "auto, cpu, cuda or cuda:N")
	fs.BoolVar(&f.TF32, "tf32", false, "let float32 GEMMs on a GPU use TF32 tensor cores")
	fs.Uint64Var(&f.Seed, "seed", 1, "seed of the initial weights and dropout")
	fs.StringVar(&f.Init, "init", "", "start from this checkpoint's weights (and its model shape and vocabulary)")
	fs.StringVar(&f.Resume, "resume", "", "continue the run this checkpoint saved, exactly, with the settings it records (shape, batching, optimizer, rate, schedule, ...)")
	fs.StringVar(&f.Checkpoint, "checkpoint", "charrnn.safetensors", "checkpoint to write at the end, every -checkpoint-every steps and on Ctrl-C (empty: none)")
	fs.BoolVar(&f.Force, "force", false, "replace an existing -checkpoint this run does not -resume from")
	fs.Int64Var(&f.CheckpointEvery, "checkpoint-every", 1000, "steps between checkpoints (0: at the end only)")
	fs.StringVar(&f.Plot, "plot", "", "write the training and validation loss curves to this PNG")
	fs.BoolVar(&f.MemStats, "memstats", false, "print the device allocator's figures at the end")
	fs.BoolVar(&f.JSON, "json", false, "print every line as one JSON object")
	fs.IntVar(&f.SampleN, "sample", 400, "characters to generate at the end (0: none)")
	fs.Float64Var(&f.SampleTemperature, "temperature", 0.8, "temperature of the sample at the end")
	fs.StringVar(&f.SamplePrime, "prime", "", "text the sample at the end starts from (default: a newline)")
	fs.BoolVar(&f.SkipNonFinite, "skip-nonfinite", false, "skip (and count) a step whose loss or gradient is NaN or infinite instead of stopping")
	fs.Int64Var(&f.MaxSkips, "max-skips", 100, "with -skip-nonfinite, stop after this many skipped steps in a row (0: 100)")
	// A number or auto, as -batch is.
	cli.BatchVar(fs, &f.Pipeline, &f.PipelineAuto, "pipeline", 0,
		"steps queued on the device before their losses are read back, never waiting for it in between, or auto: 8 on a GPU, 1 on the CPU (step lines come up to N-1 steps late, and Ctrl-C stops after the steps queued)")
	f.PipelineAuto = true
	graphsFlag(fs, &f.Graphs)
	cli.DistVar(fs, &f.Dist, &f.DistTimeout)
}

func parseTrain(args []string, env Env) (command, error) {
	var f TrainFlags
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	f.register(fs)
	if err := parse(fs, args, env, &f); err != nil {
		return nil, err
	}
	f.Explicit = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.Explicit[fl.Name] = true })
	return func(ctx context.Context) error { return Train(ctx, f, env) }, nil
}

// registerModel defines the model's flags, the same for train and plan.
func registerModel(fs *flag.FlagSet, m *models.CharRNNConfig) {
	fs.StringVar(&m.Cell, "cell", "lstm", "recurrent cell: lstm or gru")
	fs.IntVar(&m.Embed, "embed", 64, "embedding size")
	fs.IntVar(&m.Hidden, "hidden", 256, "hidden size of each layer")
	fs.IntVar(&m.Layers, "layers", 2, "recurrent layers")
	fs.Float64Var(&m.Dropout, "dropout", 0, "dropout between recurrent layers, in [0, 1)")
	cli.RecomputeVar(fs, &m.Recompute, "recompute")
}

// stepEvent is a -json line of training progress: a step taken, or with
// SkippedStep one -skip-nonfinite skipped (Step then counts the steps
// taken before it, and Loss or GradNorm is null: not finite).
type stepEvent struct {
	Event        string     `json:"event"`
	Step         int64      `json:"step"`
	Steps        int64      `json:"steps,omitempty"`
	Epoch        int        `json:"epoch"`
	SkippedStep  bool       `json:"skipped_step,omitempty"`
	InARow       int64      `json:"in_a_row,omitempty"` // steps skipped in a row, this one included
	Loss         cli.Number `json:"loss"`
	GradNorm     cli.Number `json:"grad_norm"`
	LR           float64    `json:"lr"`
	TokensPerSec float64    `json:"tokens_per_s"`
	DataWait     float64    `json:"data_wait"`
	Skipped      int64      `json:"skipped,omitempty"`
	AllocBytes   int64      `json:"allocated_bytes"`
	// Memory is the bytes each category holds (alloc.Category names).
	Memory map[string]int64 `json:"memory"`
}

type evalEvent struct {
	Event       string     `json:"event"`
	Step        int64      `json:"step"`
	Loss        cli.Number `json:"loss"` // null when not finite (a diverged model)
	BitsPerChar cli.Number `json:"bits_per_char"`
	Tokens      int64      `json:"tokens"`
	// Mapped counts the text's characters outside the vocabulary that eval
	// -unknown read as its character.
	Mapped int64 `json:"mapped,omitempty"`
}

// Train runs the train command, phase by phase: it checks the flags,
// reads the checkpoint of -init or -resume and takes the settings it
// records (fromCheckpoint), checks that it can write its outputs
// (-checkpoint, which it does not replace unless it resumes from it or
// f.Force says so, and -plot), opens the device, loads the model of the
// checkpoint, reads the text,
// builds the model (unless loaded), the loaders and the trainer, runs it,
// and reports: the curves (-plot), the summary line, a sample and the
// allocator's figures (-memstats). What a phase opens is closed when
// Train returns, in the reverse order.
func Train(ctx context.Context, f TrainFlags, env Env) (err error) {
	env = env.withDefaults()
	if err := f.validate(); err != nil {
		return err
	}
	ck, rec, err := f.fromCheckpoint()
	if err != nil {
		return err
	}
	opt, sched, err := f.settings()
	if err != nil {
		return err
	}
	if rec != nil {
		// Every hyperparameter as the run had it, not only those with flags.
		opt = rec.Optimizer
		if rec.HasSettings {
			sched = rec.Schedule
		} else {
			warn(env, &printer{W: env.Stdout, JSON: f.JSON}, fmt.Sprintf("%s records no schedule, clipping or end (a checkpoint of an earlier version): -schedule, -warmup, -clip and -steps or -epochs apply as given", f.Resume))
		}
	}
	job, err := f.job(env)
	if err != nil {
		return err
	}
	if job.Rank == 0 {
		// The other ranks write nothing (Config.Comm).
		if err := f.checkOutputs(); err != nil {
			return err
		}
	} else {
		// Rank 0 reports; the others only fail.
		env.Stdout, env.Live = io.Discard, false
		f.Plot, f.SampleN, f.MemStats = "", 0, false
	}
	r := &trainRun{f: f, env: env, p: &printer{W: env.Stdout, JSON: f.JSON}, ck: ck, rec: rec, job: job}
	defer func() { err = errors.Join(err, r.close()) }()
	gpu := env.CUDA
	gpu.TF32 = gpu.TF32 || f.TF32
	if r.d, err = cli.OpenRankDevice(f.Device, job, gpu, int64(f.MemoryLimit)); err != nil {
		return err
	}
	if job.Size > 1 {
		cfg := env.Dist
		cfg.Timeout = f.DistTimeout
		if r.comm, err = launch.Join(r.d, job, cfg); err != nil {
			return err
		}
	}
	// The model: from a checkpoint (its shape and vocabulary, which the
	// text is read in), or new once the text has given the vocabulary.
	if err := r.loadModel(ctx); err != nil {
		return err
	}
	if err := r.readText(ctx); err != nil {
		return err
	}
	switch {
	case f.BatchAuto:
		if err := r.fitBatch(ctx); err != nil {
			return err
		}
	case r.comm == nil:
		// A run that cannot fit is refused before it allocates (a
		// data-parallel rank's share of the batch is not the plan's).
		if err := models.CheckFits(ctx, devices.MetaConfig(r.d), r.memorySpec()); err != nil {
			return err
		}
	}
	if r.m == nil {
		if r.m, err = models.NewCharRNN(ctx, r.d, r.f.Model, r.text.Vocab(), r.f.Seed); err != nil {
			return r.advise(ctx, err)
		}
	}
	// The sample at the end starts from -prime: check it now, in the
	// vocabulary, rather than after the last step.
	if f.SampleN > 0 {
		if _, _, _, err := encodePrime(r.m.Vocab(), f.SamplePrime, ""); err != nil {
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
	}
	if err := r.openLoaders(); err != nil {
		return r.advise(ctx, err)
	}
	if err := r.newTrainer(opt, sched); err != nil {
		return r.advise(ctx, err)
	}
	r.printStart()
	sum, err := r.tr.Run(ctx)
	stopped, err := r.endRun(ctx, r.advise(ctx, err))
	if err != nil {
		return err
	}
	return r.report(ctx, sum, stopped)
}

// settings checks the flags that need no device and returns the optimizer
// and the learning-rate schedule they name. -steps and -epochs both 0
// mean 1,000 steps.
func (f *TrainFlags) settings() (train.Optimizer, train.Schedule, error) {
	var sched train.Schedule
	if f.Init != "" && f.Resume != "" {
		return train.Optimizer{}, sched, fmt.Errorf("%w: -init and -resume exclude each other", ErrUsage)
	}
	if f.Steps < 0 || f.Epochs < 0 {
		return train.Optimizer{}, sched, fmt.Errorf("%w: -steps %d, -epochs %d; neither may be negative", ErrUsage, f.Steps, f.Epochs)
	}
	// A 0 given is refused rather than read as the default: -steps 0
	// used to train 1,000 steps without a word (issue 47).
	for _, z := range []struct {
		name string
		zero bool
	}{{"steps", f.Steps == 0}, {"epochs", f.Epochs == 0}} {
		if z.zero && f.Explicit[z.name] {
			return train.Optimizer{}, sched, fmt.Errorf("%w: -%s 0, want > 0 (leave both -steps and -epochs out for 1000 steps)", ErrUsage, z.name)
		}
	}
	if f.Steps == 0 && f.Epochs == 0 {
		f.Steps = 1000
	}
	if !(f.ValFrac >= 0 && f.ValFrac < 1) {
		return train.Optimizer{}, sched, fmt.Errorf("%w: -val-frac %v, want [0, 1)", ErrUsage, f.ValFrac)
	}
	opt, err := train.NewOptimizer(train.Algorithm(f.Optimizer), f.LR)
	if err != nil {
		return opt, sched, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	switch f.Schedule {
	case "constant", "":
	case "cosine":
		if f.Steps == 0 {
			return opt, sched, fmt.Errorf("%w: -schedule cosine needs -steps", ErrUsage)
		}
		sched = train.Schedule{Decay: "cosine"}
	default:
		return opt, sched, fmt.Errorf("%w: -schedule %q, want constant or cosine", ErrUsage, f.Schedule)
	}
	sched.Warmup = f.Warmup
	return opt, sched, nil
}

// trainRun is what the phases of one train command build, and close in
// reverse order.
type trainRun struct {
	f   TrainFlags // with what the checkpoint of -init or -resume records
	env Env
	p   *printer
	ck  *train.Checkpoint // the checkpoint of -init or -resume, or nil
	rec *train.Record     // what the checkpoint of -resume records, or nil

	d     device.Device
	m     *models.CharRNN
	job   dist.Env  // the data-parallel job (-dist), one rank without
	comm  dist.Comm // its communicator; nil for one rank
	step0 int64     // the step the run started from

	corpus                   *loader.Corpus
	text, trainText, valText *loader.Text
	data                     *loader.Loader
	val                      *loader.Loader // nil: no validation
	progress                 *trainProgress
	tr                       *train.Trainer
}

// close closes what the phases opened, the last first.
func (r *trainRun) close() error {
	var errs []error
	if r.tr != nil {
		errs = append(errs, r.tr.Close())
	}
	if r.val != nil {
		errs = append(errs, r.val.Close())
	}
	if r.data != nil {
		errs = append(errs, r.data.Close())
	}
	if r.corpus != nil {
		errs = append(errs, r.corpus.Close())
	}
	if r.m != nil {
		errs = append(errs, r.m.Close())
	}
	if r.comm != nil {
		errs = append(errs, r.comm.Close())
	}
	if r.d != nil {
		errs = append(errs, r.d.Close())
	}
	return errors.Join(errs...)
}

// loadModel loads the model of the checkpoint of -init or -resume, if
// there is one.
func (r *trainRun) loadModel(ctx context.Context) (err error) {
	if r.ck == nil {
		return nil
	}
	if r.m, err = models.CharRNNFromCheckpoint(ctx, r.d, r.ck); err != nil {
		return err
	}
	return r.m.SetRecompute(r.f.Model.Recompute) // not recorded: the flag's
}

// readText opens -data (or the default corpus), tokenizes it, in the
// loaded model's vocabulary if there is one, and splits off the
// validation text at its end.
func (r *trainRun) readText(ctx context.Context) (err error) {
	if r.corpus, err = openCorpus(r.f.Data, r.env); err != nil {
		return err
	}
	if r.job.Rank == 0 { // the other ranks print only their errors
		warnSkipped(r.env, r.p, r.f.Data, r.corpus)
	}
	tc := loader.TokenizeConfig{}
	if r.m != nil {
		tc.Vocab = r.m.Vocab()
	}
	if r.text, err = tokenize(ctx, r.corpus, tc, r.env, r.p); err != nil {
		return fmt.Errorf("charrnn: %w", err)
	}
	r.trainText, r.valText, err = r.text.Split(r.f.ValFrac)
	return err
}

// openLoaders opens the loader of the training text and, if the held-out
// text is long enough for one batch, the validation loader, over at most
// -val-tokens characters.
func (r *trainRun) openLoaders() (err error) {
	f := r.f
	// -batch is the job's: each rank reads its share of every batch.
	n := r.job.Size
	r.data, err = loader.New(r.d, r.trainText, loader.Config{Batch: f.Batch / n, Seq: f.Seq, Accum: f.Accum, Epochs: f.Epochs, Seed: f.Seed,
		Shard: loader.Shard{Rank: r.job.Rank, Of: n}})
	if err != nil {
		return fmt.Errorf("charrnn: training text: %w", err)
	}
	if r.valText.Len() == 0 {
		return nil
	}
	// The cap keeps the end of the held-out text, the part furthest from
	// the training text.
	if n := r.valText.Len(); f.ValTokens > 0 && n > f.ValTokens {
		r.valText = r.valText.Slice(n-f.ValTokens, n)
	}
	val, err := loader.New(r.d, r.valText, loader.Config{Batch: f.Batch, Seq: f.Seq})
	switch {
	case errors.Is(err, loader.ErrTooShort):
		warn(r.env, r.p, fmt.Sprintf("no validation: the held-out %d characters are too few for one batch of %d x %d", r.valText.Len(), f.Batch, f.Seq+1))
	case err != nil:
		return fmt.Errorf("charrnn: validation text: %w", err)
	default:
		r.val = val
	}
	return nil
}

// memorySpec is the run for the planner and the batch-size search.
func (r *trainRun) memorySpec() models.MemorySpec {
	f := r.f
	cfg := f.Model
	if r.m != nil {
		cfg = r.m.Config()
		cfg.Recompute = f.Model.Recompute // a way of training, not recorded
	}
	return models.MemorySpec{CharRNN: &cfg, Vocab: r.text.Vocab().Len(), Batch: f.Batch, Accum: f.Accum, Seq: f.Seq,
		Optimizer: train.Algorithm(f.Optimizer), Validate: f.ValFrac > 0, Graphs: useGraphs(f.Graphs, r.d)}
}

// fitBatch is -batch auto: it finds the largest batch that fits, with
// training steps on the device (models.FitBatch, starting from the
// planned answer), and takes it (with the accumulation keeping
// -effective-batch).
func (r *trainRun) fitBatch(ctx context.Context) error {
	spec := r.memorySpec()
	spec.Batch = 8
	// No more streams than the text has windows for.
	most := int(min(4096, r.trainText.Len()/int64((spec.Seq+1)*max(spec.Accum, 1))))
	if most < 1 {
		return fmt.Errorf("charrnn: -batch auto: the training text's %d characters are too few for one window of %d", r.trainText.Len(), spec.Seq+1)
	}
	spec.Batch = min(spec.Batch, most)
	target := devices.MetaConfig(r.d)
	res, err := models.FitBatch(ctx, r.d, spec, models.FitConfig{Effective: r.f.EffectiveBatch, Max: most, Plan: &target})
	if err != nil {
		return fmt.Errorf("charrnn: -batch auto: %w", err)
	}
	r.f.Batch, r.f.Accum = res.Spec.Batch, max(res.Spec.Accum, 1)
	r.p.Emit(map[string]any{"event": "batch", "batch": r.f.Batch, "accum": r.f.Accum, "peak_reserved_bytes": res.PeakReserved,
		"limit_bytes": res.Limit, "trials": len(res.Trials), "seconds": res.Elapsed.Seconds()},
		fmt.Sprintf("batch auto: %d x %d accumulated (peak %s of %s, %d trials in %.1f s: %v)\n", r.f.Batch, r.f.Accum,
			alloc.FormatSize(res.PeakReserved), alloc.FormatSize(res.Limit), len(res.Trials), res.Elapsed.Seconds(), res))
	return nil
}

// advise gives an out-of-memory error the planner's advice for this run
// on this device (models.WithAdvice); other errors pass unchanged.
func (r *trainRun) advise(ctx context.Context, err error) error {
	if err == nil || r.text == nil {
		return err
	}
	return models.WithAdvice(ctx, err, devices.MetaConfig(r.d), r.memorySpec())
}

// stepsPerEpoch is the optimizer steps of one pass over the training text.
func (r *trainRun) stepsPerEpoch() int64 { return r.data.PerEpoch() / int64(r.f.Accum) }

// newTrainer builds the trainer, its progress reports and checkpoints,
// and with -resume restores the run's state.
func (r *trainRun) newTrainer(opt train.Optimizer, sched train.Schedule) (err error) {
	f := r.f
	total := f.Steps
	if total == 0 {
		total = int64(f.Epochs) * r.stepsPerEpoch()
	}
	r.progress = newTrainProgress(f, r.env, r.p, total)
	meta := r.m.Metadata()
	js, err := json.Marshal(trainRecord{ValFrac: f.ValFrac})
	if err != nil {
		return err
	}
	meta[trainKey] = string(js)
	cfg := train.Config{
		Optimizer: opt, Schedule: sched, Steps: f.Steps, ClipNorm: f.Clip,
		Validation: r.val, EvalEvery: f.EvalEvery,
		Checkpoint: f.Checkpoint, CheckpointEvery: f.CheckpointEvery, Metadata: meta,
		SkipNonFinite: f.SkipNonFinite, MaxSkips: f.MaxSkips,
		OnStep: r.progress.step, OnEval: r.progress.eval,
		Pipeline: r.pipeline(), Graphs: useGraphs(f.Graphs, r.d), Comm: r.comm,
	}
	if r.rec != nil && r.rec.HasSettings {
		cfg.ClipValue = r.rec.ClipValue // no flag sets it
	}
	if r.tr, err = train.New(r.d, r.m, r.data, cfg); err != nil {
		return err
	}
	if f.Resume != "" {
		if err := r.tr.Resume(r.ck); err != nil {
			return err
		}
	}
	r.step0 = r.tr.Step()
	return nil
}

// job is the data-parallel job -dist says this process is part of
// (cli.Job), whose ranks split -batch evenly.
func (f *TrainFlags) job(env Env) (dist.Env, error) {
	job, err := cli.Job(f.Dist, f.DistTimeout, env.Getenv)
	switch {
	case err != nil:
		return job, fmt.Errorf("charrnn: %w", err)
	case job.Size == 1:
	case f.BatchAuto:
		return job, fmt.Errorf("%w: -batch auto with -dist over %d ranks: give the job's batch, a multiple of %d", ErrUsage, job.Size, job.Size)
	case f.Batch%job.Size != 0:
		return job, fmt.Errorf("%w: -batch %d over %d ranks (-dist auto, %s): the batch must divide evenly among the ranks", ErrUsage, f.Batch, job.Size, job.Launcher)
	}
	return job, nil
}

// pipeline is -pipeline: auto reads 8 steps back at a time on a GPU,
// where a wait for the device idles it, and each step at its end on the
// CPU, where a wait costs microseconds and Ctrl-C then stops after the
// step under way.
func (r *trainRun) pipeline() int {
	switch {
	case !r.f.PipelineAuto:
		return r.f.Pipeline
	case strings.HasPrefix(r.d.Name(), "cuda"):
		return 8
	}
	return 1
}

// printStart prints what is about to be trained, on what.
func (r *trainRun) printStart() {
	f, m := r.f, r.m
	params := 0
	for _, g := range m.Groups() {
		params += g.Params.Len()
	}
	r.p.Emit(map[string]any{"event": "start", "device": r.d.Name(), "cell": f.Model.Cell, "params": params, "vocab": m.Classes(),
		"train_tokens": r.trainText.Len(), "val_tokens": r.valText.Len(), "step": r.tr.Step(), "steps": f.Steps, "epochs": f.Epochs,
		"steps_per_epoch": r.stepsPerEpoch()},
		fmt.Sprintf("training a %d-layer %s of %d (%s parameters) on %s: %s training and %s validation characters, vocabulary %d; %d steps per epoch, starting at step %d\n",
			f.Model.Layers, strings.ToUpper(f.Model.Cell), f.Model.Hidden, thousands(float64(params)), r.d.Name(),
			thousands(float64(r.trainText.Len())), thousands(float64(r.valText.Len())), m.Classes(), r.stepsPerEpoch(), r.tr.Step()))
}

// endRun ends the progress display and writes -plot after the trainer's
// Run returned runErr. A run that stopped because ctx was cancelled (Ctrl-C),
// and failed in nothing else, is stopped, not an error.
func (r *trainRun) endRun(ctx context.Context, runErr error) (stopped bool, err error) {
	r.progress.finish()
	if r.f.Plot != "" {
		runErr = errors.Join(runErr, r.progress.writePlot(r.f.Plot, r.f.Model))
	}
	stopped = ctx.Err() != nil && onlyCancelled(runErr, ctx.Err()) ||
		// Another rank of the job was stopped: this one stopped with it,
		// after the same step, and rank 0 saved it.
		errors.Is(runErr, train.ErrRankStopped) && onlyCancelled(runErr, context.Canceled)
	if runErr != nil && !stopped {
		return stopped, runErr
	}
	return stopped, nil
}

// report prints the run's summary, then, unless it was stopped, a sample
// of the trained model, and with -memstats the allocator's figures.
func (r *trainRun) report(ctx context.Context, sum train.Summary, stopped bool) error {
	f := r.f
	done := map[string]any{"event": "done", "step": sum.Steps, "loss": cli.Number(sum.Loss), "tokens": sum.Tokens,
		"elapsed_s": sum.Elapsed.Seconds(), "tokens_per_s": float64(sum.Tokens) / sum.Elapsed.Seconds(), "skipped": sum.Skipped, "stopped": stopped}
	text := fmt.Sprintf("step %d: loss %.4f, %s tokens in %s (%s tok/s)", sum.Steps, sum.Loss, thousands(float64(sum.Tokens)),
		sum.Elapsed.Round(time.Millisecond), thousands(float64(sum.Tokens)/sum.Elapsed.Seconds()))
	if v := sum.Validation; v != nil {
		done["val_loss"], done["val_bits_per_char"] = cli.Number(v.Loss), cli.Number(v.BitsPerToken)
		text += fmt.Sprintf("; validation %.4f nats/char, %.4f bits/char", v.Loss, v.BitsPerToken)
	}
	text += cli.CollectiveFields(done, r.comm, sum.Steps-r.step0)
	if f.Checkpoint != "" {
		done["checkpoint"] = f.Checkpoint
		text += "; checkpoint " + f.Checkpoint
	}
	if stopped {
		text = "interrupted after " + text
		if f.Checkpoint != "" {
			text += " (continue with -resume " + f.Checkpoint + ")"
		}
	}
	r.p.Emit(done, text+"\n")
	if f.SampleN > 0 && !stopped {
		if err := sampleAfterTraining(ctx, r.d, r.m, f, r.p); err != nil {
			return err
		}
	}
	if f.MemStats {
		printMemStats(r.p, r.d)
	}
	return nil
}

// trainProgress reports training as it goes, a bar on a terminal and
// otherwise a line every -log-every steps and one per validation, and
// keeps the loss curves for -plot.
type trainProgress struct {
	p                    *printer
	logEvery             int64
	bar                  *progress.Bar // nil: lines
	trainCurve, valCurve plot.Curve
	lastVal              float64 // the last validation loss, NaN before the first

	// The interval a printed line's tokens/s covers: from the previous
	// printed step (its tokens and elapsed time), less the validations run
	// since (each timed from the OnStep before it to its OnEval).
	repTokens            int64
	repElapsed, excluded time.Duration
	lastStepAt           time.Time
}

func newTrainProgress(f TrainFlags, env Env, p *printer, total int64) *trainProgress {
	tp := &trainProgress{p: p, logEvery: f.LogEvery, lastVal: math.NaN()}
	tp.trainCurve.Name, tp.valCurve.Name = "train", "validation"
	if env.Live && !f.JSON {
		tp.bar = progress.New(env.Stderr, total, true)
	}
	return tp
}

// step is train.Config.OnStep.
func (tp *trainProgress) step(pr train.Progress) {
	if pr.NonFinite != nil {
		tp.skip(pr)
		return
	}
	tp.lastStepAt = time.Now()
	tp.trainCurve.X = append(tp.trainCurve.X, float64(pr.Step))
	tp.trainCurve.Y = append(tp.trainCurve.Y, pr.Loss)
	if tp.bar != nil {
		tp.bar.Update(pr.Step, fmt.Sprintf("loss %.3f  val %.3f  %s tok/s  wait %.0f%%", pr.Loss, tp.lastVal, thousands(pr.TokensPerSecond), 100*pr.DataWait))
		return
	}
	if tp.logEvery > 0 && (pr.Step%tp.logEvery == 0 || pr.Step == 1) {
		rate := tp.rate(pr)
		tp.p.Emit(newStepEvent(pr, rate),
			fmt.Sprintf("step %d  epoch %d  loss %.4f  grad norm %.3f  lr %.2g  %s tok/s  data wait %.1f%%\n",
				pr.Step, pr.Position.Epoch, pr.Loss, pr.GradNorm, pr.LR, thousands(rate), 100*pr.DataWait))
	}
}

// skip reports a step -skip-nonfinite skipped: neither on the loss curve
// nor counted by the bar; on the bar's status, or as a line (JSON: a step
// event with "skipped_step") at the 1st, 2nd, 4th, ... step skipped in a
// row, whatever -log-every, so a run that diverged for good writes a few
// lines rather than one a step.
func (tp *trainProgress) skip(pr train.Progress) {
	text := fmt.Sprintf("step %d skipped: loss %v, grad norm %v (%d skipped, %d in a row)",
		pr.NonFinite.Step, pr.Loss, pr.GradNorm, pr.Skipped, pr.SkippedInARow)
	if tp.bar != nil {
		tp.bar.Update(pr.Step, text)
		return
	}
	if n := pr.SkippedInARow; n&(n-1) != 0 {
		return
	}
	e := newStepEvent(pr, tp.rate(pr))
	e.SkippedStep, e.InARow = true, pr.SkippedInARow
	tp.p.Emit(e, text+"\n")
}

// newStepEvent is the step event of pr, rate its tokens/s.
func newStepEvent(pr train.Progress, rate float64) stepEvent {
	return stepEvent{Event: "step", Step: pr.Step, Steps: pr.Steps, Epoch: pr.Position.Epoch, Loss: cli.Number(pr.Loss),
		GradNorm: cli.Number(pr.GradNorm), LR: pr.LR, TokensPerSec: rate, DataWait: pr.DataWait, Skipped: pr.Skipped,
		AllocBytes: pr.Memory.AllocatedBytes[alloc.AllPools].Current, Memory: cli.CategoryCurrents(pr.Memory)}
}

// rate is the training tokens/s since the previous printed step (the
// run's start for the first), validation time left out, and starts the
// next interval.
func (tp *trainProgress) rate(pr train.Progress) float64 {
	dt := pr.Elapsed - tp.repElapsed - tp.excluded
	dn := pr.Tokens - tp.repTokens
	tp.repTokens, tp.repElapsed, tp.excluded = pr.Tokens, pr.Elapsed, 0
	if dt <= 0 {
		return pr.TokensPerSecond
	}
	return float64(dn) / dt.Seconds()
}

// eval is train.Config.OnEval.
func (tp *trainProgress) eval(ev train.Evaluation) {
	if !tp.lastStepAt.IsZero() {
		tp.excluded += time.Since(tp.lastStepAt)
	}
	tp.lastVal = ev.Loss
	tp.valCurve.X = append(tp.valCurve.X, float64(ev.Step))
	tp.valCurve.Y = append(tp.valCurve.Y, ev.Loss)
	if tp.bar == nil {
		tp.p.Emit(evalEvent{Event: "validation", Step: ev.Step, Loss: cli.Number(ev.Loss), BitsPerChar: cli.Number(ev.BitsPerToken), Tokens: ev.Tokens},
			fmt.Sprintf("validation at step %d: loss %.4f nats/char, %.4f bits/char (%d characters)\n", ev.Step, ev.Loss, ev.BitsPerToken, ev.Tokens))
	}
}

// finish ends the bar, if there is one.
func (tp *trainProgress) finish() {
	if tp.bar != nil {
		tp.bar.Finish()
	}
}

// writePlot writes the loss curves of the steps run, if any, as a PNG at
// path.
func (tp *trainProgress) writePlot(path string, cfg models.CharRNNConfig) error {
	if len(tp.trainCurve.X) == 0 {
		return nil
	}
	curves := []plot.Curve{tp.trainCurve}
	if len(tp.valCurve.X) > 0 {
		curves = append(curves, tp.valCurve)
	}
	return plot.WriteFile(path, plot.Chart{Title: fmt.Sprintf("char-RNN %s %dx%d", strings.ToUpper(cfg.Cell), cfg.Layers, cfg.Hidden),
		XLabel: "step", YLabel: "loss (nats/char)", Curves: curves})
}

// sampleAfterTraining prints what the trained model writes.
func sampleAfterTraining(ctx context.Context, d device.Device, m *models.CharRNN, f TrainFlags, p *printer) error {
	prime, ids, _, err := encodePrime(m.Vocab(), f.SamplePrime, "")
	if err != nil {
		return err
	}
	var sb strings.Builder
	sb.WriteString(prime)
	err = train.Sample(ctx, d, m, train.SampleConfig{N: f.SampleN, Temperature: f.SampleTemperature, Prime: ids, Seed: f.Seed,
		NoGraphs: !useGraphs(f.Graphs, d)},
		func(id int32) error {
			sb.WriteRune(m.Vocab().Rune(id))
			return nil
		})
	if err != nil {
		return err
	}
	p.Emit(map[string]any{"event": "sample", "temperature": f.SampleTemperature, "text": sb.String()},
		fmt.Sprintf("--- sample (temperature %g) ---\n%s\n---\n", f.SampleTemperature, sb.String()))
	return nil
}

// onlyCancelled reports whether err is cause and nothing else: a run that
// stopped on Ctrl-C but failed to save its checkpoint has failed.
func onlyCancelled(err, cause error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyCancelled(e, cause) {
				return false
			}
		}
		return true
	}
	if !errors.Is(err, cause) {
		return false
	}
	if u := errors.Unwrap(err); u != nil && u != cause {
		return onlyCancelled(u, cause)
	}
	return true
}

// checkUnknown checks an -unknown flag against the checkpoint's
// vocabulary: empty, or one of its characters.
func checkUnknown(v *loader.Vocab, unknown string) error {
	if unknown == "" {
		return nil
	}
	if r := []rune(unknown); len(r) == 1 {
		if _, ok := v.ID(r[0]); ok {
			return nil
		}
	}
	return fmt.Errorf("%w: -unknown %q, want one character of the checkpoint's vocabulary", ErrUsage, unknown)
}

// encodePrime returns the text sampling starts from and its ids: prime, or
// if it is empty a newline (the vocabulary's first character if it has no
// newline). A character outside the vocabulary is an error, unless
// unknown (one of its characters; "": none) stands in for it; mapped
// counts those.
func encodePrime(v *loader.Vocab, prime, unknown string) (_ string, ids []int32, mapped int, err error) {
	if prime == "" {
		prime = string(v.Rune(0))
		if _, ok := v.ID('\n'); ok {
			prime = "\n"
		}
	}
	if unknown == "" {
		ids, err := v.Encode(prime)
		if err != nil {
			return "", nil, 0, fmt.Errorf("charrnn: -prime: %w", err)
		}
		return prime, ids, 0, nil
	}
	if err := checkUnknown(v, unknown); err != nil {
		return "", nil, 0, err
	}
	if !utf8.ValidString(prime) {
		return "", nil, 0, fmt.Errorf("%w: -prime %q is not valid UTF-8", ErrUsage, prime)
	}
	unk, _ := v.ID([]rune(unknown)[0])
	for _, r := range prime {
		id, ok := v.ID(r)
		if !ok {
			id, mapped = unk, mapped+1
		}
		ids = append(ids, id)
	}
	return prime, ids, mapped, nil
}

// thousands formats v rounded, with commas: 12,345.
func thousands(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
