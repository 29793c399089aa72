package charrnn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/examples/charrnn/internal/plot"
	"github.com/gocurrent/gocurrent/examples/charrnn/internal/progress"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// TrainFlags are the train command's settings, one field per flag.
type TrainFlags struct {
	Data                     string
	Model                    Config
	Batch, Seq, Accum        int
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
	CheckpointEvery          int64
	Plot                     string
	MemStats, JSON           bool
	SampleN                  int
	SampleTemperature        float64
	SamplePrime              string
}

func (f *TrainFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Data, "data", "", "training text, a file or a directory tree (default: the Go standard library's source, $(go env GOROOT)/src)")
	fs.StringVar(&f.Model.Cell, "cell", "lstm", "recurrent cell: lstm or gru")
	fs.IntVar(&f.Model.Embed, "embed", 64, "embedding size")
	fs.IntVar(&f.Model.Hidden, "hidden", 256, "hidden size of each layer")
	fs.IntVar(&f.Model.Layers, "layers", 2, "recurrent layers")
	fs.Float64Var(&f.Model.Dropout, "dropout", 0, "dropout between recurrent layers, in [0, 1)")
	fs.IntVar(&f.Batch, "batch", 32, "streams per micro-batch")
	fs.IntVar(&f.Seq, "seq", 64, "characters per window (truncated backpropagation length)")
	fs.IntVar(&f.Accum, "accum", 1, "micro-batches per optimizer step (gradient accumulation)")
	fs.StringVar(&f.Optimizer, "optimizer", "adam", "adam, adamw, sgd or rmsprop")
	fs.Float64Var(&f.LR, "lr", 2e-3, "learning rate")
	fs.Float64Var(&f.Clip, "clip", 5, "clip the gradient to this global L2 norm (0: off)")
	fs.StringVar(&f.Schedule, "schedule", "constant", "learning-rate schedule: constant or cosine (to 0 at -steps)")
	fs.Int64Var(&f.Warmup, "warmup", 0, "linear learning-rate warm-up steps")
	fs.Int64Var(&f.Steps, "steps", 0, "optimizer steps to reach, counting resumed ones (0: -epochs decides; both 0: 1000 steps)")
	fs.IntVar(&f.Epochs, "epochs", 0, "passes over the training text (0: -steps decides)")
	fs.Float64Var(&f.ValFrac, "val-frac", 0.05, "fraction of the text, at its end, held out for validation")
	fs.Int64Var(&f.ValTokens, "val-tokens", 1<<18, "validate on at most this many characters, the last, of the held-out text (0: all)")
	fs.Int64Var(&f.EvalEvery, "eval-every", 200, "validate every this many steps (0: at the end only)")
	fs.Int64Var(&f.LogEvery, "log-every", 100, "with -json or without a terminal, report every this many steps")
	fs.StringVar(&f.Device, "device", "auto", "auto, cpu, cuda or cuda:N")
	fs.BoolVar(&f.TF32, "tf32", false, "let float32 GEMMs on a GPU use TF32 tensor cores")
	fs.Uint64Var(&f.Seed, "seed", 1, "seed of the initial weights and dropout")
	fs.StringVar(&f.Init, "init", "", "start from this checkpoint's weights (and its model shape and vocabulary)")
	fs.StringVar(&f.Resume, "resume", "", "continue the run this checkpoint saved, exactly")
	fs.StringVar(&f.Checkpoint, "checkpoint", "charrnn.safetensors", "checkpoint to write at the end, every -checkpoint-every steps and on Ctrl-C (empty: none)")
	fs.Int64Var(&f.CheckpointEvery, "checkpoint-every", 1000, "steps between checkpoints (0: at the end only)")
	fs.StringVar(&f.Plot, "plot", "", "write the training and validation loss curves to this PNG")
	fs.BoolVar(&f.MemStats, "memstats", false, "print the device allocator's figures at the end")
	fs.BoolVar(&f.JSON, "json", false, "print every line as one JSON object")
	fs.IntVar(&f.SampleN, "sample", 400, "characters to generate at the end (0: none)")
	fs.Float64Var(&f.SampleTemperature, "temperature", 0.8, "temperature of the sample at the end")
	fs.StringVar(&f.SamplePrime, "prime", "", "text the sample at the end starts from (default: a newline)")
}

func trainCommand(ctx context.Context, args []string, env Env) error {
	var f TrainFlags
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	f.register(fs)
	if err := parse(fs, args, env); err != nil {
		if errors.Is(err, errHelp) {
			return nil
		}
		return err
	}
	return Train(ctx, f, env)
}

// stepEvent is a -json line of training progress.
type stepEvent struct {
	Event        string  `json:"event"`
	Step         int64   `json:"step"`
	Steps        int64   `json:"steps,omitempty"`
	Epoch        int     `json:"epoch"`
	Loss         float64 `json:"loss"`
	GradNorm     float64 `json:"grad_norm"`
	LR           float64 `json:"lr"`
	TokensPerSec float64 `json:"tokens_per_s"`
	DataWait     float64 `json:"data_wait"`
	Skipped      int64   `json:"skipped,omitempty"`
	AllocBytes   int64   `json:"allocated_bytes"`
}

type evalEvent struct {
	Event       string  `json:"event"`
	Step        int64   `json:"step"`
	Loss        float64 `json:"loss"`
	BitsPerChar float64 `json:"bits_per_char"`
	Tokens      int64   `json:"tokens"`
}

// Train runs the train command.
func Train(ctx context.Context, f TrainFlags, env Env) (err error) {
	env = env.withDefaults()
	if f.Init != "" && f.Resume != "" {
		return fmt.Errorf("%w: -init and -resume exclude each other", ErrUsage)
	}
	if f.Steps < 0 || f.Epochs < 0 {
		return fmt.Errorf("%w: -steps %d, -epochs %d; neither may be negative", ErrUsage, f.Steps, f.Epochs)
	}
	if f.Steps == 0 && f.Epochs == 0 {
		f.Steps = 1000
	}
	if !(f.ValFrac >= 0 && f.ValFrac < 1) {
		return fmt.Errorf("%w: -val-frac %v, want [0, 1)", ErrUsage, f.ValFrac)
	}
	opt, err := train.NewOptimizer(train.Algorithm(f.Optimizer), f.LR)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	var sched train.Schedule
	switch f.Schedule {
	case "constant", "":
	case "cosine":
		if f.Steps == 0 {
			return fmt.Errorf("%w: -schedule cosine needs -steps", ErrUsage)
		}
		sched = train.Schedule{Decay: "cosine"}
	default:
		return fmt.Errorf("%w: -schedule %q, want constant or cosine", ErrUsage, f.Schedule)
	}
	sched.Warmup = f.Warmup
	p := &printer{w: env.Stdout, json: f.JSON}

	gpu := env.CUDA
	gpu.TF32 = gpu.TF32 || f.TF32
	d, err := OpenDevice(f.Device, gpu)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()

	// The model: from a checkpoint (its shape and vocabulary), or new once
	// the text has given the vocabulary.
	var m *Model
	var ck *train.Checkpoint
	if from := f.Init + f.Resume; from != "" {
		if m, ck, err = Load(d, from); err != nil {
			return err
		}
		if f.Resume != "" && !ck.Resumable() {
			m.Close()
			return fmt.Errorf("charrnn: %s holds weights only; start from it with -init", from)
		}
		f.Model = m.Config()
	}
	defer func() {
		if m != nil {
			err = errors.Join(err, m.Close())
		}
	}()

	corpus, err := openCorpus(f.Data, env)
	if err != nil {
		return err
	}
	defer corpus.Close()
	tc := loader.TokenizeConfig{}
	if m != nil {
		tc.Vocab = m.Vocab()
	}
	text, err := loader.Tokenize(ctx, corpus, tc)
	if err != nil {
		return fmt.Errorf("charrnn: %w", err)
	}
	trainText, valText, err := text.Split(f.ValFrac)
	if err != nil {
		return err
	}
	if m == nil {
		if m, err = NewModel(d, f.Model, text.Vocab(), f.Seed); err != nil {
			return err
		}
	}
	data, err := loader.New(d, trainText, loader.Config{Batch: f.Batch, Seq: f.Seq, Accum: f.Accum, Epochs: f.Epochs, Seed: f.Seed})
	if err != nil {
		return fmt.Errorf("charrnn: training text: %w", err)
	}
	defer func() { err = errors.Join(err, data.Close()) }()
	var val *loader.Loader
	if valText.Len() > 0 {
		// The cap keeps the end of the held-out text, the part furthest
		// from the training text.
		if n := valText.Len(); f.ValTokens > 0 && n > f.ValTokens {
			valText = valText.Slice(n-f.ValTokens, n)
		}
		val, err = loader.New(d, valText, loader.Config{Batch: f.Batch, Seq: f.Seq})
		switch {
		case errors.Is(err, loader.ErrTooShort):
			fmt.Fprintf(env.Stderr, "charrnn: no validation: the held-out %d characters are too few for one batch of %d x %d\n", valText.Len(), f.Batch, f.Seq+1)
			val = nil
		case err != nil:
			return fmt.Errorf("charrnn: validation text: %w", err)
		default:
			defer func() { err = errors.Join(err, val.Close()) }()
		}
	}

	// Progress: a bar on a terminal, else a line every LogEvery steps.
	live := env.Live && !f.JSON
	total := f.Steps
	if total == 0 {
		total = int64(f.Epochs) * data.PerEpoch() / int64(f.Accum)
	}
	var bar *progress.Bar
	if live {
		bar = progress.New(env.Stderr, total, true)
	}
	var trainCurve, valCurve plot.Curve
	trainCurve.Name, valCurve.Name = "train", "validation"
	lastVal := math.NaN()
	tcfg := train.Config{
		Optimizer: opt, Schedule: sched, Steps: f.Steps, ClipNorm: f.Clip,
		Validation: val, EvalEvery: f.EvalEvery,
		Checkpoint: f.Checkpoint, CheckpointEvery: f.CheckpointEvery, Metadata: m.Metadata(),
		OnStep: func(pr train.Progress) {
			trainCurve.X = append(trainCurve.X, float64(pr.Step))
			trainCurve.Y = append(trainCurve.Y, pr.Loss)
			status := fmt.Sprintf("loss %.3f  val %.3f  %s tok/s  wait %.0f%%", pr.Loss, lastVal, thousands(pr.TokensPerSecond), 100*pr.DataWait)
			if bar != nil {
				bar.Update(pr.Step, status)
				return
			}
			if f.LogEvery > 0 && (pr.Step%f.LogEvery == 0 || pr.Step == 1) {
				p.emit(stepEvent{Event: "step", Step: pr.Step, Steps: pr.Steps, Epoch: pr.Position.Epoch, Loss: pr.Loss, GradNorm: pr.GradNorm,
					LR: pr.LR, TokensPerSec: pr.TokensPerSecond, DataWait: pr.DataWait, Skipped: pr.Skipped,
					AllocBytes: pr.Memory.AllocatedBytes[alloc.AllPools].Current},
					fmt.Sprintf("step %d  epoch %d  loss %.4f  grad norm %.3f  lr %.2g  %s tok/s  data wait %.1f%%\n",
						pr.Step, pr.Position.Epoch, pr.Loss, pr.GradNorm, pr.LR, thousands(pr.TokensPerSecond), 100*pr.DataWait))
			}
		},
		OnEval: func(ev train.Evaluation) {
			lastVal = ev.Loss
			valCurve.X = append(valCurve.X, float64(ev.Step))
			valCurve.Y = append(valCurve.Y, ev.Loss)
			if bar == nil {
				p.emit(evalEvent{Event: "validation", Step: ev.Step, Loss: ev.Loss, BitsPerChar: ev.BitsPerToken, Tokens: ev.Tokens},
					fmt.Sprintf("validation at step %d: loss %.4f nats/char, %.4f bits/char (%d characters)\n", ev.Step, ev.Loss, ev.BitsPerToken, ev.Tokens))
			}
		},
	}
	tr, err := train.New(d, m, data, tcfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tr.Close()) }()
	if f.Resume != "" {
		if err := tr.Resume(ck); err != nil {
			return err
		}
	}
	params := 0
	for _, g := range m.Groups() {
		params += g.Params.Len()
	}
	p.emit(map[string]any{"event": "start", "device": d.Name(), "cell": f.Model.Cell, "params": params, "vocab": m.Classes(),
		"train_tokens": trainText.Len(), "val_tokens": valText.Len(), "step": tr.Step(), "steps": f.Steps, "epochs": f.Epochs,
		"steps_per_epoch": data.PerEpoch() / int64(f.Accum)},
		fmt.Sprintf("training a %d-layer %s of %d (%s parameters) on %s: %s training and %s validation characters, vocabulary %d; %d steps per epoch, starting at step %d\n",
			f.Model.Layers, strings.ToUpper(f.Model.Cell), f.Model.Hidden, thousands(float64(params)), d.Name(),
			thousands(float64(trainText.Len())), thousands(float64(valText.Len())), m.Classes(), data.PerEpoch()/int64(f.Accum), tr.Step()))

	sum, runErr := tr.Run(ctx)
	if bar != nil {
		bar.Finish()
	}
	if f.Plot != "" && len(trainCurve.X) > 0 {
		curves := []plot.Curve{trainCurve}
		if len(valCurve.X) > 0 {
			curves = append(curves, valCurve)
		}
		chart := plot.Chart{Title: fmt.Sprintf("char-RNN %s %dx%d", strings.ToUpper(f.Model.Cell), f.Model.Layers, f.Model.Hidden),
			XLabel: "step", YLabel: "loss (nats/char)", Curves: curves}
		if err := plot.WriteFile(f.Plot, chart); err != nil {
			runErr = errors.Join(runErr, err)
		}
	}
	stopped := ctx.Err() != nil && onlyCancelled(runErr, ctx.Err())
	if runErr != nil && !stopped {
		return runErr
	}
	done := map[string]any{"event": "done", "step": sum.Steps, "loss": sum.Loss, "tokens": sum.Tokens,
		"elapsed_s": sum.Elapsed.Seconds(), "tokens_per_s": float64(sum.Tokens) / sum.Elapsed.Seconds(), "skipped": sum.Skipped, "stopped": stopped}
	text2 := fmt.Sprintf("step %d: loss %.4f, %s tokens in %s (%s tok/s)", sum.Steps, sum.Loss, thousands(float64(sum.Tokens)),
		sum.Elapsed.Round(time.Millisecond), thousands(float64(sum.Tokens)/sum.Elapsed.Seconds()))
	if v := sum.Validation; v != nil {
		done["val_loss"], done["val_bits_per_char"] = v.Loss, v.BitsPerToken
		text2 += fmt.Sprintf("; validation %.4f nats/char, %.4f bits/char", v.Loss, v.BitsPerToken)
	}
	if f.Checkpoint != "" {
		done["checkpoint"] = f.Checkpoint
		text2 += "; checkpoint " + f.Checkpoint
	}
	if stopped {
		text2 = "interrupted after " + text2
		if f.Checkpoint != "" {
			text2 += " (continue with -resume " + f.Checkpoint + ")"
		}
	}
	p.emit(done, text2+"\n")
	if f.SampleN > 0 && !stopped {
		if err := sampleAfterTraining(ctx, d, m, f, p); err != nil {
			return err
		}
	}
	if f.MemStats {
		printMemStats(p, d)
	}
	return nil
}

// sampleAfterTraining prints what the trained model writes.
func sampleAfterTraining(ctx context.Context, d device.Device, m *Model, f TrainFlags, p *printer) error {
	prime, ids, err := encodePrime(m.Vocab(), f.SamplePrime)
	if err != nil {
		return err
	}
	var sb strings.Builder
	sb.WriteString(prime)
	err = train.Sample(ctx, d, m, train.SampleConfig{N: f.SampleN, Temperature: f.SampleTemperature, Prime: ids, Seed: f.Seed},
		func(id int32) error {
			sb.WriteRune(m.Vocab().Rune(id))
			return nil
		})
	if err != nil {
		return err
	}
	p.emit(map[string]any{"event": "sample", "temperature": f.SampleTemperature, "text": sb.String()},
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

// encodePrime returns the text sampling starts from and its ids: prime, or
// if it is empty a newline (the vocabulary's first character if it has no
// newline).
func encodePrime(v *loader.Vocab, prime string) (string, []int32, error) {
	if prime == "" {
		prime = string(v.Rune(0))
		if _, ok := v.ID('\n'); ok {
			prime = "\n"
		}
	}
	ids, err := v.Encode(prime)
	if err != nil {
		return "", nil, fmt.Errorf("charrnn: -prime: %w", err)
	}
	return prime, ids, nil
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
