package models_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
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
			m, err := models.NewTagger(d, models.TaggerConfig{Cell: "lstm", Embed: 8, Hidden: 16, Layers: 1, Bidirectional: bidir},
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
