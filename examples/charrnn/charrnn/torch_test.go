package charrnn_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// Tolerances against PyTorch's float32 numbers. Both sides compute in
// float32 with different summation orders, so agreement is to a few units
// of float32 rounding (2^-24 ≈ 6e-8) accumulated over a few thousand
// terms. Observed on amd64 with the CPU device: eval losses within 3e-8
// relative, training losses within 1e-7, gradient norms within 7e-8,
// trained weights within 6e-7 absolute (Adam's first steps move every
// weight by about lr = 0.01 whatever its gradient's size, so a weight
// carries the rounding of its update, not only of its gradient).
const (
	lossRelTol   = 1e-5
	normRelTol   = 1e-5
	weightAbsTol = 1e-5
)

var cells = []string{"lstm", "gru"}

// A checkpoint PyTorch wrote with the contract's names and metadata loads,
// and evaluates on the fixture corpus, cut as the contract says, to the
// loss PyTorch computed.
func TestEvalTorchCheckpoint(t *testing.T) {
	for _, cell := range cells {
		t.Run(cell, func(t *testing.T) {
			rep := readReport(t, cell)
			ev, err := charrnn.Eval(context.Background(), charrnn.EvalFlags{Checkpoint: torchCheckpoint(cell), Data: corpusPath,
				Batch: rep.Eval.Batch, Seq: rep.Eval.Seq, Device: "cpu"}, discard)
			if err != nil {
				t.Fatal(err)
			}
			if d := relDiff(ev.Loss, rep.Eval.Loss); !(d <= lossRelTol) {
				t.Errorf("loss %.9g, want PyTorch's %.9g (relative difference %.2g > %g)", ev.Loss, rep.Eval.Loss, d, lossRelTol)
			}
			t.Logf("loss %.9g, PyTorch %.9g: relative difference %.2g", ev.Loss, rep.Eval.Loss, relDiff(ev.Loss, rep.Eval.Loss))
			// Every window of every stream, batch x seq tokens each.
			if want := rep.Eval.Windows * int64(rep.Eval.Batch*rep.Eval.Seq); ev.Tokens != want {
				t.Errorf("tokens %d, want %d (%d windows x batch %d x seq %d)", ev.Tokens, want, rep.Eval.Windows, rep.Eval.Batch, rep.Eval.Seq)
			}
		})
	}
}

// Four Adam steps with gradient accumulation and norm clipping from
// PyTorch's initial weights give PyTorch's losses, gradient norms and
// weights.
func TestTrainMatchesTorch(t *testing.T) {
	ctx := context.Background()
	for _, cell := range cells {
		t.Run(cell, func(t *testing.T) {
			rep := readReport(t, cell)
			d, err := charrnn.OpenDevice("cpu", cuda.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			m, _, err := charrnn.Load(d, torchCheckpoint(cell))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if got, want := m.Classes(), rep.VocabSize; got != want {
				t.Fatalf("vocabulary of %d, want %d (torch_%s.json)", got, want, cell)
			}
			corpus, err := loader.Open(corpusPath)
			if err != nil {
				t.Fatal(err)
			}
			defer corpus.Close()
			text, err := loader.Tokenize(ctx, corpus, loader.TokenizeConfig{Vocab: m.Vocab()})
			if err != nil {
				t.Fatal(err)
			}
			if text.Len() != rep.Tokens {
				t.Fatalf("%d tokens, want %d (torch_%s.json)", text.Len(), rep.Tokens, cell)
			}
			// The whole text, as PyTorch's script trains on it.
			data, err := loader.New(d, text, loader.Config{Batch: rep.Train.Batch, Seq: rep.Train.Seq, Accum: rep.Train.Accum})
			if err != nil {
				t.Fatal(err)
			}
			defer data.Close()
			opt, err := train.NewOptimizer(train.Algorithm(rep.Train.Optimizer), rep.Train.LR)
			if err != nil {
				t.Fatal(err)
			}
			var losses, norms []float64
			tr, err := train.New(d, m, data, train.Config{Optimizer: opt, ClipNorm: rep.Train.Clip, Steps: rep.Train.Steps,
				OnStep: func(p train.Progress) {
					losses = append(losses, p.Loss)
					norms = append(norms, p.GradNorm)
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if _, err := tr.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if len(losses) != len(rep.Train.Losses) {
				t.Fatalf("%d steps reported, want %d", len(losses), len(rep.Train.Losses))
			}
			worstLoss, worstNorm := 0.0, 0.0
			for k := range losses {
				if d := relDiff(losses[k], rep.Train.Losses[k]); !(d <= lossRelTol) {
					t.Errorf("step %d: loss %.9g, want PyTorch's %.9g (relative difference %.2g > %g)", k+1, losses[k], rep.Train.Losses[k], d, lossRelTol)
				} else {
					worstLoss = max(worstLoss, d)
				}
				if d := relDiff(norms[k], rep.Train.GradNorms[k]); !(d <= normRelTol) {
					t.Errorf("step %d: gradient norm %.9g, want PyTorch's %.9g (relative difference %.2g > %g)", k+1, norms[k], rep.Train.GradNorms[k], d, normRelTol)
				} else {
					worstNorm = max(worstNorm, d)
				}
			}
			t.Logf("largest relative differences: losses %.2g, gradient norms %.2g", worstLoss, worstNorm)

			// The weights, through the checkpoint writer, so the names
			// are checked against PyTorch's too.
			path := filepath.Join(t.TempDir(), "weights.safetensors")
			if err := train.SaveWeights(path, d, m.Groups(), m.Metadata()); err != nil {
				t.Fatal(err)
			}
			got, _ := readSafetensors(t, path)
			want, _ := readSafetensors(t, torchTrained(cell))
			diff, where := maxAbsDiff(t, got, want)
			if !(diff <= weightAbsTol) {
				t.Errorf("weights after %d steps differ from PyTorch's by up to %.2g > %g; worst at %s", rep.Train.Steps, diff, weightAbsTol, where)
			}
			t.Logf("weights: largest absolute difference %.2g (%s)", diff, where)
		})
	}
}
