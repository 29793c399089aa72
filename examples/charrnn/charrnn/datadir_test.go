package charrnn_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// TestTrainDataDirectory: `-data DIR` trains on a folder's text and leaves
// out what is not text, saying so: first a binary file, then also the
// checkpoint the first run wrote into the folder, which a second run
// (-force) and eval meet there. Before, the binary file stopped the run
// and the checkpoint failed every later one ("charrnn.safetensors: byte
// 0: invalid UTF-8"). A binary file given alone is still an error.
func TestTrainDataDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	text, err := os.ReadFile(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(dir, "logo.png")
	for path, b := range map[string]string{filepath.Join(dir, "notes.txt"): string(text), png: "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"} {
		if err := os.WriteFile(path, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ckpt := filepath.Join(dir, "charrnn.safetensors")
	args := smallTrain(t, ckpt, "-data", dir, "-batch", "4", "-steps", "1")
	stdout, stderr, err := run(t, ctx, append(args, "-json")...)
	if err != nil {
		t.Fatalf("train -data DIR: %v\n%s", err, stdout)
	}
	evs := events(t, stdout)
	w := ofEvent(evs, "warning")
	if want := "skipped 1 file of " + dir + " that is not text: 1 binary (logo.png)"; len(w) != 1 || w[0]["warning"] != want || stderr != "" {
		t.Errorf("-json: warnings %v, stderr %q; want one warning %q and nothing on stderr", w, stderr, want)
	}
	// -val-frac 0: every character of the text trains, and nothing else.
	if st := ofEvent(evs, "start"); len(st) != 1 || st[0]["train_tokens"] != float64(len(text)) {
		t.Errorf("start events %v, want one with train_tokens %d (notes.txt alone)", st, len(text))
	}

	want := "charrnn: skipped 2 files of " + dir + " that are not text: 1 binary (logo.png), 1 checkpoint (charrnn.safetensors)\n"
	_, stderr, err = run(t, ctx, append(args, "-force")...)
	if err != nil {
		t.Fatalf("train -data DIR over its own checkpoint: %v", err)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want the line %q", stderr, want)
	}
	_, stderr, err = run(t, ctx, "eval", "-checkpoint", ckpt, "-data", dir, "-batch", "4", "-seq", "16", "-device", testdevice.Spec(t))
	if err != nil || !strings.Contains(stderr, want) {
		t.Errorf("eval -data DIR: %v, stderr %q; want the line %q", err, stderr, want)
	}

	_, _, err = run(t, ctx, append(args, "-force", "-data", png)...)
	if err == nil || !strings.Contains(err.Error(), "logo.png: byte 0: invalid UTF-8") {
		t.Errorf("train -data logo.png: %v, want an error at its byte 0", err)
	}
}
