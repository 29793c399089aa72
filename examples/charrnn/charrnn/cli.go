package charrnn

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/examples/charrnn/internal/progress"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/loader"
)

// Env is what a command uses besides its arguments.
type Env struct {
	// Stdout receives results (and every line with -json); Stderr
	// receives progress and warnings.
	Stdout, Stderr io.Writer
	// Live says Stderr is a terminal: training progress is redrawn in
	// place instead of printed as lines.
	Live bool
	// GOROOT locates the default corpus, GOROOT/src; "" asks `go env
	// GOROOT`. main fills it from the GOROOT environment variable.
	GOROOT string
	// CUDA configures the GPU for -device auto, cuda and cuda:N, apart
	// from the ordinal, which the flag gives: the driver and cuBLAS
	// libraries, TF32. main fills BLASLibrary from GOCURRENT_CUBLAS and
	// DriverLibrary from GOCURRENT_CUDA_DRIVER.
	CUDA cuda.Config
	// ProgressEvery is how often a long phase (reading a text, eval's
	// pass over it) reports its progress off a terminal; 0 means 10 s.
	ProgressEvery time.Duration
	// Getenv reads the launcher's variables for train -dist auto
	// (dist.FromEnv: mpirun's, torchrun's); nil reads none (one rank).
	// main passes os.Getenv.
	Getenv func(string) string
	// Dist configures the communicators of -dist auto: the MPI and NCCL
	// libraries (main fills them from GOCURRENT_MPI and GOCURRENT_NCCL);
	// -dist-timeout sets its Timeout.
	Dist dist.Config
	// NoBranches makes bench's model keep its recurrent stack's weight
	// gradients on the compute stream (models.CharRNNConfig.NoBranches),
	// where by default a device with branches (device.Brancher) runs
	// them beside the walk back of the layer below: to compare the two
	// on a GPU. main sets it from GOCURRENT_BRANCHES=off.
	NoBranches bool
	// WaveWindows is bench's model's models.CharRNNConfig.WaveWindows:
	// the windows its recurrent stack's forwards are cut into for their
	// wavefront (0: the stack's default, 4; 1: the layers one after the
	// other), to compare on a GPU. main sets it from
	// GOCURRENT_WAVE_WINDOWS.
	WaveWindows int
}

// withDefaults discards the output of writers left nil.
func (e Env) withDefaults() Env {
	if e.Stdout == nil {
		e.Stdout = io.Discard
	}
	if e.Stderr == nil {
		e.Stderr = io.Discard
	}
	if e.ProgressEvery <= 0 {
		e.ProgressEvery = 10 * time.Second
	}
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	return e
}

// ErrUsage is wrapped by errors in the command line (it is cli.ErrUsage,
// which the examples' programs exit 2 for).
var ErrUsage = cli.ErrUsage

// Run runs the command args[0] ("train", "sample", "eval", "bench" or "plan") with
// the flags that follow. Cancelling ctx (the main program does on Ctrl-C)
// stops training at a step boundary (train.Trainer.Run) and saves the
// checkpoint.
//
// Run returns its error without printing it; Report prints it as the
// command line asks.
func Run(ctx context.Context, args []string, env Env) error {
	env = env.withDefaults()
	cmd, err := parseCommandLine(args, env)
	if err != nil || cmd == nil {
		return err
	}
	return cmd(ctx)
}

// command is a parsed and checked command line, ready to run.
type command func(context.Context) error

// parseCommandLine parses args and checks every flag, doing no work: no
// device is opened, no file read or written. It returns a nil command for
// help, which it printed, and an error wrapping ErrUsage for a bad
// command line.
func parseCommandLine(args []string, env Env) (command, error) {
	env = env.withDefaults()
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return nil, fmt.Errorf("%w: no command (want train, sample, eval, bench or plan)", ErrUsage)
	}
	parsers := map[string]func([]string, Env) (command, error){
		"train": parseTrain, "sample": parseSample, "eval": parseEval, "bench": parseBench, "plan": parsePlan,
	}
	p, ok := parsers[args[0]]
	if !ok {
		if args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			fmt.Fprint(env.Stdout, usage)
			return nil, nil
		}
		if !mentionsJSON(args) {
			fmt.Fprint(env.Stderr, usage)
		}
		return nil, fmt.Errorf("%w: unknown command %q (want train, sample, eval, bench or plan)", ErrUsage, args[0])
	}
	cmd, err := p(args[1:], env)
	if errors.Is(err, errHelp) {
		return nil, nil
	}
	return cmd, err
}

const usage = `usage: charrnn <command> [flags]

commands:
  train   train a character-level LSTM or GRU (default data: the hand-written ASCII
          Go files of the standard library, $(go env GOROOT)/src)
  sample  generate text from a checkpoint
  eval    loss and bits per character of a checkpoint on a text
  bench   training and sampling tokens/s on the workload of bench/torch_charrnn.py
  plan    the device memory train would use with the same flags, by category, planned
          without allocating any; whether it fits, and what batch does

Run charrnn <command> -h for a command's flags.
`

// parse parses a command's flags into f and checks them; -h prints them
// and returns errHelp.
//
// The flag package's own report of a bad flag (its message and the flags)
// goes to Stderr, except with -json, whose error Report prints instead.
func parse(fs *flag.FlagSet, args []string, env Env, f interface{ validate() error }) error {
	var out bytes.Buffer
	fs.SetOutput(&out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) || !mentionsJSON(args) {
			env.Stderr.Write(out.Bytes())
		}
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	return f.validate()
}

// errHelp ends a command that printed its flags.
var errHelp = errors.New("help")

// commandFlags are a command's flags.
type commandFlags interface {
	register(*flag.FlagSet)
	json() bool
}

func (f *TrainFlags) json() bool  { return f.JSON }
func (f *SampleFlags) json() bool { return f.JSON }
func (f *EvalFlags) json() bool   { return f.JSON }
func (f *BenchFlags) json() bool  { return f.JSON }

// WantsJSON reports whether the command line args (a command and its
// flags, as Run takes them) asks for -json output. It reads the flags as
// the command does; when they do not parse, any -json among them counts.
func WantsJSON(args []string) bool {
	if len(args) == 0 {
		return false
	}
	var f commandFlags
	switch args[0] {
	case "train":
		f = &TrainFlags{}
	case "sample":
		f = &SampleFlags{}
	case "eval":
		f = &EvalFlags{}
	case "bench":
		f = &BenchFlags{}
	case "plan":
		f = &PlanFlags{}
	default:
		return mentionsJSON(args)
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return mentionsJSON(args)
	}
	return f.json()
}

// mentionsJSON reports whether an argument sets -json, whatever the flags
// around it: for command lines that do not parse.
func mentionsJSON(args []string) bool {
	for _, a := range args {
		switch strings.TrimPrefix(a, "-") {
		case "-json", "json", "-json=true", "json=true", "-json=1", "json=1":
			return true
		}
	}
	return false
}

// Report prints err, the error Run returned for args, as the command line
// asks: with -json one "error" event on Stdout, {"event": "error",
// "error": message, "exit_status": status}, so that every line of the
// output is a JSON object; otherwise "charrnn: message" on Stderr. The
// message carries one "charrnn: " prefix, whether or not err has its own.
func Report(env Env, args []string, err error, status int) {
	env = env.withDefaults()
	msg := strings.TrimPrefix(err.Error(), "charrnn: ")
	if WantsJSON(args) {
		p := &printer{W: env.Stdout, JSON: true}
		p.Emit(map[string]any{"event": "error", "error": msg, "exit_status": status}, "")
		return
	}
	fmt.Fprintln(env.Stderr, "charrnn: "+msg)
}

// warn tells the user something a command goes on despite: "charrnn:
// message" on Stderr, or with -json a "warning" event on Stdout.
func warn(env Env, p *printer, msg string) {
	if p.JSON {
		p.Emit(map[string]any{"event": "warning", "warning": msg}, "")
		return
	}
	fmt.Fprintln(env.Stderr, "charrnn: "+msg)
}

// openDevice opens the device -device names (devices.Open: auto, cpu,
// cuda, cuda:N) with gpu for a GPU; a spec devices does not know is a
// usage error.
func openDevice(spec string, gpu cuda.Config) (device.Device, error) {
	return openDeviceLimit(spec, gpu, 0)
}

// openDeviceLimit is openDevice with the allocator held to limit bytes
// (0: none): cli.OpenDevice.
func openDeviceLimit(spec string, gpu cuda.Config, limit int64) (device.Device, error) {
	return cli.OpenDevice(spec, gpu, limit)
}

// printer writes a command's output: a line of text, or with -json the
// same event as one JSON object per line.
type printer = cli.Printer

// printMemStats is the -memstats event (cli.PrintMemStats).
func printMemStats(p *printer, d device.Device) { cli.PrintMemStats(p, d) }

// generated matches Go's marker of a generated file
// (https://go.dev/s/generatedcode).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// DefaultCorpus is the directory the default corpus is read from:
// goroot/src, with goroot "" the answer of `go env GOROOT`.
func DefaultCorpus(goroot string) (string, error) {
	if goroot == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if goroot = strings.TrimSpace(string(out)); err != nil || goroot == "" {
			return "", fmt.Errorf("charrnn: no Go installation found for the default corpus (go env GOROOT: %v); set GOROOT or pass -data FILE_OR_DIR", cmdError(err))
		}
	}
	dir := goroot + string(os.PathSeparator) + "src"
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("charrnn: the default corpus %s is not a directory; pass -data FILE_OR_DIR", dir)
	}
	return dir, nil
}

// openCorpus opens -data, or with "" the default corpus: the hand-written
// Go files of GOROOT/src, that is outside testdata directories and without
// the "// Code generated ... DO NOT EDIT." line (generated tables, some
// megabytes of hexadecimal, would otherwise be much of the validation
// text at the corpus's end), and plain ASCII (most of them; the few with
// other characters would take the vocabulary from about 100 characters to
// 1,600).
func openCorpus(data string, env Env) (*loader.Corpus, error) {
	if data != "" {
		return loader.Open(data)
	}
	dir, err := DefaultCorpus(env.GOROOT)
	if err != nil {
		return nil, err
	}
	return loader.OpenFunc(dir, func(rel string) bool {
		if !strings.HasSuffix(rel, ".go") || strings.HasPrefix(rel, "testdata/") || strings.Contains(rel, "/testdata/") {
			return false
		}
		b, err := os.ReadFile(dir + string(os.PathSeparator) + rel)
		if err != nil {
			return true // the corpus reports the error when it reads the file
		}
		for _, c := range b {
			if c >= 0x80 {
				return false
			}
		}
		return !generated.Match(b)
	})
}

// warnSkipped tells the user which files of a -data directory the corpus
// left out as not text (loader.Corpus.Skipped), in one warning: how many
// for each reason and the first few names, so that training on a project
// folder says what it did not read.
func warnSkipped(env Env, p *printer, data string, c *loader.Corpus) {
	if msg := cli.SkippedMessage(data, c.Skipped()); msg != "" {
		warn(env, p, msg)
	}
}

// cmdError is err of a command that failed, with what it wrote to
// standard error, or "empty output" for a command that succeeded.
func cmdError(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "empty output"
	case errors.As(err, &ee) && len(ee.Stderr) > 0:
		return fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err.Error()
}

// phaseProgress reports a long phase of a command (reading a text,
// evaluating it): on a terminal a bar on Stderr; otherwise a line on
// Stderr every Env.ProgressEvery (10 s), or with -json a "progress"
// event (phase, done, total, unit) on Stdout at that pace. A phase that
// ends within the first interval off a terminal prints nothing.
type phaseProgress struct {
	p           *printer
	phase, unit string
	bar         *progress.Bar // on a terminal
	w           io.Writer     // lines, without a terminal or -json
	every       time.Duration
	start, last time.Time
}

func newPhaseProgress(env Env, p *printer, phase, unit string, total int64) *phaseProgress {
	pp := &phaseProgress{p: p, phase: phase, unit: unit, every: env.ProgressEvery, start: time.Now()}
	pp.last = pp.start
	switch {
	case env.Live && !p.JSON:
		pp.bar = progress.New(env.Stderr, total, true)
	case !p.JSON:
		pp.w = env.Stderr
	}
	return pp
}

// update reports done units of total.
func (pp *phaseProgress) update(done, total int64) {
	if pp.bar != nil {
		pp.bar.Update(done, pp.phase+" ("+pp.unit+")")
		return
	}
	now := time.Now()
	if now.Sub(pp.last) < pp.every {
		return
	}
	pp.last = now
	if pp.w != nil {
		elapsed := now.Sub(pp.start)
		eta := ""
		if done > 0 && done < total {
			eta = fmt.Sprintf(", about %s to go", (time.Duration(float64(elapsed) * float64(total-done) / float64(done))).Round(time.Second))
		}
		fmt.Fprintf(pp.w, "charrnn: %s: %s of %s %s (%.0f%%) in %s%s\n", pp.phase, thousands(float64(done)), thousands(float64(total)), pp.unit,
			100*float64(done)/float64(max(total, 1)), elapsed.Round(time.Second), eta)
		return
	}
	pp.p.Emit(map[string]any{"event": "progress", "phase": pp.phase, "done": done, "total": total, "unit": pp.unit}, "")
}

// finish ends the bar, if there is one.
func (pp *phaseProgress) finish() {
	if pp.bar != nil {
		pp.bar.Finish()
	}
}

// tokenize is loader.Tokenize with its progress reported, in megabytes
// read.
func tokenize(ctx context.Context, c *loader.Corpus, tc loader.TokenizeConfig, env Env, p *printer) (*loader.Text, error) {
	mb := func(n int64) int64 { return (n + 999_999) / 1_000_000 }
	pp := newPhaseProgress(env, p, "reading the text", "MB", mb(c.Size()))
	tc.OnRead = func(read, size int64) { pp.update(mb(read), mb(size)) }
	text, err := loader.Tokenize(ctx, c, tc)
	pp.finish()
	return text, err
}
