package charrnn_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
)

// TestEvalUnknown: a text with characters outside the checkpoint's
// vocabulary is refused with a pointer to -unknown; with -unknown it is
// evaluated, and the count of characters read as the unknown one is
// reported. Before, such a text could not be evaluated at all.
func TestEvalUnknown(t *testing.T) {
	corpus, err := os.ReadFile(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "text.txt")
	// 3 characters the fixture's vocabulary lacks: é, €, and a tab (the
	// fixture's corpus has none; checked below through the refusal).
	if err := os.WriteFile(path, append(corpus, "é€\t"...), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"eval", "-device", testdevice.Spec(t), "-checkpoint", fixtures.TorchCheckpoint("lstm"), "-data", path,
		"-batch", "4", "-seq", "16", "-json"}
	if _, _, err := run(t, t.Context(), args...); err == nil || !strings.Contains(err.Error(), "-unknown") {
		t.Fatalf("eval of a text outside the vocabulary: %v, want an error pointing to -unknown", err)
	}
	out, _, err := run(t, t.Context(), append(args, "-unknown", " ")...)
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Event  string  `json:"event"`
		Loss   float64 `json:"loss"`
		Mapped int64   `json:"mapped"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &ev); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if ev.Event != "eval" || ev.Mapped != 3 || !(ev.Loss > 0) {
		t.Errorf("eval -unknown: %+v, want an eval event with 3 mapped characters and a loss", ev)
	}
	if _, _, err := run(t, t.Context(), append(args, "-unknown", "é")...); !errors.Is(err, charrnn.ErrUsage) || !strings.Contains(err.Error(), "-unknown") {
		t.Errorf("eval -unknown with a character outside the vocabulary: %v, want a usage error naming -unknown", err)
	}
}

// TestSampleUnknown: a -prime with characters outside the checkpoint's
// vocabulary is refused with a pointer to -unknown; with -unknown the
// sample starts from it, the characters read as the unknown one, and says
// how many. Before, such a prime could not be sampled from at all.
func TestSampleUnknown(t *testing.T) {
	// The fixture's vocabulary (its corpus's 40 characters) has no é, €
	// or tab.
	args := []string{"sample", "-device", testdevice.Spec(t), "-checkpoint", fixtures.TorchCheckpoint("lstm"), "-n", "20",
		"-prime", "the é€\tcat"}
	_, _, err := run(t, t.Context(), args...)
	if !errors.Is(err, loader.ErrNotInVocab) || !strings.Contains(err.Error(), "-unknown") {
		t.Fatalf("sample from a prime outside the vocabulary: %v, want an error wrapping loader.ErrNotInVocab pointing to -unknown", err)
	}
	out, _, err := run(t, t.Context(), append(args, "-unknown", " ", "-json")...)
	if err != nil {
		t.Fatal(err)
	}
	evs := ofEvent(events(t, out), "sample")
	if len(evs) != 1 || evs[0]["mapped"] != 3.0 || len(evs[0]["text"].(string)) == 0 {
		t.Errorf("sample -unknown -json: %v, want one sample event with text and 3 mapped characters", evs)
	}
	out, errOut, err := run(t, t.Context(), append(args, "-unknown", " ")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "the é€\tcat") || !strings.Contains(errOut, "3 characters of -prime were outside the vocabulary") {
		t.Errorf("sample -unknown: stdout %q, stderr %q; want the prime then the sample, and the count on stderr", out, errOut)
	}
	if _, _, err := run(t, t.Context(), append(args, "-unknown", "é")...); !errors.Is(err, charrnn.ErrUsage) || !strings.Contains(err.Error(), "-unknown") {
		t.Errorf("sample -unknown with a character outside the vocabulary: %v, want a usage error naming -unknown", err)
	}
}

// TestEvalProgress: eval reports its progress as it reads the text and as
// it evaluates it (before, it printed nothing until the end, a minute and
// more on the default corpus): with -json "progress" events, each phase
// ending at its total; off a terminal, lines on stderr. Env.ProgressEvery
// of 1 ns reports every update.
func TestEvalProgress(t *testing.T) {
	args := []string{"eval", "-device", testdevice.Spec(t), "-checkpoint", fixtures.TorchCheckpoint("lstm"), "-data", corpusPath,
		"-batch", "4", "-seq", "16"}
	var o, e bytes.Buffer
	env := testEnv(t, &o, &e)
	env.ProgressEvery = time.Nanosecond
	if err := charrnn.Run(t.Context(), append(args, "-json"), env); err != nil {
		t.Fatal(err)
	}
	last := map[string][2]float64{}
	evs := events(t, o.String())
	for _, ev := range ofEvent(evs, "progress") {
		phase, _ := ev["phase"].(string)
		done, _ := ev["done"].(float64)
		total, _ := ev["total"].(float64)
		if prev, ok := last[phase]; ok && (done < prev[0] || total != prev[1]) {
			t.Errorf("progress of %q went from %v to %v", phase, prev, ev)
		}
		last[phase] = [2]float64{done, total}
	}
	// The corpus is 5,949 bytes: 1 MB, rounded up. 4 streams of
	// floor(5,948/4) = 1,487 inputs make 92 windows of 16.
	want := map[string][2]float64{"reading the text": {1, 1}, "evaluating": {92, 92}}
	for phase, w := range want {
		if last[phase] != w {
			t.Errorf("last progress of %q: done, total %v, want %v; events %v", phase, last[phase], w, evs)
		}
	}
	if ev := ofEvent(evs, "eval"); len(ev) != 1 || ev[0]["tokens"] != 92.0*4*16 {
		t.Errorf("eval events %v, want one over %d tokens", ev, 92*4*16)
	}
	o.Reset()
	if err := charrnn.Run(t.Context(), args, env); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.String(), "charrnn: evaluating: 92 of 92 batches (100%)") || !strings.Contains(e.String(), "charrnn: reading the text: 1 of 1 MB") {
		t.Errorf("eval's progress lines on stderr: %q", e.String())
	}
}
