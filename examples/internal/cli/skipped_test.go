package cli

import (
	"testing"

	"github.com/gocurrent/gocurrent/loader"
)

// SkippedMessage: the reasons in order, each with its count and at most
// three names (relative to -data) and "..." for the rest; nothing for no
// file, "the default corpus" without -data.
func TestSkippedMessage(t *testing.T) {
	f := func(path string, r loader.SkipReason) loader.SkippedFile {
		return loader.SkippedFile{Path: path, Reason: r}
	}
	for _, c := range []struct {
		data    string
		skipped []loader.SkippedFile
		want    string
	}{
		{"d", nil, ""},
		{"d", []loader.SkippedFile{f("d/a.png", loader.SkipBinary)}, "skipped 1 file of d that is not text: 1 binary (a.png)"},
		{"d", []loader.SkippedFile{f("d/a", loader.SkipBinary), f("d/c.safetensors", loader.SkipCheckpoint), f("d/x/b", loader.SkipBinary),
			f("d/x/c", loader.SkipBinary), f("d/y/d", loader.SkipBinary)},
			"skipped 5 files of d that are not text: 4 binary (a, x/b, x/c, ...), 1 checkpoint (c.safetensors)"},
		{"", []loader.SkippedFile{f("/go/src/a.o", loader.SkipBinary)}, "skipped 1 file of the default corpus that is not text: 1 binary (/go/src/a.o)"},
	} {
		if got := SkippedMessage(c.data, c.skipped); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
