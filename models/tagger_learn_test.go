package models_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
// Tagger, cross-entropy over the real tokens, plain SGD) on sentences
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
			ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: data.Labels.Len(), Ignore: true, IgnoreIndex: loader.IgnoreLabel})
			check(t, err)
			defer ce.Close()
			l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 16, Pool: 4, Shuffle: true, Seed: 3}, Epochs: 25})
			check(t, err)
			defer l.Close()
			k := d.Kernels()
			step := 0
			for batch, err := range l.Batches(context.Background(), loader.Position{}) {
				check(t, err)
				hb := batch.Host
				for _, g := range m.Groups() {
					check(t, g.Params.ZeroGrad())
				}
				logits, err := m.Forward(rnn.Train, batch.Tokens, hb.Seq, hb.Rows, hb.Lengths)
				check(t, err)
				check(t, ce.ForwardSum(rnn.Train, logits, batch.Labels, hb.Seq*hb.Rows, 1/float64(hb.Real)))
				dl, err := ce.Backward()
				check(t, err)
				check(t, m.Backward(dl))
				step++
				for _, g := range m.Groups() {
					v, gr := g.Params.Flat()
					check(t, k.SGD(device.SGD{DType: device.Float32, N: g.Params.Len(), LR: 0.5, Step: step, Param: v, Grad: gr}))
				}
			}
			// Token accuracy over the whole dataset, no grad.
			eval, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 32}, Epochs: 1})
			check(t, err)
			defer eval.Close()
			conf := train.NewConfusion(data.Labels.Len())
			for batch, err := range eval.Batches(context.Background(), loader.Position{}) {
				check(t, err)
				hb := batch.Host
				logits, err := m.Forward(rnn.NoGrad, batch.Tokens, hb.Seq, hb.Rows, hb.Lengths)
				check(t, err)
				lg := make([]float32, hb.Seq*hb.Rows*data.Labels.Len())
				check(t, device.DownloadSlice(d, lg, logits))
				f := make([]float64, len(lg))
				for i, v := range lg {
					f[i] = float64(v)
				}
				check(t, conf.Add(f, hb.Labels))
			}
			acc := conf.Accuracy()
			t.Logf("token accuracy %.3f after %d steps (%d tokens)", acc, step, conf.Total())
			if bidir && !(acc > 0.9) || !bidir && !(acc < 0.6) {
				t.Errorf("token accuracy %.3f; want > 0.9 bidirectional, < 0.6 forward only", acc)
			}
		})
	}
}
