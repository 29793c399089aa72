package models_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/charrnntest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// The tests run on the device internal/testdevice names (the CPU by
// default, the CUDA device with GOCURRENT_TEST_DEVICE=cuda), and read
// device memory only through the library's host paths (the checkpoint
// writer, Params.Grad). What compares different arithmetic (PyTorch's
// and the device's) derives its tolerance from float32 rounding
// (charrnntest.RoundingBound). The Examples stay on the CPU: they are
// documentation, with fixed output.

// fixtures are the files testdata/torch_fixture.py writes.
const fixtures = charrnntest.Fixtures("testdata")

var cells = []string{"lstm", "gru"}

// loadTorch loads PyTorch's initial char-RNN of cell on d, and the
// fixture corpus in its vocabulary; both are closed when the test ends.
func loadTorch(t *testing.T, d device.Device, cell string) (*models.CharRNN, *loader.Text) {
	t.Helper()
	m, _, err := models.LoadCharRNN(context.Background(), d, fixtures.TorchCheckpoint(cell))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("closing the model: %v", err)
		}
	})
	corpus, err := loader.Open(fixtures.Corpus())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { corpus.Close() }) // the text reads it until the test ends
	text, err := loader.Tokenize(context.Background(), corpus, loader.TokenizeConfig{Vocab: m.Vocab()})
	if err != nil {
		t.Fatal(err)
	}
	return m, text
}

// A checkpoint PyTorch wrote with the contract's names and metadata loads,
// and evaluates on the fixture corpus, cut as the contract says, to the
// loss PyTorch computed.
func TestEvalTorchCheckpoint(t *testing.T) {
	for _, cell := range cells {
		t.Run(cell, func(t *testing.T) {
			rep := fixtures.Report(t, cell)
			d := testdevice.Open(t)
			m, text := loadTorch(t, d, cell)
			data, err := loader.New(d, text, loader.Config{Batch: rep.Eval.Batch, Seq: rep.Eval.Seq})
			if err != nil {
				t.Fatal(err)
			}
			defer data.Close()
			ev, err := train.Evaluate(context.Background(), d, m, data)
			if err != nil {
				t.Fatal(err)
			}
			tol := fixtures.EvalTolerance(t, cell, rep.Eval.Loss)
			if d := charrnntest.RelDiff(ev.Loss, rep.Eval.Loss); !(d <= tol) {
				t.Errorf("loss %.9g, want PyTorch's %.9g (relative difference %.2g > %.2g)", ev.Loss, rep.Eval.Loss, d, tol)
			}
			t.Logf("loss %.9g, PyTorch %.9g: relative difference %.2g (tolerance %.2g)", ev.Loss, rep.Eval.Loss, charrnntest.RelDiff(ev.Loss, rep.Eval.Loss), tol)
			// Every window of every stream, batch x seq tokens each.
			if want := rep.Eval.Windows * int64(rep.Eval.Batch*rep.Eval.Seq); ev.Tokens != want {
				t.Errorf("tokens %d, want %d (%d windows x batch %d x seq %d)", ev.Tokens, want, rep.Eval.Windows, rep.Eval.Batch, rep.Eval.Seq)
			}
		})
	}
}

// adamBound bounds, to first order, how far a weight lies after len(g)
// Adam steps of opt from where another implementation puts it, when its
// gradient at step j (g[j-1], as applied) may differ by delta[j-1] there:
// the rounding of the gradients, amplified by Adam's normalisation.
//
// Step k moves the weight by lr·u_k, u_k = m̂_k/(√v̂_k + ε), where m̂_k =
// Σ_j a_kj·g_j and v̂_k = Σ_j b_kj·g_j² are the bias-corrected moments
// (a_kj = (1−β1)β1^(k−j)/(1−β1^k), b_kj likewise with β2). u_k does not
// depend on the gradient's scale, so a gradient error δ moves it by
// |δu_k| ≲ Σ_j a_kj·δ_j/(√v̂_k+ε) + |m̂_k|·(Σ_j b_kj·|g_j|·δ_j/√v̂_k)/(√v̂_k+ε)²:
// δ relative to the weight's own gradient size √v̂_k, not to the
// gradient's overall size. An element whose gradients are all tiny (its
// terms cancel) can move by up to 2·max|u_k| ≤ 2·√(Σ_j a_kj²/b_kj) (Cauchy–
// Schwarz; ≤ 2.02 for four steps at β = 0.9, 0.999), which caps |δu_k|;
// an element with no gradient yet (v̂_k = 0: an embedding row of a
// character not yet seen) has u_k = 0 exactly. The rounding of Adam's own
// float32 arithmetic (≲ 5u of an update ≤ lr) is negligible beside this.
func adamBound(opt train.Optimizer, g, delta []float64) float64 {
	sum := 0.0
	for k := 1; k <= len(g); k++ {
		bc1 := 1 - math.Pow(opt.Beta1, float64(k))
		bc2 := 1 - math.Pow(opt.Beta2, float64(k))
		var m, v, dm, dv, cs float64
		for j := 1; j <= k; j++ {
			a := (1 - opt.Beta1) * math.Pow(opt.Beta1, float64(k-j)) / bc1
			b := (1 - opt.Beta2) * math.Pow(opt.Beta2, float64(k-j)) / bc2
			m += a * g[j-1]
			v += b * g[j-1] * g[j-1]
			dm += a * delta[j-1]
			dv += b * math.Abs(g[j-1]) * delta[j-1]
			cs += a * a / b
		}
		if v == 0 {
			continue
		}
		s := math.Sqrt(v)
		du := dm/(s+opt.Eps) + math.Abs(m)*(dv/s)/((s+opt.Eps)*(s+opt.Eps))
		sum += min(du, 2*math.Sqrt(cs))
	}
	return opt.LR * sum
}

// Four Adam steps with gradient accumulation and norm clipping from
// PyTorch's initial weights give PyTorch's losses, gradient norms and
// weights, within what float32 rounding allows (see charrnntest.RoundingBound; the
// depths are counted at charrnntest.Depth), step by step:
//
//   - The gradient. An element's terms (products of a back-propagated
//     error and an activation) have charrnntest.Magnitudes ≲ |g_i| + (pre+1)·rms_T:
//     its own size, or where they cancel, as much as the forward pass
//     allows a value's terms (pre+1, see charrnntest.LossBound) times the typical
//     element of its tensor T (rms_T). With ρ = charrnntest.RoundingBound(charrnntest.Depth)
//     ≈ 2e-5, g_i errs by ≲ ρ·(|g_i| + (pre+1)·rms_T), and the gradient
//     norm by ≲ ρ·(pre+2) relative (Σ_T n_T·rms_T² = ‖g‖²). Each step
//     before carries a weight difference of the same relative order into
//     the gradient, so at step k the norm's tolerance is k·ρ·(pre+2)
//     (≈ 1.6e-4·k). That assumes no element's gradient was within its
//     rounding of zero before (a flipped sign moves a weight by ~2·lr,
//     which the weight bound below allows for that element but which
//     could move the later gradient by more); the weights' check shows
//     how near that came.
//   - The clipping coefficient 0.3/‖g‖ errs as the norm does, which adds
//     |g_i|·normTol to an element's error at a clipped step.
//   - The weights: adamBound over the steps, plus each step's rounding of
//     the weight itself on either side (≤ u·|w| each, |w| within k·lr·1.01
//     of its final value).
//   - The loss of step k: charrnntest.LossBound at the weights then (moved by ≤
//     1.01·lr a step) plus the first-order effect of their difference,
//     Σ_i |∂L_k/∂w_i|·(weight bound after k−1 steps), with ∂L_k/∂w_i the
//     device's gradient of step k before clipping.
//
// The bounds are computed from the device's own gradients, so a weight
// with tiny gradients gets the room Adam gives it and every other one a
// tight bound; the test fails if the bounds came out too loose to test
// anything.
func TestTrainMatchesTorch(t *testing.T) {
	const u = 0x1p-24
	ctx := context.Background()
	for _, cell := range cells {
		t.Run(cell, func(t *testing.T) {
			rep := fixtures.Report(t, cell)
			d := testdevice.Open(t)
			m, text := loadTorch(t, d, cell)
			if got, want := m.Classes(), rep.VocabSize; got != want {
				t.Fatalf("vocabulary of %d, want %d (torch_%s.json)", got, want, cell)
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
			if opt.Algorithm != train.Adam {
				t.Fatalf("torch_%s.json trains with %s; the bounds below are Adam's", cell, opt.Algorithm)
			}
			var losses, norms []float64
			var applied []map[string][]float64 // each step's gradient as the optimizer used it (clipped)
			tr, err := train.New(d, m, data, train.Config{Optimizer: opt, ClipNorm: rep.Train.Clip, Steps: rep.Train.Steps,
				OnStep: func(p train.Progress) {
					losses = append(losses, p.Loss)
					norms = append(norms, p.GradNorm)
					applied = append(applied, charrnntest.Grads(t, m.Groups()))
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if _, err := tr.Run(ctx); err != nil {
				t.Fatal(err)
			}
			steps := len(rep.Train.Losses)
			if len(losses) != steps {
				t.Fatalf("%d steps reported, want %d", len(losses), steps)
			}

			// The weights, through the checkpoint writer, so the names
			// are checked against PyTorch's too.
			path := filepath.Join(t.TempDir(), "weights.safetensors")
			if err := train.SaveWeights(path, d, m.Groups(), m.Metadata()); err != nil {
				t.Fatal(err)
			}
			got, _ := charrnntest.ReadSafetensors(t, path)
			want, _ := charrnntest.ReadSafetensors(t, fixtures.TorchTrained(cell))
			init, _ := charrnntest.ReadSafetensors(t, fixtures.TorchCheckpoint(cell))
			// The same names and shapes (charrnntest.MaxAbsDiff fails the test
			// otherwise); each element's bound comes below.
			diff, where := charrnntest.MaxAbsDiff(t, got, want)
			t.Logf("weights: largest absolute difference %.2g (%s)", diff, where)

			rho := charrnntest.RoundingBound(charrnntest.Depth)
			// Adam moves a weight by ≤ lr·max|u| ≤ 1.01·lr a step (see
			// adamBound): the charrnntest.Magnitudes at step k+1 allow for k steps.
			move := func(k int) float64 { return 1.01 * opt.LR * float64(k) }
			pre, logit := make([]float64, steps), make([]float64, steps)
			normTol := make([]float64, steps)
			for k := range steps {
				pre[k], logit[k] = charrnntest.Magnitudes(t, charrnntest.ModelTensors(init), move(k))
				normTol[k] = float64(k+1) * rho * (pre[k] + 2)
			}
			// delta[name][i][j]: how far element i's applied gradient of
			// step j+1 may be from PyTorch's.
			names := slices.Sorted(func(yield func(string) bool) {
				for name := range want {
					if !yield(name) {
						return
					}
				}
			})
			delta := map[string][][]float64{}
			for _, name := range names {
				n := len(applied[0][name])
				if n == 0 {
					t.Fatalf("no gradient of %s", name)
				}
				delta[name] = make([][]float64, n)
				for i := range n {
					delta[name][i] = make([]float64, steps)
				}
				for j := range steps {
					g := applied[j][name]
					ss := 0.0
					for _, x := range g {
						ss += x * x
					}
					rms := math.Sqrt(ss / float64(len(g)))
					clipped := norms[j] > rep.Train.Clip
					for i, x := range g {
						if x == 0 {
							// No terms (a character absent from the
							// step's windows): 0 everywhere.
							continue
						}
						e := rho * (math.Abs(x) + (pre[j]+1)*rms)
						if clipped {
							e += math.Abs(x) * normTol[j]
						}
						delta[name][i][j] = e
					}
				}
			}
			// weightBound is element i's bound after k steps, around its
			// value w.
			weightBound := func(name string, i, k int, w float64) float64 {
				g := make([]float64, k)
				for j := range k {
					g[j] = applied[j][name][i]
				}
				return adamBound(opt, g, delta[name][i][:k]) + 2*float64(k)*u*(math.Abs(w)+move(k))
			}

			for k := range steps {
				// The loss: rounding at the weights of step k, and the
				// first-order effect of their difference.
				tol := charrnntest.LossBound(charrnntest.ForwardDepth, pre[k], logit[k], rep.Train.Losses[k])
				if k > 0 {
					coef := min(1, rep.Train.Clip/(norms[k]+1e-6))
					effect := 0.0
					for _, name := range names {
						w := want[name].Float32s(t, name)
						for i, x := range applied[k][name] {
							effect += math.Abs(x/coef) * weightBound(name, i, k, float64(w[i]))
						}
					}
					tol += effect / rep.Train.Losses[k]
				}
				if d := charrnntest.RelDiff(losses[k], rep.Train.Losses[k]); !(d <= tol) {
					t.Errorf("step %d: loss %.9g, want PyTorch's %.9g (relative difference %.2g > %.2g)", k+1, losses[k], rep.Train.Losses[k], d, tol)
				} else {
					t.Logf("step %d: loss relative difference %.2g (tolerance %.2g)", k+1, d, tol)
				}
				if d := charrnntest.RelDiff(norms[k], rep.Train.GradNorms[k]); !(d <= normTol[k]) {
					t.Errorf("step %d: gradient norm %.9g, want PyTorch's %.9g (relative difference %.2g > %.2g)", k+1, norms[k], rep.Train.GradNorms[k], d, normTol[k])
				} else {
					t.Logf("step %d: gradient norm relative difference %.2g (tolerance %.2g)", k+1, d, normTol[k])
				}
			}

			var bounds []float64
			worst := 0.0
			for _, name := range names {
				g, w := got[name], want[name]
				if !slices.Equal(g.Shape, w.Shape) {
					t.Fatalf("tensor %s: shape %v, want %v", name, g.Shape, w.Shape)
				}
				gv, wv := g.Float32s(t, name), w.Float32s(t, name)
				if len(gv) != len(applied[0][name]) {
					t.Fatalf("tensor %s: %d values, %d gradients", name, len(gv), len(applied[0][name]))
				}
				for i := range wv {
					b := weightBound(name, i, steps, float64(wv[i]))
					bounds = append(bounds, b)
					diff := math.Abs(float64(gv[i]) - float64(wv[i]))
					if !(diff <= b) {
						t.Errorf("%s[%d] after %d steps: %v, want PyTorch's %v (difference %.2g > %.2g; gradients %v)",
							name, i, steps, gv[i], wv[i], diff, b, gradsOf(applied, name, i))
					}
					if r := diff / b; !(r <= worst) {
						worst, where = r, fmt.Sprintf("%s[%d]: difference %.2g of %.2g", name, i, diff, b)
					}
				}
			}
			slices.Sort(bounds)
			median, p90 := bounds[len(bounds)/2], bounds[len(bounds)*9/10]
			t.Logf("weights: bounds median %.2g, 90th percentile %.2g, largest %.2g; nearest to its bound %s",
				median, p90, bounds[len(bounds)-1], where)
			// Adam moves every weight by about lr a step: bounds of that
			// size would check nothing. Half of them must be below a
			// hundredth of a step, nine in ten below a tenth.
			if median > opt.LR/100 || p90 > opt.LR/10 {
				t.Errorf("weight bounds median %.2g, 90th percentile %.2g: too loose to test %d steps at lr %g", median, p90, steps, opt.LR)
			}
		})
	}
}

// gradsOf is element i of name's gradients, step by step.
func gradsOf(applied []map[string][]float64, name string, i int) []float64 {
	var out []float64
	for _, g := range applied {
		out = append(out, g[name][i])
	}
	return out
}
