package loader

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// writeTree creates the files of tree (slash-separated relative path ->
// contents) under a new temporary directory and returns it.
func writeTree(t testing.TB, tree map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, data := range tree {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// readAll reads the whole corpus with one ReadAt.
func readAll(t testing.TB, c *Corpus) []byte {
	t.Helper()
	p := make([]byte, c.Size())
	n, err := c.ReadAt(p, 0)
	if n != len(p) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt(all): got n=%d err=%v, want n=%d", n, err, len(p))
	}
	return p
}

func TestOpenDirectoryOrder(t *testing.T) {
	root := writeTree(t, map[string]string{
		"b.txt":          "[b.txt]",
		"a.txt":          "[a.txt]",
		"a/b.txt":        "[a/b.txt]",
		"a/a/z.txt":      "[a/a/z.txt]",
		"B":              "[B]",
		"d/e/f.txt":      "[d/e/f.txt]",
		"empty.txt":      "",
		".hidden":        "[.hidden]",
		".git/config":    "[.git/config]",
		"c/.x":           "[c/.x]",
		"c/.dir/in.txt":  "[c/.dir/in.txt]",
		"a.txt.d/q.txt":  "[a.txt.d/q.txt]",
		"a-b/minus.text": "[a-b/minus.text]",
	})
	// A link to a file is followed; a link back to the root is a cycle and
	// is skipped.
	if err := os.Symlink(filepath.Join(root, "b.txt"), filepath.Join(root, "link.txt")); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
	if err := os.Symlink(root, filepath.Join(root, "a", "loop")); err != nil {
		t.Fatal(err)
	}
	// Lexical order of the slash-separated relative paths, byte by byte:
	// 'B' < 'a', '-' < '.' < '/'.
	order := []string{"B", "a-b/minus.text", "a.txt", "a.txt.d/q.txt", "a/a/z.txt", "a/b.txt", "b.txt", "d/e/f.txt", "link.txt"}
	var want strings.Builder
	for _, rel := range order {
		if rel == "link.txt" {
			want.WriteString("[b.txt]")
			continue
		}
		want.WriteString("[" + rel + "]")
	}

	c, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := string(readAll(t, c)); got != want.String() {
		t.Errorf("corpus: got %q, want %q", got, want.String())
	}
	if got, want := c.Size(), int64(want.Len()); got != want {
		t.Errorf("Size: got %d, want %d", got, want)
	}
	var off int64
	for _, rel := range order {
		wantName := filepath.Join(root, filepath.FromSlash(rel))
		if name, fileOff := c.Where(off + 1); name != wantName || fileOff != 1 {
			t.Errorf("Where(%d): got %s, %d, want %s, 1", off+1, name, fileOff, wantName)
		}
		if rel == "link.txt" {
			rel = "b.txt"
		}
		off += int64(len(rel) + 2)
	}
}

func TestCorpusReadAtAcrossFiles(t *testing.T) {
	parts := []string{"abc", "", "d", "efghij", "", "k", "lmnopqrstu"}
	tree := make(map[string]string)
	for i, p := range parts {
		tree[fmt.Sprintf("f%02d", i)] = p
	}
	want := strings.Join(parts, "")
	dir, err := Open(writeTree(t, tree))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	for name, c := range map[string]*Corpus{
		"dir":       dir,
		"parts":     partsCorpus("parts", []byte("abc"), nil, []byte("d"), []byte("efghij"), nil, []byte("k"), []byte("lmnopqrstu")),
		"NewCorpus": NewCorpus(strings.NewReader(want+"beyond size"), int64(len(want)), "reader"),
	} {
		t.Run(name, func(t *testing.T) {
			if c.Size() != int64(len(want)) {
				t.Fatalf("Size: got %d, want %d", c.Size(), len(want))
			}
			for off := 0; off <= len(want)+1; off++ {
				for n := 0; n <= len(want)+2; n++ {
					p := make([]byte, n)
					got, err := c.ReadAt(p, int64(off))
					wantN := max(0, min(n, len(want)-off))
					var wantErr error
					if off >= len(want) || off+n > len(want) {
						wantErr = io.EOF
					}
					if got != wantN || err != wantErr {
						t.Fatalf("ReadAt(%d bytes, %d): got %d, %v, want %d, %v", n, off, got, err, wantN, wantErr)
					}
					if got > 0 && string(p[:got]) != want[off:off+got] {
						t.Fatalf("ReadAt(%d bytes, %d): got %q, want %q", n, off, p[:got], want[off:off+got])
					}
				}
			}
			if _, err := c.ReadAt(make([]byte, 1), -1); err == nil || err == io.EOF {
				t.Errorf("ReadAt(-1): got %v, want an error", err)
			}
		})
	}
}

func TestCorpusWhere(t *testing.T) {
	c := partsCorpus("p", []byte("abc"), nil, []byte("d"), []byte("ef"))
	// Parts: p/0 = [0,3), p/2 = [3,4), p/3 = [4,6); the empty p/1 is dropped.
	for _, tc := range []struct {
		off      int64
		name     string
		fileOff  int64
		describe string
	}{
		{0, "p/0", 0, "first byte"},
		{2, "p/0", 2, "last byte of the first file"},
		{3, "p/2", 0, "one-byte file after an empty one"},
		{4, "p/3", 0, "first byte of the last file"},
		{5, "p/3", 1, "last byte"},
		{6, "p/3", 2, "end of the corpus"},
		{-1, "p/0", -1, "before the corpus"},
	} {
		name, fileOff := c.Where(tc.off)
		if name != tc.name || fileOff != tc.fileOff {
			t.Errorf("%s: Where(%d): got %s, %d, want %s, %d", tc.describe, tc.off, name, fileOff, tc.name, tc.fileOff)
		}
	}
	r := NewCorpus(bytes.NewReader([]byte("hello")), 5, "mem")
	if name, off := r.Where(3); name != "mem" || off != 3 {
		t.Errorf("NewCorpus Where(3): got %s, %d, want mem, 3", name, off)
	}
}

func TestNewCorpus(t *testing.T) {
	data := []byte("héllo, wörld")
	c := NewCorpus(bytes.NewReader(data), int64(len(data)), "mem")
	if got := readAll(t, c); !bytes.Equal(got, data) {
		t.Errorf("ReadAt: got %q, want %q", got, data)
	}
	// A size smaller than the source bounds the corpus.
	c2 := NewCorpus(bytes.NewReader(data), 5, "mem")
	if got := string(readAll(t, c2)); got != "héll" {
		t.Errorf("ReadAt of size 5: got %q, want %q", got, "héll")
	}
	// A source shorter than the size claimed is an error, not io.EOF.
	c3 := NewCorpus(bytes.NewReader(data), 100, "short")
	_, err := c3.ReadAt(make([]byte, 100), 0)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.HasPrefix(err.Error(), "loader: ") {
		t.Errorf("ReadAt past the source: got %v, want a loader error wrapping io.ErrUnexpectedEOF", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: got %v, want nil", err)
	}
	if _, err := c.ReadAt(make([]byte, 1), 0); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("ReadAt after Close: got %v, want fs.ErrClosed", err)
	}
}

func TestOpenSingleFile(t *testing.T) {
	root := writeTree(t, map[string]string{".hidden.txt": "hidden root file"})
	p := filepath.Join(root, ".hidden.txt")
	c, err := Open(p) // the root is opened even when hidden
	if err != nil {
		t.Fatal(err)
	}
	if got := string(readAll(t, c)); got != "hidden root file" {
		t.Errorf("contents: got %q, want %q", got, "hidden root file")
	}
	if name, off := c.Where(7); name != p || off != 7 {
		t.Errorf("Where(7): got %s, %d, want %s, 7", name, off, p)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: got %v, want nil", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	if _, err := c.ReadAt(make([]byte, 1), 0); !errors.Is(err, fs.ErrClosed) || !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt after Close: got %v, want fs.ErrClosed and ErrClosed", err)
	}
}

func TestOpenErrors(t *testing.T) {
	root := t.TempDir()
	if _, err := Open(filepath.Join(root, "missing")); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "loader: ") {
		t.Errorf("Open(missing): got %v, want a loader error wrapping fs.ErrNotExist", err)
	}
	dangling := writeTree(t, map[string]string{"a.txt": "a"})
	if err := os.Symlink(filepath.Join(dangling, "nowhere"), filepath.Join(dangling, "broken")); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
	if _, err := Open(dangling); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(dir with a dangling link): got %v, want fs.ErrNotExist", err)
	}
}

func TestOpenEmptyDirectory(t *testing.T) {
	for name, tree := range map[string]map[string]string{
		"no files":    {},
		"empty files": {"a": "", "b/c": ""},
		"hidden only": {".a": "text"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Open(writeTree(t, tree))
			if err != nil {
				t.Fatalf("Open: got %v, want nil", err)
			}
			defer c.Close()
			if c.Size() != 0 {
				t.Errorf("Size: got %d, want 0", c.Size())
			}
			if _, err := c.ReadAt(make([]byte, 1), 0); err != io.EOF {
				t.Errorf("ReadAt: got %v, want io.EOF", err)
			}
		})
	}
}

func TestCorpusFileShrank(t *testing.T) {
	root := writeTree(t, map[string]string{"a": "0123456789", "b": "abcdef"})
	c, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := os.Truncate(filepath.Join(root, "a"), 4); err != nil {
		t.Fatal(err)
	}
	_, err = c.ReadAt(make([]byte, 8), 2)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), filepath.Join(root, "a")) {
		t.Errorf("ReadAt of a shrunk file: got %v, want io.ErrUnexpectedEOF naming the file", err)
	}
}

// TestOpenManyFiles reads a directory of more files than the cache of open
// files holds, sequentially and from several goroutines at once.
func TestOpenManyFiles(t *testing.T) {
	const files = 3000
	tree := make(map[string]string, files)
	var want strings.Builder
	for i := range files {
		// Nested in 30 directories; names sort in the order written.
		s := fmt.Sprintf("file %04d é\n", i)
		tree[fmt.Sprintf("d%02d/f%04d.txt", i/100, i)] = s
		want.WriteString(s)
	}
	c, err := Open(writeTree(t, tree))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := string(readAll(t, c)); got != want.String() {
		t.Fatalf("contents differ: got %d bytes, want %d", len(got), want.Len())
	}
	if got := c.files.openCount(); got > corpusMaxOpen {
		t.Errorf("open files after a sequential read: got %d, want at most %d", got, corpusMaxOpen)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				off := rng.IntN(want.Len())
				n := min(rng.IntN(200), want.Len()-off)
				p := make([]byte, n)
				if _, err := c.ReadAt(p, int64(off)); err != nil {
					errs <- err
					return
				}
				if string(p) != want.String()[off:off+n] {
					errs <- fmt.Errorf("ReadAt(%d bytes, %d): got %q, want %q", n, off, p, want.String()[off:off+n])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := c.files.openCount(); got > corpusMaxOpen {
		t.Errorf("open files after concurrent reads: got %d, want at most %d", got, corpusMaxOpen)
	}

	text, err := Tokenize(t.Context(), c, TokenizeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text.Len(), int64(len([]rune(want.String()))); got != want {
		t.Errorf("tokens: got %d, want %d", got, want)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := c.files.openCount(); got != 0 {
		t.Errorf("open files after Close: got %d, want 0", got)
	}
}

func TestOpenFunc(t *testing.T) {
	root := writeTree(t, map[string]string{
		"a.go":            "[a.go]",
		"a.txt":           "[a.txt]",
		"x/b.go":          "[x/b.go]",
		"x/testdata/c.go": "[x/testdata/c.go]",
	})
	var asked []string
	c, err := OpenFunc(root, func(rel string) bool {
		asked = append(asked, rel)
		return strings.HasSuffix(rel, ".go") && !strings.Contains(rel, "testdata/")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make([]byte, c.Size())
	if _, err := c.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if want := "[a.go][x/b.go]"; string(got) != want {
		t.Errorf("corpus %q, want %q", got, want)
	}
	if want := []string{"a.go", "a.txt", "x/b.go", "x/testdata/c.go"}; !slices.Equal(asked, want) {
		t.Errorf("keep was asked about %q, want %q", asked, want)
	}
}
