package charrnn_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/testdevice"
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
