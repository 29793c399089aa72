package charrnn

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// With no -data the corpus is the Go standard library's source, found by
// `go env GOROOT`.
func TestDefaultCorpusGOROOT(t *testing.T) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Skipf("no Go toolchain to ask for GOROOT (go env GOROOT: %v); the default corpus needs one", err)
	}
	c, err := openCorpus("", Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// GOROOT/src holds tens of megabytes of Go; 1 MB is a floor any
	// release clears by far.
	if c.Size() <= 1<<20 {
		t.Errorf("default corpus of %d bytes, want > 1 MB", c.Size())
	}
	head := make([]byte, 8<<10)
	n, err := c.ReadAt(head, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The first file in path order is Go source: a package clause within
	// its first few kilobytes (after the copyright and doc comments).
	if !bytes.Contains(head[:n], []byte("\npackage ")) {
		t.Errorf("the default corpus starts %q, want Go source with a package clause", head[:min(n, 200)])
	}
	name, _ := c.Where(0)
	if !strings.HasSuffix(name, ".go") {
		t.Errorf("the default corpus starts in %s, want a .go file", name)
	}
}

// The default corpus keeps the ASCII .go files of GOROOT/src outside
// testdata directories.
func TestDefaultCorpusFilter(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"src/a/a.go":             "package a\n",
		"src/a/notes.txt":        "not Go\n",
		"src/a/testdata/t.go":    "package t\n",
		"src/testdata/top.go":    "package top\n",
		"src/b/b.go":             "package b\n",
		"src/b/unicode.go":       "package b // π\n",
		"src/b/testdata_file.go": "package b2\n",
	}
	for rel, text := range files {
		path := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := openCorpus("", Env{GOROOT: root})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make([]byte, c.Size())
	if _, err := c.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	// a/a.go, b/b.go and b/testdata_file.go, in path order.
	if want := "package a\npackage b\npackage b2\n"; string(got) != want {
		t.Errorf("default corpus %q, want %q", got, want)
	}

	if _, err := openCorpus("", Env{GOROOT: filepath.Join(root, "src")}); err == nil || !strings.Contains(err.Error(), "-data") {
		t.Errorf("GOROOT without src: error %v, want one that suggests -data", err)
	}
}
