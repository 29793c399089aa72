package seqcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
)

// Task is which of the two commands runs: a tagger (a tag per token) or a
// classifier (a label per sequence).
type Task int

const (
	Tagging Task = iota
	Classification
)

// name is the task's program name, the prefix of its messages.
func (t Task) name() string {
	if t == Tagging {
		return "tagger"
	}
	return "classify"
}

// Env is what a command uses besides its arguments.
type Env struct {
	// Stdout receives results (and every line with -json); Stderr
	// receives progress and warnings.
	Stdout, Stderr io.Writer
	// Stdin is what predict reads.
	Stdin io.Reader
	// GOROOT locates the default data's source, GOROOT/src; "" asks `go
	// env GOROOT`.
	GOROOT string
	// CacheDir is where the default data is written once; "" means the
	// user's cache directory (os.UserCacheDir) under "gocurrent".
	CacheDir string
	// CUDA configures the GPU for -device auto, cuda and cuda:N.
	CUDA cuda.Config
	// Getenv reads the launcher's variables for train -dist auto
	// (dist.FromEnv); nil reads none (one rank). Main passes os.Getenv.
	Getenv func(string) string
	// Dist configures the communicators of -dist auto (Main fills the
	// libraries from GOCURRENT_MPI and GOCURRENT_NCCL).
	Dist dist.Config
}

func (e Env) withDefaults() Env {
	if e.Stdout == nil {
		e.Stdout = io.Discard
	}
	if e.Stderr == nil {
		e.Stderr = io.Discard
	}
	if e.Stdin == nil {
		e.Stdin = strings.NewReader("")
	}
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	return e
}

// ErrUsage is wrapped by errors in the command line: the program exits
// with status 2. It is cli.ErrUsage, as charrnn's is.
var ErrUsage = cli.ErrUsage

// Run runs the command args[0] ("train", "eval", "predict", "bench" or
// "plan") of task with the flags that follow. Cancelling ctx stops training at a
// step boundary (train.Trainer.Run) and saves the checkpoint. Run returns its error without
// printing it; Report prints it as the command line asks.
func Run(ctx context.Context, task Task, args []string, env Env) error {
	env = env.withDefaults()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(env.Stdout, usage(task))
		if len(args) == 0 {
			return fmt.Errorf("%w: no command; want train, eval, predict, bench or plan", ErrUsage)
		}
		return nil
	}
	f, ok := newFlags(task, args[0])
	if !ok {
		return fmt.Errorf("%w: unknown command %q; the commands are train, eval, predict, bench and plan", ErrUsage, args[0])
	}
	fs := flag.NewFlagSet(task.name()+" "+args[0], flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	f.register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q after the flags", ErrUsage, fs.Arg(0))
	}
	if e, ok := f.(explicitFlags); ok {
		set := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		e.setExplicit(set)
	}
	if err := f.validate(); err != nil {
		return err
	}
	return f.run(ctx, env)
}

// command is one command's flags and what it does with them.
type command interface {
	register(fs *flag.FlagSet)
	validate() error
	run(ctx context.Context, env Env) error
	json() bool
}

// explicitFlags are the flags of a command whose checks depend on which
// flags the command line gave, not only on their values.
type explicitFlags interface {
	setExplicit(set map[string]bool)
}

func newFlags(task Task, name string) (command, bool) {
	switch name {
	case "train":
		return &TrainFlags{task: task}, true
	case "eval":
		return &EvalFlags{task: task}, true
	case "predict":
		return &PredictFlags{task: task}, true
	case "bench":
		return &BenchFlags{task: task}, true
	case "plan":
		return &PlanFlags{task: task}, true
	}
	return nil, false
}

func usage(task Task) string {
	what := "tags every token of a sentence"
	if task == Classification {
		what = "labels whole sequences"
	}
	return fmt.Sprintf(`%[1]s %[2]s with a recurrent network (LSTM or GRU, bidirectional).

Usage:
  %[1]s train [-data PATH] [flags]    train (no -data: the default data, from Go's source)
  %[1]s eval -checkpoint PATH -data PATH [flags]
  %[1]s predict -checkpoint PATH < lines
  %[1]s bench [-data PATH] [flags]    training tokens/s (bench/torch_tagger.py is PyTorch's)
  %[1]s plan [-data PATH] [flags]     train's device memory by category, planned without allocating
  %[1]s COMMAND -h                    the command's flags
`, task.name(), what)
}

// WantsJSON reports whether args ask for -json, for Report.
func WantsJSON(task Task, args []string) bool {
	if len(args) == 0 {
		return false
	}
	f, ok := newFlags(task, args[0])
	if !ok {
		return false
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		for _, a := range args[1:] {
			if a == "-json" || a == "--json" || a == "-json=true" || a == "--json=true" {
				return true
			}
		}
		return false
	}
	return f.json()
}

// Report prints err, which ended a command with exit status status: an
// "error" event on Stdout with -json, a line on Stderr otherwise.
func Report(task Task, env Env, args []string, err error, status int) {
	env = env.withDefaults()
	prefix := task.name() + ": "
	msg := strings.TrimPrefix(err.Error(), prefix)
	if WantsJSON(task, args) {
		p := &printer{W: env.Stdout, JSON: true}
		p.Emit(map[string]any{"event": "error", "error": msg, "exit_status": status}, "")
		return
	}
	fmt.Fprintln(env.Stderr, prefix+msg)
}

// printer writes a command's output (cli.Printer): a line of text, or
// with -json the same event as one JSON object per line.
type printer = cli.Printer

// flagCheck collects the first bad flag (cli.FlagCheck).
type flagCheck = cli.FlagCheck

// checkFormat checks -format: "" (from the file's extension), conllu, tsv
// or jsonl.
func checkFormat(c *flagCheck, v string) {
	if v != "" {
		c.OneOf("format", v, "conllu", "tsv", "jsonl")
	}
}

// openDevice opens the device -device names (cli.OpenDevice, no memory
// limit).
func openDevice(spec string, gpu cuda.Config) (device.Device, error) {
	return cli.OpenDevice(spec, gpu, 0)
}

// ErrOutput is wrapped, with ErrUsage, by the error of a -checkpoint that
// train cannot write or must not replace: it is found before any work.
var ErrOutput = errors.New("output path")

// checkOutput checks that a checkpoint can be written at path and that
// an existing file there is replaced only with force or when the run
// resumes from it.
func checkOutput(path, resume string, force bool) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%w: %w: -checkpoint %s is a directory", ErrUsage, ErrOutput, path)
	case err == nil && !force:
		if resume != "" {
			if ri, err := os.Stat(resume); err == nil && os.SameFile(fi, ri) {
				break
			}
		}
		return fmt.Errorf("%w: %w: -checkpoint %s exists and this run did not start from it; "+
			"continue it with -resume %s, or replace it with -force", ErrUsage, ErrOutput, path, path)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w: -checkpoint %s: %v", ErrUsage, ErrOutput, path, err)
	}
	probe, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".probe-*")
	if err != nil {
		return fmt.Errorf("%w: %w: -checkpoint %s cannot be written: %v", ErrUsage, ErrOutput, path, err)
	}
	name := probe.Name()
	return errors.Join(probe.Close(), os.Remove(name))
}
