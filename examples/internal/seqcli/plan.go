package seqcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
)

// PlanFlags are the plan command's flags: the train flags that memory
// depends on, the data (read for its vocabularies and lengths, or given
// as sizes) and the device to plan for.
type PlanFlags struct {
	task Task

	Data, Val string
	DataFlags
	MinCount int
	// Without data: the vocabulary's size (words, or characters for a
	// classifier reading them), the tags or labels, the longest sequence
	// and, for a tagger with character features, the characters.
	Vocab, Classes, Seq, Chars int
	Model                      ModelFlags
	Batch                      int
	BatchAuto                  bool
	EffectiveBatch             int
	Accum, MaxTokens           int
	Optimizer                  string
	Seed                       uint64
	Device                     string
	Capacity                   cli.Size // plan for a device of this size without opening one
	MemoryLimit                cli.Size
	JSON                       bool
	// Explicit names the flags the command line gave.
	Explicit map[string]bool
}

func (f *PlanFlags) json() bool                      { return f.JSON }
func (f *PlanFlags) setExplicit(set map[string]bool) { f.Explicit = set }

func (f *PlanFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Data, "data", "", "the training data train would read, for its vocabularies and lengths (default: the default data); not with -vocab")
	fs.StringVar(&f.Val, "val", "", "the validation data train would read (default: none, or the default data's)")
	f.DataFlags.register(fs)
	fs.IntVar(&f.MinCount, "min-count", 1, "words seen fewer times read as unknown (the vocabulary's size)")
	fs.IntVar(&f.Vocab, "vocab", 0, "plan without data: the vocabulary's size, <pad> and <unk> included (words, or characters with -input chars)")
	fs.IntVar(&f.Classes, "classes", 0, "with -vocab: the tags or labels")
	fs.IntVar(&f.Seq, "seq", 0, "with -vocab: the longest sequence, in tokens (every sequence planned this long)")
	if f.task == Tagging {
		fs.IntVar(&f.Chars, "chars", 0, "with -vocab and -char-embed: the characters, <pad> and <unk> included (words planned 16 characters long)")
	}
	f.Model.register(fs, f.task)
	cli.BatchVar(fs, &f.Batch, &f.BatchAuto, "batch", 32, "sequences per batch, or auto: the largest that fits (planned)")
	fs.IntVar(&f.EffectiveBatch, "effective-batch", 0, "with -batch auto, keep this many sequences per optimizer step, raising -accum")
	fs.IntVar(&f.Accum, "accum", 1, "batches accumulated per optimizer step")
	fs.IntVar(&f.MaxTokens, "max-tokens", 0, "a token budget per batch, padding included (0: none)")
	fs.StringVar(&f.Optimizer, "optimizer", "adam", "sgd, adam, adamw or rmsprop")
	fs.Uint64Var(&f.Seed, "seed", 1, "train's seed: the order of the batches, which the peak can depend on")
	fs.StringVar(&f.Device, "device", "auto", "the device to plan for: auto, cpu, cuda or cuda:N (opened only to read its memory, unless -capacity)")
	fs.Var(&f.Capacity, "capacity", "plan for a device of this much memory (e.g. 80GiB), like -device, without opening it")
	fs.Var(&f.MemoryLimit, "memory-limit", "hold the run to this much memory, as train's -memory-limit")
	fs.BoolVar(&f.JSON, "json", false, "print the plan as one JSON object")
}

func (f *PlanFlags) validate() error {
	var c flagCheck
	f.DataFlags.check(&c)
	f.Model.check(&c, f.task)
	c.NonNegative("min-count", int64(f.MinCount))
	c.NonNegative("vocab", int64(f.Vocab))
	c.NonNegative("classes", int64(f.Classes))
	c.NonNegative("seq", int64(f.Seq))
	c.NonNegative("chars", int64(f.Chars))
	chars := f.task == Tagging && f.Model.CharEmbed > 0
	switch {
	case f.Vocab == 0:
		for _, s := range []struct {
			name string
			v    int
		}{{"classes", f.Classes}, {"seq", f.Seq}, {"chars", f.Chars}} {
			if s.v > 0 {
				c.Fail(s.name, s.v, "-vocab with it (without, the data gives it)")
			}
		}
	case f.Data != "" || f.Val != "":
		c.Fail("vocab", f.Vocab, "no -data or -val with it (it plans without data)")
	case f.Vocab < 3:
		c.Fail("vocab", f.Vocab, "at least 3 (<pad>, <unk> and a token)")
	case f.Classes < 1:
		c.Fail("classes", f.Classes, "> 0 with -vocab")
	case f.Seq < 1:
		c.Fail("seq", f.Seq, "> 0 with -vocab")
	case chars && f.Chars < 3:
		c.Fail("chars", f.Chars, "at least 3 with -vocab and -char-embed")
	case !chars && f.Chars > 0:
		c.Fail("chars", f.Chars, "-char-embed with it")
	}
	c.Positive("batch", int64(f.Batch))
	c.Positive("accum", int64(f.Accum))
	checkBatches(&c, f.Batch, f.Accum, f.MaxTokens)
	checkBatchAuto(&c, f.BatchAuto, f.EffectiveBatch, f.Explicit["accum"])
	c.NonNegative("max-tokens", int64(f.MaxTokens))
	c.OneOf("optimizer", f.Optimizer, "sgd", "adam", "adamw", "rmsprop")
	c.Device(f.Device)
	return c.Err
}

// run predicts the device memory of the train command with the same flags,
// by category, before allocating any (models.PlanMemory, through
// models.Advise), and says whether it fits the device and, if not, what
// does; with -batch auto it plans the largest batch first
// (models.PlanBatch). With data, the plan takes train's first epoch:
// its batches, bucketed and shuffled as train's loader does, and a
// validation on -val's; with -vocab, two steps of -batch·-accum
// sequences of -seq tokens and no validation.
func (f *PlanFlags) run(ctx context.Context, env Env) error {
	p := &printer{W: env.Stdout, JSON: f.JSON}
	target, err := cli.PlanTarget(f.Device, env.CUDA, int64(f.Capacity), int64(f.MemoryLimit))
	if err != nil {
		return err
	}
	spec := batching{Batch: f.Batch, Accum: f.Accum, MaxTokens: f.MaxTokens, Optimizer: f.Optimizer, Seed: f.Seed}.spec()
	f.Model.describe(f.task, &spec)
	sequences := 0
	if f.Vocab > 0 {
		spec.Vocab, spec.Classes, spec.Seq, spec.Chars = f.Vocab, f.Classes, f.Seq, f.Chars
	} else if sequences, err = f.readData(ctx, env, p, &spec); err != nil {
		return err
	}
	start := time.Now()
	if f.BatchAuto {
		planned := func(s models.MemorySpec, cfg models.FitConfig) (models.FitResult, error) {
			return models.PlanBatch(ctx, target, s, cfg)
		}
		if spec, err = autoBatch(ctx, spec, sequences, f.EffectiveBatch, target, p, planned); err != nil {
			return fmt.Errorf("%s: %w", f.task.name(), err)
		}
	}
	a, err := models.Advise(ctx, target, spec)
	if err != nil {
		return err
	}
	cli.PrintPlan(p, models.MemoryPlan{Spec: spec, Report: a.Need}, a, time.Since(start).Seconds())
	return nil
}

// readData reads -data and -val (or the default data) as train would, and
// completes spec with what they say (dataSpec). It returns the training
// data's number of sequences.
func (f *PlanFlags) readData(ctx context.Context, env Env, p *printer, spec *models.MemorySpec) (int, error) {
	paths, err := dataPaths(ctx, f.task, f.Data, f.Val, env, p)
	if err != nil {
		return 0, err
	}
	chars := f.task == Classification && f.Model.Input == "chars"
	data, val, err := openDatasets(ctx, f.task, paths, loader.DatasetConfig{ReadConfig: f.read(), MinCount: f.MinCount}, chars)
	if err != nil {
		return 0, err
	}
	dataSpec(spec, data, val)
	err = data.Close()
	if val != nil {
		err = errors.Join(err, val.Close())
	}
	return data.Len(), err
}
