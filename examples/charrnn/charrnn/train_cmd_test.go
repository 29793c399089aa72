package charrnn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/charrnntest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/train"
)

// events parses -json output: every line must be one JSON object with a
// string "event" field.
func events(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d %q is not a JSON object: %v", i+1, line, err)
		}
		if name, ok := ev["event"].(string); !ok || name == "" {
			t.Fatalf("line %d %q: event %v, want a non-empty string", i+1, line, ev["event"])
		}
		evs = append(evs, ev)
	}
	return evs
}

// ofEvent keeps the events called name.
func ofEvent(evs []map[string]any, name string) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["event"] == name {
			out = append(out, ev)
		}
	}
	return out
}

// trainerStep is the step count in a checkpoint's "trainer" metadata.
func trainerStep(t *testing.T, meta map[string]string) int64 {
	t.Helper()
	var ts struct {
		Step *int64 `json:"step"`
	}
	if err := json.Unmarshal([]byte(meta["trainer"]), &ts); err != nil || ts.Step == nil {
		t.Fatalf("trainer metadata %q: no step (%v)", meta["trainer"], err)
	}
	return *ts.Step
}

// The contract: -batch 8 -accum 4 computes the same updates as -batch 32
// -accum 1 (the same 32 streams, the loss the mean over all positions of
// a step). Only the grouping of float32 sums differs: on the CPU the
// weight-gradient sums (four of 128 positions added up, or one of 512)
// and the loss's mean; on a GPU cuBLAS may also pick other kernels, and
// so other summation orders, for 8 rows than for 32, anywhere in the
// model.
//
// The runs use SGD. Adam's update does not depend on the gradient's
// scale, so with it a run whose accumulated gradient had the wrong scale
// (a missing 1/accum, say) would pass, and its normalisation amplifies
// rounding in small gradients beyond what this command-level test can
// bound (it sees norms, not gradients); SGD's update is lr times the
// gradient, so its weights check the gradient itself. (Adam with
// accumulation is checked against PyTorch in TestTrainMatchesTorch.)
//
// The bounds (see charrnntest.RoundingBound): depth D = 3,400 for a gradient element
// of this model (embedding 16, hidden 32, 2 layers, 512 positions a
// step), counted as for fixtureDepth: per layer and time step ≲ 79
// roundings forward and 128 + 128 + 15 backward, ≲ 4 steps deep, the
// output layer (33 forward, 40 backward), the weight-gradient sums (512)
// and the forward pass (600, the forward depth). With ρ =
// charrnntest.RoundingBound(3400) ≈ 2.8e-5, step k's gradient errs by ≲
// k·ρ·(pre+2)·‖g_k‖ (as in TestTrainMatchesTorch: each element by ρ
// relative to its terms, the earlier steps' differences carried along)
// in each run, and so does its norm relative to ‖g_k‖. The weights differ
// by ≲ Σ_k lr·2·k·ρ·(pre+2)·‖g_k‖ + Σ_k 2·2u·‖w‖ (both runs' gradients,
// and the rounding of every weight in each run, in ℓ2 over all of them);
// SGD at a rate this small (lr·‖H‖ ≪ 1) does not amplify a difference
// from one step to the next. Step k's loss differs by charrnntest.LossBound twice
// (each run against the exact value) plus ‖g_k‖·(the weight bound after
// k−1 steps). The weights move by ≤ lr·Σ_k‖g_k‖ ≈ 0.015 each, which
// charrnntest.Magnitudes allows for. The weight bound is about 1e-3 of the update
// lr·‖Σ g_k‖, so a gradient off by a part in a thousand fails it.
func TestTrainAccumulationEquivalence(t *testing.T) {
	dir := t.TempDir()
	got := map[string]equivRun{}
	for name, flags := range map[string][]string{"8x4": {"-batch", "8", "-accum", "4"}, "32x1": {"-batch", "32", "-accum", "1"}} {
		ckpt := filepath.Join(dir, name+".safetensors")
		out, _, err := run(t, context.Background(), equivArgs(t, ckpt, flags...)...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got[name] = readEquivRun(t, out, ckpt)
	}
	checkEquivalent(t, got["8x4"], got["32x1"], "-batch 8 -accum 4", "-batch 32")
}

// The equivalence runs' settings (TestTrainAccumulationEquivalence).
const (
	equivLR, equivSteps, equivClip = 0.01, 5, 5.0
	equivDepth, equivForwardDepth  = 3400, 600
)

// equivArgs is an equivalence run's command line, writing ckpt, with the
// batching flags.
func equivArgs(t testing.TB, ckpt string, batching ...string) []string {
	return smallTrain(t, ckpt, slices.Concat([]string{"-steps", strconv.Itoa(equivSteps), "-optimizer", "sgd", "-lr", strconv.FormatFloat(equivLR, 'g', -1, 64),
		"-dropout", "0", "-clip", strconv.FormatFloat(equivClip, 'g', -1, 64), "-seed", "3", "-json", "-log-every", "1"}, batching)...)
}

// equivRun is what an equivalence run reported and saved.
type equivRun struct {
	losses, norms []float64
	tensors       map[string]charrnntest.Tensor
}

func readEquivRun(t *testing.T, out, ckpt string) equivRun {
	t.Helper()
	var r equivRun
	for _, ev := range ofEvent(events(t, out), "step") {
		r.losses = append(r.losses, ev["loss"].(float64))
		r.norms = append(r.norms, ev["grad_norm"].(float64))
	}
	all, _ := charrnntest.ReadSafetensors(t, ckpt)
	r.tensors = charrnntest.ModelTensors(all)
	return r
}

// checkEquivalent checks that two runs of the same training steps whose
// float32 sums are grouped differently (named an and bn) agree within the
// bounds derived above.
func checkEquivalent(t *testing.T, a, b equivRun, an, bn string) {
	t.Helper()
	const (
		lr, steps, clip     = equivLR, equivSteps, equivClip
		depth, forwardDepth = equivDepth, equivForwardDepth
		u                   = 0x1p-24
	)
	if len(a.losses) != steps || len(b.losses) != steps {
		t.Fatalf("step events: %d and %d, want %d each (-log-every 1, -steps %d)", len(a.losses), len(b.losses), steps, steps)
	}
	rho := charrnntest.RoundingBound(depth)
	norm := make([]float64, steps) // the larger of the two runs' ‖g_k‖
	total := 0.0
	for k := range steps {
		norm[k] = max(a.norms[k], b.norms[k])
		total += norm[k]
		if norm[k] >= clip {
			t.Fatalf("step %d: gradient norm %v ≥ -clip %v; the bounds assume no clipping", k+1, norm[k], clip)
		}
	}
	pre, logit := charrnntest.Magnitudes(t, b.tensors, lr*total)
	wnorm := 0.0
	for name, tn := range b.tensors {
		for _, v := range tn.Float32s(t, name) {
			wnorm += float64(v) * float64(v)
		}
	}
	wnorm = math.Sqrt(wnorm) + lr*total
	// weightBound is the ℓ2 bound on the runs' weight difference after k
	// steps.
	weightBound := func(k int) float64 {
		sum := 0.0
		for j := range k {
			sum += lr*2*float64(j+1)*rho*(pre+2)*norm[j] + 2*2*u*wnorm
		}
		return sum
	}
	for k := range steps {
		lossTol := 2*charrnntest.LossBound(forwardDepth, pre, logit, b.losses[k]) + norm[k]*weightBound(k)/b.losses[k]
		if d := charrnntest.RelDiff(a.losses[k], b.losses[k]); !(d <= lossTol) {
			t.Errorf("step %d: loss %.9g with %s, %.9g with %s (relative difference %.2g > %.2g)", k+1, a.losses[k], an, b.losses[k], bn, d, lossTol)
		}
		normTol := 2 * float64(k+1) * rho * (pre + 2)
		if d := charrnntest.RelDiff(a.norms[k], b.norms[k]); !(d <= normTol) {
			t.Errorf("step %d: gradient norm %.9g with %s, %.9g with %s (relative difference %.2g > %.2g)", k+1, a.norms[k], an, b.norms[k], bn, d, normTol)
		}
		t.Logf("step %d: loss relative difference %.2g (tolerance %.2g), gradient norm %.2g (tolerance %.2g)",
			k+1, charrnntest.RelDiff(a.losses[k], b.losses[k]), lossTol, charrnntest.RelDiff(a.norms[k], b.norms[k]), normTol)
	}
	// The same names and shapes (charrnntest.MaxAbsDiff fails the test otherwise).
	worst, where := charrnntest.MaxAbsDiff(t, a.tensors, b.tensors)
	diff := 0.0
	for name, tn := range a.tensors {
		av, bv := tn.Float32s(t, name), b.tensors[name].Float32s(t, name)
		for i := range av {
			d := float64(av[i]) - float64(bv[i])
			diff += d * d
		}
	}
	diff = math.Sqrt(diff)
	if bound := weightBound(steps); !(diff <= bound) {
		t.Errorf("weights after %d steps differ by %.2g in ℓ2 > %.2g; largest at %s", steps, diff, bound, where)
	} else {
		t.Logf("weights: ℓ2 difference %.2g (bound %.2g; the update is about lr·Σ‖g‖ = %.2g), largest %.2g at %s", diff, bound, lr*total, worst, where)
	}
}

// Stopping at step 3 and resuming to step 6 ends in the checkpoint a run
// straight to step 6 writes: weights, optimizer and carried state bit for
// bit, with dropout drawing random masks all along. The straight run is
// eager; the two halves replay their steps as device graphs (-graphs on),
// drawing the masks where the device keeps their offset.
func TestTrainResumeEquivalence(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	flags := []string{"-dropout", "0.3", "-accum", "2", "-batch", "4", "-seed", "5"}
	straight := filepath.Join(dir, "straight.safetensors")
	if _, _, err := run(t, ctx, smallTrain(t, straight, slices.Concat(flags, []string{"-steps", "6", "-graphs", "off"})...)...); err != nil {
		t.Fatal(err)
	}
	split := filepath.Join(dir, "split.safetensors")
	if _, _, err := run(t, ctx, smallTrain(t, split, slices.Concat(flags, []string{"-steps", "3", "-graphs", "on"})...)...); err != nil {
		t.Fatal(err)
	}
	_, half := charrnntest.ReadSafetensors(t, split)
	if got := trainerStep(t, half); got != 3 {
		t.Fatalf("checkpoint after -steps 3 at step %d, want 3", got)
	}
	if _, _, err := run(t, ctx, smallTrain(t, split, slices.Concat(flags, []string{"-resume", split, "-steps", "6", "-graphs", "on"})...)...); err != nil {
		t.Fatal(err)
	}
	want, wantMeta := charrnntest.ReadSafetensors(t, straight)
	got, gotMeta := charrnntest.ReadSafetensors(t, split)
	if err := charrnntest.SameTensors(got, want); err != nil {
		t.Errorf("resumed run vs straight run: %v", err)
	}
	for k, v := range wantMeta {
		if gotMeta[k] != v {
			t.Errorf("metadata %q: resumed %q, straight %q", k, gotMeta[k], v)
		}
	}
	if len(gotMeta) != len(wantMeta) {
		t.Errorf("metadata keys: resumed %d, straight %d", len(gotMeta), len(wantMeta))
	}
	// The carried state and Adam's moments are in the file, so the check
	// above covers them; make sure of it (-accum 2: carried states 0 and
	// 1, an LSTM's h and c).
	for _, name := range []string{"optim.rnn.exp_avg", "optim.rnn.exp_avg_sq", "optim.carry.1.c"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no tensor %s in the checkpoint", name)
		}
	}
}

// -resume with no other flag than -data and -device continues the run as
// the checkpoint records it: a run of non-default shape, batching,
// optimizer, rate, clipping, cosine schedule, seed and held-out fraction,
// stopped at step 3 of 6, resumed with none of those flags repeated, ends
// in the checkpoint of the run straight to step 6. Before the settings
// were restored, the resumed run took the defaults (-lr 0.002, -batch 32,
// ...) and failed or trained another run. -init, given no shape flags,
// takes the checkpoint's shape; -steps past the end of the recorded
// cosine schedule is refused.
func TestTrainResumeRestores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dataDev := []string{"train", "-data", corpusPath, "-device", testdevice.Spec(t), "-sample", "0"}
	settings := []string{"-cell", "gru", "-embed", "12", "-hidden", "24", "-layers", "1", "-batch", "4", "-seq", "12",
		"-accum", "2", "-optimizer", "rmsprop", "-lr", "0.01", "-clip", "1", "-schedule", "cosine", "-warmup", "1",
		"-seed", "5", "-val-frac", "0.1", "-eval-every", "0"}
	straight := filepath.Join(dir, "straight.safetensors")
	if _, _, err := run(t, ctx, slices.Concat(dataDev, settings, []string{"-steps", "6", "-checkpoint", straight})...); err != nil {
		t.Fatal(err)
	}
	// The first part: the same run stopped as Ctrl-C stops it, after step
	// 1 (the context is cancelled at step 1's report), so that the
	// schedule it records ends at step 6.
	stopped := filepath.Join(dir, "stopped.safetensors")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := charrnn.Run(cctx, slices.Concat(dataDev, settings, []string{"-steps", "6", "-json", "-log-every", "1", "-pipeline", "1", "-checkpoint", stopped}),
		testEnv(t, &cancelOnStep{cancel: cancel}, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	_, meta := charrnntest.ReadSafetensors(t, stopped)
	if got := trainerStep(t, meta); got != 1 {
		t.Fatalf("the interrupted run saved step %d, want 1", got)
	}
	if _, _, err := run(t, ctx, "train", "-data", corpusPath, "-device", testdevice.Spec(t), "-sample", "0", "-eval-every", "0",
		"-resume", stopped, "-checkpoint", stopped); err != nil {
		t.Fatal(err)
	}
	want, wantMeta := charrnntest.ReadSafetensors(t, straight)
	got, gotMeta := charrnntest.ReadSafetensors(t, stopped)
	if err := charrnntest.SameTensors(got, want); err != nil {
		t.Errorf("resumed run vs straight run: %v", err)
	}
	if !maps.Equal(gotMeta, wantMeta) {
		t.Errorf("metadata: resumed %q, straight %q", gotMeta, wantMeta)
	}

	// -init takes the shape from the checkpoint when no shape flag is
	// given, or when the one given agrees.
	for _, extra := range [][]string{nil, {"-hidden", "24", "-cell", "gru"}} {
		next := filepath.Join(dir, "init.safetensors")
		if _, _, err := run(t, ctx, slices.Concat(dataDev, extra, []string{"-init", straight, "-steps", "1", "-force", "-checkpoint", next})...); err != nil {
			t.Fatalf("-init %v: %v", extra, err)
		}
		_, meta := charrnntest.ReadSafetensors(t, next)
		if meta["config"] != wantMeta["config"] {
			t.Errorf("-init %v: model %s, want the checkpoint's %s", extra, meta["config"], wantMeta["config"])
		}
	}

	// The recorded schedule ends at step 6: -steps 6 may be given, -steps
	// 7 would train at the minimum rate, 0, and is refused.
	_, _, err = run(t, ctx, "train", "-data", corpusPath, "-device", testdevice.Spec(t), "-sample", "0", "-resume", straight,
		"-checkpoint", straight, "-steps", "7")
	if !errors.Is(err, charrnn.ErrUsage) || !strings.Contains(err.Error(), "-steps 7 runs past the end of the cosine schedule") {
		t.Errorf("-steps 7 past the cosine schedule's end at 6: error %v, want a usage error saying so", err)
	}
}

// -resume refuses what it cannot continue exactly, and leaves the
// checkpoint it was given as it was.
func TestTrainResumeErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	flags := []string{"-accum", "2", "-batch", "4", "-steps", "2"}
	ckpt := filepath.Join(dir, "run.safetensors")
	if _, _, err := run(t, ctx, smallTrain(t, ckpt, flags...)...); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "weights.safetensors")
	saveWeights(t, fixtures.TorchCheckpoint("lstm"), weights, nil)

	for _, tc := range []struct {
		name   string
		extra  []string
		is     error  // when set, the error wraps it
		substr string // when set, the error says it
	}{
		// A flag given that contradicts the checkpoint names both values.
		{"other batch", []string{"-resume", ckpt, "-batch", "8"}, charrnn.ErrUsage, "-batch 8 contradicts " + ckpt + ", which records -batch 4"},
		{"other accum", []string{"-resume", ckpt, "-accum", "1"}, charrnn.ErrUsage, "-accum 1 contradicts " + ckpt + ", which records -accum 2"},
		{"other seq", []string{"-resume", ckpt, "-seq", "32"}, charrnn.ErrUsage, "which records -seq 16"},
		{"other optimizer", []string{"-resume", ckpt, "-optimizer", "sgd"}, charrnn.ErrUsage, "which records -optimizer adam"},
		{"other lr", []string{"-resume", ckpt, "-lr", "0.01"}, charrnn.ErrUsage, "-lr 0.01 contradicts " + ckpt + ", which records -lr 0.002"},
		{"other hidden", []string{"-resume", ckpt, "-hidden", "48"}, charrnn.ErrUsage, "which records -hidden 32"},
		{"other val-frac", []string{"-resume", ckpt, "-val-frac", "0.1"}, charrnn.ErrUsage, "which records -val-frac 0"},
		{"other hidden with -init", []string{"-init", ckpt, "-hidden", "48", "-force"}, charrnn.ErrUsage, "which records -hidden 32: -init takes the model's shape"},
		// SaveWeights's file and PyTorch's have no trainer state. (-force:
		// the run may replace ckpt, which it does not resume from.)
		{"weights only", []string{"-resume", weights, "-force"}, charrnn.ErrUsage, "weights only"},
		{"torch weights", []string{"-resume", fixtures.TorchCheckpoint("gru"), "-force"}, charrnn.ErrUsage, "weights only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := smallTrain(t, ckpt, slices.Concat(flags, tc.extra, []string{"-steps", "4"})...)
			_, _, err := run(t, ctx, args...)
			switch {
			case err == nil:
				t.Fatalf("train %v: no error", tc.extra)
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Errorf("error %q, want one wrapping %q", err, tc.is)
			case tc.substr != "" && !strings.Contains(err.Error(), tc.substr):
				t.Errorf("error %q, want one saying %q", err, tc.substr)
			}
			after, err := os.ReadFile(ckpt)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				t.Errorf("the failed run changed %s (%d bytes, were %d)", ckpt, len(after), len(before))
			}
		})
	}
}

// cancelOnStep is a Stdout that cancels a context when it sees the first
// step event, as Ctrl-C in the middle of a run would.
type cancelOnStep struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnStep) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte(`"event":"step"`)) {
		w.cancel()
	}
	return len(p), nil
}

// Cancelling the context stops the run after the step under way, cleanly:
// no error, a "done" event that says so, and a checkpoint to resume from.
func TestTrainCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ckpt := filepath.Join(t.TempDir(), "run.safetensors")
	const steps = 50 // far more than the run will take
	out := &cancelOnStep{cancel: cancel}
	// -pipeline 1: each step read back at its end (on a GPU too), so
	// the report that cancels comes before the next step is queued.
	args := smallTrain(t, ckpt, "-batch", "4", "-steps", strconv.Itoa(steps), "-log-every", "1", "-json", "-sample", "10", "-pipeline", "1")
	if err := charrnn.Run(ctx, args, testEnv(t, out, &bytes.Buffer{})); err != nil {
		t.Fatalf("cancelled run: %v, want nil (a clean stop)", err)
	}
	done := ofEvent(events(t, out.buf.String()), "done")
	if len(done) != 1 {
		t.Fatalf("%d done events, want 1; output:\n%s", len(done), out.buf.String())
	}
	if done[0]["stopped"] != true {
		t.Errorf("done event %v: stopped %v, want true", done[0], done[0]["stopped"])
	}
	// The context is cancelled in step 1's report, which the trainer makes
	// between steps: no step is under way, so the run stops at 1.
	step, _ := done[0]["step"].(float64)
	if step != 1 {
		t.Errorf("done at step %v, want 1 (of -steps %d)", done[0]["step"], steps)
	}
	ck, err := train.ReadCheckpoint(ckpt)
	if err != nil {
		t.Fatalf("no checkpoint after cancelling: %v", err)
	}
	if !ck.Resumable() {
		t.Errorf("checkpoint %s is not resumable", ckpt)
	}
	if got := trainerStep(t, ck.Metadata()); got != int64(step) {
		t.Errorf("checkpoint at step %d, want the done event's %v", got, step)
	}
}

// With -json every line of stdout is a JSON object, with validation, the
// sample and -memstats too.
func TestTrainJSON(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "run.safetensors")
	// -val-frac 0.2 holds out 1,189 of the 5,949 characters, enough for
	// batches of 4 x 16.
	out, _, err := run(t, context.Background(), smallTrain(t, ckpt, "-batch", "4", "-steps", "4", "-val-frac", "0.2", "-eval-every", "2",
		"-log-every", "1", "-sample", "20", "-memstats", "-json")...)
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, out)
	// start, a step event per step (-log-every 1), validation at steps 2
	// and 4 (-eval-every 2), done, sample, memstats.
	for _, want := range []struct {
		event string
		n     int
	}{{"start", 1}, {"step", 4}, {"validation", 2}, {"done", 1}, {"sample", 1}, {"memstats", 1}} {
		if got := len(ofEvent(evs, want.event)); got != want.n {
			t.Errorf("%d %q events, want %d", got, want.event, want.n)
		}
	}
	// Events that name the device name the test device.
	dev := deviceName(t)
	for _, name := range []string{"start", "memstats"} {
		for _, ev := range ofEvent(evs, name) {
			if ev["device"] != dev {
				t.Errorf("%s event on device %v, want the test device %q", name, ev["device"], dev)
			}
		}
	}
	if ms := ofEvent(evs, "memstats"); len(ms) == 1 {
		for _, field := range []string{"allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
			"device_allocs", "device_frees", "alloc_retries", "ooms"} {
			if v, ok := ms[0][field].(float64); !ok || v < 0 {
				t.Errorf("memstats %s = %v, want a number >= 0", field, ms[0][field])
			}
		}
		if v, _ := ms[0]["peak_allocated_bytes"].(float64); v <= 0 {
			t.Errorf("memstats peak_allocated_bytes = %v after training, want > 0", v)
		}
	}
}

// A run resumed at its end takes no step: its done event's loss is null
// (NaN in train.Summary); before, JSON refused the NaN and the event was
// an error event instead.
func TestTrainJSONNoStep(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "run.safetensors")
	if _, _, err := run(t, t.Context(), smallTrain(t, ckpt, "-batch", "4", "-steps", "2")...); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, t.Context(), smallTrain(t, ckpt, "-resume", ckpt, "-json")...)
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, out)
	done := ofEvent(evs, "done")
	if len(done) != 1 || len(ofEvent(evs, "error")) != 0 {
		t.Fatalf("output %s, want one done event and no error", out)
	}
	if loss, ok := done[0]["loss"]; !ok || loss != nil || done[0]["step"] != 2.0 {
		t.Errorf("done event %v, want step 2 and loss null", done[0])
	}
}

// -plot writes the loss curves as a PNG.
func TestTrainPlot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "loss.png")
	if _, _, err := run(t, context.Background(), smallTrain(t, filepath.Join(dir, "run.safetensors"), "-batch", "4", "-steps", "3",
		"-val-frac", "0.2", "-eval-every", "1", "-plot", path)...); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// 800 is the plot package's default width.
	if got := img.Bounds().Dx(); got != 800 {
		t.Errorf("plot width %d, want 800", got)
	}
}

// A cancelled run whose checkpoint cannot be written must say so: the
// whole point of stopping cleanly is the checkpoint.
func TestTrainCancelCheckpointFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A directory that does not exist: the checkpoint cannot be written.
	ckpt := filepath.Join(t.TempDir(), "no-such-dir", "run.safetensors")
	out := &cancelOnStep{cancel: cancel}
	err := charrnn.Run(ctx, smallTrain(t, ckpt, "-batch", "4", "-steps", "50", "-log-every", "1", "-json"), testEnv(t, out, &bytes.Buffer{}))
	if err == nil || !strings.Contains(err.Error(), "no-such-dir") {
		t.Errorf("cancelled run that could not write its checkpoint: error %v, want one naming %s", err, ckpt)
	}
}

// TestTrainSkipNonFinite: -skip-nonfinite skips and counts diverged steps
// and -max-skips ends a run that never recovers, with the last step's
// error. (lr 1e39 makes every step after the first non-finite; see
// TestBadInput's non-finite case.) The skipped steps are step events
// flagged "skipped_step" at the 1st, 2nd and 4th in a row, their step the
// steps taken and their non-finite figures null; before, a skipped step
// printed nothing.
func TestTrainSkipNonFinite(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "run.safetensors")
	out, _, err := run(t, t.Context(), "train", "-data", corpusPath, "-device", testdevice.Spec(t), "-embed", "8", "-hidden", "16",
		"-seq", "16", "-batch", "4", "-val-frac", "0", "-steps", "50", "-lr", "1e39", "-sample", "0",
		"-skip-nonfinite", "-max-skips", "4", "-checkpoint", ckpt, "-json")
	if !errors.Is(err, train.ErrNonFinite) || !strings.Contains(err.Error(), "4 steps in a row") {
		t.Fatalf("train with -max-skips 4 on a diverging run: %v, want ErrNonFinite after 4 steps in a row", err)
	}
	type event struct {
		Event       string   `json:"event"`
		Step        int64    `json:"step"`
		SkippedStep bool     `json:"skipped_step"`
		InARow      int64    `json:"in_a_row"`
		Skipped     int64    `json:"skipped"`
		Loss        *float64 `json:"loss"`
		GradNorm    *float64 `json:"grad_norm"`
	}
	var steps []event
	for line := range strings.Lines(out) {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		if e.Event == "step" {
			steps = append(steps, e)
		}
	}
	if len(steps) != 4 || steps[0].SkippedStep || steps[0].Step != 1 || steps[0].Loss == nil {
		t.Fatalf("step events %+v, want step 1 taken, then 3 skipped", steps)
	}
	for i, e := range steps[1:] {
		n := int64(1) << i
		if !e.SkippedStep || e.Step != 1 || e.InARow != n || e.Skipped != n || (e.Loss != nil && e.GradNorm != nil) {
			t.Errorf("step event %+v, want step 1 (the steps taken), skipped_step, %d skipped in a row, a null loss or gradient norm", e, n)
		}
	}
	ck, err := train.ReadCheckpoint(ckpt)
	if err != nil {
		t.Fatalf("no checkpoint of the state before the last skipped step: %v", err)
	}
	if meta := ck.Metadata()["trainer"]; !strings.Contains(meta, `"skipped":4`) || !strings.Contains(meta, `"stopped":"non-finite step`) {
		t.Errorf("trainer metadata %s, want 4 skipped steps and the stopped mark", meta)
	}
}

// TestTrainPipeline: -pipeline 5 (steps read back five at a time, never
// waiting for the device between) trains the same run as -pipeline 1: the
// same step events, loss for loss, and the same checkpoint, byte for byte;
// -pipeline auto (the default) is accepted.
func TestTrainPipeline(t *testing.T) {
	dir := t.TempDir()
	trainWith := func(pipeline string, more ...string) ([]map[string]any, []byte) {
		ckpt := filepath.Join(dir, "p"+pipeline+strings.Join(more, "")+".safetensors")
		out, _, err := run(t, context.Background(), smallTrain(t, ckpt, append([]string{"-batch", "4", "-steps", "12", "-clip", "0.5",
			"-log-every", "1", "-json", "-pipeline", pipeline}, more...)...)...)
		if err != nil {
			t.Fatalf("-pipeline %s: %v", pipeline, err)
		}
		steps := ofEvent(events(t, out), "step")
		for _, e := range steps {
			for _, k := range []string{"tokens_per_s", "data_wait", "elapsed_s"} {
				delete(e, k) // timings
			}
			// The memory figures are the device's when the step is
			// reported, which a pipeline delays: with graphs (-graphs
			// auto on a GPU) they grow at the second step, when the step
			// is recorded (the graphs' batch buffers, the temporaries they
			// keep), so a step reported later shows more.
			delete(e, "allocated_bytes")
			delete(e, "memory")
		}
		b, err := os.ReadFile(ckpt)
		if err != nil {
			t.Fatal(err)
		}
		return steps, b
	}
	wantSteps, wantCkpt := trainWith("1")
	if len(wantSteps) != 12 {
		t.Fatalf("-pipeline 1: %d step events, want 12", len(wantSteps))
	}
	for _, p := range []string{"5", "auto"} {
		steps, ckpt := trainWith(p)
		if !reflect.DeepEqual(steps, wantSteps) {
			t.Errorf("-pipeline %s: step events\n%v\nwant\n%v", p, steps, wantSteps)
		}
		if !bytes.Equal(ckpt, wantCkpt) {
			t.Errorf("-pipeline %s: the checkpoint differs from -pipeline 1's", p)
		}
	}
	// Steps replayed as device graphs, and not: the same events and
	// checkpoint (auto is off on the CPU, on on a GPU). The sample at the
	// end is in neither, but is drawn by replays too with graphs.
	for _, g := range []string{"on", "off"} {
		steps, ckpt := trainWith("5", "-graphs", g)
		if !reflect.DeepEqual(steps, wantSteps) {
			t.Errorf("-pipeline 5 -graphs %s: step events\n%v\nwant\n%v", g, steps, wantSteps)
		}
		if !bytes.Equal(ckpt, wantCkpt) {
			t.Errorf("-pipeline 5 -graphs %s: the checkpoint differs from -pipeline 1's", g)
		}
	}
}
