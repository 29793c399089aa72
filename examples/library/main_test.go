package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/models"
)

// TestREADME: the README's Go block is this program, byte for byte, so
// that what a newcomer copies compiles (the package builds with the
// module) and does what it says (TestRun).
func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) != 1 {
		t.Fatalf("the README has %d Go blocks, want 1: this program", len(blocks))
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(blocks[0][1]), string(src); got != want {
		t.Errorf("the README's Go block differs from examples/library/main.go; copy the file into it.\nREADME:\n%s\nmain.go:\n%s", got, want)
	}
}

// TestRun: the program trains on a text, writes its checkpoint, and the
// checkpoint loads back as the model it trained (two steps on the models'
// fixture corpus, 5,949 characters).
func TestRun(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "run.safetensors")
	ctx := context.Background()
	if err := run(ctx, "../../models/testdata/corpus.txt", ck, 2); err != nil {
		t.Fatal(err)
	}
	d, err := devices.Open("cpu", devices.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m, c, err := models.LoadCharRNN(ctx, d, ck)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec, err := c.Record()
	if err != nil {
		t.Fatal(err)
	}
	if rec.Step != 2 || m.Config().Hidden != 256 || !strings.Contains(m.Metadata()["format"], "charrnn") {
		t.Errorf("the checkpoint: step %d, hidden %d, format %q; want step 2 of the README's model", rec.Step, m.Config().Hidden, m.Metadata()["format"])
	}
}
