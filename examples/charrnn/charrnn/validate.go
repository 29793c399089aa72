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
)

// flagCheck collects the first bad flag of a command: each check names
// the flag and its value, and the error wraps ErrUsage.
type flagCheck struct{ err error }

func (c *flagCheck) fail(name string, value any, want string) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: -%s %v, want %s", ErrUsage, name, value, want)
	}
}

func (c *flagCheck) positive(name string, v int64) {
	if v <= 0 {
		c.fail(name, v, "> 0")
	}
}

func (c *flagCheck) nonNegative(name string, v int64) {
	if v < 0 {
		c.fail(name, v, ">= 0")
	}
}

// finite checks v is finite and at least min.
func (c *flagCheck) finite(name string, v, min float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < min {
		c.fail(name, v, fmt.Sprintf("a finite number >= %g", min))
	}
}

func (c *flagCheck) cell(name, v string) {
	if v != "lstm" && v != "gru" {
		c.fail(name, strconv.Quote(v), "lstm or gru")
	}
}

// device checks a -device spec has one of devices.Open's forms, without
// opening it.
func (c *flagCheck) device(v string) {
	switch {
	case v == "auto" || v == "cpu" || v == "cuda":
		return
	case strings.HasPrefix(v, "cuda:"):
		if n, err := strconv.Atoi(v[len("cuda:"):]); err == nil && n >= 0 {
			return
		}
	}
	c.fail("device", strconv.Quote(v), "auto, cpu, cuda or cuda:N with N a GPU ordinal")
}

// validate checks every train flag that needs neither the device nor the
// data. -prime can only be checked against the vocabulary, once the text
// or the checkpoint has given it (Train does, before the first step).
func (f *TrainFlags) validate() error {
	var c flagCheck
	c.cell("cell", f.Model.Cell)
	c.positive("embed", int64(f.Model.Embed))
	c.positive("hidden", int64(f.Model.Hidden))
	c.positive("layers", int64(f.Model.Layers))
	if !(f.Model.Dropout >= 0 && f.Model.Dropout < 1) {
		c.fail("dropout", f.Model.Dropout, "[0, 1)")
	}
	c.positive("batch", int64(f.Batch))
	c.positive("seq", int64(f.Seq))
	c.positive("accum", int64(f.Accum))
	if math.IsNaN(f.LR) || math.IsInf(f.LR, 0) || f.LR <= 0 {
		c.fail("lr", f.LR, "a finite number > 0")
	}
	c.finite("clip", f.Clip, 0)
	c.nonNegative("warmup", f.Warmup)
	c.nonNegative("steps", f.Steps)
	c.nonNegative("epochs", int64(f.Epochs))
	if !(f.ValFrac >= 0 && f.ValFrac < 1) {
		c.fail("val-frac", f.ValFrac, "[0, 1)")
	}
	c.nonNegative("val-tokens", f.ValTokens)
	c.nonNegative("eval-every", f.EvalEvery)
	c.nonNegative("log-every", f.LogEvery)
	c.nonNegative("checkpoint-every", f.CheckpointEvery)
	c.nonNegative("sample", int64(f.SampleN))
	c.finite("temperature", f.SampleTemperature, 0)
	c.nonNegative("max-skips", f.MaxSkips)
	c.device(f.Device)
	if f.Plot != "" && !strings.EqualFold(filepath.Ext(f.Plot), ".png") {
		c.fail("plot", strconv.Quote(f.Plot), "a file name ending in .png")
	}
	if c.err != nil {
		return c.err
	}
	g := *f // settings fills in -steps
	_, _, err := g.settings()
	return err
}

func (f *SampleFlags) validate() error {
	var c flagCheck
	c.nonNegative("n", int64(f.N))
	c.finite("temperature", f.Temperature, 0)
	c.nonNegative("top-k", int64(f.TopK))
	c.device(f.Device)
	if f.Unknown != "" && utf8.RuneCountInString(f.Unknown) != 1 {
		c.fail("unknown", strconv.Quote(f.Unknown), "one character")
	}
	return c.err
}

func (f *EvalFlags) validate() error {
	var c flagCheck
	c.positive("batch", int64(f.Batch))
	c.positive("seq", int64(f.Seq))
	c.device(f.Device)
	if f.Unknown != "" && utf8.RuneCountInString(f.Unknown) != 1 {
		c.fail("unknown", strconv.Quote(f.Unknown), "one character")
	}
	return c.err
}

func (f *BenchFlags) validate() error {
	var c flagCheck
	c.cell("cell", f.Cell)
	c.positive("hidden", int64(f.Hidden))
	c.positive("layers", int64(f.Layers))
	c.positive("batch", int64(f.Batch))
	c.positive("seq", int64(f.Seq))
	c.positive("steps", int64(f.Steps))
	c.positive("n", int64(f.N))
	c.device(f.Device)
	return c.err
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
