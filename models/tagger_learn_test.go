package models_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// TestTaggerLearnsTheNextWord trains taggers end to end (a TSV file,
// loader.OpenDataset, a SeqLoader's bucketed batches on the device, the
// Tagger, train.NewSeq with plain SGD, train.EvaluateSeq) on sentences
// whose every tag is the class of the next word: only the reverse
// direction sees it. The bidirectional tagger learns it (token accuracy
// above 0.9); the unidirectional one cannot beat guessing by much (below
// 0.6: it can learn only the tags' frequencies and the sentence end).
func TestTaggerLearnsTheNextWord(t *testing.T) {
	d := testdevice.Open(t)
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range 300 {
		n := 2 + r.IntN(8)
		ws := make([]int, n)
		for i := range ws {
			ws[i] = r.IntN(9)
		}
		for i, w := range ws {
			tag := "END"
			if i+1 < n {
				tag = fmt.Sprint("C", ws[i+1]%3)
			}
			fmt.Fprintf(&b, "w%d\t%s\n", w, tag)
		}
		b.WriteString("\n")
	}
	path := filepath.Join(t.TempDir(), "next.tsv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := loader.OpenDataset(context.Background(), path, loader.DatasetConfig{})
	check(t, err)
	defer data.Close()
	for _, bidir := range []bool{true, false} {
		t.Run(fmt.Sprint("bidirectional=", bidir), func(t *testing.T) {
			m, err := models.NewTagger(context.Background(), d, models.TaggerConfig{Cell: "lstm", Embed: 8, Hidden: 16, Layers: 1, Bidirectional: bidir},
				data.Words, data.Labels, 5)
			check(t, err)
			defer m.Close()
			l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 16, Pool: 4, Shuffle: true, Seed: 3}, Epochs: 25})
			check(t, err)
			defer l.Close()
			eval, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 32}, Epochs: 1})
			check(t, err)
			defer eval.Close()
			sgd, err := train.NewOptimizer(train.SGD, 0.5)
			check(t, err)
			tr, err := train.NewSeq(d, m, l, train.Config{Optimizer: sgd}, train.SeqOptions{Validation: eval})
			check(t, err)
			defer tr.Close()
			sum, err := tr.Run(context.Background())
			check(t, err)
			step, ev := sum.Steps, sum.Validation
			if ev == nil {
				t.Fatal("no validation at the end of the run")
			}
			conf := ev.Confusion
			acc := conf.Accuracy()
			if ev.Accuracy != acc || conf.Total() != data.Tokens() || ev.Tokens != data.Tokens() {
				t.Errorf("accuracy %v over %d tokens, the confusion's %v over %d; the data has %d", ev.Accuracy, ev.Tokens, acc, conf.Total(), data.Tokens())
			}
			t.Logf("token accuracy %.3f after %d steps (%d tokens)", acc, step, conf.Total())
			if bidir && !(acc > 0.9) || !bidir && !(acc < 0.6) {
				t.Errorf("token accuracy %.3f; want > 0.9 bidirectional, < 0.6 forward only", acc)
			}
		})
	}
}

// TestTaggerLearnsSuffixes trains taggers end to end (TSV files,
// loader.OpenDataset, a SeqLoader's bucketed batches carrying their words'
// characters, the Tagger, cross-entropy over the real tokens, Adam) on
// sentences of made-up words whose tag is the word's suffix class (-ing,
// -ed, -ly, -s, drawn at random: the context says nothing), and evaluates
// them on new sentences of new made-up words, unseen in training (read as
// <unk> in the word vocabulary). Words alone cannot tag an unseen word:
// the tagger without character features stays near guessing (below 0.5;
// a quarter of the tags is each class); with them it reads the suffix
// (above 0.9).
func TestTaggerLearnsSuffixes(t *testing.T) {
	d := testdevice.Open(t)
	suffixes := []struct{ suffix, tag string }{{"ing", "V"}, {"ed", "P"}, {"ly", "A"}, {"s", "N"}}
	write := func(name string, seed uint64, n int) string {
		r := rand.New(rand.NewPCG(seed, 1))
		var b strings.Builder
		for range n {
			for range 2 + r.IntN(6) {
				// Stems of letters none of the suffixes end with.
				stem := make([]byte, 2+r.IntN(4))
				for i := range stem {
					stem[i] = "abcfhkmoprtuvwz"[r.IntN(15)]
				}
				s := suffixes[r.IntN(len(suffixes))]
				fmt.Fprintf(&b, "%s%s\t%s\n", stem, s.suffix, s.tag)
			}
			b.WriteString("\n")
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ctx := context.Background()
	data, err := loader.OpenDataset(ctx, write("train.tsv", 1, 200), loader.DatasetConfig{})
	check(t, err)
	defer data.Close()
	evalData, err := loader.OpenDataset(ctx, write("eval.tsv", 2, 60), loader.DatasetConfig{Words: data.Words, Chars: data.Chars, Labels: data.Labels})
	check(t, err)
	defer evalData.Close()
	for _, chars := range []bool{false, true} {
		t.Run(fmt.Sprint("chars=", chars), func(t *testing.T) {
			cfg := models.TaggerConfig{Cell: "lstm", Embed: 8, Hidden: 16, Layers: 1, Bidirectional: true}
			var cv *loader.Words
			if chars {
				cfg.CharEmbed, cfg.CharHidden, cv = 8, 16, data.Chars
			}
			m, err := models.NewTaggerChars(context.Background(), d, cfg, data.Words, cv, data.Labels, 5)
			check(t, err)
			defer m.Close()
			ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: data.Labels.Len(), Ignore: true, IgnoreIndex: loader.IgnoreLabel})
			check(t, err)
			defer ce.Close()
			// Adam's moments, zeros, one pair per group.
			var moments [][2]device.Buffer
			for _, g := range m.Groups() {
				var mv [2]device.Buffer
				for i := range mv {
					mv[i], err = d.Alloc(int64(g.Params.Len())*4, device.Workspace)
					check(t, err)
					defer d.Free(mv[i])
					check(t, d.Kernels().Fill(device.Fill{DType: device.Float32, N: g.Params.Len(), X: mv[i]}))
				}
				moments = append(moments, mv)
			}
			l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 16, Pool: 4, Shuffle: true, Seed: 3}, Epochs: 6,
				CollateConfig: loader.CollateConfig{Chars: chars}})
			check(t, err)
			defer l.Close()
			k := d.Kernels()
			step := 0
			for batch, err := range l.Batches(ctx, loader.Position{}) {
				check(t, err)
				hb := batch.Host
				if chars {
					// The loader's order of the words is the one the
					// fixture tests lay out (wordOrder).
					index, positions := wordOrder(hb.Seq, hb.Rows, hb.Lengths)
					if !slices.Equal(hb.WordIndex, index) || !slices.Equal(hb.WordPositions, positions) {
						t.Fatalf("batch %d: word index %v and positions %v, want %v and %v", step, hb.WordIndex, hb.WordPositions, index, positions)
					}
				}
				for _, g := range m.Groups() {
					check(t, g.Params.ZeroGrad())
				}
				logits, err := m.ForwardBatch(rnn.Train, batch)
				check(t, err)
				check(t, ce.ForwardSum(rnn.Train, logits, batch.Labels, hb.Seq*hb.Rows, 1/float64(hb.Real)))
				dl, err := ce.Backward()
				check(t, err)
				check(t, m.Backward(dl))
				step++
				for i, g := range m.Groups() {
					v, gr := g.Params.Flat()
					check(t, k.Adam(device.Adam{DType: device.Float32, N: g.Params.Len(), LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
						Step: step, Param: v, Grad: gr, M: moments[i][0], V: moments[i][1]}))
				}
			}
			eval, err := loader.NewSeqLoader(d, evalData, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 32}, Epochs: 1,
				CollateConfig: loader.CollateConfig{Chars: chars}})
			check(t, err)
			defer eval.Close()
			conf := train.NewConfusion(data.Labels.Len())
			unknown := 0
			for batch, err := range eval.Batches(ctx, loader.Position{}) {
				check(t, err)
				hb := batch.Host
				logits, err := m.ForwardBatch(rnn.NoGrad, batch)
				check(t, err)
				lg := make([]float32, hb.Seq*hb.Rows*data.Labels.Len())
				check(t, device.DownloadSlice(d, lg, logits))
				f := make([]float64, len(lg))
				for i, v := range lg {
					f[i] = float64(v)
				}
				check(t, conf.Add(f, hb.Labels))
				for _, id := range hb.Tokens {
					if id == loader.UnknownID {
						unknown++
					}
				}
			}
			acc := conf.Accuracy()
			t.Logf("token accuracy %.3f on unseen sentences after %d steps (%d tokens, %d of them unknown words)", acc, step, conf.Total(), unknown)
			if float64(unknown) < 0.9*float64(conf.Total()) {
				t.Fatalf("%d of %d evaluation words unknown; the task wants nearly all unseen", unknown, conf.Total())
			}
			if chars && !(acc > 0.9) || !chars && !(acc < 0.5) {
				t.Errorf("token accuracy %.3f; want > 0.9 with character features, < 0.5 without", acc)
			}
		})
	}
}
