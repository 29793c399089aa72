package charrnn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// SampleFlags are the sample command's settings.
type SampleFlags struct {
	Checkpoint  string
	N           int
	Temperature float64
	TopK        int
	Prime       string
	Seed        uint64
	Device      string
	// Unknown, when set, is a character of the checkpoint's vocabulary
	// that characters of Prime outside it are read as; empty: such a
	// character is an error.
	Unknown  string
	MemStats bool
	JSON     bool
	// Graphs is -graphs: auto, on or off (useGraphs).
	Graphs string
}

func parseSample(args []string, env Env) (command, error) {
	var f SampleFlags
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	f.register(fs)
	if err := parse(fs, args, env, &f); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return Sample(ctx, f, env)
	}, nil
}

func (f *SampleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Checkpoint, "checkpoint", "charrnn.safetensors", "checkpoint to sample from")
	fs.IntVar(&f.N, "n", 500, "characters to generate")
	fs.Float64Var(&f.Temperature, "temperature", 1, "softmax temperature (0: always the most likely character)")
	fs.IntVar(&f.TopK, "top-k", 0, "draw among the k most likely characters only (0: all)")
	fs.StringVar(&f.Prime, "prime", "", "text to start from (default: a newline)")
	fs.Uint64Var(&f.Seed, "seed", 1, "seed of the draws")
	fs.StringVar(&f.Device, "device", "auto", "auto, cpu, cuda or cuda:N")
	fs.StringVar(&f.Unknown, "unknown", "", "read characters of -prime outside the checkpoint's vocabulary as this one of its characters (default: refuse them)")
	fs.BoolVar(&f.MemStats, "memstats", false, "print the device allocator's figures at the end")
	fs.BoolVar(&f.JSON, "json", false, "print the sample (and figures) as JSON objects, one per line")
	graphsFlag(fs, &f.Graphs)
}

// graphsFlag registers -graphs, which every command that runs a model has.
func graphsFlag(fs *flag.FlagSet, v *string) {
	fs.StringVar(v, "graphs", "auto", "record the steps (and sampled chunks) once as device graphs and replay them: on, off, or auto: on a GPU")
}

// useGraphs is -graphs v on d: auto records on a GPU, where a launch
// costs microseconds of the host's time, and not on the CPU device, whose
// figures stay those of its calls.
func useGraphs(v string, d device.Device) bool {
	switch v {
	case "on":
		return true
	case "off":
		return false
	}
	return strings.HasPrefix(d.Name(), "cuda")
}

// Sample runs the sample command: the text goes to Stdout as it is drawn
// (with -json, as one object at the end).
func Sample(ctx context.Context, f SampleFlags, env Env) (err error) {
	env = env.withDefaults()
	if err := f.validate(); err != nil {
		return err
	}
	d, err := openDevice(f.Device, env.CUDA)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	m, _, err := models.LoadCharRNN(ctx, d, f.Checkpoint)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.Close()) }()
	prime, ids, mapped, err := encodePrime(m.Vocab(), f.Prime, f.Unknown)
	if err != nil {
		if f.Unknown == "" && errors.Is(err, loader.ErrNotInVocab) {
			err = fmt.Errorf("%w (-unknown CHAR reads such characters as CHAR)", err)
		}
		return err
	}
	p := &printer{W: env.Stdout, JSON: f.JSON}
	if mapped > 0 && !f.JSON { // with -json, the sample event's "mapped"
		warn(env, p, fmt.Sprintf("%d characters of -prime were outside the vocabulary, read as %q", mapped, f.Unknown))
	}
	var text bytes.Buffer
	out := bufio.NewWriter(env.Stdout)
	if !f.JSON {
		out.WriteString(prime)
	}
	start := time.Now()
	err = train.Sample(ctx, d, m, train.SampleConfig{N: f.N, Temperature: f.Temperature, TopK: f.TopK, Prime: ids, Seed: f.Seed,
		NoGraphs: !useGraphs(f.Graphs, d)},
		func(id int32) error {
			r := m.Vocab().Rune(id)
			if f.JSON {
				text.WriteRune(r)
				return nil
			}
			out.WriteRune(r)
			if r == '\n' {
				return out.Flush()
			}
			return nil
		})
	elapsed := time.Since(start)
	if !f.JSON {
		out.WriteString("\n")
		err = errors.Join(err, out.Flush())
	}
	if err != nil {
		return err
	}
	if f.JSON {
		ev := map[string]any{"event": "sample", "prime": prime, "text": text.String(), "temperature": f.Temperature,
			"tokens_per_s": float64(f.N) / elapsed.Seconds()}
		if f.Unknown != "" {
			ev["mapped"] = mapped
		}
		p.Emit(ev, "")
	}
	if f.MemStats {
		printMemStats(p, d)
	}
	return nil
}

// EvalFlags are the eval command's settings.
type EvalFlags struct {
	Checkpoint, Data, Device string
	Batch, Seq               int
	// Unknown, when set, is a character of the checkpoint's vocabulary
	// that characters of the text outside it are read as
	// (loader.TokenizeConfig.Unknown); empty: such a character is an error.
	Unknown string
	JSON    bool
}

func parseEval(args []string, env Env) (command, error) {
	var f EvalFlags
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	f.register(fs)
	if err := parse(fs, args, env, &f); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := Eval(ctx, f, env)
		return err
	}, nil
}

func (f *EvalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Checkpoint, "checkpoint", "charrnn.safetensors", "checkpoint to evaluate")
	fs.StringVar(&f.Data, "data", "", "text to evaluate on, a file or a directory tree (default: the validation part of train's default corpus, as train held it out)")
	fs.IntVar(&f.Batch, "batch", 32, "streams per batch")
	fs.IntVar(&f.Seq, "seq", 64, "characters per window")
	fs.StringVar(&f.Device, "device", "auto", "auto, cpu, cuda or cuda:N")
	fs.StringVar(&f.Unknown, "unknown", "", "read characters outside the checkpoint's vocabulary as this one of its characters (default: refuse them)")
	fs.BoolVar(&f.JSON, "json", false, "print the result (and progress) as JSON objects, one per line")
}

// Eval runs the eval command: the checkpoint's mean loss over the text,
// cut as training cuts it, without gradients.
func Eval(ctx context.Context, f EvalFlags, env Env) (ev train.Evaluation, err error) {
	env = env.withDefaults()
	if err := f.validate(); err != nil {
		return ev, err
	}
	d, err := openDevice(f.Device, env.CUDA)
	if err != nil {
		return ev, err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	m, ck, err := models.LoadCharRNN(ctx, d, f.Checkpoint)
	if err != nil {
		return ev, err
	}
	defer func() { err = errors.Join(err, m.Close()) }()
	corpus, err := openCorpus(f.Data, env)
	if err != nil {
		return ev, err
	}
	defer corpus.Close()
	if err := checkUnknown(m.Vocab(), f.Unknown); err != nil {
		return ev, err
	}
	p := &printer{W: env.Stdout, JSON: f.JSON}
	warnSkipped(env, p, f.Data, corpus)
	text, err := tokenize(ctx, corpus, loader.TokenizeConfig{Vocab: m.Vocab(), Unknown: f.Unknown}, env, p)
	if err != nil {
		if f.Unknown == "" {
			err = fmt.Errorf("%w (-unknown CHAR reads such characters as CHAR)", err)
		}
		return ev, fmt.Errorf("charrnn: %w", err)
	}
	if f.Data == "" {
		text = heldOut(text, ck)
	}
	data, err := loader.New(d, text, loader.Config{Batch: f.Batch, Seq: f.Seq})
	if err != nil {
		return ev, fmt.Errorf("charrnn: %w", err)
	}
	defer func() { err = errors.Join(err, data.Close()) }()
	pp := newPhaseProgress(env, p, "evaluating", "batches", data.PerEpoch())
	ev, err = train.EvaluateWith(ctx, d, m, data, train.EvalConfig{OnBatch: pp.update})
	pp.finish()
	if err != nil {
		return ev, err
	}
	mapped := ""
	if f.Unknown != "" {
		mapped = fmt.Sprintf(" (%d characters of the text were outside the vocabulary, read as %q)", text.Mapped(), f.Unknown)
	}
	p.Emit(evalEvent{Event: "eval", Loss: cli.Number(ev.Loss), BitsPerChar: cli.Number(ev.BitsPerToken), Tokens: ev.Tokens, Mapped: text.Mapped()},
		fmt.Sprintf("loss %.4f nats/char, %.4f bits/char over %d characters%s\n", ev.Loss, ev.BitsPerToken, ev.Tokens, mapped))
	return ev, nil
}

// heldOut is what train validated ck's model on, of the default corpus's
// text: the part it held out (the val_frac the checkpoint records, or
// train's default, 0.05), its last 262,144 characters (train's
// -val-tokens default); with nothing held out, the text's last
// characters as many.
func heldOut(text *loader.Text, ck *train.Checkpoint) *loader.Text {
	frac := 0.05
	if js, ok := ck.Metadata()[trainKey]; ok {
		var tr trainRecord
		if json.Unmarshal([]byte(js), &tr) == nil && tr.ValFrac >= 0 && tr.ValFrac < 1 {
			frac = tr.ValFrac
		}
	}
	val := text
	if frac > 0 {
		if _, v, err := text.Split(frac); err == nil && v.Len() > 0 {
			val = v
		}
	}
	const valTokens = 1 << 18 // train's -val-tokens default
	if n := val.Len(); n > valTokens {
		val = val.Slice(n-valTokens, n)
	}
	return val
}

// BenchFlags are the bench command's settings: the workload of
// bench/torch_charrnn.py (vocabulary 65, embedding 64, Adam at
// 2e-3, clipping at global norm 5, random tokens; sampling at batch 1 with
// temperature 0.8).
type BenchFlags struct {
	Cell                 string
	Hidden, Layers       int
	Batch, Seq, Steps, N int
	Device               string
	// TF32 lets a GPU's float32 GEMMs use TF32 tensor cores (cuda.Config.TF32).
	TF32           bool
	MemStats, JSON bool
	Graphs         string // -graphs: auto, on or off (useGraphs)
}

// BenchResult is what bench measures.
type BenchResult struct {
	TrainTokensPerSecond  float64 `json:"train_tokens_per_s"`
	SampleTokensPerSecond float64 `json:"sample_tokens_per_s"`
	// SegmentAllocs counts the segments the device allocator got from
	// the device (cuMemAlloc on a GPU) during the timed training run, its
	// trainer's set-up included: 0 once the warm-up run has filled the
	// cache.
	SegmentAllocs int64 `json:"segment_allocs"`
	// DataWait is the fraction of the training run spent waiting for a
	// batch.
	DataWait float64 `json:"data_wait"`
	// Step and Token are what the device was asked for (device.Counts)
	// per timed training step and per token of the timed sample (a
	// train.Sample call of -n tokens, its prime and its read-backs
	// included); zero on a device that does not count.
	Step, Token PerOp `json:"-"`
}

// PerOp is device.Counts per step or per token.
type PerOp struct {
	Syncs, Launches, GEMMs, Copies, Graphs, Calls float64
}

func perOp(c device.Counts, n int64) PerOp {
	f := float64(max(n, 1))
	return PerOp{Syncs: float64(c.Syncs) / f, Launches: float64(c.Launches) / f, GEMMs: float64(c.GEMMs) / f, Copies: float64(c.Copies) / f,
		Graphs: float64(c.Graphs) / f, Calls: float64(c.Calls) / f}
}

// counts reads d's counts; zero for a device that does not count.
func counts(d device.Device) device.Counts {
	if c, ok := d.(device.Counter); ok {
		return c.Counts()
	}
	return device.Counts{}
}

func parseBench(args []string, env Env) (command, error) {
	var f BenchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	f.register(fs)
	if err := parse(fs, args, env, &f); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := Bench(ctx, f, env)
		return err
	}, nil
}

func (f *BenchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Cell, "cell", "lstm", "lstm or gru")
	fs.IntVar(&f.Hidden, "hidden", 256, "hidden size")
	fs.IntVar(&f.Layers, "layers", 2, "layers")
	fs.IntVar(&f.Batch, "batch", 32, "batch")
	fs.IntVar(&f.Seq, "seq", 64, "sequence length")
	fs.IntVar(&f.Steps, "steps", 20, "timed training steps (after 3 untimed ones)")
	fs.IntVar(&f.N, "n", 400, "timed sampled tokens (after 20 untimed ones)")
	fs.StringVar(&f.Device, "device", "auto", "auto, cpu, cuda or cuda:N")
	fs.BoolVar(&f.TF32, "tf32", false, "let float32 GEMMs on a GPU use TF32 tensor cores")
	fs.BoolVar(&f.MemStats, "memstats", false, "print the device allocator's figures at the end")
	fs.BoolVar(&f.JSON, "json", false, "print the result as one JSON object")
	graphsFlag(fs, &f.Graphs)
}

// benchVocab is torch_charrnn.py's vocabulary size.
const benchVocab = 65

// benchPipeline is the bench's train.Config.Pipeline: steps read back 8
// at a time, without waiting for the device.
const benchPipeline = 8

// Bench runs the bench command. Training runs the real trainer on a
// loader over a random text of 65 characters (PyTorch's script reuses one
// random batch; streaming a text costs us the loader too); sampling is
// train.Sample, one token at a time.
func Bench(ctx context.Context, f BenchFlags, env Env) (res BenchResult, err error) {
	env = env.withDefaults()
	env.CUDA.TF32 = env.CUDA.TF32 || f.TF32
	const warmSteps, warmTokens = 3, 20
	if err := f.validate(); err != nil {
		return res, err
	}
	d, err := openDevice(f.Device, env.CUDA)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	chars := make([]string, benchVocab)
	for i := range chars {
		chars[i] = string(rune('0' + i)) // '0' .. 'p', printable ASCII
	}
	vocab, err := loader.NewVocab(chars)
	if err != nil {
		return res, err
	}
	m, err := models.NewCharRNN(ctx, d, models.CharRNNConfig{Cell: f.Cell, Embed: 64, Hidden: f.Hidden, Layers: f.Layers, NoBranches: env.NoBranches,
		WaveWindows: env.WaveWindows}, vocab, 0)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, m.Close()) }()

	steps := warmSteps + f.Steps
	r := rand.New(rand.NewPCG(0, 0))
	raw := make([]byte, f.Batch*(steps*f.Seq+1))
	for i := range raw {
		raw[i] = byte('0' + r.IntN(benchVocab))
	}
	text, err := loader.Tokenize(ctx, loader.NewCorpus(bytes.NewReader(raw), int64(len(raw)), "random"), loader.TokenizeConfig{Vocab: vocab})
	if err != nil {
		return res, err
	}
	data, err := loader.New(d, text, loader.Config{Batch: f.Batch, Seq: f.Seq})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, data.Close()) }()
	// The training steps are pipelined (train.Config.Pipeline): a run
	// reads its last steps back before it returns, so each run is timed
	// from its start to its return. The warm-up is a run of its own, whose
	// trainer's memory the timed one reuses from the cache.
	opt, _ := train.NewOptimizer(train.Adam, 2e-3)
	run := func(steps int64, onStep func(train.Progress)) error {
		tr, err := train.New(d, m, data, train.Config{Optimizer: opt, Steps: steps, ClipNorm: 5, Pipeline: benchPipeline,
			Graphs: useGraphs(f.Graphs, d), OnStep: onStep})
		if err != nil {
			return err
		}
		_, err = tr.Run(ctx)
		return errors.Join(err, tr.Close())
	}
	if err := run(warmSteps, nil); err != nil {
		return res, err
	}
	allocs0, c0, t0 := d.MemStats().DeviceAllocs, counts(d), time.Now()
	err = run(int64(f.Steps), func(p train.Progress) { res.DataWait = p.DataWait })
	t1, c1 := time.Now(), counts(d)
	if err != nil {
		return res, err
	}
	res.SegmentAllocs = d.MemStats().DeviceAllocs - allocs0
	res.TrainTokensPerSecond = float64(f.Steps*f.Batch*f.Seq) / t1.Sub(t0).Seconds()
	res.Step = perOp(c1.Sub(c0), int64(f.Steps))

	// Sampling draws on the device and reads the tokens back 64 at a time
	// (train.Sample), so emit is called in bursts: the timed tokens are a
	// whole call of their own, after an untimed one, from its start to its
	// return, its one-token prime and last read-back included.
	sample := func(n int) error {
		return train.Sample(ctx, d, m, train.SampleConfig{N: n, Temperature: 0.8, Prime: []int32{0}, Seed: 1, NoGraphs: !useGraphs(f.Graphs, d)},
			func(int32) error { return nil })
	}
	if err := sample(warmTokens); err != nil {
		return res, err
	}
	t0, c0 = time.Now(), counts(d)
	if err := sample(f.N); err != nil {
		return res, err
	}
	t1, c1 = time.Now(), counts(d)
	res.SampleTokensPerSecond = float64(f.N) / t1.Sub(t0).Seconds()
	res.Token = perOp(c1.Sub(c0), int64(f.N))
	// What the GEMMs ran in: TF32 only on a GPU opened with it (the CPU
	// device's float32 GEMMs are IEEE float32), printed beside the PyTorch
	// script's settings so a comparison says what it compares.
	tf32, where, fuse, walk := false, d.Name(), 0, 0
	if g, ok := d.(*cuda.Device); ok {
		tf32, where, fuse, walk = g.Info().TF32, d.Name()+" ("+g.Info().Name+")", g.Info().FuseCellsUpTo, g.Info().WalkCellsUpTo
	}
	// Whether the stack's weight gradients ran on a branch: the model's
	// word after its runs, false where the device has none, could not
	// open one, or NoBranches.
	branches, windows := m.Branched(), m.WaveWindows()
	p := &printer{W: env.Stdout, JSON: f.JSON}
	p.Emit(map[string]any{"event": "bench", "impl": "gocurrent", "device": d.Name(), "device_name": where, "cell": f.Cell,
		"hidden": f.Hidden, "layers": f.Layers, "batch": f.Batch, "seq": f.Seq, "tf32": tf32, "graphs": useGraphs(f.Graphs, d),
		"fuse_cells_up_to": fuse, "walk_cells_up_to": walk, "branches": branches, "wave_windows": windows,
		"train_tokens_per_s": res.TrainTokensPerSecond, "sample_tokens_per_s": res.SampleTokensPerSecond,
		"segment_allocs": res.SegmentAllocs, "data_wait": res.DataWait,
		"step_syncs": res.Step.Syncs, "step_launches": res.Step.Launches, "step_gemms": res.Step.GEMMs, "step_copies": res.Step.Copies,
		"step_graphs": res.Step.Graphs, "step_calls": res.Step.Calls, "token_syncs": res.Token.Syncs, "token_launches": res.Token.Launches,
		"token_gemms": res.Token.GEMMs, "token_copies": res.Token.Copies, "token_graphs": res.Token.Graphs, "token_calls": res.Token.Calls},
		fmt.Sprintf("%s %dx%d batch %d seq %d on %s, TF32 %v, branches %v, wave windows %d: train_tokens_per_s %.0f  sample_tokens_per_s %.0f  segment_allocs %d  data_wait %.1f%%\n"+
			"  per training step: %.1f syncs, %.1f launches, %.1f GEMMs, %.1f copies, %.2f graphs, %.1f host calls; per sampled token: %.1f syncs, %.1f launches, %.1f GEMMs, %.1f copies, %.3f graphs, %.2f host calls\n",
			f.Cell, f.Layers, f.Hidden, f.Batch, f.Seq, where, tf32, branches, windows, res.TrainTokensPerSecond, res.SampleTokensPerSecond,
			res.SegmentAllocs, 100*res.DataWait,
			res.Step.Syncs, res.Step.Launches, res.Step.GEMMs, res.Step.Copies, res.Step.Graphs, res.Step.Calls,
			res.Token.Syncs, res.Token.Launches, res.Token.GEMMs, res.Token.Copies, res.Token.Graphs, res.Token.Calls))
	if f.MemStats {
		printMemStats(p, d)
	}
	return res, nil
}
