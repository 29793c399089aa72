package seqcli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// BenchFlags are the bench command's flags: training speed on real data,
// and the batches it trained on, for bench/torch_tagger.py to train the
// same model on the same batches.
type BenchFlags struct {
	task Task
	Data string
	DataFlags
	Model      ModelFlags
	Batch      int
	Steps      int
	Warmup     int
	Device     string
	Seed       uint64
	BatchesOut string
	JSON       bool
}

func (f *BenchFlags) json() bool { return f.JSON }

func (f *BenchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Data, "data", "", "labelled data (default: the default data's training part)")
	f.DataFlags.register(fs)
	m := &f.Model
	fs.StringVar(&m.Cell, "cell", "lstm", "lstm or gru")
	fs.IntVar(&m.Embed, "embed", 100, "the embedding's width")
	fs.IntVar(&m.Hidden, "hidden", 128, "the hidden size of each direction")
	fs.IntVar(&m.Layers, "layers", 1, "recurrent layers")
	fs.BoolVar(&m.Bidirectional, "bidirectional", true, "run each layer both ways")
	m.Pool, m.Input = "last", "words"
	fs.IntVar(&f.Batch, "batch", 32, "sequences per batch")
	fs.IntVar(&f.Steps, "steps", 40, "timed training steps")
	fs.IntVar(&f.Warmup, "warmup", 5, "untimed steps first")
	fs.StringVar(&f.Device, "device", "cpu", "auto, cpu, cuda or cuda:N")
	fs.Uint64Var(&f.Seed, "seed", 1, "seeds the weights and the batches' order")
	fs.StringVar(&f.BatchesOut, "batches-out", "", "write the batches trained on (ids, tags, lengths) as JSON here")
	fs.BoolVar(&f.JSON, "json", false, "print the result as one JSON object")
}

func (f *BenchFlags) validate() error {
	var c flagCheck
	f.DataFlags.check(&c)
	c.OneOf("cell", f.Model.Cell, "lstm", "gru")
	c.Positive("embed", int64(f.Model.Embed))
	c.Positive("hidden", int64(f.Model.Hidden))
	c.Positive("layers", int64(f.Model.Layers))
	c.Positive("batch", int64(f.Batch))
	if c.Err == nil {
		f.Model.check(&c, f.task)
	}
	checkBatches(&c, f.Batch, 1, 0)
	c.Positive("steps", int64(f.Steps))
	c.NonNegative("warmup", int64(f.Warmup))
	c.Device(f.Device)
	return c.Err
}

// benchBatch is one batch as bench/torch_tagger.py reads it.
type benchBatch struct {
	Lengths []int32 `json:"lengths"`
	Tokens  []int32 `json:"tokens"` // [seq, rows], time-major
	Labels  []int32 `json:"labels"`
	Seq     int     `json:"seq"`
	Rows    int     `json:"rows"`
}

// run trains Warmup+Steps steps (Adam at 1e-3, clipping at 5) and prints
// the timed steps' real tokens per second.
func (f *BenchFlags) run(ctx context.Context, env Env) (err error) {
	p := &printer{W: env.Stdout, JSON: f.JSON}
	path := f.Data
	if path == "" {
		files, err := defaultData(ctx, f.task, env)
		if err != nil {
			return err
		}
		path = files.train
	}
	d, err := openDevice(f.Device, env.CUDA)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	data, err := openData(ctx, f.task, path, loader.DatasetConfig{ReadConfig: f.read()}, false)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, data.Close()) }()
	m, err := newModel(ctx, f.task, d, f.Model, data, f.Seed)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.Close()) }()
	l, err := newLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: f.Batch, Shuffle: true, Seed: f.Seed}}, m)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	opt, err := train.NewOptimizer(train.Adam, 1e-3)
	if err != nil {
		return err
	}
	var batches []benchBatch
	var t0 time.Time
	var tokens0 int64
	res := map[string]any{"impl": "gocurrent", "device": d.Name(), "threads": runtime.GOMAXPROCS(0), "batch": f.Batch, "steps": f.Steps}
	cfg := train.Config{Optimizer: opt, ClipNorm: 5, Steps: int64(f.Warmup + f.Steps), OnStep: func(pr train.Progress) {
		if pr.Step == int64(f.Warmup) {
			t0, tokens0 = time.Now(), pr.Tokens
		}
		if pr.Step == int64(f.Warmup+f.Steps) {
			if t0.IsZero() { // no warm-up
				t0 = time.Now().Add(-pr.Elapsed)
			}
			s := time.Since(t0).Seconds()
			res["train_tokens_per_s"] = float64(pr.Tokens-tokens0) / s
			res["tokens"] = pr.Tokens - tokens0
			res["seconds"] = s
			res["data_wait"] = pr.DataWait
		}
	}}
	tr, err := train.NewSeq(d, m, l, cfg, train.SeqOptions{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tr.Close()) }()
	if _, err := tr.Run(ctx); err != nil {
		return err
	}
	if f.BatchesOut != "" {
		for b, err := range l.Batches(ctx, loader.Position{}) {
			if err != nil {
				return err
			}
			hb := b.Host
			batches = append(batches, benchBatch{Lengths: hb.Lengths, Tokens: hb.Tokens, Labels: hb.Labels, Seq: hb.Seq, Rows: hb.Rows})
			if len(batches) == f.Warmup+f.Steps {
				break
			}
		}
		js, err := json.Marshal(map[string]any{"vocab": data.Words.Len(), "classes": data.Labels.Len(), "tagging": data.Tagging,
			"embed": f.Model.Embed, "hidden": f.Model.Hidden, "layers": f.Model.Layers, "cell": f.Model.Cell,
			"bidirectional": f.Model.Bidirectional, "warmup": f.Warmup, "batches": batches})
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.BatchesOut, js, 0o644); err != nil {
			return err
		}
	}
	p.Emit(res, fmt.Sprintf("train_tokens_per_s %.0f  (%d real tokens in %.2f s, %d threads, %s)\n",
		res["train_tokens_per_s"], res["tokens"], res["seconds"], res["threads"], d.Name()))
	return nil
}
