package models

import (
	"context"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/internal/testfull"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// TestWarmUp trains a tagger (with character features and dropout) and a
// classifier on bucketed, shuffled batches of varied lengths, with and
// without a token budget: with the warm-up, the device allocations (new
// segments) stop before the first step; without it they go on as larger
// batches come. The weights and losses are the same either way, bit for
// bit: the warm-up changes nothing but memory.
func TestWarmUp(t *testing.T) {
	ctx := context.Background()
	specs := []MemorySpec{
		{Tagger: &TaggerConfig{Cell: "lstm", Embed: 32, Hidden: 96, Layers: 2, Bidirectional: true, Dropout: 0.2, CharEmbed: 8, CharHidden: 16},
			Vocab: 200, Classes: 7, Chars: 30, LongestWord: 11, Batch: 16, Seq: 120},
		{Classifier: &ClassifierConfig{Cell: "gru", Embed: 32, Hidden: 128, Layers: 2, Pool: PoolMax}, Vocab: 200, Classes: 3, Batch: 16, Seq: 120},
	}
	for _, spec := range specs {
		if spec.Tagger != nil && !testfull.On() {
			continue // 16 s of the tagger's with character features: the full suites'
		}
		budgets := []int{600, 0}
		if !testfull.On() {
			budgets = budgets[:1] // the batches of a token budget, the most shapes
		}
		for _, budget := range budgets {
			t.Run(specName(spec)+map[bool]string{true: "-budget", false: ""}[budget > 0], func(t *testing.T) {
				lengths := lengthsFrom(90, spec.Seq, 1)
				type result struct {
					allocsAtFirst, allocsAtEnd int64
					losses                     []float64
					weights                    [][]float32
				}
				train1 := func(mode train.WarmUp) result {
					d, err := cpu.Open(cpu.Config{})
					if err != nil {
						t.Fatal(err)
					}
					defer d.Close()
					chars := spec.Tagger != nil && spec.Tagger.hasChars()
					data, err := planDataset(ctx, spec, lengths, chars, false)
					if err != nil {
						t.Fatal(err)
					}
					var m seqModel
					if spec.Tagger != nil {
						m, err = NewTaggerChars(context.Background(), d, *spec.Tagger, data.Words, data.Chars, data.Labels, 7)
					} else {
						m, err = NewClassifier(context.Background(), d, *spec.Classifier, data.Words, data.Labels, 7)
					}
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					collate := loader.CollateConfig{Chars: chars}
					l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: spec.Batch, MaxTokens: budget,
						Pool: 2, Shuffle: true, Seed: 3}, Epochs: 2, CollateConfig: collate})
					if err != nil {
						t.Fatal(err)
					}
					defer l.Close()
					val, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 2 * spec.Batch}, Epochs: 1, CollateConfig: collate})
					if err != nil {
						t.Fatal(err)
					}
					defer val.Close()
					opt, _ := train.NewOptimizer(train.Adam, 1e-2)
					var res result
					tr, err := train.NewSeq(d, m, l, train.Config{Optimizer: opt, ClipNorm: 1, WarmUp: mode, EvalEvery: 5,
						OnStep: func(p train.Progress) {
							if p.Step == 1 {
								res.allocsAtFirst = p.Memory.DeviceAllocs
							}
							res.allocsAtEnd = p.Memory.DeviceAllocs
							res.losses = append(res.losses, p.Loss)
						}}, train.SeqOptions{Validation: val})
					if err != nil {
						t.Fatal(err)
					}
					defer tr.Close()
					if _, err := tr.Run(ctx); err != nil {
						t.Fatal(err)
					}
					for _, g := range m.Groups() {
						v, _ := g.Params.Flat()
						w := make([]float32, g.Params.Len())
						if err := device.DownloadSlice(d, w, v); err != nil {
							t.Fatal(err)
						}
						res.weights = append(res.weights, w)
					}
					return res
				}
				warm, cold := train1(train.WarmUpAuto), train1(train.WarmUpOff)
				t.Logf("device allocations from the first step to the last: %d with the warm-up, %d without (over %d steps)",
					warm.allocsAtEnd-warm.allocsAtFirst, cold.allocsAtEnd-cold.allocsAtFirst, len(warm.losses))
				if warm.allocsAtEnd != warm.allocsAtFirst {
					t.Errorf("with the warm-up, %d device allocations after the first step", warm.allocsAtEnd-warm.allocsAtFirst)
				}
				if cold.allocsAtEnd == cold.allocsAtFirst {
					t.Errorf("without the warm-up no allocation after the first step either: the data does not exercise the warm-up")
				}
				if len(warm.losses) != len(cold.losses) {
					t.Fatalf("%d steps with the warm-up, %d without", len(warm.losses), len(cold.losses))
				}
				for i := range warm.losses {
					if warm.losses[i] != cold.losses[i] {
						t.Fatalf("step %d: loss %v with the warm-up, %v without", i+1, warm.losses[i], cold.losses[i])
					}
				}
				for g := range warm.weights {
					for i := range warm.weights[g] {
						if warm.weights[g][i] != cold.weights[g][i] {
							t.Fatalf("group %d weight %d: %v with the warm-up, %v without", g, i, warm.weights[g][i], cold.weights[g][i])
						}
					}
				}
			})
		}
	}
}
