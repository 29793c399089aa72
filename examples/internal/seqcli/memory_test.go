package seqcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

// runOn runs a command line on the test device (-device is the caller's:
// testdevice.Spec) and returns its standard output.
func runOn(t *testing.T, task Task, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errOut, CacheDir: t.TempDir(), CUDA: testdevice.CUDAConfig(t)}
	err := Run(context.Background(), task, args, env)
	return out.String(), err
}

// ofEvent are the events of out named event.
func ofEvent(t *testing.T, out, event string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, ev := range jsonLines(t, out) {
		if ev["event"] == event {
			evs = append(evs, ev)
		}
	}
	return evs
}

// threeLetterFile writes n tagged sentences of 2 to 12 words, every word
// three letters long, the tag its first letter.
func threeLetterFile(t *testing.T, dir string, n int, seed uint64) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	words := []string{"the", "cat", "dog", "run", "now", "see", "fox", "big"}
	var b strings.Builder
	for range n {
		for range 2 + r.IntN(11) {
			w := words[r.IntN(len(words))]
			fmt.Fprintf(&b, "%s\t%c\n", w, w[0]-32)
		}
		b.WriteString("\n")
	}
	path := filepath.Join(dir, fmt.Sprintf("three%d.tsv", seed))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// longLabelledFile writes n sequences of 3 to 40 words labelled as
// labelledFile's.
func longLabelledFile(t *testing.T, dir string, n int, seed uint64) string {
	t.Helper()
	return writeLabelled(t, filepath.Join(dir, fmt.Sprintf("long%d.jsonl", seed)), rand.New(rand.NewPCG(seed, 4)), n, 3, 40)
}

// TestPlanMatchesTrain plans runs of the tagger (with and without
// character features) and the classifier from their data, trains them and
// checks that the plan's peaks, and each category's peak and share of the
// peak, are what train -memstats then reports, to the byte.
//
// Plan and train must build the same run. The plan takes the first epoch
// of the training data's batches, in the order train's loader makes them
// (bucketed by length, shuffled by -seed: the reserved peak depends on
// the order the cache's blocks are reused in), so train runs -epochs 1
// with the same -seed, and the test checks it took the epoch's steps,
// several of them. Validation is -val's data for both (the plan takes its
// lengths), or none. The planner makes every word of a tagger with
// character features as long as the data's longest, the batch that needs
// the most; that is exact for data whose words are all of one length, as
// threeLetterFile's are (on other data the plan is an upper bound).
func TestPlanMatchesTrain(t *testing.T) {
	dir := t.TempDir()
	// The validation sentences are shorter than the training's longest,
	// so the validation's batches are smaller than the planner would make
	// them of the training's lengths.
	tagged, taggedVal := taggedFile(t, dir, 70, 11), filepath.Join(dir, "val.tsv")
	if err := os.WriteFile(taggedVal, []byte("the\tC0\ncat\tN\nruns\tC1\n\na\tC1\nbird\tV\nnow\tC0\n\ndog\tC0\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	three := threeLetterFile(t, dir, 50, 13)
	labelled, labelledVal := labelledFile(t, dir, 80, 14), labelledFile(t, dir, 30, 15)
	// The quick run plans and trains the first; the full suites all.
	for _, c := range testfull.Cases([]struct {
		name  string
		task  Task
		flags []string
	}{
		// With this seed the batches' order sets the reserved peak: 4 MiB
		// in train's order, 2 MiB in the file's.
		{"classifier max", Classification, []string{"-data", longLabelledFile(t, dir, 60, 16), "-pool", "max", "-batch", "9", "-max-tokens", "200",
			"-embed", "20", "-hidden", "32", "-seed", "4"}},
		{"tagger", Tagging, []string{"-data", tagged, "-val", taggedVal, "-batch", "8"}},
		{"tagger chars", Tagging, []string{"-data", three, "-char-embed", "6", "-char-hidden", "10", "-batch", "6", "-accum", "2"}},
		{"classifier mean", Classification, []string{"-data", labelled, "-val", labelledVal, "-pool", "mean", "-cell", "gru", "-batch", "10",
			"-optimizer", "rmsprop"}},
	}, 1) {
		t.Run(c.name, func(t *testing.T) {
			common := append([]string{"-device", testdevice.Spec(t), "-embed", "12", "-hidden", "16", "-layers", "2", "-seed", "3"}, c.flags...)
			out, err := runOn(t, c.task, append(append([]string{"plan"}, common...), "-json")...)
			if err != nil {
				t.Fatalf("plan: %v\n%s", err, out)
			}
			plans := ofEvent(t, out, "plan")
			if len(plans) != 1 || plans[0]["fits"] != true {
				t.Fatalf("plan printed %s; want one plan event that fits", out)
			}
			plan := plans[0]
			ck := filepath.Join(t.TempDir(), "m.safetensors")
			out, err = runOn(t, c.task, append(append([]string{"train"}, common...), "-epochs", "1", "-checkpoint", ck, "-memstats", "-json")...)
			if err != nil {
				t.Fatalf("train: %v\n%s", err, out)
			}
			start, done, ms := ofEvent(t, out, "start"), ofEvent(t, out, "done"), ofEvent(t, out, "memstats")
			if len(start) != 1 || len(done) != 1 || len(ms) != 1 {
				t.Fatalf("train printed %s; want one start, done and memstats event", out)
			}
			if steps := done[0]["steps"].(float64); steps != start[0]["steps"].(float64) || steps < 3 {
				t.Errorf("train took %v steps of the epoch's %v; want the whole epoch, at least 3 steps", steps, start[0]["steps"])
			}
			for _, field := range []string{"peak_allocated_bytes", "peak_reserved_bytes"} {
				if plan[field] != ms[0][field] || !(plan[field].(float64) > 0) {
					t.Errorf("%s: planned %v, trained %v", field, plan[field], ms[0][field])
				}
			}
			planned, measured := plan["categories"].(map[string]any), ms[0]["categories"].(map[string]any)
			if _, ok := measured["other"]; ok {
				t.Errorf("untagged memory: %v", measured["other"])
			}
			for cat := range measured {
				p, _ := planned[cat].(map[string]any)
				m := measured[cat].(map[string]any)
				if p == nil || p["peak"] != m["peak"] || p["at_peak"] != m["at_peak"] {
					t.Errorf("%s: planned %v, trained %v", cat, p, m)
				}
			}
			for _, cat := range []string{"parameters", "gradients", "optimizer_state", "activations", "batches"} {
				if _, ok := measured[cat]; !ok {
					t.Errorf("train reports no %s: %v", cat, measured)
				}
			}
			if len(planned) != len(measured) {
				t.Errorf("planned categories %v, trained %v", planned, measured)
			}
		})
	}
}

// autoFlags are the classifier runs of TestBatchAuto and
// TestOutOfMemoryAdvice, on longLabelledFile's 400 sequences: a batch of
// tens of them fills 24 MiB.
func autoFlags(t *testing.T) []string {
	return []string{"train", "-data", longLabelledFile(t, t.TempDir(), 400, 21), "-device", testdevice.Spec(t), "-embed", "32", "-hidden", "64",
		"-checkpoint", filepath.Join(t.TempDir(), "c.safetensors"), "-json"}
}

// TestBatchAuto trains with the largest batch that fits a memory limit
// for two epochs of sequences of many lengths: the run stays within the
// limit. (Before the trainer's warm-up, the largest batch of the trials on
// sequences all of the longest length, 67 on this data, ran out of memory
// in the epoch, its cache fragmented by smaller batches first; the second,
// planned search of the epoch lowered it. With the warm-up, 67 fits.)
func TestBatchAuto(t *testing.T) {
	const limit = 24 << 20
	out, err := runOn(t, Classification, append(autoFlags(t), "-batch", "auto", "-memory-limit", "24MiB", "-epochs", "2", "-memstats")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b := ofEvent(t, out, "batch")
	if len(b) != 1 {
		t.Fatalf("%d batch events in %s", len(b), out)
	}
	batch, peak := b[0]["batch"].(float64), b[0]["peak_reserved_bytes"].(float64)
	if batch < 8 || peak > 0.95*limit || b[0]["limit_bytes"].(float64) != limit || b[0]["accum"].(float64) != 1 ||
		b[0]["trials"].(float64) < 2 || b[0]["epoch_trials"].(float64) < 1 {
		t.Errorf("batch event %v: want a batch of at least 8 whose planned peak is within 95%% of 24 MiB, found by trials and a planned epoch", b[0])
	}
	ms := ofEvent(t, out, "memstats")
	if len(ms) != 1 || ms[0]["peak_reserved_bytes"].(float64) > limit || ms[0]["ooms"].(float64) != 0 {
		t.Errorf("memstats after the run %v: want a peak within 24 MiB and no out-of-memory error (the search's are not the run's)", ms)
	}
	if steps := ofEvent(t, out, "step"); len(steps) == 0 || steps[len(steps)-1]["memory"].(map[string]any)["parameters"] == nil {
		t.Errorf("step events %v: want the bytes of each category", steps)
	}
	// With -effective-batch the accumulation keeps the sequences of a step.
	out, err = runOn(t, Classification, append(autoFlags(t), "-batch", "auto", "-effective-batch", "256", "-memory-limit", "24MiB",
		"-steps", "1")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if b := ofEvent(t, out, "batch"); len(b) != 1 || b[0]["batch"].(float64)*b[0]["accum"].(float64) != 256 || b[0]["accum"].(float64) < 2 {
		t.Errorf("-effective-batch 256: %v, want batch x accum = 256", b)
	}
}

// TestBatchAutoUsage checks the flags of the batch search and the memory
// limit: a bad combination is a usage error naming the flag, before any
// work.
func TestBatchAutoUsage(t *testing.T) {
	dir := t.TempDir()
	data := labelledFile(t, dir, 20, 7)
	ck := filepath.Join(dir, "c.safetensors")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"effective without auto", []string{"-effective-batch", "64"}, "-effective-batch 64, want -batch auto with it"},
		{"effective with accum", []string{"-batch", "auto", "-effective-batch", "64", "-accum", "2"}, "-effective-batch 64, want no -accum"},
		{"auto with resume", []string{"-batch", "auto", "-resume", ck}, "-batch auto, want a number with -resume"},
		{"batch neither", []string{"-batch", "none"}, "-batch"},
		{"batch zero", []string{"-batch", "0"}, "-batch 0, want > 0"},
		{"memory limit", []string{"-memory-limit", "lots"}, "-memory-limit"},
	} {
		for _, command := range []string{"train", "plan"} {
			if command == "plan" && c.name == "auto with resume" {
				continue
			}
			t.Run(command+" "+c.name, func(t *testing.T) {
				args := append([]string{command, "-data", data, "-device", testdevice.Spec(t)}, c.args...)
				if command == "train" {
					args = append(args, "-checkpoint", ck)
				}
				_, err := runOn(t, Classification, args...)
				if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%v; want a usage error saying %q", err, c.want)
				}
			})
		}
	}
	if _, err := os.Stat(ck); err == nil {
		t.Error("a checkpoint was written")
	}
}

// TestOutOfMemoryAdvice runs out of memory and checks the error carries
// the planner's advice: what the run needs by category, the largest batch
// that fits and the accumulation that keeps the step's sequences.
func TestOutOfMemoryAdvice(t *testing.T) {
	_, err := runOn(t, Classification, append(autoFlags(t), "-batch", "200", "-memory-limit", "24MiB", "-steps", "1")...)
	if err == nil {
		t.Fatal("batch 200 trained within 24 MiB")
	}
	for _, s := range []string{"out of memory", "Planner: the run needs", "activations", "largest batch that fits is", "accumulated"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q:\n%v", s, err)
		}
	}
}

// TestPlanWithoutData plans from sizes alone: a GPU's plan carries the
// cuBLAS workspace the CPU's does not, -batch auto plans the search, and
// a run that does not fit says what does.
func TestPlanWithoutData(t *testing.T) {
	sizes := []string{"plan", "-vocab", "50", "-classes", "5", "-seq", "12", "-char-embed", "4", "-char-hidden", "6", "-chars", "30",
		"-embed", "8", "-hidden", "16", "-batch", "4", "-json"}
	peaks := map[string]float64{}
	for _, dev := range []string{"cpu", "cuda"} {
		out, err := runOn(t, Tagging, append(sizes, "-device", dev, "-capacity", "128MiB")...)
		if err != nil {
			t.Fatalf("%s: %v", dev, err)
		}
		plans := ofEvent(t, out, "plan")
		if len(plans) != 1 || plans[0]["fits"] != true || plans[0]["limit_bytes"].(float64) != 128<<20 {
			t.Fatalf("%s: %s; want one plan event that fits 128 MiB", dev, out)
		}
		peaks[dev] = plans[0]["peak_reserved_bytes"].(float64)
	}
	if peaks["cuda"] < peaks["cpu"]+32<<20 {
		t.Errorf("planned peaks %v: want cuda's to hold the 32 MiB cuBLAS workspace more", peaks)
	}
	if !testfull.On() {
		return // -batch auto without data: the full suites' (the searches take seconds)
	}
	out, err := runOn(t, Classification, "plan", "-vocab", "20", "-classes", "3", "-seq", "30", "-embed", "32", "-hidden", "64",
		"-batch", "auto", "-effective-batch", "256", "-device", "cpu", "-capacity", "24MiB", "-json")
	if err != nil {
		t.Fatal(err)
	}
	b := ofEvent(t, out, "batch")
	if len(b) != 1 || b[0]["batch"].(float64)*b[0]["accum"].(float64) != 256 || b[0]["epoch_trials"].(float64) != 0 {
		t.Errorf("batch events %v; want one of batch x accum = 256 and no epoch (no data)", b)
	}
	if p := ofEvent(t, out, "plan"); len(p) != 1 || p[0]["fits"] != true {
		t.Errorf("plan events %v; want one that fits", p)
	}
	out, err = runOn(t, Classification, "plan", "-vocab", "20", "-classes", "3", "-seq", "30", "-embed", "32", "-hidden", "64",
		"-batch", "256", "-device", "cpu", "-capacity", "24MiB")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"activations", "does not fit: the run needs", "largest batch that fits is", "accumulated"} {
		if !strings.Contains(out, s) {
			t.Errorf("plan printed %s; want it to say %q", out, s)
		}
	}
}

// TestPlanUsage checks the plan command's own flags.
func TestPlanUsage(t *testing.T) {
	data := taggedFile(t, t.TempDir(), 10, 8)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-vocab", "50", "-classes", "5", "-seq", "12", "-data", data}, "-vocab 50, want no -data or -val"},
		{[]string{"-classes", "5"}, "-classes 5, want -vocab with it"},
		{[]string{"-vocab", "50", "-seq", "12"}, "-classes 0, want > 0 with -vocab"},
		{[]string{"-vocab", "50", "-classes", "5"}, "-seq 0, want > 0 with -vocab"},
		{[]string{"-vocab", "2", "-classes", "5", "-seq", "12"}, "-vocab 2, want at least 3"},
		{[]string{"-vocab", "50", "-classes", "5", "-seq", "12", "-char-embed", "4", "-char-hidden", "4"}, "-chars 0, want at least 3"},
		{[]string{"-vocab", "50", "-classes", "5", "-seq", "12", "-chars", "30"}, "-chars 30, want -char-embed"},
		{[]string{"-capacity", "80QB"}, "-capacity"},
		{[]string{"-device", "tpu"}, `-device "tpu"`},
	} {
		_, err := runOn(t, Tagging, append([]string{"plan"}, c.args...)...)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("plan %v: %v; want a usage error saying %q", c.args, err, c.want)
		}
	}
}

// TestPlanRecompute plans a classifier over long sequences with and
// without -recompute auto: recomputation keeps a fraction of the
// activations. (Batch 64: the stack's chunks are 4 steps, so the segments
// of ⌈√120⌉ = 11 steps, 12 rounded, are not the whole window.)
func TestPlanRecompute(t *testing.T) {
	act := map[string]float64{}
	for _, k := range []string{"0", "auto"} {
		out, err := runOn(t, Classification, "plan", "-vocab", "20", "-classes", "3", "-seq", "120", "-embed", "16", "-hidden", "32",
			"-bidirectional=false", "-layers", "2", "-batch", "64", "-device", "cpu", "-capacity", "48MiB", "-recompute", k, "-json")
		if err != nil {
			t.Fatal(err)
		}
		p := ofEvent(t, out, "plan")
		if len(p) != 1 {
			t.Fatalf("%s", out)
		}
		act[k] = p[0]["categories"].(map[string]any)["activations"].(map[string]any)["peak"].(float64)
	}
	if act["auto"] >= act["0"]/3 {
		t.Errorf("planned activations %v: want -recompute auto to keep less than a third", act)
	}
}
