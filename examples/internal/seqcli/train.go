package seqcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/dist/launch"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// ModelFlags are a model's shape.
type ModelFlags struct {
	Cell          string
	Embed         int
	Hidden        int
	Layers        int
	Bidirectional bool
	Dropout       float64
	// The tagger's character features (0: none).
	CharEmbed, CharHidden int
	// The classifier's pooling (last, mean, max) and tokens (words or
	// chars).
	Pool, Input string
	// Recompute is the stack's rnn.Config.Recompute (-recompute).
	Recompute int
}

// register defines the flags of task's model shape.
func (m *ModelFlags) register(fs *flag.FlagSet, task Task) {
	fs.StringVar(&m.Cell, "cell", "lstm", "the recurrent cell: lstm or gru")
	fs.IntVar(&m.Embed, "embed", 100, "the embedding's width")
	fs.IntVar(&m.Hidden, "hidden", 128, "the hidden size of each direction")
	fs.IntVar(&m.Layers, "layers", 1, "recurrent layers")
	fs.BoolVar(&m.Bidirectional, "bidirectional", true, "run each layer both ways")
	fs.Float64Var(&m.Dropout, "dropout", 0, "dropout between recurrent layers, in [0, 1)")
	cli.RecomputeVar(fs, &m.Recompute, "recompute")
	if task == Tagging {
		fs.IntVar(&m.CharEmbed, "char-embed", 0, "character embedding width for character features (0: none)")
		fs.IntVar(&m.CharHidden, "char-hidden", 0, "hidden size of the character LSTM (0: none)")
	} else {
		fs.StringVar(&m.Pool, "pool", "last", "how a sequence becomes one vector: last, mean or max")
		fs.StringVar(&m.Input, "input", "words", "what a sequence is made of: words (of {\"tokens\": ...}) or chars (of {\"text\": ...})")
	}
}

// check checks the flags of task's model shape.
func (m ModelFlags) check(c *flagCheck, task Task) {
	c.Recurrent(m.Cell, m.Embed, m.Hidden, m.Layers, m.Dropout)
	c.NonNegative("char-embed", int64(m.CharEmbed))
	c.NonNegative("char-hidden", int64(m.CharHidden))
	if (m.CharEmbed == 0) != (m.CharHidden == 0) {
		c.Fail("char-hidden", m.CharHidden, fmt.Sprintf("> 0 with -char-embed %d, 0 without", m.CharEmbed))
	}
	if task == Classification {
		c.OneOf("pool", m.Pool, "last", "mean", "max")
		c.OneOf("input", m.Input, "words", "chars")
		c.Sizes("-embed, -hidden, -layers", m.classifierConfig().Validate())
	} else {
		c.Sizes("-embed, -hidden, -layers, -char-embed, -char-hidden", m.taggerConfig().Validate())
	}
}

// checkBatches checks the sizes -batch, -accum and -max-tokens give
// together (loader.BucketConfig.Validate: a pool whose size overflows);
// batch 0 is -batch auto, whose batch is found later.
func checkBatches(c *flagCheck, batch, accum, maxTokens int) {
	c.Sizes("-batch, -accum, -max-tokens", loader.BucketConfig{Batch: max(batch, 1), Accum: accum, MaxTokens: maxTokens}.Validate())
}

// DataFlags say how to read a labelled file.
type DataFlags struct {
	Format, Column string
}

func (f *DataFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Format, "format", "", "the data's format: conllu, tsv or jsonl (default: from the file's extension)")
	fs.StringVar(&f.Column, "column", "upos", "the CoNLL-U tag column: upos or xpos")
}

func (f *DataFlags) check(c *flagCheck) {
	checkFormat(c, f.Format)
	c.OneOf("column", f.Column, "upos", "xpos")
}

func (f DataFlags) read() loader.ReadConfig {
	return loader.ReadConfig{Format: loader.Format(f.Format), Column: f.Column}
}

// TrainFlags are the train command's flags.
type TrainFlags struct {
	task Task

	Data, Val string
	DataFlags
	Model     ModelFlags
	Batch     int
	BatchAuto bool // -batch auto: the largest batch that fits
	// EffectiveBatch, with BatchAuto, keeps Batch·Accum by raising Accum.
	EffectiveBatch int
	MemoryLimit    cli.Size // the allocator's limit, 0: none
	Accum          int
	MaxTokens      int
	Epochs         int
	Steps          int64
	Optimizer      string
	LR, Clip       float64
	MinCount       int
	Device         string
	Seed           uint64
	Checkpoint     string
	Force          bool
	Resume         string
	LogEvery       int64
	PerClass       bool
	MemStats       bool
	JSON           bool
	Dist           string        // -dist: auto or none
	DistTimeout    time.Duration // dist.Config.Timeout
	// Explicit names the flags the command line gave.
	Explicit map[string]bool
}

func (f *TrainFlags) json() bool                      { return f.JSON }
func (f *TrainFlags) setExplicit(set map[string]bool) { f.Explicit = set }

func (f *TrainFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Data, "data", "", "training data, a CoNLL-U, TSV or JSON lines file (default: the default data, derived from Go's standard library)")
	fs.StringVar(&f.Val, "val", "", "validation data, in the training data's format (default: none, or the default data's)")
	f.DataFlags.register(fs)
	f.Model.register(fs, f.task)
	cli.BatchVar(fs, &f.Batch, &f.BatchAuto, "batch", 32, "sequences per batch, or auto: the largest that fits the device (or -memory-limit), found by training steps on sequences as long as the data's longest, then by planning the first epoch")
	fs.IntVar(&f.EffectiveBatch, "effective-batch", 0, "with -batch auto, keep this many sequences per optimizer step, raising -accum as the batch that fits needs (0: keep -accum)")
	fs.Var(&f.MemoryLimit, "memory-limit", "hold the device memory the run reserves to this size, e.g. 6GiB (0: the device's own)")
	fs.IntVar(&f.Accum, "accum", 1, "batches accumulated per optimizer step")
	fs.IntVar(&f.MaxTokens, "max-tokens", 0, "a token budget per batch, padding included (0: none)")
	fs.IntVar(&f.Epochs, "epochs", 5, "passes over the data (ignored with -steps)")
	fs.Int64Var(&f.Steps, "steps", 0, "optimizer steps to take (0: -epochs decides)")
	fs.StringVar(&f.Optimizer, "optimizer", "adam", "sgd, adam, adamw or rmsprop")
	fs.Float64Var(&f.LR, "lr", 1e-3, "learning rate")
	fs.Float64Var(&f.Clip, "clip", 5, "clip the gradient's global norm to this (0: off)")
	fs.IntVar(&f.MinCount, "min-count", 1, "words seen fewer times read as unknown")
	fs.StringVar(&f.Device, "device", "auto", "auto, cpu, cuda or cuda:N")
	fs.Uint64Var(&f.Seed, "seed", 1, "seeds the weights and the batches' order")
	fs.StringVar(&f.Checkpoint, "checkpoint", f.task.checkpoint(), "where the model is saved (every epoch, at the end, on Ctrl-C)")
	fs.BoolVar(&f.Force, "force", false, "replace an existing -checkpoint")
	fs.StringVar(&f.Resume, "resume", "", "continue the run a checkpoint saved (same data and batching)")
	fs.Int64Var(&f.LogEvery, "log-every", 50, "report every this many steps")
	fs.BoolVar(&f.PerClass, "per-class", false, "report per-class figures at each validation")
	fs.BoolVar(&f.MemStats, "memstats", false, "print the device allocator's figures after training, by category")
	fs.BoolVar(&f.JSON, "json", false, "one JSON object per line on standard output")
	cli.DistVar(fs, &f.Dist, &f.DistTimeout)
}

func (f *TrainFlags) validate() error {
	var c flagCheck
	f.DataFlags.check(&c)
	f.Model.check(&c, f.task)
	c.Positive("batch", int64(f.Batch))
	c.Positive("accum", int64(f.Accum))
	checkBatchAuto(&c, f.BatchAuto, f.EffectiveBatch, f.Explicit["accum"])
	if f.BatchAuto && f.Resume != "" {
		c.Fail("batch", "auto", "a number with -resume (the run's batch is recorded)")
	}
	c.NonNegative("max-tokens", int64(f.MaxTokens))
	checkBatches(&c, f.Batch, f.Accum, f.MaxTokens)
	c.NonNegative("epochs", int64(f.Epochs))
	c.NonNegative("steps", f.Steps)
	if f.Steps == 0 && f.Epochs == 0 {
		c.Fail("epochs", 0, "> 0 when -steps is 0")
	}
	c.OneOf("optimizer", f.Optimizer, "sgd", "adam", "adamw", "rmsprop")
	if !(f.LR > 0) || f.LR > 1e6 {
		c.Fail("lr", f.LR, "a finite number > 0")
	}
	c.Finite("clip", f.Clip, 0)
	c.NonNegative("min-count", int64(f.MinCount))
	c.Device(f.Device)
	c.Positive("log-every", f.LogEvery)
	if f.Checkpoint == "" {
		c.Fail("checkpoint", `""`, "a file name")
	}
	return c.Err
}

// stepEvent is a train "step" line.
type stepEvent struct {
	Event           string  `json:"event"`
	Step            int64   `json:"step"`
	Epoch           int     `json:"epoch"`
	Loss            float64 `json:"loss"`
	LR              float64 `json:"lr"`
	TokensPerSecond float64 `json:"tokens_per_s"`
	DataWait        float64 `json:"data_wait"`
	Skipped         int64   `json:"skipped,omitempty"`
	AllocBytes      int64   `json:"allocated_bytes"`
	// Memory is the bytes each category holds (alloc.Category names).
	Memory map[string]int64 `json:"memory"`
}

// evalEvent is an "eval" line: a validation, or eval's result.
type evalEvent struct {
	Event     string       `json:"event"`
	Step      int64        `json:"step,omitempty"`
	Loss      float64      `json:"loss"`
	Accuracy  float64      `json:"accuracy"`
	MacroF1   *float64     `json:"macro_f1,omitempty"`
	Tokens    int64        `json:"tokens,omitempty"`
	Sentences int64        `json:"sentences,omitempty"`
	Sequences int64        `json:"sequences,omitempty"`
	PerClass  []classEvent `json:"per_class,omitempty"`
}

// classEvent is one class's figures.
type classEvent struct {
	Class     string  `json:"class"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
	Support   int64   `json:"support"`
}

// newEvalEvent is ev as the task reports it.
func newEvalEvent(task Task, event string, ev train.Evaluation, classes *loader.Labels, perClass bool) evalEvent {
	e := evalEvent{Event: event, Step: ev.Step, Loss: ev.Loss, Accuracy: ev.Accuracy}
	if task == Tagging {
		e.Tokens, e.Sentences = ev.Tokens, ev.Sequences
	} else {
		f1 := ev.MacroF1
		e.MacroF1, e.Sequences = &f1, ev.Sequences
	}
	if perClass && ev.Confusion != nil {
		for k, c := range ev.Confusion.PerClass() {
			e.PerClass = append(e.PerClass, classEvent{Class: classes.Item(int32(k)), Precision: c.Precision, Recall: c.Recall, F1: c.F1, Support: c.Support})
		}
	}
	return e
}

// text is e as a line (and a table of the classes).
func (e evalEvent) text(prefix string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sloss %.4f  accuracy %.4f", prefix, e.Loss, e.Accuracy)
	if e.MacroF1 != nil {
		fmt.Fprintf(&b, "  macro_f1 %.4f  sequences %d", *e.MacroF1, e.Sequences)
	} else {
		fmt.Fprintf(&b, "  tokens %d  sentences %d", e.Tokens, e.Sentences)
	}
	b.WriteString("\n")
	for _, c := range e.PerClass {
		fmt.Fprintf(&b, "  %-12s precision %.3f  recall %.3f  f1 %.3f  support %d\n", c.Class, c.Precision, c.Recall, c.F1, c.Support)
	}
	return b.String()
}

// Train trains a tagger or classifier as f says.
func (f *TrainFlags) run(ctx context.Context, env Env) (err error) {
	job, err := cli.Job(f.Dist, f.DistTimeout, env.Getenv)
	if err != nil {
		return fmt.Errorf("%s: %w", f.task.name(), err)
	}
	if job.Size > 1 && f.BatchAuto {
		return fmt.Errorf("%w: -batch auto with -dist over %d ranks: give the job's batch", ErrUsage, job.Size)
	}
	if job.Rank != 0 {
		// Rank 0 reports and writes; the others only fail.
		env.Stdout, f.MemStats = io.Discard, false
	}
	p := &printer{W: env.Stdout, JSON: f.JSON}
	if job.Rank == 0 {
		if err := checkOutput(f.Checkpoint, f.Resume, f.Force); err != nil {
			return err
		}
	}
	var resume *train.Checkpoint
	if f.Resume != "" {
		if resume, err = train.ReadCheckpoint(f.Resume); err != nil {
			return err
		}
		if !resume.Resumable() {
			return fmt.Errorf("%w: -resume %s holds weights only, no training state", ErrUsage, f.Resume)
		}
	}
	paths, err := dataPaths(ctx, f.task, f.Data, f.Val, env, p)
	if err != nil {
		return err
	}
	var cleanup []func() error
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanup[i]())
		}
	}()
	d, err := cli.OpenRankDevice(f.Device, job, env.CUDA, int64(f.MemoryLimit))
	if err != nil {
		return err
	}
	cleanup = append(cleanup, d.Close)
	var comm dist.Comm
	if job.Size > 1 {
		cfg := env.Dist
		cfg.Timeout = f.DistTimeout
		if comm, err = launch.Join(d, job, cfg); err != nil {
			return err
		}
		cleanup = append(cleanup, comm.Close)
	}

	var m model
	dcfg := loader.DatasetConfig{ReadConfig: f.read(), MinCount: f.MinCount}
	if resume != nil {
		// The vocabularies are the checkpoint's: build the model it holds
		// and read the data in its terms.
		if m, err = loadModel(ctx, f.task, d, resume); err != nil {
			return err
		}
		cleanup = append(cleanup, m.Close)
		if err := m.SetRecompute(f.Model.Recompute); err != nil { // not recorded: the flag's
			return err
		}
		dcfg.Words, dcfg.Chars, dcfg.Labels = m.vocabs()
	}
	data, val, err := openDatasets(ctx, f.task, paths, dcfg, f.charInput())
	if err != nil {
		return err
	}
	cleanup = append(cleanup, data.Close)
	if val != nil {
		cleanup = append(cleanup, val.Close)
	}
	// memorySpec is the run for the planner: its advice on an
	// out-of-memory error, and -batch auto's search.
	memorySpec := func() models.MemorySpec {
		spec := batching{Batch: f.Batch, Accum: f.Accum, MaxTokens: f.MaxTokens, Optimizer: f.Optimizer, Seed: f.Seed}.spec()
		if m != nil {
			m.describe(&spec, f.Model.Recompute)
		} else {
			f.Model.describe(f.task, &spec)
		}
		dataSpec(&spec, data, val)
		return spec
	}
	if f.BatchAuto {
		target := devices.MetaConfig(d)
		onDevice := func(s models.MemorySpec, cfg models.FitConfig) (models.FitResult, error) {
			cfg.Plan = &target // start from the planned answer
			return models.FitBatch(ctx, d, s, cfg)
		}
		spec, err := autoBatch(ctx, memorySpec(), data.Len(), f.EffectiveBatch, target, p, onDevice)
		if err != nil {
			return fmt.Errorf("%s: %w", f.task.name(), err)
		}
		f.Batch, f.Accum = spec.Batch, spec.Accum
	}
	if m == nil {
		if m, err = newModel(ctx, f.task, d, f.Model, data, f.Seed); err != nil {
			return advise(ctx, err, d, memorySpec())
		}
		cleanup = append(cleanup, m.Close)
	}
	// -batch is the job's: each rank takes its even share of every batch.
	l, err := newLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: f.Batch, Accum: f.Accum, MaxTokens: f.MaxTokens,
		Shuffle: true, Seed: f.Seed}, Epochs: f.Epochs, Shard: loader.Shard{Rank: job.Rank, Of: job.Size}}, m)
	if err != nil {
		return advise(ctx, err, d, memorySpec())
	}
	cleanup = append(cleanup, l.Close)
	var opts train.SeqOptions
	if val != nil {
		if opts.Validation, err = newLoader(d, val, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: f.Batch}, Epochs: 1}, m); err != nil {
			return advise(ctx, err, d, memorySpec())
		}
		cleanup = append(cleanup, opts.Validation.Close)
	}
	opt, err := train.NewOptimizer(train.Algorithm(f.Optimizer), f.LR)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	steps := f.Steps
	if steps == 0 {
		steps = int64(f.Epochs) * stepsPerEpoch(l)
	}
	epoch := 0
	cfg := train.Config{Optimizer: opt, Steps: steps, ClipNorm: f.Clip, Checkpoint: f.Checkpoint, Metadata: m.Metadata(),
		EvalEvery: stepsPerEpoch(l), CheckpointEvery: stepsPerEpoch(l), Comm: comm,
		OnStep: func(pr train.Progress) {
			epoch = pr.Position.Epoch
			if pr.NonFinite != nil {
				// A skipped step (none: SkipNonFinite is off here, and a
				// non-finite step ends the run) is not step pr.Step.
				return
			}
			if pr.Step%f.LogEvery != 0 && pr.Step != pr.Steps {
				return
			}
			e := stepEvent{Event: "step", Step: pr.Step, Epoch: pr.Position.Epoch, Loss: pr.Loss, LR: pr.LR,
				TokensPerSecond: pr.TokensPerSecond, DataWait: pr.DataWait, Skipped: pr.Skipped,
				AllocBytes: pr.Memory.AllocatedBytes[alloc.AllPools].Current, Memory: cli.CategoryCurrents(pr.Memory)}
			p.Emit(e, fmt.Sprintf("step %d/%d  epoch %d  loss %.4f  lr %.3g  %.0f tokens/s  data wait %.1f%%  %s allocated\n",
				pr.Step, pr.Steps, pr.Position.Epoch, pr.Loss, pr.LR, pr.TokensPerSecond, 100*pr.DataWait, alloc.FormatSize(e.AllocBytes)))
		},
		OnEval: func(ev train.Evaluation) {
			e := newEvalEvent(f.task, "eval", ev, data.Labels, f.PerClass)
			p.Emit(e, e.text(fmt.Sprintf("validation after step %d (%d epochs done): ", ev.Step, epoch)))
		},
	}
	tr, err := train.NewSeq(d, m, l, cfg, opts)
	if err != nil {
		return advise(ctx, err, d, memorySpec())
	}
	cleanup = append(cleanup, tr.Close)
	if resume != nil {
		if err := tr.Resume(resume); err != nil {
			return err
		}
	}
	p.Emit(map[string]any{"event": "start", "device": d.Name(), "sentences": data.Len(), "tokens": data.Tokens(),
		"vocab": data.Words.Len(), "classes": data.Labels.Len(), "steps": steps, "padding": l.Padding(0)},
		fmt.Sprintf("training on %s: %d sequences, %d tokens, %d words, %d classes; %d steps, %.1f%% padding\n",
			d.Name(), data.Len(), data.Tokens(), data.Words.Len(), data.Labels.Len(), steps, 100*l.Padding(0)))
	start, step0 := time.Now(), tr.Step()
	sum, runErr := tr.Run(ctx)
	if runErr != nil {
		return advise(ctx, runErr, d, memorySpec())
	}
	done := map[string]any{"event": "done", "steps": sum.Steps, "seconds": time.Since(start).Seconds(),
		"tokens_per_s": float64(sum.Tokens) / sum.Elapsed.Seconds(), "checkpoint": f.Checkpoint}
	text := fmt.Sprintf("done: %d steps in %s, %.0f tokens/s%s; saved %s\n", sum.Steps, time.Since(start).Round(time.Millisecond),
		float64(sum.Tokens)/sum.Elapsed.Seconds(), cli.CollectiveFields(done, comm, sum.Steps-step0), f.Checkpoint)
	if v := sum.Validation; v != nil {
		done["accuracy"] = v.Accuracy
		done["loss"] = v.Loss
		if f.task == Classification {
			done["macro_f1"] = v.MacroF1
		}
	}
	p.Emit(done, text)
	if f.MemStats {
		cli.PrintMemStats(p, d)
	}
	if paths.isDefault && paths.val != "" && job.Rank == 0 {
		return showSamples(ctx, f.task, d, m, paths.val, f.read(), p)
	}
	return nil
}

// charInput says the classifier reads characters.
func (f *TrainFlags) charInput() bool { return f.task == Classification && f.Model.Input == "chars" }

// stepsPerEpoch is the number of optimizer steps in epoch 0.
func stepsPerEpoch(l *loader.SeqLoader) int64 {
	n := l.PerEpoch(0)
	a := int64(l.Config().Bucket.Accum)
	return max((n+a-1)/a, 1)
}

// dataFiles are the files train reads.
type dataFiles struct {
	train, val string
	isDefault  bool
}

// dataPaths is -data and -val, or task's default data.
func dataPaths(ctx context.Context, task Task, data, val string, env Env, p *printer) (dataFiles, error) {
	if data != "" {
		return dataFiles{train: data, val: val}, nil
	}
	if val != "" {
		return dataFiles{}, fmt.Errorf("%w: -val without -data; the default data has its own validation part", ErrUsage)
	}
	files, err := defaultData(ctx, task, env)
	if err != nil {
		return dataFiles{}, err
	}
	p.Emit(map[string]any{"event": "data", "train": files.train, "val": files.val},
		fmt.Sprintf("default data (derived from Go's standard library): %s, validation %s\n", files.train, files.val))
	return files, nil
}

// openDatasets opens the training data at paths.train, read as cfg says,
// and the validation data at paths.val (nil without one) in its
// vocabularies; the caller closes both.
func openDatasets(ctx context.Context, task Task, paths dataFiles, cfg loader.DatasetConfig, chars bool) (data, val *loader.Dataset, err error) {
	if data, err = openData(ctx, task, paths.train, cfg, chars); err != nil || paths.val == "" {
		return data, nil, err
	}
	vcfg := loader.DatasetConfig{ReadConfig: cfg.ReadConfig, Words: data.Words, Chars: data.Chars, Labels: data.Labels}
	if val, err = openData(ctx, task, paths.val, vcfg, chars); err != nil {
		return nil, nil, errors.Join(err, data.Close())
	}
	return data, val, nil
}

// openData opens a dataset for task, checking it carries what the task
// needs.
func openData(ctx context.Context, task Task, path string, cfg loader.DatasetConfig, chars bool) (*loader.Dataset, error) {
	d, err := loader.OpenDataset(ctx, path, cfg)
	if err != nil {
		return nil, err
	}
	if task == Tagging && !d.Tagging {
		return nil, errors.Join(fmt.Errorf("%s holds a label per sequence; the tagger needs a tag per token (CoNLL-U, TSV, or {\"tokens\", \"tags\"} lines)", path), d.Close())
	}
	if task == Classification && d.Tagging {
		return nil, errors.Join(fmt.Errorf("%s holds a tag per token; the classifier needs a label per sequence ({\"tokens\" or \"text\", \"label\"} lines)", path), d.Close())
	}
	if task == Classification && chars != d.Texts {
		want := "{\"tokens\": ..., \"label\": ...} lines with -input words"
		if chars {
			want = "{\"text\": ..., \"label\": ...} lines with -input chars"
		}
		return nil, errors.Join(fmt.Errorf("%s: want %s", path, want), d.Close())
	}
	return d, nil
}
