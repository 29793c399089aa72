package charrnn

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// flagCheck collects the first bad flag of a command (cli.FlagCheck):
// each check names the flag and its value, and the error wraps ErrUsage.
type flagCheck = cli.FlagCheck

// validate checks every train flag that needs neither the device nor the
// data. -prime can only be checked against the vocabulary, once the text
// or the checkpoint has given it (Train does, before the first step).
func (f *TrainFlags) validate() error {
	var c flagCheck
	checkModel(&c, f.Model)
	c.Positive("batch", int64(f.Batch))
	c.Positive("seq", int64(f.Seq))
	c.Positive("accum", int64(f.Accum))
	checkBatches(&c, f.Batch, f.Seq, f.Accum)
	c.NonNegative("effective-batch", int64(f.EffectiveBatch))
	switch {
	case f.BatchAuto && f.Resume != "":
		c.Fail("batch", "auto", "a number with -resume (the run's batch is recorded)")
	case f.EffectiveBatch > 0 && !f.BatchAuto:
		c.Fail("effective-batch", f.EffectiveBatch, "-batch auto with it (a fixed batch keeps -batch x -accum)")
	case f.EffectiveBatch > 0 && f.Explicit["accum"]:
		c.Fail("effective-batch", f.EffectiveBatch, "no -accum with it (it sets the accumulation)")
	}
	if math.IsNaN(f.LR) || math.IsInf(f.LR, 0) || f.LR <= 0 {
		c.Fail("lr", f.LR, "a finite number > 0")
	}
	c.Finite("clip", f.Clip, 0)
	c.NonNegative("warmup", f.Warmup)
	c.NonNegative("steps", f.Steps)
	c.NonNegative("epochs", int64(f.Epochs))
	if !(f.ValFrac >= 0 && f.ValFrac < 1) {
		c.Fail("val-frac", f.ValFrac, "[0, 1)")
	}
	c.NonNegative("val-tokens", f.ValTokens)
	c.NonNegative("eval-every", f.EvalEvery)
	c.NonNegative("log-every", f.LogEvery)
	c.NonNegative("checkpoint-every", f.CheckpointEvery)
	c.NonNegative("sample", int64(f.SampleN))
	c.Finite("temperature", f.SampleTemperature, 0)
	c.NonNegative("max-skips", f.MaxSkips)
	c.NonNegative("pipeline", int64(f.Pipeline))
	if f.Pipeline > train.MaxPipeline {
		c.Fail("pipeline", f.Pipeline, fmt.Sprintf("at most %d", train.MaxPipeline))
	}
	c.OneOf("graphs", f.Graphs, "auto", "on", "off")
	c.Device(f.Device)
	if f.Plot != "" && !strings.EqualFold(filepath.Ext(f.Plot), ".png") {
		c.Fail("plot", strconv.Quote(f.Plot), "a file name ending in .png")
	}
	if c.Err != nil {
		return c.Err
	}
	g := *f // settings fills in -steps
	_, _, err := g.settings()
	return err
}

// checkModel checks the model's flags (registerModel's): each in its
// range, then the sizes they give (models.CharRNNConfig.Validate).
func checkModel(c *flagCheck, m models.CharRNNConfig) {
	c.Recurrent(m.Cell, m.Embed, m.Hidden, m.Layers, m.Dropout)
	c.Sizes("-embed, -hidden, -layers", m.Validate())
}

// checkBatches checks the sizes -batch, -seq and -accum give together
// (loader.Config.Validate: products that overflow); batch 0 is -batch
// auto, whose batch is found later.
func checkBatches(c *flagCheck, batch, seq, accum int) {
	c.Sizes("-batch, -seq, -accum", loader.Config{Batch: max(batch, 1), Seq: seq, Accum: accum}.Validate())
}

func (f *SampleFlags) validate() error {
	var c flagCheck
	c.NonNegative("n", int64(f.N))
	c.Finite("temperature", f.Temperature, 0)
	c.NonNegative("top-k", int64(f.TopK))
	c.OneOf("graphs", f.Graphs, "auto", "on", "off")
	c.Device(f.Device)
	if f.Unknown != "" && utf8.RuneCountInString(f.Unknown) != 1 {
		c.Fail("unknown", strconv.Quote(f.Unknown), "one character")
	}
	return c.Err
}

func (f *EvalFlags) validate() error {
	var c flagCheck
	c.Positive("batch", int64(f.Batch))
	c.Positive("seq", int64(f.Seq))
	checkBatches(&c, f.Batch, f.Seq, 1)
	c.Device(f.Device)
	if f.Unknown != "" && utf8.RuneCountInString(f.Unknown) != 1 {
		c.Fail("unknown", strconv.Quote(f.Unknown), "one character")
	}
	return c.Err
}

func (f *BenchFlags) validate() error {
	var c flagCheck
	c.OneOf("cell", f.Cell, "lstm", "gru")
	c.Positive("hidden", int64(f.Hidden))
	c.Positive("layers", int64(f.Layers))
	c.Positive("batch", int64(f.Batch))
	c.Positive("seq", int64(f.Seq))
	c.Positive("steps", int64(f.Steps))
	c.Positive("n", int64(f.N))
	c.Sizes("-hidden, -layers", models.CharRNNConfig{Cell: f.Cell, Embed: 64, Hidden: f.Hidden, Layers: f.Layers}.Validate())
	checkBatches(&c, f.Batch, f.Seq, 1)
	c.OneOf("graphs", f.Graphs, "auto", "on", "off")
	c.Device(f.Device)
	return c.Err
}

// ErrOutput is wrapped, with ErrUsage, by the error of an output path
// (-checkpoint, -plot) that train cannot write or must not replace: it
// is found before the first step.
var ErrOutput = errors.New("output path")

// checkOutputs checks, before any work, that train can write its
// outputs and does not replace a checkpoint it did not start from.
func (f *TrainFlags) checkOutputs() error {
	if f.Checkpoint != "" {
		if err := checkWritable("checkpoint", f.Checkpoint); err != nil {
			return err
		}
		if err := f.checkOverwrite(); err != nil {
			return err
		}
	}
	if f.Plot != "" {
		return checkWritable("plot", f.Plot)
	}
	return nil
}

// checkOverwrite refuses to replace an existing -checkpoint unless -force
// says so or the run resumes from that very file.
func (f *TrainFlags) checkOverwrite() error {
	fi, err := os.Stat(f.Checkpoint)
	if errors.Is(err, fs.ErrNotExist) || f.Force {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w: -checkpoint %s: %v", ErrUsage, ErrOutput, f.Checkpoint, err)
	}
	if f.Resume != "" {
		if ri, err := os.Stat(f.Resume); err == nil && os.SameFile(fi, ri) {
			return nil
		}
	}
	return fmt.Errorf("%w: %w: -checkpoint %s exists and this run did not start from it; "+
		"continue it with -resume %s, or replace it with -force", ErrUsage, ErrOutput, f.Checkpoint, f.Checkpoint)
}

// checkWritable checks that a file can be written at path: path is not a
// directory, and a probe file (".NAME.probe-*", removed at once) can be
// created in its directory.
func checkWritable(flagName, path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%w: %w: -%s %s is a directory", ErrUsage, ErrOutput, flagName, path)
	}
	probe, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".probe-*")
	if err != nil {
		return fmt.Errorf("%w: %w: -%s %s cannot be written: %v", ErrUsage, ErrOutput, flagName, path, err)
	}
	name := probe.Name()
	return errors.Join(probe.Close(), os.Remove(name))
}
