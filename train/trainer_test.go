package train_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

func maxDiff(t *testing.T, a, b map[string][]float64) float64 {
	t.Helper()
	worst := 0.0
	for name, x := range a {
		y, ok := b[name]
		if !ok || len(x) != len(y) {
			t.Fatalf("parameter %s missing or resized", name)
		}
		for i := range x {
			if d := math.Abs(x[i] - y[i]); d > worst || math.IsNaN(d) {
				worst = d
			}
		}
	}
	return worst
}

func adam(t *testing.T, lr float64) train.Optimizer {
	o, err := train.NewOptimizer(train.Adam, lr)
	check(t, err)
	return o
}

// TestAccumulation checks the batching contract: 4 micro-batches of 8
// streams, each carrying its own state, give the update of one batch of
// the same 32 streams, step after step (float64, so the tolerance is
// rounding only).
//
// The two runs are not the same call sequence (GEMMs of 32 rows against
// four of 8 accumulated), so they agree within rounding, not bit for bit,
// on any device. accumTol is where that rounding ends: a gradient element
// is a sum of at most K = Seq·32 = 512 products (the weight-gradient
// GEMMs), which the two groupings add in different orders (cuBLAS may
// also split K), so they differ by ≲ K·2⁻⁵³ ≈ 6e-14 relative to the sum
// of the terms' magnitudes; Adam divides by √v, so that relative error
// passes into the update scaled by lr = 0.01, over 5 steps: ≲ 3e-15
// times the conditioning of the sums (their cancellation). The loss
// (≈ 2.5) and the gradient norm (≈ 0.1) are means and sums of the same
// depth in float64, ≲ 512·2⁻⁵³·2.5 ≈ 1.4e-13. 1e-12 leaves room for a
// conditioning of ~300 and is orders of magnitude below what a wrong
// weighting or a state carried across micro-batches gives. (The CPU and
// the emulator differ by 1–2 ulps.)
func TestAccumulation(t *testing.T) {
	const accumTol = 1e-12
	d := testdevice.Open(t)
	txt := text(t, 4000, 12, 1)
	run := func(batch, accum int) (map[string][]float64, []float64) {
		m := newLM(t, d, lmConfig{vocab: 12, embed: 6, hidden: 10, layers: 2, dtype: device.Float64, seed: 3})
		l := newLoader(t, d, txt, loader.Config{Batch: batch, Accum: accum, Seq: 16})
		var losses []float64
		tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 5, ClipNorm: 0.5,
			OnStep: func(p train.Progress) { losses = append(losses, p.Loss, p.GradNorm) }})
		_, err := tr.Run(context.Background())
		check(t, err)
		return values(t, m.Groups()), losses
	}
	one, l1 := run(32, 1)
	four, l4 := run(8, 4)
	if diff := maxDiff(t, one, four); diff > accumTol {
		t.Errorf("weights after 5 steps differ by %g, want < %g", diff, accumTol)
	}
	for i := range l1 {
		if !(math.Abs(l1[i]-l4[i]) <= accumTol) {
			t.Errorf("step %d: loss/norm %v with batch 32, %v with 8 x 4", i/2+1, l1[i], l4[i])
		}
	}
	if len(l1) != 10 {
		t.Errorf("%d progress values, want 10", len(l1))
	}
}

// TestResume checks that stopping, saving and resuming in a new trainer
// (new model, new loader, different initial weights) continues exactly:
// the final checkpoints are byte for byte the same file. Dropout and
// accumulation are on, so the random state and the carried states count.
// The resumed run queues the same kernels on the same shapes as the
// uninterrupted one, and every device is deterministic (fixed reduction
// trees, one cuBLAS handle on one stream, dropout drawn from seed and
// offset), so this is exact in float32 on the GPU too. With Graphs the
// interrupted and the resumed runs replay their steps (drawing the masks
// where the device holds their offset, which the resumed run takes from
// the checkpoint), and still end with the uninterrupted eager run's file.
func TestResume(t *testing.T) {
	for _, graphs := range []bool{false, true} {
		t.Run(map[bool]string{false: "Eager", true: "Graphs"}[graphs], func(t *testing.T) { testResume(t, graphs) })
	}
}

func testResume(t *testing.T, graphs bool) {
	d := testdevice.Open(t)
	txt := text(t, 3000, 10, 2)
	dir := os.Getenv("RESUME_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dropout: 0.3, dtype: device.Float32, seed: 4}
	run := func(m *lm, steps int64, from string, save string, graphs bool) *train.Trainer {
		l := newLoader(t, d, txt, loader.Config{Batch: 3, Accum: 2, Seq: 8})
		tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: steps, ClipNorm: 1, Checkpoint: save, Graphs: graphs})
		if from != "" {
			ck, err := train.ReadCheckpoint(from)
			check(t, err)
			check(t, tr.Resume(ck))
		}
		counter, counts := d.(device.Counter)
		var c0 device.Counts
		if counts {
			c0 = counter.Counts()
		}
		_, err := tr.Run(context.Background())
		check(t, err)
		// Steps 2 to 4 (5 to 8 resumed) record or replay theirs.
		if counts && graphs && counter.Counts().Sub(c0).Graphs == 0 {
			t.Errorf("a run of %d steps from %q with Graphs launched no graph", steps, from)
		}
		return tr
	}
	straight := filepath.Join(dir, "straight.safetensors")
	run(newLM(t, d, cfg), 8, "", straight, false)
	half := filepath.Join(dir, "half.safetensors")
	first := run(newLM(t, d, cfg), 4, "", half, graphs)
	if first.Step() != 4 {
		t.Fatalf("first half stopped at step %d, want 4", first.Step())
	}
	other := cfg
	other.seed = 99
	resumed := filepath.Join(dir, "resumed.safetensors")
	tr := run(newLM(t, d, other), 8, half, resumed, graphs)
	if tr.Step() != 8 {
		t.Errorf("resumed run stopped at step %d, want 8", tr.Step())
	}
	a, err := os.ReadFile(straight)
	check(t, err)
	b, err := os.ReadFile(resumed)
	check(t, err)
	if !bytes.Equal(a, b) {
		t.Errorf("the resumed run's checkpoint (%d bytes) differs from the uninterrupted run's (%d bytes)", len(b), len(a))
	}
}

// TestCancel checks that a cancelled context ends the run after the step
// under way, with a checkpoint of that step.
func TestCancel(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "ck.safetensors")
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 50, Checkpoint: path,
		OnStep: func(p train.Progress) {
			if p.Step == 2 {
				cancel()
			}
		}})
	sum, err := tr.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if tr.Step() != 2 || sum.Steps != 2 {
		t.Errorf("stopped at step %d (summary %d), want 2", tr.Step(), sum.Steps)
	}
	ck, err := train.ReadCheckpoint(path)
	check(t, err)
	if !ck.Resumable() {
		t.Error("the checkpoint written on cancellation holds no trainer state")
	}
	// The trainer continues where it stopped.
	sum, err = tr.Run(context.Background())
	check(t, err)
	if sum.Steps != 50 {
		t.Errorf("continued to step %d, want 50", sum.Steps)
	}
}

func poison(t *testing.T, m *lm, row int) {
	w, err := m.emb.Params().Value("weight")
	check(t, err)
	data := w.Data().([]float32)
	dim := len(data) / m.v
	for i := range dim {
		data[row*dim+i] = float32(math.NaN())
	}
	check(t, m.emb.Params().SetValue("weight", w))
}

func sameOrBothNaN(a, b map[string][]float64) bool {
	for name, x := range a {
		for i, v := range x {
			w := b[name][i]
			if v != w && !(math.IsNaN(v) && math.IsNaN(w)) {
				return false
			}
		}
	}
	return true
}

// TestNonFiniteStops: a NaN weight makes the loss NaN; the step is
// refused with an error and changes nothing.
func TestNonFiniteStops(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 5})
	_, err := tr.Run(context.Background())
	check(t, err)
	for i := range 10 {
		poison(t, m, i)
	}
	before := values(t, m.Groups())
	_, err = tr.Run(context.Background()) // Steps reached: nothing to do
	check(t, err)
	tr2 := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 10})
	_, err = tr2.Run(context.Background())
	var nf *train.NonFiniteError
	if !errors.Is(err, train.ErrNonFinite) || !errors.As(err, &nf) {
		t.Fatalf("Run returned %v, want a *NonFiniteError", err)
	}
	if nf.Step != 1 || !math.IsNaN(nf.Loss) {
		t.Errorf("error reports step %d loss %v, want step 1 and NaN", nf.Step, nf.Loss)
	}
	if tr2.Step() != 0 || tr2.Position() != (loader.Position{}) {
		t.Errorf("after the refused step: step %d position %+v, want 0 and the start", tr2.Step(), tr2.Position())
	}
	if !sameOrBothNaN(before, values(t, m.Groups())) {
		t.Error("the refused step changed the parameters")
	}
}

// TestNonFiniteSkip: a character whose embedding is NaN appears once; the
// step that reads it is skipped and counted, every other step trains, and
// the carried state is put back so later steps stay finite.
func TestNonFiniteSkip(t *testing.T) {
	d := testdevice.Open(t)
	raw := []byte(nil)
	for i := range 2000 {
		raw = append(raw, "abcd"[i*7%4])
	}
	raw[777] = 'e'
	vocab, err := loader.NewVocab([]string{"a", "b", "c", "d", "e"})
	check(t, err)
	txt, err := loader.Tokenize(context.Background(), loader.NewCorpus(bytes.NewReader(raw), int64(len(raw)), "t"), loader.TokenizeConfig{Vocab: vocab})
	check(t, err)
	m := newLM(t, d, lmConfig{vocab: 5, embed: 4, hidden: 6, layers: 1, dtype: device.Float32, seed: 1})
	poison(t, m, 4)
	l := newLoader(t, d, txt, loader.Config{Batch: 4, Seq: 10, Epochs: 1})
	var reports []train.Progress
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), SkipNonFinite: true,
		OnStep: func(p train.Progress) { reports = append(reports, p) }})
	sum, err := tr.Run(context.Background())
	check(t, err)
	// 4 streams of 500 tokens give 49 windows; the 'e' at 777 is input 277
	// of stream 1, in window 27 (from 0).
	if sum.Skipped != 1 || sum.Steps != 48 {
		t.Errorf("%d steps and %d skipped, want 48 and 1", sum.Steps, sum.Skipped)
	}
	// Every window is reported, in order: the skipped one flagged, with
	// its NaN loss, at the step count before it; the others taken.
	if len(reports) != 49 {
		t.Fatalf("OnStep called %d times, want 49 (48 steps taken and 1 skipped)", len(reports))
	}
	for i, p := range reports {
		var step, skipped, inARow int64 = int64(i + 1), 0, 0
		switch {
		case i == 27:
			step, skipped, inARow = 27, 1, 1
		case i > 27:
			step, skipped = int64(i), 1
		}
		if p.Step != step || p.Skipped != skipped || p.SkippedInARow != inARow || p.Position.Batch != int64(i+1)%49 {
			t.Errorf("report %d: step %d, skipped %d (%d in a row), position %+v; want step %d, skipped %d (%d in a row), batch %d",
				i, p.Step, p.Skipped, p.SkippedInARow, p.Position, step, skipped, inARow, (i+1)%49)
		}
		switch {
		case i == 27 && (p.NonFinite == nil || p.NonFinite.Step != 28 || !math.IsNaN(p.Loss) || !math.IsNaN(p.NonFinite.Loss)):
			t.Errorf("report of the skipped window: NonFinite %v, loss %v; want the error of step 28 and loss NaN", p.NonFinite, p.Loss)
		case i != 27 && (p.NonFinite != nil || math.IsNaN(p.Loss)):
			t.Errorf("report %d (step %d taken): NonFinite %v, loss %v; want none and a finite loss", i, p.Step, p.NonFinite, p.Loss)
		}
	}
	for name, v := range values(t, m.Groups()) {
		for i, x := range v {
			if math.IsNaN(x) && !(name == "emb.weight" && i >= 16) {
				t.Fatalf("%s[%d] is NaN after training", name, i)
			}
		}
	}
}

// sgdDelta trains one step with SGD at learning rate 1 (so the update is
// the gradient) and returns the update's L2 and max norms and the reported
// gradient norm.
func sgdDelta(t *testing.T, clipNorm, clipValue float64) (l2, linf, reported float64) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 8, embed: 4, hidden: 6, layers: 1, dtype: device.Float64, seed: 5})
	l := newLoader(t, d, text(t, 1000, 8, 4), loader.Config{Batch: 4, Seq: 8})
	opt, err := train.NewOptimizer(train.SGD, 1)
	check(t, err)
	before := values(t, m.Groups())
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: opt, Steps: 1, ClipNorm: clipNorm, ClipValue: clipValue,
		OnStep: func(p train.Progress) { reported = p.GradNorm }})
	_, err = tr.Run(context.Background())
	check(t, err)
	for name, v := range values(t, m.Groups()) {
		for i, x := range v {
			g := before[name][i] - x
			l2 += g * g
			linf = max(linf, math.Abs(g))
		}
	}
	return math.Sqrt(l2), linf, reported
}

// TestClipping checks clip_grad_norm_'s coefficient max/(norm+1e-6) and
// element-wise clamping, through the update of one SGD step at rate 1
// (float64). clipTol, relative: the update read back is the gradient
// within the rounding of p - g, so its norm is within ≲ 2⁻⁵³·‖p‖/‖g‖ ≈
// 2e-15 (‖p‖ ≈ 7, ‖g‖ ≈ 0.4 here), and the reported norm is the root of a
// float64 sum of squares of N ≈ 400 terms (≲ N·2⁻⁵³ ≈ 4e-14); the
// clipping coefficient's +1e-6 moves the result by 1e-6/norm ≈ 2e-6
// relative, so 1e-9 sees it with a margin of 10³ and is 10⁴ above the
// rounding. linfTol, absolute: a clamped element is 1e-3 exactly, and the
// update read back is p - (p - 1e-3) within 2·2⁻⁵³·|p| ≈ 6e-16 (|p| < 2.5,
// the embedding's N(0, 1) draws included).
func TestClipping(t *testing.T) {
	const clipTol, linfTol = 1e-9, 1e-12
	norm, _, reported := sgdDelta(t, 0, 0)
	if !(math.Abs(norm-reported) <= clipTol*norm) {
		t.Fatalf("reported gradient norm %v, the update's norm is %v", reported, norm)
	}
	// clip_grad_norm_: scale by max/(norm+1e-6) when that is below 1.
	c := norm / 3
	clipped, _, reported := sgdDelta(t, c, 0)
	if want := norm * c / (norm + 1e-6); !(math.Abs(clipped-want) <= clipTol*want) {
		t.Errorf("clipped to norm %v: update norm %v, want %v", c, clipped, want)
	}
	if !(math.Abs(reported-norm) <= clipTol*norm) {
		t.Errorf("reported norm %v with clipping, want the norm before clipping %v", reported, norm)
	}
	unclipped, _, _ := sgdDelta(t, norm*2, 0)
	if !(math.Abs(unclipped-norm) <= clipTol*norm) {
		t.Errorf("clip above the norm changed the update: %v, want %v", unclipped, norm)
	}
	_, linf, _ := sgdDelta(t, 0, 1e-3)
	if !(math.Abs(linf-1e-3) <= linfTol) {
		t.Errorf("element-wise clipping at 1e-3: largest update %v", linf)
	}
}

func TestSchedule(t *testing.T) {
	for _, c := range []struct {
		name string
		s    train.Schedule
		step int64
		want float64
	}{
		{"constant", train.Schedule{}, 100, 1},
		{"warm-up first", train.Schedule{Warmup: 4}, 0, 0.25},
		{"warm-up last", train.Schedule{Warmup: 4}, 3, 1},
		{"after warm-up", train.Schedule{Warmup: 4}, 4, 1},
		{"step decay", train.Schedule{Decay: "step", Every: 10, Gamma: 0.5}, 25, 0.25},
		{"cosine start", train.Schedule{Decay: "cosine", Total: 10}, 0, 1},
		{"cosine middle", train.Schedule{Decay: "cosine", Total: 10, MinLR: 0.2}, 5, 0.6},
		{"cosine end", train.Schedule{Decay: "cosine", Total: 10, MinLR: 0.2}, 12, 0.2},
		{"cosine after warm-up", train.Schedule{Decay: "cosine", Warmup: 2, Total: 12}, 7, 0.5},
		{"cosine total from steps", train.Schedule{Decay: "cosine"}, 50, 0.5},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.Rate(1, c.step, 100); !(math.Abs(got-c.want) <= 1e-12) {
				t.Errorf("Rate(1, %d) = %v, want %v", c.step, got, c.want)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	txt := text(t, 3000, 10, 3)
	endless := newLoader(t, d, txt, loader.Config{Batch: 4, Seq: 8})
	bad := []struct {
		name string
		cfg  train.Config
	}{
		{"no end", train.Config{}},
		{"negative clip", train.Config{Steps: 1, ClipNorm: -1}},
		{"NaN clip", train.Config{Steps: 1, ClipValue: math.NaN()}},
		{"unknown optimizer", train.Config{Steps: 1, Optimizer: train.Optimizer{Algorithm: "adagrad", LR: 1}}},
		{"zero learning rate", train.Config{Steps: 1, Optimizer: train.Optimizer{Algorithm: train.SGD}}},
		{"bad betas", train.Config{Steps: 1, Optimizer: train.Optimizer{Algorithm: train.Adam, LR: 1, Beta1: 1, Eps: 1e-8}}},
		{"unknown schedule", train.Config{Steps: 1, Schedule: train.Schedule{Decay: "linear"}}},
		{"cosine without end", train.Config{Steps: 0, Schedule: train.Schedule{Decay: "cosine"}}},
		{"negative steps", train.Config{Steps: -1}},
		{"checksum metadata", train.Config{Steps: 1, Metadata: map[string]string{"crc32c.emb.weight": "00000000"}}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if tr, err := train.New(d, m, endless, c.cfg); err == nil {
				tr.Close()
				t.Errorf("New accepted %+v", c.cfg)
			}
		})
	}
	if _, err := train.NewOptimizer("adagrad", 1); err == nil {
		t.Error("NewOptimizer accepted adagrad")
	}
}

// TestEvaluate checks that the loss does not depend on how the streams are
// grouped, that bits are nats/ln 2, and that evaluation changes nothing.
//
// The two groupings run GEMMs of 6 and of 3 rows, so they agree within
// float64 rounding, not bit for bit. evalTol: a logit is a sum of at most
// 8 products behind two layers over 10 steps, a row's loss a log-sum-exp
// of 10 classes, and the mean adds 49 or 98 batch means: a depth of ≲ 150
// operations on values ≲ 2.5, ≲ 150·2⁻⁵³·2.5 ≈ 4e-14. 1e-12 is 25 times
// that and orders of magnitude below the effect of a state not carried
// per group. (The CPU and the emulator differ by 2 ulps.)
func TestEvaluate(t *testing.T) {
	const evalTol = 1e-12
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dropout: 0.5, dtype: device.Float64, seed: 1})
	txt := text(t, 3000, 10, 7)
	before := values(t, m.Groups())
	ev, err := train.Evaluate(context.Background(), d, m, newLoader(t, d, txt, loader.Config{Batch: 6, Seq: 10}))
	check(t, err)
	ev2, err := train.Evaluate(context.Background(), d, m, newLoader(t, d, txt, loader.Config{Batch: 3, Accum: 2, Seq: 10}))
	check(t, err)
	if !(math.Abs(ev.Loss-ev2.Loss) <= evalTol) || ev.Tokens != ev2.Tokens {
		t.Errorf("batch 6: %v over %d tokens; 3 x 2: %v over %d", ev.Loss, ev.Tokens, ev2.Loss, ev2.Tokens)
	}
	// 6 streams of 500 tokens, 49 windows of 10.
	if ev.Tokens != 6*49*10 {
		t.Errorf("%d tokens evaluated, want %d", ev.Tokens, 6*49*10)
	}
	if ev.BitsPerToken != ev.Loss/math.Ln2 { // the same host division
		t.Errorf("bits %v for loss %v", ev.BitsPerToken, ev.Loss)
	}
	if !(ev.Loss > 1 && ev.Loss < 4) {
		t.Errorf("untrained loss %v, want near ln 10 = 2.30", ev.Loss)
	}
	if r := m.RandomState(); r[1] != 0 {
		t.Errorf("evaluation drew %d dropout elements", r[1])
	}
	if maxDiff(t, before, values(t, m.Groups())) != 0 {
		t.Error("evaluation changed the parameters")
	}
}

func TestSample(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dtype: device.Float32, seed: 1})
	ctx := context.Background()
	sample := func(c train.SampleConfig) []int32 {
		var ids []int32
		check(t, train.Sample(ctx, d, m, c, func(id int32) error {
			ids = append(ids, id)
			return nil
		}))
		if len(ids) != c.N {
			t.Fatalf("%d tokens, want %d", len(ids), c.N)
		}
		return ids
	}
	prime := []int32{1, 2, 3}
	a := sample(train.SampleConfig{N: 50, Temperature: 1, Prime: prime, Seed: 1})
	b := sample(train.SampleConfig{N: 50, Temperature: 1, Prime: prime, Seed: 1})
	c := sample(train.SampleConfig{N: 50, Temperature: 1, Prime: prime, Seed: 2})
	if !equal(a, b) || equal(a, c) {
		t.Errorf("seed 1 twice: %v, %v; seed 2: %v", a, b, c)
	}
	greedy := sample(train.SampleConfig{N: 30, Prime: prime, Seed: 1})
	top1 := sample(train.SampleConfig{N: 30, Temperature: 1, TopK: 1, Prime: prime, Seed: 7})
	if !equal(greedy, top1) {
		t.Errorf("temperature 0 gave %v, top-1 %v", greedy, top1)
	}
	// Memory does not grow with the length, nor with the prime's beyond
	// the chunk it is fed in (256 tokens): 300 and 3000 take the same.
	peak := func(c train.SampleConfig) int64 {
		sample(c)
		return d.MemStats().AllocatedBytes[alloc.AllPools].Peak
	}
	// Peaks and figures are compared on one device, as differences: the
	// CUDA device holds memory of its own (cuBLAS's workspace) from Open.
	// The layers keep their outputs for the next call, sized by the
	// largest window seen (the 256-token chunk): held is measured after
	// one.
	long := make([]int32, 3000)
	p0 := peak(train.SampleConfig{N: 10, Temperature: 1, Prime: long[:300]})
	held := d.MemStats().AllocatedBytes[alloc.AllPools].Current
	if p := peak(train.SampleConfig{N: 3000, Temperature: 1, Prime: long}); p != p0 {
		t.Errorf("peak allocated %d bytes for 3000 tokens after a 3000-token prime, %d for 10 after 300", p, p0)
	}
	if now := d.MemStats().AllocatedBytes[alloc.AllPools].Current; now != held {
		t.Errorf("%d bytes allocated after sampling, %d before: Sample kept memory", now, held)
	}
	for _, c := range []train.SampleConfig{{N: 1}, {N: 1, Prime: []int32{10}}, {N: -1, Prime: prime}, {N: 1, Prime: prime, Temperature: -1}} {
		if err := train.Sample(ctx, d, m, c, func(int32) error { return nil }); err == nil {
			t.Errorf("Sample accepted %+v", c)
		}
	}
	stop := errors.New("enough")
	n := 0
	err := train.Sample(ctx, d, m, train.SampleConfig{N: 100, Prime: prime}, func(int32) error {
		if n++; n == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 5 {
		t.Errorf("emit's error after %d tokens gave %v", n, err)
	}
}

func equal(a, b []int32) bool { return bytes.Equal(int32Bytes(a), int32Bytes(b)) }

func int32Bytes(v []int32) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, x := range v {
		out = append(out, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	return out
}

// TestCheckpointErrors: files that do not fit are refused and change
// nothing.
func TestCheckpointErrors(t *testing.T) {
	d := testdevice.Open(t)
	dir := t.TempDir()
	small := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	big := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dtype: device.Float32, seed: 2})
	wide := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 9, layers: 1, dtype: device.Float32, seed: 3})
	save := func(m *lm, name string, meta map[string]string) string {
		p := filepath.Join(dir, name)
		check(t, train.SaveWeights(p, d, m.Groups(), meta))
		return p
	}
	bigPath, widePath := save(big, "big", nil), save(wide, "wide", nil)
	before := values(t, small.Groups())
	for _, p := range []string{bigPath, widePath} {
		ck, err := train.ReadCheckpoint(p)
		check(t, err)
		if err := ck.LoadWeights(d, small.Groups()); !errors.Is(err, train.ErrMismatch) {
			t.Errorf("%s into the small model: %v, want ErrMismatch", filepath.Base(p), err)
		}
	}
	if maxDiff(t, before, values(t, small.Groups())) != 0 {
		t.Error("a refused load changed the parameters")
	}
	// The small model's own file loads into a copy; a weights-only file
	// does not resume a trainer.
	own := save(small, "own", map[string]string{"note": "x"})
	ck, err := train.ReadCheckpoint(own)
	check(t, err)
	if ck.Metadata()["note"] != "x" || ck.Resumable() {
		t.Errorf("metadata %v, resumable %v", ck.Metadata(), ck.Resumable())
	}
	copyModel := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float64, seed: 9})
	check(t, ck.LoadWeights(d, copyModel.Groups()))
	if diff := maxDiff(t, before, values(t, copyModel.Groups())); diff != 0 {
		t.Errorf("float32 weights loaded into a float64 model differ by %g", diff)
	}
	l := newLoader(t, d, text(t, 2000, 10, 1), loader.Config{Batch: 4, Seq: 8})
	tr := newTrainer(t, d, small, l, train.Config{Steps: 2})
	if err := tr.Resume(ck); !errors.Is(err, train.ErrMismatch) {
		t.Errorf("resuming from a weights-only file: %v, want ErrMismatch", err)
	}
	// A trainer checkpoint does not resume with another loader cut or
	// another optimizer.
	trained := filepath.Join(dir, "trained")
	tr = newTrainer(t, d, small, l, train.Config{Steps: 2, Checkpoint: trained})
	_, err = tr.Run(context.Background())
	check(t, err)
	ck, err = train.ReadCheckpoint(trained)
	check(t, err)
	other := newLoader(t, d, text(t, 2000, 10, 1), loader.Config{Batch: 5, Seq: 8})
	if err := newTrainer(t, d, small, other, train.Config{Steps: 4}).Resume(ck); !errors.Is(err, train.ErrMismatch) {
		t.Errorf("resuming with batch 5 after batch 4: %v, want ErrMismatch", err)
	}
	sgd, _ := train.NewOptimizer(train.SGD, 0.1)
	if err := newTrainer(t, d, small, l, train.Config{Steps: 4, Optimizer: sgd}).Resume(ck); !errors.Is(err, train.ErrMismatch) {
		t.Errorf("resuming Adam's state with SGD: %v, want ErrMismatch", err)
	}
	// Damaged files.
	b, err := os.ReadFile(trained)
	check(t, err)
	for name, data := range map[string][]byte{"truncated": b[:len(b)-3], "empty": nil, "garbage": bytes.Repeat([]byte{0xff}, 64)} {
		p := filepath.Join(dir, name)
		check(t, os.WriteFile(p, data, 0o644))
		if _, err := train.ReadCheckpoint(p); !errors.Is(err, train.ErrCorrupt) {
			t.Errorf("%s file: %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := train.ReadCheckpoint(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// Saving into a directory that does not exist fails and leaves no file.
	if err := tr.Save(filepath.Join(dir, "no", "such", "dir", "x")); err == nil {
		t.Error("Save into a missing directory succeeded")
	}
}

// TestMemory checks the trainer's memory on the allocator's figures, which
// mean the same on every device: steady-state steps hold the same bytes
// and take no new segment from the device, Progress reports the figures,
// and a trainer's Close frees everything it took. Everything is a
// difference on one device: the CUDA device holds memory of its own
// (cuBLAS's workspace) from Open, and its reductions borrow scratch from
// the cache within a step, so counts of allocations are not compared.
func TestMemory(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dtype: device.Float32, seed: 1})
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8, Accum: 2})
	allocated := func(s alloc.Stats) int64 { return s.AllocatedBytes[alloc.AllPools].Current }
	var held, reserved []int64
	cfg := train.Config{Optimizer: adam(t, 0.01), Steps: 5, ClipNorm: 1,
		OnStep: func(p train.Progress) {
			held = append(held, allocated(p.Memory))
			reserved = append(reserved, p.Memory.ReservedBytes[alloc.AllPools].Current)
		}}
	// The model keeps its layers' outputs from call to call: a first run
	// sizes them, so that the second trainer's figures are its own.
	tr, err := train.New(d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 1})
	check(t, err)
	_, err = tr.Run(context.Background())
	check(t, err)
	check(t, tr.Close())
	base := allocated(d.MemStats())
	tr, err = train.New(d, m, l, cfg)
	check(t, err)
	if own := allocated(d.MemStats()) - base; own <= 0 {
		t.Errorf("New allocated %d bytes, want the optimizer state and the carried states", own)
	}
	_, err = tr.Run(context.Background())
	check(t, err)
	check(t, tr.Close())
	if now := allocated(d.MemStats()); now != base {
		t.Errorf("%d bytes allocated after the trainer's Close, %d before its New", now, base)
	}
	if len(held) != 5 {
		t.Fatalf("%d steps reported, want 5", len(held))
	}
	for i := 1; i < len(held); i++ {
		if held[i] != held[0] || reserved[i] != reserved[0] {
			t.Errorf("step %d holds %d bytes in %d reserved, step 1 %d in %d: steady-state steps should not grow",
				i+1, held[i], reserved[i], held[0], reserved[0])
		}
	}
	if held[0] <= base {
		t.Errorf("Progress.Memory reports %d bytes allocated during training, %d before New", held[0], base)
	}
}
