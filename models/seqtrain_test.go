package models_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// writeTagged writes n random sentences of 1-12 words as a TSV file, each
// word's tag its class mod 3 unless the next word is w0 (then "P"): tags
// that depend on both directions.
func writeTagged(t *testing.T, n int, seed uint64) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	for range n {
		ws := make([]int, 1+r.IntN(12))
		for i := range ws {
			ws[i] = r.IntN(12)
		}
		for i, w := range ws {
			tag := fmt.Sprint("T", w%3)
			if i+1 < len(ws) && ws[i+1] == 0 {
				tag = "P"
			}
			fmt.Fprintf(&b, "w%d\t%s\n", w, tag)
		}
		b.WriteString("\n")
	}
	path := filepath.Join(t.TempDir(), "tagged.tsv")
	check(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// writeLabelled writes n random sequences of 1-10 words as JSON lines,
// each labelled by whether w1 occurs in it, and where.
func writeLabelled(t *testing.T, n int, seed uint64) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 9))
	var b strings.Builder
	for range n {
		ws := make([]string, 1+r.IntN(10))
		label := "none"
		for i := range ws {
			ws[i] = fmt.Sprint("w", r.IntN(8))
			if ws[i] == "w1" {
				label = "first"
				if i > 0 {
					label = "later"
				}
			}
		}
		fmt.Fprintf(&b, `{"tokens": ["%s"], "label": %q}`+"\n", strings.Join(ws, `", "`), label)
	}
	path := filepath.Join(t.TempDir(), "labelled.jsonl")
	check(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// seqModel builds a float64 tagger or classifier over data's vocabularies.
func seqModel(t *testing.T, d device.Device, data *loader.Dataset, cell string, dropout float64) interface {
	train.SeqModel
	Close() error
} {
	t.Helper()
	if data.Tagging {
		m, err := models.NewTagger(context.Background(), d, models.TaggerConfig{Cell: cell, Embed: 6, Hidden: 5, Layers: 2, Bidirectional: true,
			Dropout: dropout, DType: device.Float64}, data.Words, data.Labels, 11)
		check(t, err)
		return m
	}
	m, err := models.NewClassifier(context.Background(), d, models.ClassifierConfig{Cell: cell, Embed: 6, Hidden: 5, Layers: 2, Bidirectional: true,
		Dropout: dropout, DType: device.Float64}, data.Words, data.Labels, 11)
	check(t, err)
	return m
}

// params downloads every parameter of groups, in order.
func params(t *testing.T, d device.Device, groups []train.Group) []float64 {
	t.Helper()
	var out []float64
	for _, g := range groups {
		v, _ := g.Params.Flat()
		x := make([]float64, g.Params.Len())
		check(t, device.DownloadSlice(d, x, v.Slice(0, int64(8*len(x)))))
		out = append(out, x...)
	}
	return out
}

// trainSeq trains m for steps steps on data cut into batches of batch,
// accum of them per step, and returns the progress of every step.
func trainSeq(t *testing.T, d device.Device, m train.SeqModel, data *loader.Dataset, batch, accum int, steps int64, cfg train.Config) []train.Progress {
	t.Helper()
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: batch, Accum: accum, Pool: 3, Shuffle: true, Seed: 5}})
	check(t, err)
	defer l.Close()
	var got []train.Progress
	cfg.Steps = steps
	cfg.OnStep = func(p train.Progress) { got = append(got, p) }
	tr, err := train.NewSeq(d, m, l, cfg, train.SeqOptions{})
	check(t, err)
	defer tr.Close()
	_, err = tr.Run(context.Background())
	check(t, err)
	return got
}

// TestSeqAccumulation checks that the step's loss is the mean over all of
// its real tokens (tagging) or sequences (classification): batches of 8
// accumulated 4 at a time take the same steps as batches of 32, with the
// loader's bucketing and shuffling on, through clipping and Adam, to
// float64 rounding (1e-9: the sums are added in another order).
func TestSeqAccumulation(t *testing.T) {
	d := testdevice.Open(t)
	for _, kind := range []string{"tagger", "classifier"} {
		t.Run(kind, func(t *testing.T) {
			path := writeTagged(t, 150, 1)
			if kind == "classifier" {
				path = writeLabelled(t, 150, 1)
			}
			data, err := loader.OpenDataset(context.Background(), path, loader.DatasetConfig{})
			check(t, err)
			defer data.Close()
			opt, err := train.NewOptimizer(train.Adam, 1e-2)
			check(t, err)
			cfg := train.Config{Optimizer: opt, ClipNorm: 0.5}
			var runs [2][]float64
			var prog [2][]train.Progress
			for i, shape := range [][2]int{{32, 1}, {8, 4}} {
				m := seqModel(t, d, data, "lstm", 0)
				prog[i] = trainSeq(t, d, m, data, shape[0], shape[1], 6, cfg)
				runs[i] = params(t, d, m.Groups())
				check(t, m.Close())
			}
			for s := range prog[0] {
				a, b := prog[0][s], prog[1][s]
				if !(math.Abs(a.Loss-b.Loss) <= 1e-9) || !(math.Abs(a.GradNorm-b.GradNorm) <= 1e-9) || a.Tokens != b.Tokens {
					t.Errorf("step %d: loss %v, norm %v, tokens %d with batch 32; %v, %v, %d with 8×4", s+1, a.Loss, a.GradNorm, a.Tokens, b.Loss, b.GradNorm, b.Tokens)
				}
			}
			if worst := maxDiff(runs[0], runs[1]); !(worst <= 1e-9) {
				t.Errorf("parameters differ by up to %g after 6 steps; want ≤ 1e-9", worst)
			}
			if worst := maxDiff(runs[0], nil); worst == 0 {
				t.Error("the parameters are all zero")
			}
		})
	}
}

// TestSeqPipeline: a sequence trainer whose steps are read back 5 at a
// time (train.Config.Pipeline) takes the same steps as one that reads each
// back at its end, bit for bit: sums made means on the device (the
// source's scale in the step's verdict), clipping, dropout and the
// loader's shuffled buckets, over 7 steps that 5 does not divide.
func TestSeqPipeline(t *testing.T) {
	d := testdevice.Open(t)
	for _, kind := range []string{"tagger", "classifier"} {
		t.Run(kind, func(t *testing.T) {
			path := writeTagged(t, 150, 2)
			if kind == "classifier" {
				path = writeLabelled(t, 150, 2)
			}
			data, err := loader.OpenDataset(context.Background(), path, loader.DatasetConfig{})
			check(t, err)
			defer data.Close()
			opt, err := train.NewOptimizer(train.Adam, 1e-2)
			check(t, err)
			var runs [2][]float64
			var prog [2][]train.Progress
			for i, pipeline := range []int{0, 5} {
				m := seqModel(t, d, data, "gru", 0.2)
				prog[i] = trainSeq(t, d, m, data, 8, 2, 7, train.Config{Optimizer: opt, ClipNorm: 0.5, Pipeline: pipeline})
				runs[i] = params(t, d, m.Groups())
				check(t, m.Close())
			}
			if len(prog[0]) != 7 || len(prog[1]) != 7 {
				t.Fatalf("%d and %d steps reported, want 7", len(prog[0]), len(prog[1]))
			}
			for s := range prog[0] {
				a, b := prog[0][s], prog[1][s]
				if a.Loss != b.Loss || a.GradNorm != b.GradNorm || a.Tokens != b.Tokens || a.Position != b.Position {
					t.Errorf("step %d: loss %v, norm %v, tokens %d at %+v read back at once; %v, %v, %d at %+v pipelined",
						s+1, a.Loss, a.GradNorm, a.Tokens, a.Position, b.Loss, b.GradNorm, b.Tokens, b.Position)
				}
			}
			if worst := maxDiff(runs[0], runs[1]); worst != 0 {
				t.Errorf("parameters differ by up to %g after 7 steps; want the same bits", worst)
			}
		})
	}
}

// maxDiff is the largest |a[i]-b[i]| (b nil: |a[i]|), NaN where one is
// (the builtin max keeps a NaN): callers test !(worst <= tol).
func maxDiff(a, b []float64) float64 {
	worst := 0.0
	for i := range a {
		v := a[i]
		if b != nil {
			v -= b[i]
		}
		worst = max(worst, math.Abs(v))
	}
	return worst
}

// TestSeqResume stops a run with dropout after 3 steps, saves it, and
// resumes it in a fresh trainer and model: the 4 steps after equal the
// uninterrupted run's bit for bit (float64 on the CPU; the CUDA device's
// reductions may round differently, so within 1e-12 there).
func TestSeqResume(t *testing.T) {
	d := testdevice.Open(t)
	for _, kind := range []string{"tagger", "classifier"} {
		t.Run(kind, func(t *testing.T) {
			path := writeTagged(t, 120, 2)
			if kind == "classifier" {
				path = writeLabelled(t, 120, 2)
			}
			data, err := loader.OpenDataset(context.Background(), path, loader.DatasetConfig{})
			check(t, err)
			defer data.Close()
			opt, err := train.NewOptimizer(train.Adam, 1e-2)
			check(t, err)
			sched := train.Schedule{Decay: "cosine", Warmup: 2, Total: 7}
			cfg := train.Config{Optimizer: opt, ClipNorm: 1, Schedule: sched}

			m := seqModel(t, d, data, "gru", 0.3)
			straight := trainSeq(t, d, m, data, 16, 2, 7, cfg)
			want := params(t, d, m.Groups())
			check(t, m.Close())

			ck := filepath.Join(t.TempDir(), "seq.safetensors")
			m = seqModel(t, d, data, "gru", 0.3)
			c1 := cfg
			c1.Checkpoint = ck
			first := trainSeq(t, d, m, data, 16, 2, 3, c1)
			check(t, m.Close())

			m = seqModel(t, d, data, "gru", 0.3)
			defer m.Close()
			c, err := train.ReadCheckpoint(ck)
			check(t, err)
			l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 16, Accum: 2, Pool: 3, Shuffle: true, Seed: 5}})
			check(t, err)
			defer l.Close()
			c2 := cfg
			c2.Steps = 7
			var rest []train.Progress
			c2.OnStep = func(p train.Progress) { rest = append(rest, p) }
			tr, err := train.NewSeq(d, m, l, c2, train.SeqOptions{})
			check(t, err)
			defer tr.Close()
			check(t, tr.Resume(c))
			_, err = tr.Run(context.Background())
			check(t, err)
			got := params(t, d, m.Groups())
			tol := 0.0
			if d.Name() != "cpu" {
				tol = 1e-12
			}
			all := append(first, rest...)
			if len(all) != len(straight) {
				t.Fatalf("%d steps resumed, %d straight", len(all), len(straight))
			}
			for s := range all {
				if !(math.Abs(all[s].Loss-straight[s].Loss) <= tol) || all[s].Position != straight[s].Position {
					t.Errorf("step %d: loss %v at %+v resumed, %v at %+v straight", s+1, all[s].Loss, all[s].Position, straight[s].Loss, straight[s].Position)
				}
			}
			if worst := maxDiff(got, want); !(worst <= tol) {
				t.Errorf("resumed parameters differ from the straight run's by up to %g", worst)
			}
			// The record says how the data was cut.
			rec, err := c.Record()
			check(t, err)
			if rec.Data.Mode != "sequences" || rec.Data.Batch != 16 || rec.Data.Accum != 2 || rec.Data.Examples != 120 || !rec.Data.Shuffle {
				t.Errorf("data record %+v", rec.Data)
			}
			// A loader cut another way does not resume.
			other, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 8, Accum: 2, Pool: 3, Shuffle: true, Seed: 5}})
			check(t, err)
			defer other.Close()
			tr2, err := train.NewSeq(d, m, other, c2, train.SeqOptions{})
			check(t, err)
			defer tr2.Close()
			if err := tr2.Resume(c); !errors.Is(err, train.ErrMismatch) {
				t.Errorf("resuming with batches of 8: %v, want ErrMismatch", err)
			}
		})
	}
}

// TestSeqClassWeights checks the weighted mean: weights all equal to 3
// take the same steps as none (the mean divides them out), and a zero
// weight leaves its class out of the loss.
func TestSeqClassWeights(t *testing.T) {
	d := testdevice.Open(t)
	path := writeTagged(t, 60, 3)
	data, err := loader.OpenDataset(context.Background(), path, loader.DatasetConfig{})
	check(t, err)
	defer data.Close()
	run := func(weights []float64) ([]train.Progress, []float64) {
		l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 16}})
		check(t, err)
		defer l.Close()
		m := seqModel(t, d, data, "lstm", 0)
		defer m.Close()
		var got []train.Progress
		tr, err := train.NewSeq(d, m, l, train.Config{Steps: 3, OnStep: func(p train.Progress) { got = append(got, p) }},
			train.SeqOptions{Weights: weights})
		check(t, err)
		defer tr.Close()
		_, err = tr.Run(context.Background())
		check(t, err)
		return got, params(t, d, m.Groups())
	}
	n := data.Labels.Len()
	plain, pw := run(nil)
	threes := make([]float64, n)
	for i := range threes {
		threes[i] = 3
	}
	same, sw := run(threes)
	if worst := maxDiff(pw, sw); !(worst <= 1e-12) || !(math.Abs(plain[0].Loss-same[0].Loss) <= 1e-12) {
		t.Errorf("weights of 3: loss %v, parameters off by %g; want loss %v, equal parameters", same[0].Loss, worst, plain[0].Loss)
	}
	// Only class 0 counts: a different loss.
	only := make([]float64, n)
	only[0] = 1
	one, _ := run(only)
	if math.Abs(one[0].Loss-plain[0].Loss) < 1e-6 {
		t.Errorf("one class weighted: loss %v, the same as unweighted", one[0].Loss)
	}
	// Bad weights are refused.
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 16}})
	check(t, err)
	defer l.Close()
	m := seqModel(t, d, data, "lstm", 0)
	defer m.Close()
	for _, w := range [][]float64{{1}, append(make([]float64, n-1), math.NaN()), append(make([]float64, n-1), -1)} {
		if tr, err := train.NewSeq(d, m, l, train.Config{Steps: 1}, train.SeqOptions{Weights: w}); err == nil {
			tr.Close()
			t.Errorf("weights %v accepted", w)
		}
	}
}
