package charrnn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// PlanFlags are the plan command's settings: the train command's flags
// that memory depends on, and the device to plan for.
type PlanFlags struct {
	Data              string
	Vocab             int
	Model             models.CharRNNConfig
	Batch, Seq, Accum int
	BatchAuto         bool
	EffectiveBatch    int
	Optimizer         string
	ValFrac           float64
	Device            string
	Capacity          cli.Size // plan for a device of this size without opening one
	MemoryLimit       cli.Size
	JSON              bool
	Graphs            string // -graphs, as train's: the run planned replays its steps
}

func (f *PlanFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Data, "data", "", "training text whose vocabulary sets the model's size (default: train's default text); not read with -vocab")
	fs.IntVar(&f.Vocab, "vocab", 0, "the vocabulary's size, instead of reading -data")
	registerModel(fs, &f.Model)
	cli.BatchVar(fs, &f.Batch, &f.BatchAuto, "batch", 32, "streams per micro-batch, or auto: the largest that fits (planned)")
	fs.IntVar(&f.EffectiveBatch, "effective-batch", 0, "with -batch auto, keep this many streams per step, raising -accum")
	fs.IntVar(&f.Seq, "seq", 64, "characters per window")
	fs.IntVar(&f.Accum, "accum", 1, "micro-batches per optimizer step")
	fs.StringVar(&f.Optimizer, "optimizer", "adam", "adam, adamw, sgd or rmsprop")
	fs.Float64Var(&f.ValFrac, "val-frac", 0.05, "held-out fraction (> 0: the validation loader's memory counts)")
	fs.StringVar(&f.Device, "device", "auto", "the device to plan for: auto, cpu, cuda or cuda:N (opened only to read its memory, unless -capacity)")
	fs.Var(&f.Capacity, "capacity", "plan for a device of this much memory (e.g. 80GiB), like -device, without opening it")
	fs.Var(&f.MemoryLimit, "memory-limit", "hold the run to this much memory, as train's -memory-limit")
	fs.BoolVar(&f.JSON, "json", false, "print the plan as one JSON object")
	graphsFlag(fs, &f.Graphs)
}

// graphs is -graphs for the device target stands for: auto as train's
// (useGraphs), on a GPU.
func (f *PlanFlags) graphs(target meta.Config) bool {
	switch f.Graphs {
	case "on":
		return true
	case "off":
		return false
	}
	return strings.HasPrefix(target.Name, "cuda")
}

func (f *PlanFlags) json() bool { return f.JSON }

func (f *PlanFlags) validate() error {
	var c flagCheck
	checkModel(&c, f.Model)
	c.Positive("batch", int64(f.Batch))
	c.Positive("seq", int64(f.Seq))
	c.Positive("accum", int64(f.Accum))
	checkBatches(&c, f.Batch, f.Seq, f.Accum)
	c.NonNegative("vocab", int64(f.Vocab))
	c.NonNegative("effective-batch", int64(f.EffectiveBatch))
	if f.Vocab > 0 && f.Vocab < 3 {
		c.Fail("vocab", f.Vocab, "at least 3")
	}
	if f.EffectiveBatch > 0 && !f.BatchAuto {
		c.Fail("effective-batch", f.EffectiveBatch, "-batch auto with it")
	}
	c.OneOf("optimizer", f.Optimizer, string(train.Adam), string(train.AdamW), string(train.SGD), string(train.RMSprop))
	if !(f.ValFrac >= 0 && f.ValFrac < 1) {
		c.Fail("val-frac", f.ValFrac, "[0, 1)")
	}
	c.OneOf("graphs", f.Graphs, "auto", "on", "off")
	c.Device(f.Device)
	return c.Err
}

func parsePlan(args []string, env Env) (command, error) {
	var f PlanFlags
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	f.register(fs)
	if err := parse(fs, args, env, &f); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return Plan(ctx, f, env) }, nil
}

// Plan runs the plan command: it predicts the device memory of the train
// command with the same flags, by category, before allocating any
// (models.PlanMemory), says whether it fits the device and, if not, what
// does (models.Advise); with -batch auto it plans the largest batch.
func Plan(ctx context.Context, f PlanFlags, env Env) error {
	env = env.withDefaults()
	if err := f.validate(); err != nil {
		return err
	}
	p := &printer{W: env.Stdout, JSON: f.JSON}
	target, err := f.target(env)
	if err != nil {
		return err
	}
	vocab := f.Vocab
	if vocab == 0 {
		if vocab, err = f.vocabOfData(ctx, env, p); err != nil {
			return err
		}
	}
	start := time.Now()
	spec := models.MemorySpec{CharRNN: &f.Model, Vocab: vocab, Batch: f.Batch, Accum: f.Accum, Seq: f.Seq,
		Optimizer: train.Algorithm(f.Optimizer), Validate: f.ValFrac > 0, Graphs: f.graphs(target)}
	if f.BatchAuto {
		spec.Batch = 8
		res, err := models.PlanBatch(ctx, target, spec, models.FitConfig{Effective: f.EffectiveBatch})
		if err != nil {
			return fmt.Errorf("charrnn: -batch auto: %w", err)
		}
		spec = res.Spec
		p.Emit(map[string]any{"event": "batch", "batch": spec.Batch, "accum": max(spec.Accum, 1), "trials": len(res.Trials)},
			fmt.Sprintf("batch auto: %d x %d accumulated (%d planned trials)\n", spec.Batch, max(spec.Accum, 1), len(res.Trials)))
	}
	a, err := models.Advise(ctx, target, spec)
	if err != nil {
		return err
	}
	cli.PrintPlan(p, models.MemoryPlan{Spec: spec, Report: a.Need}, a, time.Since(start).Seconds())
	return nil
}

// target describes the device to plan for: one of -capacity bytes, or the
// device -device opens (read, then closed), held to -memory-limit
// (cli.PlanTarget).
func (f *PlanFlags) target(env Env) (meta.Config, error) {
	return cli.PlanTarget(f.Device, env.CUDA, int64(f.Capacity), int64(f.MemoryLimit))
}

// vocabOfData reads -data (or the default text) for its vocabulary's size.
func (f *PlanFlags) vocabOfData(ctx context.Context, env Env, p *printer) (int, error) {
	corpus, err := openCorpus(f.Data, env)
	if err != nil {
		return 0, err
	}
	warnSkipped(env, p, f.Data, corpus)
	text, err := tokenize(ctx, corpus, loader.TokenizeConfig{}, env, p)
	err = errors.Join(err, corpus.Close())
	if err != nil {
		return 0, fmt.Errorf("charrnn: %w", err)
	}
	return text.Vocab().Len(), nil
}
