package loader

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// safetensors is a safetensors file as train.WriteFile lays one out: the
// header's length in 8 little-endian bytes, the JSON header, then the
// tensors' bytes (here one F32 of 1.0).
func safetensors() string {
	header := `{"__metadata__":{"format":"gocurrent.charrnn/1"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	return string(n[:]) + header + "\x00\x00\x80\x3f"
}

// TestOpenSkipsFilesNotText: a directory's binary files (a NUL byte or
// bytes not UTF-8 in the first 8 KiB) and safetensors checkpoints are left
// out of the corpus and listed by Skipped with their reason, in stream
// order; text stays, including a character cut by the 8 KiB the sniff
// reads, a header-like '{' at byte 8 of a text, and a NUL or bad byte past
// those 8 KiB (the corpus's to report); a run's lock and temporary files
// are hidden names, left out and not listed. Before, the first such file
// failed Tokenize: "charrnn.safetensors: byte 0: invalid UTF-8".
func TestOpenSkipsFilesNotText(t *testing.T) {
	past := strings.Repeat("y", sniffLen)
	tree := map[string]string{
		"a.txt":                                 "hello\n",
		"b.bin":                                 "ab\x00cd",
		"c.png":                                 "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
		"charrnn.safetensors":                   safetensors(),
		"d/cut.txt":                             strings.Repeat("a", sniffLen-1) + "é and more",
		"d/brace.txt":                           "abcdefgh{not a header}",
		"d/late-nul.txt":                        past + "\x00",
		"e.utf16":                               "\xff\xfeh\x00i\x00",
		"f.o":                                   "\x7fELF\x02\x01\x01\x00\x00\x00",
		".charrnn.safetensors.lock":             "",
		".charrnn.safetensors.tmp-gocurrent-42": safetensors(),
		"z.txt":                                 "ünïcödé\n",
	}
	root := writeTree(t, tree)
	c, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := tree["a.txt"] + tree["d/brace.txt"] + tree["d/cut.txt"] + tree["d/late-nul.txt"] + tree["z.txt"]
	if got := string(readAll(t, c)); got != want {
		t.Errorf("the corpus holds %d bytes, want the %d of the text files", len(got), len(want))
	}
	at := func(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }
	wantSkipped := []SkippedFile{
		{at("b.bin"), SkipBinary},
		{at("c.png"), SkipBinary},
		{at("charrnn.safetensors"), SkipCheckpoint},
		{at("e.utf16"), SkipBinary},
		{at("f.o"), SkipBinary},
	}
	if got := c.Skipped(); !reflect.DeepEqual(got, wantSkipped) {
		t.Errorf("Skipped: got %v\nwant %v", got, wantSkipped)
	}
	if _, err := Tokenize(t.Context(), c, TokenizeConfig{}); err != nil {
		t.Errorf("Tokenize: %v, want the text files read", err)
	}
}

// TestOpenKeepsLateInvalidUTF8: invalid UTF-8 past the 8 KiB Open sniffs
// is still Tokenize's *DataError at its offset, and a file given alone is
// taken whatever it holds, as before: a checkpoint fails Tokenize at its
// first byte that is not UTF-8 (here its tensor's 0x80, byte 112: the
// 8-byte length and the header before it are ASCII and NULs).
func TestOpenKeepsLateInvalidUTF8(t *testing.T) {
	root := writeTree(t, map[string]string{"a.txt": "ab", "b.txt": strings.Repeat("x", sniffLen+5) + "\xff tail"})
	c, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := c.Skipped(); s != nil {
		t.Errorf("Skipped: %v, want none", s)
	}
	_, err = Tokenize(t.Context(), c, TokenizeConfig{})
	var de *DataError
	if !errors.As(err, &de) || de.Name != filepath.Join(root, "b.txt") || de.Offset != sniffLen+5 || de.Reason != reasonInvalidUTF8 {
		t.Errorf("Tokenize: %v, want invalid UTF-8 at byte %d of b.txt", err, sniffLen+5)
	}

	ck := safetensors()
	path := filepath.Join(t.TempDir(), "charrnn.safetensors")
	if err := os.WriteFile(path, []byte(ck), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := c.Skipped(); s != nil {
		t.Errorf("a single file: Skipped %v, want none", s)
	}
	if _, err := Tokenize(t.Context(), c, TokenizeConfig{}); !errors.As(err, &de) || de.Offset != int64(len(ck)-2) {
		t.Errorf("Tokenize of a checkpoint given alone: %v, want invalid UTF-8 at byte %d", err, len(ck)-2)
	}
}

// TestSniffed: the rule, byte by byte. A character may span files, so the
// continuation bytes a file starts with and a character cut at the end of
// what was read are not held against it; a header length larger than the
// file is no checkpoint.
func TestSniffed(t *testing.T) {
	ck := safetensors()
	for _, c := range []struct {
		name string
		b    string
		size int64 // 0: len(b)
		want SkipReason
	}{
		{"ascii", "plain text\n", 0, ""},
		{"utf-8", "naïve café 😀", 0, ""},
		{"a character's end first", "\xa9b", 0, ""},
		{"three continuation bytes first", "\x9f\x98\x80b", 0, ""},
		{"four continuation bytes first", "\x80\x80\x80\x80b", 0, SkipBinary},
		{"a character's start last", "ab\xf0\x9f", 0, ""},
		{"a stray continuation", "ab\x80c", 0, SkipBinary},
		{"0xff", "abc\xff", 0, SkipBinary},
		{"a NUL", "abc\x00", 0, SkipBinary},
		{"a lead byte, then ASCII", "a\xe2x", 0, SkipBinary},
		{"a checkpoint", ck, 0, SkipCheckpoint},
		{"a checkpoint's start", ck[:sniffLen/100], int64(len(ck)), SkipCheckpoint},
		{"a header longer than the file", ck, 20, SkipBinary},
		{"a brace at byte 8 of text", "abcdefgh{}", 0, ""},
		{"empty", "", 0, ""},
	} {
		size := c.size
		if size == 0 {
			size = int64(len(c.b))
		}
		if got := sniffed([]byte(c.b), size); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
