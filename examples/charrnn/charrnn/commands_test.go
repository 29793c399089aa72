package charrnn_test

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/charrnntest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// sample runs the sample command on PyTorch's initial LSTM, whose
// distribution over the 40 characters is close to uniform, so different
// draws give different texts. It runs on the test device: a text is the
// same for a seed on every device but where the devices' logits differ
// across a boundary between two characters (the draws are made on the
// device, the same bits from the same logits everywhere: device.Sample).
func sample(t *testing.T, flags ...string) string {
	t.Helper()
	dev := testdevice.Spec(t)
	args := append([]string{"sample", "-device", dev, "-checkpoint", fixtures.TorchCheckpoint("lstm")}, flags...)
	out, _, err := run(t, context.Background(), args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return out
}

func TestSampleSeed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a, b     []string
		wantSame bool
	}{
		{"same seed", []string{"-n", "100", "-seed", "5"}, []string{"-n", "100", "-seed", "5"}, true},
		// 100 draws near 1/40 each: two seeds agree by chance with
		// probability about 40^-100.
		{"other seed", []string{"-n", "100", "-seed", "5"}, []string{"-n", "100", "-seed", "6"}, false},
		{"temperature 0 ignores the seed", []string{"-n", "100", "-seed", "5", "-temperature", "0"}, []string{"-n", "100", "-seed", "6", "-temperature", "0"}, true},
		{"top-k 1 is argmax", []string{"-n", "100", "-seed", "5", "-top-k", "1"}, []string{"-n", "100", "-seed", "6", "-temperature", "0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := sample(t, tc.a...), sample(t, tc.b...)
			if got := a == b; got != tc.wantSame {
				t.Errorf("texts the same: %v, want %v\n%v: %q\n%v: %q", got, tc.wantSame, tc.a, a, tc.b, b)
			}
		})
	}
}

func TestSampleOutput(t *testing.T) {
	const n, prime = 60, "The river "
	t.Run("text", func(t *testing.T) {
		out := sample(t, "-n", "60", "-prime", prime)
		if !strings.HasPrefix(out, prime) {
			t.Errorf("output %q, want it to start with the prime %q", out, prime)
		}
		// The prime, n characters and a final newline.
		if got, want := utf8.RuneCountInString(out), len(prime)+n+1; got != want || !strings.HasSuffix(out, "\n") {
			t.Errorf("output of %d characters %q, want %d ending in a newline", got, out, want)
		}
	})
	t.Run("json", func(t *testing.T) {
		evs := events(t, sample(t, "-n", "60", "-prime", prime, "-json"))
		if len(evs) != 1 || evs[0]["event"] != "sample" {
			t.Fatalf("events %v, want one sample event", evs)
		}
		text, _ := evs[0]["text"].(string)
		if got := utf8.RuneCountInString(text); got != n {
			t.Errorf("text %q of %d characters, want %d", text, got, n)
		}
		if evs[0]["prime"] != prime {
			t.Errorf("prime %v, want %q", evs[0]["prime"], prime)
		}
	})
	t.Run("json memstats", func(t *testing.T) {
		evs := events(t, sample(t, "-n", "5", "-json", "-memstats"))
		if len(evs) != 2 || evs[0]["event"] != "sample" || evs[1]["event"] != "memstats" {
			t.Fatalf("events %v, want sample then memstats", evs)
		}
		if got, want := evs[1]["device"], deviceName(t); got != want {
			t.Errorf("memstats of device %v, want the test device %q", got, want)
		}
	})
}

// The eval command prints what Eval returns: nats and bits per character.
func TestEvalCommand(t *testing.T) {
	rep := fixtures.Report(t, "gru")
	dev := testdevice.Spec(t)
	args := []string{"eval", "-device", dev, "-checkpoint", fixtures.TorchCheckpoint("gru"), "-data", corpusPath,
		"-batch", strconv.Itoa(rep.Eval.Batch), "-seq", strconv.Itoa(rep.Eval.Seq)}
	out, _, err := run(t, context.Background(), append(args, "-json")...)
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, out)
	if len(evs) != 1 || evs[0]["event"] != "eval" {
		t.Fatalf("events %v, want one eval event", evs)
	}
	loss, _ := evs[0]["loss"].(float64)
	bits, _ := evs[0]["bits_per_char"].(float64)
	if d, tol := charrnntest.RelDiff(loss, rep.Eval.Loss), fixtures.EvalTolerance(t, "gru", rep.Eval.Loss); !(d <= tol) {
		t.Errorf("loss %v, want PyTorch's %v (relative difference %.2g > %.2g)", loss, rep.Eval.Loss, d, tol)
	}
	if d := charrnntest.RelDiff(bits, loss/math.Ln2); !(d <= 1e-12) {
		t.Errorf("bits per char %v, want loss/ln 2 = %v", bits, loss/math.Ln2)
	}
	text, _, err := run(t, context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "nats/char") || !strings.Contains(text, "bits/char") {
		t.Errorf("output %q, want the loss in nats/char and bits/char", text)
	}
}

// bench runs and reports both rates (a tiny workload; the numbers are not
// checked beyond being positive and finite).
func TestBenchCommand(t *testing.T) {
	dev := testdevice.Spec(t)
	out, _, err := run(t, context.Background(), "bench", "-device", dev, "-hidden", "16", "-layers", "1", "-batch", "2", "-seq", "8",
		"-steps", "2", "-n", "200", "-graphs", "on", "-json")
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, out)
	if len(evs) != 1 || evs[0]["event"] != "bench" {
		t.Fatalf("events %v, want one bench event", evs)
	}
	if got, want := evs[0]["device"], deviceName(t); got != want {
		t.Errorf("bench on device %v, want the test device %q", got, want)
	}
	for _, k := range []string{"train_tokens_per_s", "sample_tokens_per_s"} {
		if v, ok := evs[0][k].(float64); !ok || !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want > 0", k, evs[0][k])
		}
	}
	// The device's counts per step and per token (device.Counter, which
	// both devices implement): a sampled token of a 1-layer model is 3
	// GEMMs (the layer's input projection and recurrent product, the
	// output layer), but 2 on the CUDA device, which computes the
	// recurrent product of so small a layer (hidden 16, at most
	// cuda.Config.FuseCellsUpTo) in the cell's kernels. A training step
	// of 8 time steps (one chunk of rows) is 8 GEMMs on the CUDA device:
	// the forward's input projection and output layer, the output layer's
	// weight and input gradients, the layer's product into the gradient
	// of its initial state (the walk back's first step: the state is tied
	// to the forward), its weight gradients (W_ih, W_hh) and its input's
	// gradient; the recurrent products of the steps, forward and backward,
	// run in the cells' kernels there (device.LSTMCell and LSTMCellGrad's
	// fused forms). The CPU device runs those as GEMMs: 8 more forward and
	// 7 more backward (into the steps before the last 7), 23. Its work is
	// queued, not waited for, so it has far fewer syncs than launches.
	// The 200 timed tokens: chunk 0 (tokens 0-63) drawn eagerly, chunks 1
	// and 2 replays of the recorded chunk (train.Sample), tokens 192-199
	// eagerly; the replayed GEMMs count as the calls they recorded did.
	tokenGemms := 3.0
	if strings.HasPrefix(dev, "cuda") {
		tokenGemms = 2
	}
	if g := evs[0]["token_gemms"]; g != tokenGemms {
		t.Errorf("token_gemms = %v, want %v", g, tokenGemms)
	}
	if g := evs[0]["token_graphs"]; g != 2.0/200 {
		t.Errorf("token_graphs = %v, want 2/200 (chunks 1 and 2 replayed)", g)
	}
	// The timed run's trainer runs its first step eagerly and replays the
	// second (train.Config.Graphs).
	if g := evs[0]["step_graphs"]; g != 0.5 {
		t.Errorf("step_graphs = %v, want 0.5 (one of the 2 timed steps replayed)", g)
	}
	// The host's calls: the eager step's are its work, the replayed
	// step's a few (train.TestGraphStepEndsOnDevice counts them), so a
	// step's calls are well under its work.
	calls, _ := evs[0]["step_calls"].(float64)
	work := 0.0
	for _, k := range []string{"step_launches", "step_gemms", "step_copies"} {
		v, _ := evs[0][k].(float64)
		work += v
	}
	if !(calls > 0 && calls < 0.75*work) {
		t.Errorf("step_calls = %v, want above 0 and under 3/4 of the work (%v launches, GEMMs and copies)", calls, work)
	}
	// They are drawn on the device and read back in chunks of 64, the
	// last with the 8 tokens after it: 3 syncs (the prime's copy is not
	// waited for), 1 per 67 tokens, where drawing on the host took 2 a
	// token.
	if sy, ok := evs[0]["token_syncs"].(float64); !ok || sy > 3.0/200 {
		t.Errorf("token_syncs = %v, want at most 3/200", evs[0]["token_syncs"])
	}
	stepGemms := 23.0
	if strings.HasPrefix(dev, "cuda") {
		stepGemms = 8
	}
	if g := evs[0]["step_gemms"]; g != stepGemms {
		t.Errorf("step_gemms = %v, want %v", g, stepGemms)
	}
	l, _ := evs[0]["step_launches"].(float64)
	if sy, ok := evs[0]["step_syncs"].(float64); !ok || !(l > 8*sy) {
		t.Errorf("step_launches %v, step_syncs %v: want launches to outnumber syncs many times", l, sy)
	}
	// tf32 says what the GEMMs ran in, for comparison with PyTorch's
	// settings: TF32 only when asked for and on a GPU (the CPU device's
	// float32 GEMMs are IEEE whatever the flag).
	if evs[0]["tf32"] != false {
		t.Errorf("tf32 = %v without -tf32, want false", evs[0]["tf32"])
	}
	// branches says whether the recurrent weight gradients ran on a
	// branch: by default on a device with branches, as the CPU device;
	// with Env.NoBranches (GOCURRENT_BRANCHES=off) on none.
	if testdevice.IsCPU() && evs[0]["branches"] != true {
		t.Errorf("branches = %v on the CPU device, want true", evs[0]["branches"])
	}
	// wave_windows is the windows of the training forwards' wavefront:
	// 1 for one layer, which has none.
	if evs[0]["wave_windows"] != 1.0 {
		t.Errorf("wave_windows = %v for one layer, want 1", evs[0]["wave_windows"])
	}
	// Two layers with Env.WaveWindows 2 (GOCURRENT_WAVE_WINDOWS=2): two
	// windows where the stack has a branch, and with NoBranches too
	// (GOCURRENT_BRANCHES=off) no branch and one window.
	for _, noBranches := range []bool{false, true} {
		var o bytes.Buffer
		env := testEnv(t, &o, io.Discard)
		env.NoBranches, env.WaveWindows = noBranches, 2
		err = charrnn.Run(context.Background(), []string{"bench", "-device", dev, "-hidden", "16", "-layers", "2", "-batch", "2", "-seq", "8",
			"-steps", "1", "-n", "1", "-json", "-tf32"}, env)
		if err != nil {
			t.Fatal(err)
		}
		evs = events(t, o.String())
		if len(evs) != 1 || evs[0]["tf32"] != !testdevice.IsCPU() {
			t.Fatalf("events %v with -tf32, want one bench event with tf32 %v", evs, !testdevice.IsCPU())
		}
		branches, windows := evs[0]["branches"], evs[0]["wave_windows"]
		switch {
		case noBranches && (branches != false || windows != 1.0):
			t.Errorf("with NoBranches: branches %v, wave_windows %v; want false, 1", branches, windows)
		case !noBranches && testdevice.IsCPU() && (branches != true || windows != 2.0):
			t.Errorf("with WaveWindows 2 on the CPU device: branches %v, wave_windows %v; want true, 2", branches, windows)
		case !noBranches && branches == true && windows != 2.0:
			t.Errorf("with WaveWindows 2 and a branch: wave_windows %v, want 2", windows)
		}
	}
}

// TestEvalDefaultData: eval without -data evaluates on what train held
// out of the default corpus (its -val-frac, recorded in the checkpoint, at
// most train's -val-tokens default from the end), and gives the loss
// train's last validation gave (issue 47: it evaluated the whole corpus,
// training text included). The default corpus is a GOROOT of the
// fixtures' text.
func TestEvalDefaultData(t *testing.T) {
	text, err := os.ReadFile(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	goroot := t.TempDir()
	for i, part := range []string{"a", "b", "c"} {
		p := filepath.Join(goroot, "src", part, part+".go")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, text[i*len(text)/3:(i+1)*len(text)/3], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ck := filepath.Join(t.TempDir(), "charrnn.safetensors")
	cmd := func(args ...string) []map[string]any {
		var o, e bytes.Buffer
		env := testEnv(t, &o, &e)
		env.GOROOT = goroot
		if err := charrnn.Run(context.Background(), args, env); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, e.String())
		}
		return events(t, o.String())
	}
	var done map[string]any
	for _, ev := range cmd("train", "-device", testdevice.Spec(t), "-embed", "16", "-hidden", "32", "-seq", "16", "-batch", "4",
		"-steps", "3", "-val-frac", "0.2", "-sample", "0", "-checkpoint", ck, "-json") {
		if ev["event"] == "done" {
			done = ev
		}
	}
	if done == nil || done["val_loss"] == nil {
		t.Fatalf("train's done event %v has no validation loss", done)
	}
	evs := cmd("eval", "-device", testdevice.Spec(t), "-checkpoint", ck, "-batch", "4", "-seq", "16", "-json")
	if len(evs) != 1 || evs[0]["loss"] != done["val_loss"] {
		t.Errorf("eval without -data: %v; train's last validation loss %v", evs, done["val_loss"])
	}
}
