package seqcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// taggedFile writes n sentences whose tags depend on both neighbours: a
// word's tag is "N" after "the", "V" before "now", else its class.
func taggedFile(t *testing.T, dir string, n int, seed uint64) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"the", "cat", "dog", "runs", "now", "sees", "a", "bird"}
	var b strings.Builder
	for range n {
		ws := make([]string, 2+r.IntN(8))
		for i := range ws {
			ws[i] = words[r.IntN(len(words))]
		}
		for i, w := range ws {
			tag := fmt.Sprint("C", len(w)%3)
			switch {
			case i > 0 && ws[i-1] == "the":
				tag = "N"
			case i+1 < len(ws) && ws[i+1] == "now":
				tag = "V"
			}
			fmt.Fprintf(&b, "%s\t%s\n", w, tag)
		}
		b.WriteString("\n")
	}
	path := filepath.Join(dir, fmt.Sprintf("tagged%d.tsv", seed))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// labelledFile writes n sequences labelled by their first word's class.
func labelledFile(t *testing.T, dir string, n int, seed uint64) string {
	t.Helper()
	return writeLabelled(t, filepath.Join(dir, fmt.Sprintf("labelled%d.jsonl", seed)), rand.New(rand.NewPCG(seed, 2)), n, 1, 6)
}

// writeLabelled writes to path n sequences of lo to hi words drawn from r,
// each labelled by its first word's class ("zero", "one" or "other").
func writeLabelled(t *testing.T, path string, r *rand.Rand, n, lo, hi int) string {
	t.Helper()
	var b strings.Builder
	for range n {
		ws := make([]string, lo+r.IntN(hi-lo+1))
		for i := range ws {
			ws[i] = fmt.Sprint("w", r.IntN(6))
		}
		label := map[byte]string{'0': "zero", '1': "one"}[ws[0][1]]
		if label == "" {
			label = "other"
		}
		js, _ := json.Marshal(map[string]any{"tokens": ws, "label": label})
		b.Write(append(js, '\n'))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs a command line and returns its standard output.
func run(t *testing.T, task Task, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(stdin), CacheDir: t.TempDir()}
	err := Run(context.Background(), task, args, env)
	return out.String(), err
}

// jsonLines decodes every line of out.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// TestTaggerCommands trains a small tagger from the command line, then
// evaluates it and predicts with it: the figures eval prints are the
// validation's at the end of training (the same model and data), the
// accuracy is well above the majority tag's, and predict writes one tag
// per token.
func TestTaggerCommands(t *testing.T) {
	dir := t.TempDir()
	trainPath, valPath := taggedFile(t, dir, 300, 1), taggedFile(t, dir, 60, 2)
	ck := filepath.Join(dir, "tagger.safetensors")
	out, err := run(t, Tagging, "", "train", "-data", trainPath, "-val", valPath, "-embed", "16", "-hidden", "16", "-epochs", "8",
		"-lr", "1e-2", "-device", "cpu", "-checkpoint", ck, "-json")
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	evs := jsonLines(t, out)
	last := evs[len(evs)-1]
	if last["event"] != "done" {
		t.Fatalf("the last event is %v, want done", last)
	}
	acc := last["accuracy"].(float64)
	if acc < 0.9 {
		t.Errorf("validation accuracy %.3f after training; want > 0.9 (the tags follow from the neighbours)", acc)
	}
	out, err = run(t, Tagging, "", "eval", "-checkpoint", ck, "-data", valPath, "-device", "cpu", "-json")
	if err != nil {
		t.Fatalf("eval: %v", err)
	}
	ev := jsonLines(t, out)[0]
	if ev["accuracy"].(float64) != acc || ev["loss"].(float64) != last["loss"].(float64) {
		t.Errorf("eval: accuracy %v loss %v; training's last validation %v, %v", ev["accuracy"], ev["loss"], acc, last["loss"])
	}
	data, err := loader.OpenDataset(context.Background(), valPath, loader.DatasetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	if int64(ev["tokens"].(float64)) != data.Tokens() || int(ev["sentences"].(float64)) != data.Len() {
		t.Errorf("eval counted %v tokens, %v sentences; the file has %d, %d", ev["tokens"], ev["sentences"], data.Tokens(), data.Len())
	}
	out, err = run(t, Tagging, "the cat runs now\n\nzebra the\n", "predict", "-checkpoint", ck, "-device", "cpu")
	if err != nil {
		t.Fatalf("predict: %v", err)
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 4 || len(strings.Fields(lines[0])) != 4 || lines[1] != "" || len(strings.Fields(lines[2])) != 2 {
		t.Fatalf("predict wrote %q; want 4 tags, an empty line, 2 tags", out)
	}
	if f := strings.Fields(lines[0]); f[1] != "N" || f[2] != "V" {
		t.Errorf("predicted %v for \"the cat runs now\"; want N for cat (after the), V for runs (before now)", f)
	}
}

// TestClassifyCommands does the same for the classifier, whose eval also
// prints macro-F1.
func TestClassifyCommands(t *testing.T) {
	dir := t.TempDir()
	trainPath, valPath := labelledFile(t, dir, 300, 1), labelledFile(t, dir, 60, 2)
	ck := filepath.Join(dir, "classifier.safetensors")
	out, err := run(t, Classification, "", "train", "-data", trainPath, "-val", valPath, "-embed", "16", "-hidden", "16", "-epochs", "10",
		"-lr", "1e-2", "-device", "cpu", "-checkpoint", ck)
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	out, err = run(t, Classification, "", "eval", "-checkpoint", ck, "-data", valPath, "-device", "cpu", "-json", "-per-class")
	if err != nil {
		t.Fatalf("eval: %v", err)
	}
	ev := jsonLines(t, out)[0]
	if acc := ev["accuracy"].(float64); acc < 0.9 {
		t.Errorf("accuracy %.3f; want > 0.9 (the label is the first word's)", acc)
	}
	if _, ok := ev["macro_f1"]; !ok || len(ev["per_class"].([]any)) != 3 {
		t.Errorf("eval printed %v; want macro_f1 and 3 classes' figures", ev)
	}
	out, err = run(t, Classification, "w0 w3 w4\nw1\n", "predict", "-checkpoint", ck, "-device", "cpu")
	if err != nil {
		t.Fatalf("predict: %v", err)
	}
	if out != "zero\none\n" {
		t.Errorf("predict wrote %q, want \"zero\\none\\n\"", out)
	}
	// A line past the labelled readers' default bound (1 MiB) is still
	// predicted: predict reads back a file of its own, bounded by its
	// longest line. The long word is unknown; the label is the first's.
	long := "w0 " + strings.Repeat("x", 1100<<10) + "\n"
	out, err = run(t, Classification, long, "predict", "-checkpoint", ck, "-device", "cpu")
	if err != nil || out != "zero\n" {
		t.Errorf("predict of a line of %d bytes wrote %q (%v), want \"zero\\n\"", len(long), out, err)
	}
}

// TestTrainResume stops a run after 3 steps and resumes it to 6: the
// checkpoint's weights equal those of a straight run of 6 steps.
func TestTrainResume(t *testing.T) {
	dir := t.TempDir()
	data := taggedFile(t, dir, 100, 3)
	common := []string{"-data", data, "-embed", "8", "-hidden", "8", "-batch", "16", "-dropout", "0", "-layers", "2", "-device", "cpu"}
	straight := filepath.Join(dir, "straight.safetensors")
	if _, err := run(t, Tagging, "", append([]string{"train", "-steps", "6", "-checkpoint", straight}, common...)...); err != nil {
		t.Fatal(err)
	}
	resumed := filepath.Join(dir, "resumed.safetensors")
	if _, err := run(t, Tagging, "", append([]string{"train", "-steps", "3", "-checkpoint", resumed}, common...)...); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, Tagging, "", append([]string{"train", "-steps", "6", "-checkpoint", resumed, "-resume", resumed}, common...)...); err != nil {
		t.Fatal(err)
	}
	a, err := train.ReadCheckpoint(straight)
	if err != nil {
		t.Fatal(err)
	}
	b, err := train.ReadCheckpoint(resumed)
	if err != nil {
		t.Fatal(err)
	}
	ra, _ := a.Record()
	rb, _ := b.Record()
	if ra.Step != 6 || rb.Step != 6 || ra.Position != rb.Position {
		t.Fatalf("records %+v and %+v", ra, rb)
	}
	wa, _ := os.ReadFile(straight)
	wb, _ := os.ReadFile(resumed)
	if !bytes.Equal(wa, wb) {
		t.Error("the resumed run's checkpoint differs from the straight run's")
	}
}

// TestBadInput checks the command-line rules: a bad flag is a usage
// error naming it, before any work; an existing checkpoint is not
// replaced; data errors name the file and line; the wrong kind of data
// for the command says what it needs.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	tagged := taggedFile(t, dir, 20, 4)
	labelled := labelledFile(t, dir, 20, 4)
	empty := filepath.Join(dir, "empty.tsv")
	os.WriteFile(empty, nil, 0o644)
	broken := filepath.Join(dir, "broken.tsv")
	os.WriteFile(broken, []byte("a\tX\nb c d\n"), 0o644)
	exists := filepath.Join(dir, "exists.safetensors")
	os.WriteFile(exists, []byte("x"), 0o644)
	ck := filepath.Join(dir, "out.safetensors")
	for _, c := range []struct {
		name  string
		task  Task
		args  []string
		usage bool
		want  string
	}{
		{"no command", Tagging, nil, true, "no command"},
		{"unknown command", Tagging, []string{"fit"}, true, `unknown command "fit"`},
		{"unknown flag", Tagging, []string{"train", "-bogus"}, true, "bogus"},
		{"cell", Tagging, []string{"train", "-cell", "rnn"}, true, `-cell "rnn"`},
		{"batch", Tagging, []string{"train", "-batch", "0"}, true, "-batch 0"},
		{"dropout", Tagging, []string{"train", "-dropout", "1"}, true, "-dropout 1"},
		{"lr", Tagging, []string{"train", "-lr", "NaN"}, true, "-lr NaN"},
		{"char", Tagging, []string{"train", "-char-embed", "8"}, true, "-char-hidden 0"},
		{"format", Tagging, []string{"train", "-format", "csv"}, true, `-format "csv"`},
		{"column", Tagging, []string{"train", "-column", "deprel"}, true, `-column "deprel"`},
		{"device", Tagging, []string{"train", "-device", "tpu"}, true, `-device "tpu"`},
		{"pool", Classification, []string{"train", "-pool", "attention"}, true, `-pool "attention"`},
		{"no epochs", Tagging, []string{"train", "-epochs", "0"}, true, "-epochs 0"},
		// Without -checkpoint, eval and predict read what train writes
		// by default (issue 47: they required it).
		{"eval of train's default checkpoint", Tagging, []string{"eval", "-data", tagged}, false, "open tagger.safetensors"},
		{"predict of train's default checkpoint", Classification, []string{"predict"}, false, "open classifier.safetensors"},
		{"eval with an empty checkpoint", Tagging, []string{"eval", "-checkpoint", "", "-data", tagged}, true, "-checkpoint"},
		{"existing checkpoint", Tagging, []string{"train", "-data", tagged, "-checkpoint", exists, "-device", "cpu"}, true, "exists"},
		{"empty data", Tagging, []string{"train", "-data", empty, "-checkpoint", ck, "-device", "cpu"}, false, "holds no example"},
		{"malformed data", Tagging, []string{"train", "-data", broken, "-checkpoint", ck, "-device", "cpu"}, false, "broken.tsv:2"},
		{"labels for the tagger", Tagging, []string{"train", "-data", labelled, "-checkpoint", ck, "-device", "cpu"}, false, "a tag per token"},
		{"tags for the classifier", Classification, []string{"train", "-data", tagged, "-checkpoint", ck, "-device", "cpu"}, false, "a label per sequence"},
		{"missing data", Tagging, []string{"train", "-data", filepath.Join(dir, "nope.tsv"), "-checkpoint", ck, "-device", "cpu"}, false, "nope.tsv"},
		{"corrupt checkpoint", Tagging, []string{"eval", "-checkpoint", exists, "-data", tagged, "-device", "cpu"}, false, "exists.safetensors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := run(t, c.task, "", c.args...)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrUsage) != c.usage || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q (usage: %v); want one containing %q (usage: %v)", err, errors.Is(err, ErrUsage), c.want, c.usage)
			}
			if _, serr := os.Stat(ck); serr == nil {
				t.Errorf("a checkpoint was written")
			}
		})
	}
	// With -json a failure is one error event on standard output.
	var out, errOut bytes.Buffer
	args := []string{"train", "-batch", "0", "-json"}
	Report(Tagging, Env{Stdout: &out, Stderr: &errOut}, args, fmt.Errorf("%w: -batch 0, want > 0", ErrUsage), 2)
	if ev := jsonLines(t, out.String()); len(ev) != 1 || ev[0]["event"] != "error" || ev[0]["exit_status"].(float64) != 2 || errOut.Len() != 0 {
		t.Errorf("Report wrote %q and %q", out.String(), errOut.String())
	}
}

// TestCancel cancels training: the checkpoint is saved and resumable, and
// the error wraps context.Canceled.
func TestCancel(t *testing.T) {
	dir := t.TempDir()
	data := taggedFile(t, dir, 200, 5)
	ck := filepath.Join(dir, "c.safetensors")
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	w := &cancelAfter{w: &out, n: 3, cancel: cancel}
	err := Run(ctx, Tagging, []string{"train", "-data", data, "-embed", "8", "-hidden", "8", "-log-every", "1", "-device", "cpu",
		"-checkpoint", ck, "-json"}, Env{Stdout: w, CacheDir: dir})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	c, err := train.ReadCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Record()
	if err != nil || rec.Step == 0 {
		t.Errorf("the checkpoint records step %d (%v); want the steps taken", rec.Step, err)
	}
}

// cancelAfter cancels after n writes.
type cancelAfter struct {
	w      *bytes.Buffer
	n      int
	cancel func()
}

func (c *cancelAfter) Write(b []byte) (int, error) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return c.w.Write(b)
}

// TestVariants trains the other shapes a few steps each — a tagger with
// character features, a character classifier pooling by max, a GRU
// classifier pooling by mean with accumulation — and evaluates and
// predicts with each checkpoint, which must load as it was written.
func TestVariants(t *testing.T) {
	dir := t.TempDir()
	tagged := taggedFile(t, dir, 40, 6)
	words := labelledFile(t, dir, 40, 6)
	var b strings.Builder
	for i := range 40 {
		js, _ := json.Marshal(map[string]string{"text": strings.Repeat("ab", 1+i%5) + "c", "label": fmt.Sprint("L", i%2)})
		b.Write(append(js, '\n'))
	}
	texts := filepath.Join(dir, "texts.jsonl")
	if err := os.WriteFile(texts, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		task  Task
		data  string
		flags []string
		input string
	}{
		{"tagger chars", Tagging, tagged, []string{"-char-embed", "4", "-char-hidden", "5"}, "the cat zebra\n"},
		{"classifier chars max", Classification, texts, []string{"-input", "chars", "-pool", "max"}, "ababc\n"},
		{"classifier gru mean accum", Classification, words, []string{"-cell", "gru", "-pool", "mean", "-accum", "2", "-batch", "8"}, "w1 w2\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ck := filepath.Join(t.TempDir(), "m.safetensors")
			args := append([]string{"train", "-data", c.data, "-embed", "6", "-hidden", "6", "-steps", "3", "-device", "cpu", "-checkpoint", ck}, c.flags...)
			if out, err := run(t, c.task, "", args...); err != nil {
				t.Fatalf("train: %v\n%s", err, out)
			}
			out, err := run(t, c.task, "", "eval", "-checkpoint", ck, "-data", c.data, "-device", "cpu", "-json")
			if err != nil {
				t.Fatalf("eval: %v", err)
			}
			if ev := jsonLines(t, out)[0]; !(ev["loss"].(float64) > 0) {
				t.Errorf("eval printed %v", ev)
			}
			out, err = run(t, c.task, c.input, "predict", "-checkpoint", ck, "-device", "cpu")
			want := len(strings.Fields(c.input))
			if c.task == Classification {
				want = 1
			}
			if err != nil || len(strings.Fields(out)) != want {
				t.Errorf("predict wrote %q (%v); want %d predictions", out, err, want)
			}
		})
	}
}

// TestEvalDefaults: eval with neither -checkpoint nor -data evaluates what
// train writes by default on what train validates it on, the default
// data's validation part, and says what train's last validation said
// (issue 47: both flags were required, though train has defaults for
// both). The default data comes from a small GOROOT of 60 files.
func TestEvalDefaults(t *testing.T) {
	goroot := t.TempDir()
	for i := range 60 {
		src := fmt.Sprintf("package p%02d\n\n// F%d adds.\nfunc F%d(a, b int) int {\n\tc := a + b\n\tfor i := range c {\n\t\tc += i * %d\n\t}\n\treturn c\n}\n\ntype T%d struct{ x, y int }\n\nfunc (t T%d) M() int { return F%d(t.x, t.y) }\n", i, i, i, i, i, i, i)
		p := filepath.Join(goroot, "src", fmt.Sprintf("p%02d", i), "f.go")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	work, cache := t.TempDir(), t.TempDir()
	t.Chdir(work) // train's and eval's default checkpoint, tagger.safetensors, lies here
	cmd := func(args ...string) []map[string]any {
		var out, errOut bytes.Buffer
		err := Run(context.Background(), Tagging, args, Env{Stdout: &out, Stderr: &errOut, CacheDir: cache, GOROOT: goroot})
		if err != nil {
			t.Fatalf("%v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		return jsonLines(t, out.String())
	}
	var done map[string]any
	for _, ev := range cmd("train", "-steps", "4", "-embed", "8", "-hidden", "8", "-device", "cpu", "-json") {
		if ev["event"] == "done" {
			done = ev
		}
	}
	if done["checkpoint"] != "tagger.safetensors" {
		t.Fatalf("train's last event: %v, want done with tagger.safetensors", done)
	}
	ev := cmd("eval", "-device", "cpu", "-json")[0]
	if ev["accuracy"] != done["accuracy"] || ev["loss"] != done["loss"] {
		t.Errorf("eval of the defaults: accuracy %v, loss %v; train's last validation: %v, %v", ev["accuracy"], ev["loss"], done["accuracy"], done["loss"])
	}
}
