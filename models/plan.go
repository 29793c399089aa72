package models

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/internal/checked"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// MemorySpec describes a training run of one of the models of this
// package, for PlanMemory: everything its device memory depends on.
type MemorySpec struct {
	// The model: exactly one of the three.
	CharRNN    *CharRNNConfig
	Tagger     *TaggerConfig
	Classifier *ClassifierConfig

	// Vocab is the number of token ids, the reserved ones included: the
	// char-RNN's characters, the tagger's words, the classifier's words
	// (or characters, with Input "chars").
	Vocab int
	// Classes is the number of tags or labels (tagger, classifier).
	Classes int
	// Chars is the size of the tagger's character vocabulary, reserved
	// ids included, with character features; LongestWord the most
	// characters of a word in the data (0 means 16), which sets the
	// loader's room for characters, at most MaxWordChars when that is set.
	Chars, LongestWord, MaxWordChars int

	// Batch is the sequences of a micro-batch; Accum the micro-batches of
	// an optimizer step (0 means 1).
	Batch, Accum int
	// Seq is the char-RNN's window, or the sequence models' longest
	// sequence, in tokens.
	Seq int
	// Lengths, for the sequence models, are the lengths of the data's
	// sequences (all at most Seq): the run then takes its real batches,
	// bucketed as the loader does, for one epoch, so the peak is the one
	// of the largest batch it makes. Nil means Batch·Accum sequences of
	// Seq tokens per step.
	Lengths []int
	// ValLengths, with Validate, are the validation data's lengths (all
	// at most Seq); nil means the validation takes Lengths (or, without
	// them, the planned training sequences).
	ValLengths []int
	// Shuffle and Seed are the sequence loader's (loader.BucketConfig):
	// with Lengths the plan takes the batches in the order the run's
	// first epoch does, which the peaks can depend on (the first step
	// runs before the optimizer's state exists; the cache's blocks are
	// reused as the batches come).
	Shuffle bool
	Seed    uint64
	// MaxTokens is the sequence loader's token budget (0: none).
	MaxTokens int
	// Optimizer is the update; zero means Adam.
	Optimizer train.Algorithm
	// Validate adds what a validation holds: its loader's ring and the
	// no-grad passes over batches of Batch sequences.
	Validate bool
	// Graphs is the char-RNN run's train.Config.Graphs: its steps are
	// replayed as device graphs, whose batch buffers and kept memory the
	// plan then holds too.
	Graphs bool
}

// steps is how many optimizer steps a plan takes without Lengths: the
// second shows the steady state, and the optimizer's state exists.
const planSteps = 2

// MemoryPlan is a prediction of a run's device memory: the figures a
// MemoryReport of the real run would give after its first steps, made on
// a meta device (package device/meta) by running the run's own code
// without computing anything.
type MemoryPlan struct {
	Spec MemorySpec
	// Report is the predicted report: peaks (PeakAllocated,
	// PeakReserved, each category's Peak and AtPeak) and the steady
	// state after the steps (the currents).
	Report alloc.Report
	// Steps is the number of optimizer steps the plan took.
	Steps int64
}

// PlanMemory predicts the device memory of spec's training run on the
// device target describes (devices.MetaConfig makes one from an open
// device): it builds the model, the loaders and the trainer on a meta
// device and takes the run's first steps there, allocating no device
// memory. A run that does not fit target's capacity returns the
// allocator's *alloc.OutOfMemoryError, as the real run would.
func PlanMemory(ctx context.Context, target meta.Config, spec MemorySpec) (MemoryPlan, error) {
	if err := spec.check(); err != nil {
		return MemoryPlan{}, err
	}
	d, err := meta.Open(target)
	if err != nil {
		return MemoryPlan{}, err
	}
	var r alloc.Report
	steps, err := runSpec(ctx, d, spec, func() { r, _ = device.MemoryReport(d) })
	if err = errors.Join(err, d.Close()); err != nil {
		return MemoryPlan{}, err
	}
	r.Device += " (planned)"
	if target.Capacity == 0 { // unlimited: no device figures to show
		r.DeviceTotal, r.DeviceFree, r.Outside = 0, 0, 0
	}
	return MemoryPlan{Spec: spec, Report: r, Steps: steps}, nil
}

// MeasureMemory runs what PlanMemory plans for real on d: spec's model,
// loaders and trainer, its first steps (the same ones), and returns d's
// memory report after them, before closing what it built. On a fresh
// device, the report's peaks are what the plan predicted.
func MeasureMemory(ctx context.Context, d device.Device, spec MemorySpec) (alloc.Report, error) {
	if err := spec.check(); err != nil {
		return alloc.Report{}, err
	}
	var r alloc.Report
	_, err := runSpec(ctx, d, spec, func() { r, _ = device.MemoryReport(d) })
	return r, err
}

// check validates what PlanMemory needs beyond the model's own checks.
func (s MemorySpec) check() error {
	n := 0
	for _, set := range []bool{s.CharRNN != nil, s.Tagger != nil, s.Classifier != nil} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return fmt.Errorf("models: a MemorySpec names %d models, want exactly one of CharRNN, Tagger and Classifier", n)
	case s.Batch <= 0 || s.Seq <= 0 || s.Accum < 0:
		return fmt.Errorf("models: MemorySpec batch %d, seq %d, accum %d; batch and seq must be > 0", s.Batch, s.Seq, s.Accum)
	case s.Vocab < 3:
		return fmt.Errorf("models: MemorySpec vocab %d, want at least 3", s.Vocab)
	case s.CharRNN == nil && s.Classes < 1:
		return fmt.Errorf("models: MemorySpec classes %d, want at least 1", s.Classes)
	case s.Tagger != nil && s.Tagger.hasChars() && s.Chars < 3:
		return fmt.Errorf("models: MemorySpec chars %d with character features, want at least 3", s.Chars)
	case s.CharRNN != nil && (s.Lengths != nil || s.ValLengths != nil):
		return errors.New("models: MemorySpec lengths are for the sequence models; the char-RNN's windows all have Seq tokens")
	}
	for k, lengths := range [][]int{s.Lengths, s.ValLengths} {
		for i, n := range lengths {
			if n < 1 || n > s.Seq {
				return fmt.Errorf("models: MemorySpec %s %d is %d, want 1..seq (%d)", []string{"length", "validation length"}[k], i, n, s.Seq)
			}
		}
	}
	return nil
}

// runSpec builds spec's run on d, takes its steps, calls after (for the
// figures of the steady state) and closes what it built, returning the
// steps taken.
func runSpec(ctx context.Context, d device.Device, spec MemorySpec, after func()) (steps int64, err error) {
	var cleanup []func() error
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanup[i]())
		}
	}()
	alg := spec.Optimizer
	if alg == "" {
		alg = train.Adam
	}
	opt, err := train.NewOptimizer(alg, 1e-3)
	if err != nil {
		return 0, err
	}
	accum := max(spec.Accum, 1)
	var tr *train.Trainer
	if spec.CharRNN != nil {
		tr, err = charRNNRun(ctx, d, spec, opt, accum, &cleanup)
	} else {
		tr, err = seqRun(ctx, d, spec, opt, accum, &cleanup)
	}
	if err != nil {
		return 0, err
	}
	cleanup = append(cleanup, tr.Close)
	sum, err := tr.Run(ctx)
	if err == nil && after != nil {
		after()
	}
	return sum.Steps, err
}

// charRNNRun is the char-RNN's run: a model, a loader of windows (and one
// for validation) over a text of the vocabulary's characters, a trainer.
func charRNNRun(ctx context.Context, d device.Device, spec MemorySpec, opt train.Optimizer, accum int, cleanup *[]func() error) (*train.Trainer, error) {
	chars := make([]string, spec.Vocab)
	for i := range chars {
		chars[i] = string(rune(0x4e00 + i)) // distinct characters, as many as asked
	}
	vocab, err := loader.NewVocab(chars)
	if err != nil {
		return nil, err
	}
	m, err := NewCharRNN(ctx, d, *spec.CharRNN, vocab, 1)
	if err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, m.Close)
	// The text cycles through the characters, and is no text of its
	// size: the loader on the meta device reads none of it.
	tokens, ok := checked.Mul(spec.Batch, accum, planSteps*spec.Seq+1)
	if !ok {
		return nil, fmt.Errorf("models: a plan of batch %d, accum %d, seq %d overflows int", spec.Batch, accum, spec.Seq)
	}
	text, err := loader.Cycle(vocab, int64(tokens))
	if err != nil {
		return nil, err
	}
	data, err := loader.New(d, text, loader.Config{Mode: loader.Streams, Batch: spec.Batch, Seq: spec.Seq, Accum: accum})
	if err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, data.Close)
	cfg := train.Config{Optimizer: opt, Steps: planSteps, ClipNorm: 5, Graphs: spec.Graphs}
	if spec.Validate {
		if cfg.Validation, err = loader.New(d, text, loader.Config{Mode: loader.Streams, Batch: spec.Batch, Seq: spec.Seq, Epochs: 1}); err != nil {
			return nil, err
		}
		*cleanup = append(*cleanup, cfg.Validation.Close)
	}
	return train.New(d, m, data, cfg)
}

// seqRun is the tagger's or the classifier's run: a dataset of the
// lengths asked for (in memory), its loader (and one for validation), the
// model and a trainer.
func seqRun(ctx context.Context, d device.Device, spec MemorySpec, opt train.Optimizer, accum int, cleanup *[]func() error) (*train.Trainer, error) {
	lengths := spec.Lengths
	epochs, steps := 1, int64(0)
	if lengths == nil {
		lengths = make([]int, spec.Batch*accum*planSteps)
		for i := range lengths {
			lengths[i] = spec.Seq
		}
		epochs, steps = 0, planSteps
	}
	chars := spec.Tagger != nil && spec.Tagger.hasChars()
	texts := spec.Classifier != nil && spec.Classifier.Input == InputChars
	data, err := planDataset(ctx, spec, lengths, chars, texts)
	if err != nil {
		return nil, err
	}
	var m seqModel
	switch {
	case spec.Tagger != nil && chars:
		m, err = asSeqModel(NewTaggerChars(ctx, d, *spec.Tagger, data.Words, data.Chars, data.Labels, 1))
	case spec.Tagger != nil:
		m, err = asSeqModel(NewTagger(ctx, d, *spec.Tagger, data.Words, data.Labels, 1))
	case texts:
		m, err = asSeqModel(NewClassifier(ctx, d, *spec.Classifier, data.Chars, data.Labels, 1))
	default:
		m, err = asSeqModel(NewClassifier(ctx, d, *spec.Classifier, data.Words, data.Labels, 1))
	}
	if err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, m.Close)
	collate := loader.CollateConfig{Chars: chars, MaxWordChars: spec.MaxWordChars}
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: spec.Batch, Accum: accum,
		MaxTokens: spec.MaxTokens, Shuffle: spec.Shuffle, Seed: spec.Seed}, Epochs: epochs, CollateConfig: collate})
	if err != nil {
		return nil, err
	}
	*cleanup = append(*cleanup, l.Close)
	var opts train.SeqOptions
	if spec.Validate {
		val := data
		if spec.ValLengths != nil {
			if val, err = planDataset(ctx, spec, spec.ValLengths, chars, texts); err != nil {
				return nil, err
			}
		}
		if opts.Validation, err = loader.NewSeqLoader(d, val, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: spec.Batch},
			Epochs: 1, CollateConfig: collate}); err != nil {
			return nil, err
		}
		*cleanup = append(*cleanup, opts.Validation.Close)
	}
	return train.NewSeq(d, m, l, train.Config{Optimizer: opt, Steps: steps, ClipNorm: 5}, opts)
}

// seqModel is what the tagger and the classifier are.
type seqModel interface {
	train.SeqModel
	Close() error
}

// asSeqModel is a constructor's result as a seqModel: on error a nil
// interface, not a nil *Tagger in a non-nil one, whose Close would
// dereference nil.
func asSeqModel[M seqModel](m M, err error) (seqModel, error) {
	if err != nil {
		return nil, err
	}
	return m, nil
}

// planDataset makes, in memory, a dataset of examples of the given
// lengths with vocabularies of the sizes spec asks for.
func planDataset(ctx context.Context, spec MemorySpec, lengths []int, chars, texts bool) (*loader.Dataset, error) {
	names := func(prefix string, n int, reserved bool) []string {
		var s []string
		if reserved {
			s, n = []string{"<pad>", "<unk>"}, n-2
		}
		for i := range n {
			s = append(s, fmt.Sprintf("%s%d", prefix, i))
		}
		return s
	}
	words, err := loader.NewWords(names("w", spec.Vocab, true))
	if err != nil {
		return nil, err
	}
	labels, err := loader.NewLabels(names("c", spec.Classes, false))
	if err != nil {
		return nil, err
	}
	cfg := loader.DatasetConfig{ReadConfig: loader.ReadConfig{Format: loader.JSONL}, Words: words, Labels: labels}
	longest := spec.LongestWord
	if longest == 0 {
		longest = 16
	}
	word := strings.Repeat("x", longest) // every word as long as the longest
	if chars {
		if cfg.Chars, err = loader.NewWords(names("", spec.Chars, true)); err != nil {
			return nil, err
		}
	}
	if texts {
		cfg.Words = nil // the classifier reads a text's characters as its tokens
		if cfg.Chars, err = loader.NewWords(append([]string{"<pad>", "<unk>"}, charNames(spec.Vocab-2)...)); err != nil {
			return nil, err
		}
	}
	// Each length's line is encoded once: the lines of a plan of a large
	// batch (millions of sequences) are copies of a few.
	var buf bytes.Buffer
	lines := map[int][]byte{}
	for i, n := range lengths {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("models: planning's dataset: %w", err)
			}
		}
		line, ok := lines[n]
		if !ok {
			ex := map[string]any{}
			switch {
			case texts:
				ex["text"], ex["label"] = strings.Repeat("a", n), labels.Item(0)
			case spec.Tagger != nil:
				tokens, tags := make([]string, n), make([]string, n)
				for i := range tokens {
					tokens[i], tags[i] = word, labels.Item(0)
				}
				ex["tokens"], ex["tags"] = tokens, tags
			default:
				tokens := make([]string, n)
				for i := range tokens {
					tokens[i] = word
				}
				ex["tokens"], ex["label"] = tokens, labels.Item(0)
			}
			js, err := json.Marshal(ex)
			if err != nil {
				return nil, err
			}
			line = append(js, '\n')
			lines[n] = line
			// The lines are ours and in memory already: the reader's
			// bound on a line (1 MiB by default, which a tagger's
			// sequence of 50,000 words of 16 characters passes) is their
			// longest.
			cfg.MaxLine = max(cfg.MaxLine, len(line))
		}
		buf.Write(line)
	}
	return loader.NewDataset(ctx, bytes.NewReader(buf.Bytes()), int64(buf.Len()), "plan.jsonl", cfg)
}

// charNames are n distinct one-character strings.
func charNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = string(rune(0x4e00 + i))
	}
	return s
}
