package seqcli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// EvalFlags are the eval command's flags.
type EvalFlags struct {
	task       Task
	Checkpoint string
	Data       string
	DataFlags
	Batch    int
	Device   string
	PerClass bool
	JSON     bool
}

func (f *EvalFlags) json() bool { return f.JSON }

func (f *EvalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Checkpoint, "checkpoint", f.task.checkpoint(), "the model to evaluate (default: what train writes)")
	fs.StringVar(&f.Data, "data", "", "the labelled data to evaluate on (default: the default data's validation part, which train validates on)")
	f.DataFlags.register(fs)
	fs.IntVar(&f.Batch, "batch", 32, "sequences per batch")
	fs.StringVar(&f.Device, "device", "auto", "auto, cpu, cuda or cuda:N")
	fs.BoolVar(&f.PerClass, "per-class", false, "print each class's precision, recall and F1")
	fs.BoolVar(&f.JSON, "json", false, "print the result as one JSON object")
}

func (f *EvalFlags) validate() error {
	var c flagCheck
	if f.Checkpoint == "" {
		c.Fail("checkpoint", `""`, "the checkpoint to evaluate")
	}
	f.DataFlags.check(&c)
	c.Positive("batch", int64(f.Batch))
	c.Device(f.Device)
	return c.Err
}

// run prints the model's loss (mean cross-entropy over the real tokens,
// or the sequences, in nats), accuracy and the task's other figures.
func (f *EvalFlags) run(ctx context.Context, env Env) (err error) {
	p := &printer{W: env.Stdout, JSON: f.JSON}
	d, m, closeAll, err := openModel(ctx, f.task, f.Checkpoint, f.Device, env)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeAll()) }()
	words, chars, labels := m.vocabs()
	path := f.Data
	if path == "" {
		files, err := defaultData(ctx, f.task, env)
		if err != nil {
			return err
		}
		path = files.val
	}
	data, err := openData(ctx, f.task, path, loader.DatasetConfig{ReadConfig: f.read(), Words: words, Chars: chars, Labels: labels}, chars != nil && words == nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, data.Close()) }()
	l, err := newLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: f.Batch}, Epochs: 1}, m)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	ev, err := train.EvaluateSeq(ctx, d, m, l, train.EvalConfig{})
	if err != nil {
		return err
	}
	e := newEvalEvent(f.task, "eval", ev, labels, f.PerClass)
	p.Emit(e, e.text(""))
	return nil
}

// PredictFlags are the predict command's flags.
type PredictFlags struct {
	task       Task
	Checkpoint string
	Batch      int
	Device     string
	JSON       bool
}

func (f *PredictFlags) json() bool { return f.JSON }

func (f *PredictFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Checkpoint, "checkpoint", f.task.checkpoint(), "the model (default: what train writes)")
	fs.IntVar(&f.Batch, "batch", 32, "sequences per batch")
	fs.StringVar(&f.Device, "device", "auto", "auto, cpu, cuda or cuda:N")
	fs.BoolVar(&f.JSON, "json", false, "one JSON object per input line")
}

func (f *PredictFlags) validate() error {
	var c flagCheck
	if f.Checkpoint == "" {
		c.Fail("checkpoint", `""`, "the checkpoint to predict with")
	}
	c.Positive("batch", int64(f.Batch))
	c.Device(f.Device)
	return c.Err
}

// predictChunk is how many input lines are predicted at a time.
const predictChunk = 1024

// run reads one sentence (tagger: tokens separated by spaces) or one
// sequence (classifier: its words, or its text with -input chars) per
// line and writes the tags of its tokens, separated by spaces, or its
// label, one line per input line; an empty line gives an empty line.
func (f *PredictFlags) run(ctx context.Context, env Env) (err error) {
	p := &printer{W: env.Stdout, JSON: f.JSON}
	d, m, closeAll, err := openModel(ctx, f.task, f.Checkpoint, f.Device, env)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeAll()) }()
	dir, err := os.MkdirTemp("", "gocurrent-predict-*")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	sc := bufio.NewScanner(env.Stdin)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	var lines []string
	flush := func() error {
		if len(lines) == 0 {
			return nil
		}
		out, err := predictLines(ctx, f.task, d, m, lines, f.Batch, filepath.Join(dir, "lines.jsonl"))
		if err != nil {
			return err
		}
		for i, line := range lines {
			p.Emit(map[string]any{"input": line, "prediction": out[i]}, strings.Join(out[i], " ")+"\n")
		}
		lines = lines[:0]
		return nil
	}
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		lines = append(lines, sc.Text())
		if len(lines) == predictChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the input: %w", err)
	}
	return flush()
}

// predictLines predicts lines through a JSON lines file at path, read as
// a dataset in the model's vocabularies (so batching, unknown words and
// character features are the training's): the tags of each line's
// tokens, or its label in a one-element slice; nothing for a blank line.
func predictLines(ctx context.Context, task Task, d device.Device, m model, lines []string, batch int, path string) ([][]string, error) {
	words, chars, labels := m.vocabs()
	textInput := words == nil
	dummy := labels.Item(0)
	var b strings.Builder
	var index []int // the line of each example
	longest := 0    // the longest JSON line written
	for i, line := range lines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var ex any
		tokens := strings.Fields(line)
		switch {
		case task == Tagging:
			tags := make([]string, len(tokens))
			for k := range tags {
				tags[k] = dummy
			}
			ex = map[string]any{"tokens": tokens, "tags": tags}
		case textInput:
			ex = map[string]any{"text": line, "label": dummy}
		default:
			ex = map[string]any{"tokens": tokens, "label": dummy}
		}
		js, err := json.Marshal(ex)
		if err != nil {
			return nil, err
		}
		b.Write(js)
		b.WriteByte('\n')
		index = append(index, i)
		longest = max(longest, len(js))
	}
	out := make([][]string, len(lines))
	if len(index) == 0 {
		return out, nil
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	// The file is ours, its lines the input's (at most the scanner's 16 MiB)
	// as JSON: the reader's bound on a line is their longest.
	data, err := loader.OpenDataset(ctx, path, loader.DatasetConfig{ReadConfig: loader.ReadConfig{Format: loader.JSONL, MaxLine: longest},
		Words: words, Chars: chars, Labels: labels})
	if err != nil {
		return nil, err
	}
	defer data.Close()
	preds, err := predict(ctx, d, m, data, batch)
	if err != nil {
		return nil, err
	}
	for k, pr := range preds {
		out[index[k]] = pr
	}
	return out, nil
}

// predict returns the predicted tags of every example of data (one label
// each for a classifier), by example.
func predict(ctx context.Context, d device.Device, m model, data *loader.Dataset, batch int) ([][]string, error) {
	l, err := newLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: batch}, Epochs: 1}, m)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	labels := m.labels()
	classes := labels.Len()
	dt := m.Groups()[0].Params.DType()
	out := make([][]string, data.Len())
	for b, err := range l.Batches(ctx, loader.Position{}) {
		if err != nil {
			return nil, err
		}
		logits, err := m.ForwardBatch(rnn.NoGrad, b)
		if err != nil {
			return nil, err
		}
		hb := b.Host
		rows := hb.Rows
		if data.Tagging {
			rows = hb.Seq * hb.Rows
		}
		v, err := download(d, dt, logits, rows*classes)
		if err != nil {
			return nil, err
		}
		argmax := func(row int) string {
			best := 0
			for k := 1; k < classes; k++ {
				if v[row*classes+k] > v[row*classes+best] {
					best = k
				}
			}
			return labels.Item(int32(best))
		}
		for r, ex := range hb.Examples {
			if !data.Tagging {
				out[ex] = []string{argmax(r)}
				continue
			}
			tags := make([]string, hb.Lengths[r])
			for t := range tags {
				tags[t] = argmax(t*hb.Rows + r)
			}
			out[ex] = tags
		}
	}
	return out, nil
}

// download reads n elements of dt as float64s.
func download(d device.Device, dt device.DType, b device.Buffer, n int) ([]float64, error) {
	out := make([]float64, n)
	if dt == device.Float64 {
		return out, device.DownloadSlice(d, out, b.Slice(0, int64(n)*8))
	}
	f := make([]float32, n)
	if err := device.DownloadSlice(d, f, b.Slice(0, int64(n)*4)); err != nil {
		return nil, err
	}
	for i, x := range f {
		out[i] = float64(x)
	}
	return out, nil
}

// showSamples prints the model's predictions for the first sentences of
// the validation file against their labels.
func showSamples(ctx context.Context, task Task, d device.Device, m model, path string, read loader.ReadConfig, p *printer) error {
	const n = 4
	words, chars, labels := m.vocabs()
	data, err := loader.OpenDataset(ctx, path, loader.DatasetConfig{ReadConfig: read, Words: words, Chars: chars, Labels: labels})
	if err != nil {
		return err
	}
	defer data.Close()
	preds, err := predict(ctx, d, m, data, 32)
	if err != nil {
		return err
	}
	for i := range min(n, data.Len()) {
		ex, err := data.Example(i)
		if err != nil {
			return err
		}
		var b strings.Builder
		if task == Tagging {
			for k, w := range ex.Tokens {
				mark := ""
				if preds[i][k] != ex.Tags[k] {
					mark = "≠" + ex.Tags[k]
				}
				fmt.Fprintf(&b, "%s/%s%s ", w, preds[i][k], mark)
			}
		} else {
			text := ex.Text
			if text == "" {
				text = strings.Join(ex.Tokens, " ")
			}
			if len(text) > 100 {
				text = text[:100] + "…"
			}
			fmt.Fprintf(&b, "%s  →  %s (label %s)", text, preds[i][0], ex.Label)
		}
		p.Emit(map[string]any{"event": "sample", "tokens": ex.Tokens, "text": ex.Text, "predicted": preds[i], "tags": ex.Tags, "label": ex.Label},
			"  "+strings.TrimSpace(b.String())+"\n")
	}
	return nil
}
