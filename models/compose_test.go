package models_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/nn"
	"github.com/gocurrent/gocurrent/rnn"
)

// copyParams sets dst's parameters to src's, group by group by name.
func copyParams(t *testing.T, d device.Device, dst, src []nn.Group) {
	t.Helper()
	if len(dst) != len(src) {
		t.Fatalf("%d groups, want %d", len(dst), len(src))
	}
	for i := range dst {
		if dst[i].Name != src[i].Name || dst[i].Params.Len() != src[i].Params.Len() {
			t.Fatalf("group %d: %q of %d parameters, want %q of %d", i, dst[i].Name, dst[i].Params.Len(), src[i].Name, src[i].Params.Len())
		}
		for p := range src[i].Params.All() {
			q, ok := dst[i].Params.Lookup(p.Name)
			if !ok || !slices.Equal(q.Shape, p.Shape) {
				t.Fatalf("group %q: no parameter %q of shape %v", dst[i].Name, p.Name, p.Shape)
			}
			check(t, d.Kernels().Copy(device.Copy{Dst: q.Value, Src: p.Value}))
		}
	}
}

// sameGrads checks that two models' gradients are the same bits.
func sameGrads(t *testing.T, d device.Device, got, want []nn.Group) {
	t.Helper()
	for i := range want {
		for p := range want[i].Params.All() {
			q, _ := got[i].Params.Lookup(p.Name)
			a, b := download32(t, d, q.Grad, q.Len()), download32(t, d, p.Grad, p.Len())
			if !slices.Equal(a, b) {
				t.Errorf("%s.%s: gradients differ: %v, want %v", want[i].Name, p.Name, a[:min(4, len(a))], b[:min(4, len(b))])
			}
		}
	}
}

func download32(t *testing.T, d device.Device, b device.Buffer, n int) []float32 {
	t.Helper()
	v := make([]float32, n)
	check(t, device.DownloadSlice(d, v, b.Slice(0, int64(n)*4)))
	return v
}

// TestSequentialIsTheClassifier builds models.Classifier's network from
// the public modules (Embedding, a recurrent module, its final state or a
// Pool, Linear) and checks that, over the same parameters and batch, it
// computes the classifier's logits and gradients to the bit, for every
// pooling, both cells, and one and two directions: composing is not a
// second implementation.
func TestSequentialIsTheClassifier(t *testing.T) {
	d := testdevice.Open(t)
	ctx := context.Background()
	tokens, err := loader.NewWords([]string{"<pad>", "<unk>", "a", "b", "c", "d", "e"})
	check(t, err)
	labels, err := loader.NewLabels([]string{"x", "y", "z"})
	check(t, err)
	const T, B, E, H = 5, 4, 3, 4
	lengths := []int32{5, 2, 4, 1}
	r := rand.New(rand.NewPCG(1, 1))
	ids := make([]int32, T*B)
	for i := range ids {
		if int32(i/B) < lengths[i%B] {
			ids[i] = 2 + r.Int32N(5)
		}
	}
	y := []int32{0, 2, 1, 2}
	for _, cell := range []string{"lstm", "gru"} {
		for _, bidir := range []bool{false, true} {
			for _, pool := range []string{models.PoolLast, models.PoolMean, models.PoolMax} {
				name := cell + "/" + pool
				if bidir {
					name += "/bidirectional"
				}
				t.Run(name, func(t *testing.T) {
					cfg := models.ClassifierConfig{Cell: cell, Embed: E, Hidden: H, Layers: 2, Bidirectional: bidir, Pool: pool}
					cl, err := models.NewClassifier(ctx, d, cfg, tokens, labels, 3)
					check(t, err)
					defer cl.Close()
					dirs := 1
					if bidir {
						dirs = 2
					}
					emb, err := nn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: tokens.Len(), Dim: E})
					check(t, err)
					rc := nn.RecurrentConfig{Config: rnn.Config{Input: E, Hidden: H, Layers: 2, Bidirectional: bidir}, Final: pool == models.PoolLast}
					var rec nn.Module
					if cell == "lstm" {
						rec, err = nn.NewLSTM(ctx, d, rc)
					} else {
						rec, err = nn.NewGRU(ctx, d, rc)
					}
					check(t, err)
					out, err := nn.NewLinear(ctx, d, rnn.LinearConfig{In: dirs * H, Out: labels.Len()})
					check(t, err)
					chain := []nn.Module{nn.Named("emb", emb), nn.Named("rnn", rec)}
					if pool != models.PoolLast {
						p, err := nn.NewPool(d, map[string]nn.PoolKind{models.PoolMean: nn.PoolMean, models.PoolMax: nn.PoolMax}[pool])
						check(t, err)
						chain = append(chain, p)
					}
					seq, err := nn.NewSequential(append(chain, nn.Named("out", out))...)
					check(t, err)
					defer seq.Close()
					copyParams(t, d, seq.Groups(), cl.Groups())

					x, err := nn.UploadIDs(d, ids, T, B)
					check(t, err)
					defer d.Free(x.Data)
					x.Lengths = lengths
					target, err := nn.UploadIDs(d, y, B)
					check(t, err)
					defer d.Free(target.Data)

					got, err := seq.Forward(nn.Train, x)
					check(t, err)
					if want := []int{B, labels.Len()}; !slices.Equal(got.Shape, want) {
						t.Fatalf("logits %v, want shape %v", got, want)
					}
					want, err := cl.Forward(rnn.Train, x.Data, T, B, lengths)
					check(t, err)
					if a, b := download32(t, d, got.Data, B*labels.Len()), download32(t, d, want, B*labels.Len()); !slices.Equal(a, b) {
						t.Fatalf("logits %v, want the classifier's %v", a, b)
					}
					for _, m := range []struct {
						forward  nn.Tensor
						backward func(nn.Tensor) error
					}{
						{got, func(dy nn.Tensor) error { _, err := seq.Backward(dy); return err }},
						{nn.Of(want, device.Float32, B, labels.Len()), func(dy nn.Tensor) error { return cl.Backward(dy.Data) }},
					} {
						ce, err := nn.NewCrossEntropy(d, nn.CrossEntropyConfig{Classes: labels.Len()})
						check(t, err)
						check(t, ce.Forward(nn.Train, m.forward, target))
						dy, err := ce.Backward()
						check(t, err)
						check(t, m.backward(dy))
						check(t, ce.Close())
					}
					sameGrads(t, d, seq.Groups(), cl.Groups())
				})
			}
		}
	}
}

// TestSequentialIsTheCharRNN does the same for models.CharRNN:
// Embedding, an LSTM or GRU stack and a Linear at every step.
func TestSequentialIsTheCharRNN(t *testing.T) {
	d := testdevice.Open(t)
	ctx := context.Background()
	vocab, err := loader.NewVocab([]string{"a", "b", "c", "d", "e", "f"})
	check(t, err)
	const T, B, E, H = 6, 3, 4, 5
	r := rand.New(rand.NewPCG(2, 2))
	ids, next := make([]int32, T*B), make([]int32, T*B)
	for i := range ids {
		ids[i], next[i] = r.Int32N(6), r.Int32N(6)
	}
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			cm, err := models.NewCharRNN(ctx, d, models.CharRNNConfig{Cell: cell, Embed: E, Hidden: H, Layers: 2}, vocab, 4)
			check(t, err)
			defer cm.Close()
			emb, err := nn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: vocab.Len(), Dim: E})
			check(t, err)
			rc := nn.RecurrentConfig{Config: rnn.Config{Input: E, Hidden: H, Layers: 2}}
			var rec nn.Module
			if cell == "lstm" {
				rec, err = nn.NewLSTM(ctx, d, rc)
			} else {
				rec, err = nn.NewGRU(ctx, d, rc)
			}
			check(t, err)
			out, err := nn.NewLinear(ctx, d, rnn.LinearConfig{In: H, Out: vocab.Len()})
			check(t, err)
			seq, err := nn.NewSequential(nn.Named("emb", emb), nn.Named("rnn", rec), nn.Named("out", out))
			check(t, err)
			defer seq.Close()
			copyParams(t, d, seq.Groups(), cm.Groups())
			x, err := nn.UploadIDs(d, ids, T, B)
			check(t, err)
			defer d.Free(x.Data)
			target, err := nn.UploadIDs(d, next, T, B)
			check(t, err)
			defer d.Free(target.Data)
			got, err := seq.Forward(nn.Train, x)
			check(t, err)
			want, err := cm.Forward(rnn.Train, x.Data, T, B, nil)
			check(t, err)
			n := T * B * vocab.Len()
			if a, b := download32(t, d, got.Data, n), download32(t, d, want, n); !slices.Equal(a, b) {
				t.Fatalf("logits differ from the char-RNN's")
			}
			for _, m := range []struct {
				forward  nn.Tensor
				backward func(nn.Tensor) error
			}{
				{got, func(dy nn.Tensor) error { _, err := seq.Backward(dy); return err }},
				{nn.Of(want, device.Float32, T, B, vocab.Len()), func(dy nn.Tensor) error { return cm.Backward(dy.Data) }},
			} {
				ce, err := nn.NewCrossEntropy(d, nn.CrossEntropyConfig{Classes: vocab.Len()})
				check(t, err)
				check(t, ce.ForwardSum(nn.Train, m.forward, target, 1.0/(T*B)))
				dy, err := ce.Backward()
				check(t, err)
				check(t, m.backward(dy))
				check(t, ce.Close())
			}
			sameGrads(t, d, seq.Groups(), cm.Groups())
		})
	}
}
