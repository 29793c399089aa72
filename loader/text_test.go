package loader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// partsCorpus returns a corpus of in-memory files name/0, name/1, ... read
// one after the other, as Open reads the files of a directory.
func partsCorpus(name string, parts ...[]byte) *Corpus {
	c := &Corpus{name: name}
	for i, p := range parts {
		if len(p) == 0 {
			continue
		}
		c.parts = append(c.parts, corpusPart{
			name:  fmt.Sprintf("%s/%d", name, i),
			start: c.size,
			size:  int64(len(p)),
			src:   bytes.NewReader(p),
		})
		c.size += int64(len(p))
	}
	return c
}

// stringCorpus returns a corpus of s.
func stringCorpus(s string) *Corpus {
	return NewCorpus(strings.NewReader(s), int64(len(s)), "mem")
}

// sortedChars returns the distinct characters of s in code point order: the
// vocabulary Tokenize must build.
func sortedChars(s string) []string {
	seen := make(map[rune]bool)
	var rs []rune
	for _, r := range s {
		if !seen[r] {
			seen[r] = true
			rs = append(rs, r)
		}
	}
	slices.Sort(rs)
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return out
}

// referenceIDs returns the ids of the characters of s under chars (index =
// id), with unknown for a character outside chars.
func referenceIDs(chars []string, s string, unknown int32) []int32 {
	ids := make(map[rune]int32, len(chars))
	for i, c := range chars {
		ids[[]rune(c)[0]] = int32(i)
	}
	var out []int32
	for _, r := range s {
		id, ok := ids[r]
		if !ok {
			id = unknown
		}
		out = append(out, id)
	}
	return out
}

// mixedChars has characters of 1, 2, 3 and 4 bytes, a byte order mark,
// CR LF and U+FFFD (valid, though it is utf8.RuneError).
var mixedChars = []rune("abcdefgh xyz.\r\n\t" + "éßñüλπжя" + "€中文字\uFEFF\uFFFD" + "😀𝄞🚀")

// randomChars returns n characters drawn from chars.
func randomChars(seed uint64, chars []rune, n int) string {
	rng := rand.New(rand.NewPCG(seed, 2))
	var b strings.Builder
	for range n {
		b.WriteRune(chars[rng.IntN(len(chars))])
	}
	return b.String()
}

// smallParams are buffer sizes that put chunk boundaries everywhere in a
// short input, and the defaults.
var smallParams = []textParams{
	{chunk: 1, readChunk: 4},
	{chunk: 2, readChunk: 5},
	{chunk: 3, readChunk: 7},
	{chunk: 5, readChunk: 16},
	{chunk: 1000, readChunk: 100},
	{chunk: tokenizeChunk, readChunk: textReadChunk},
}

// checkText checks text against the reference ids of the whole string:
// length, and Read at every start of 0 to 17 tokens, of 1100 tokens (more
// than an index stride) from every 7th start, and to the end from every
// stride-th start.
func checkText(t *testing.T, text *Text, want []int32, stride int) {
	t.Helper()
	if text.Len() != int64(len(want)) {
		t.Fatalf("Len: got %d, want %d", text.Len(), len(want))
	}
	dst := make([]int32, len(want))
	for start := range len(want) + 1 {
		for _, n := range []int{0, 1, 2, 17, 1100, -1} {
			switch {
			case n == 1100 && start%7 != 0:
				continue
			case n == -1 && start%stride != 0:
				continue
			case n == -1:
				n = len(want) - start
			}
			if start+n > len(want) {
				continue
			}
			if err := text.Read(int64(start), dst[:n]); err != nil {
				t.Fatalf("Read(%d, %d tokens): %v", start, n, err)
			}
			if !slices.Equal(dst[:n], want[start:start+n]) {
				t.Fatalf("Read(%d, %d tokens): got %v, want %v", start, n, dst[:n], want[start:start+n])
			}
		}
	}
}

func TestTokenizeBuildsVocab(t *testing.T) {
	for _, tc := range []struct{ name, s string }{
		{"ascii", "hello, world\n"},
		{"one char", "x"},
		{"bom and crlf", "\uFEFFline one\r\nline two\r\n"},
		{"replacement char", "a\uFFFDb"},
		{"mixed", randomChars(1, mixedChars, 500)},
		{"astral order", "😀a🚀\U0010FFFF𝄞a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, err := Tokenize(t.Context(), stringCorpus(tc.s), TokenizeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			want := sortedChars(tc.s)
			if got := text.Vocab().Strings(); !slices.Equal(got, want) {
				t.Errorf("vocabulary: got %q, want %q", got, want)
			}
			if got, want := text.Len(), int64(utf8.RuneCountInString(tc.s)); got != want {
				t.Errorf("Len: got %d, want %d", got, want)
			}
			checkText(t, text, referenceIDs(want, tc.s, -1), 1)
		})
	}
}

// TestTextReadEveryStart reads texts longer than a few index strides
// (1024 tokens) at every start, with buffer sizes that put chunk and read
// boundaries inside multi-byte characters, from one part and from parts
// cut at arbitrary bytes (inside characters too).
func TestTextReadEveryStart(t *testing.T) {
	texts := map[string]string{
		"ascii": randomChars(2, []rune("abcdefghijklmnopqrstuvwxyz \n"), 3000),
		"mixed": randomChars(3, mixedChars, 3000),
		// Multi-byte characters at exactly the 1024th and 2048th tokens.
		"wide at strides": strings.Repeat("a", 1023) + "😀" + strings.Repeat("é", 1023) + "中" + strings.Repeat("b", 5),
	}
	for name, s := range texts {
		want := referenceIDs(sortedChars(s), s, -1)
		cuts := [][]int{nil, {1, 2, 3, 1024, 1025, 1026, 1027, len(s) / 2, len(s) - 1}}
		for _, cut := range cuts {
			var parts [][]byte
			prev := 0
			for _, c := range cut {
				parts = append(parts, []byte(s[prev:c]))
				prev = c
			}
			parts = append(parts, []byte(s[prev:]))
			for _, p := range smallParams {
				t.Run(fmt.Sprintf("%s/%d parts/chunk %d read %d", name, len(parts), p.chunk, p.readChunk), func(t *testing.T) {
					if testing.Short() && p.chunk < 3 {
						t.Skip("short")
					}
					text, err := tokenizeWith(t.Context(), partsCorpus("p", parts...), TokenizeConfig{}, p)
					if err != nil {
						t.Fatal(err)
					}
					checkText(t, text, want, 97)
				})
			}
		}
	}
}

func TestTokenizeInvalidUTF8(t *testing.T) {
	for _, tc := range []struct {
		name    string
		parts   []string
		valid   string // for valid input, the text
		corpOff int64  // else the corpus offset of the bad byte
		part    int    // and the part holding it
		partOff int64
	}{
		{name: "stray continuation", parts: []string{"ab\x80c"}, corpOff: 2, part: 0, partOff: 2},
		{name: "0xff", parts: []string{"abc\xff"}, corpOff: 3, part: 0, partOff: 3},
		{name: "overlong", parts: []string{"a\xc0\x80"}, corpOff: 1, part: 0, partOff: 1},
		{name: "surrogate", parts: []string{"ab\xed\xa0\x80"}, corpOff: 2, part: 0, partOff: 2},
		{name: "above U+10FFFF", parts: []string{"\xf4\x90\x80\x80"}, corpOff: 0, part: 0, partOff: 0},
		{name: "truncated at the end", parts: []string{"ab\xf0\x9f\x98"}, corpOff: 2, part: 0, partOff: 2},
		{name: "bad after good multibyte", parts: []string{"é€😀\xe2\x82x"}, corpOff: 9, part: 0, partOff: 9},
		{name: "split across two files", parts: []string{"a\xc3", "\xa9b"}, valid: "aéb"},
		{name: "split across three files", parts: []string{"a\xf0\x9f", "\x98", "\x80b"}, valid: "a😀b"},
		{name: "split with empty file between", parts: []string{"\xe2\x82", "", "\xac"}, valid: "€"},
		{name: "truncated, next file ASCII", parts: []string{"ab\xe2\x82", "cd"}, corpOff: 2, part: 0, partOff: 2},
		{name: "truncated at last file's end", parts: []string{"ab", "c\xe2"}, corpOff: 3, part: 1, partOff: 1},
		{name: "continuation starts second file", parts: []string{"abc", "\x80"}, corpOff: 3, part: 1, partOff: 0},
		{name: "lead byte then lead byte", parts: []string{"x\xe2", "\xe2\x82\xac"}, corpOff: 1, part: 0, partOff: 1},
	} {
		for _, p := range smallParams[:5] {
			t.Run(fmt.Sprintf("%s/chunk %d", tc.name, p.chunk), func(t *testing.T) {
				parts := make([][]byte, len(tc.parts))
				for i, s := range tc.parts {
					parts[i] = []byte(s)
				}
				text, err := tokenizeWith(t.Context(), partsCorpus("p", parts...), TokenizeConfig{}, p)
				if tc.valid != "" {
					if err != nil {
						t.Fatalf("got %v, want no error", err)
					}
					checkText(t, text, referenceIDs(sortedChars(tc.valid), tc.valid, -1), 1)
					return
				}
				var de *DataError
				if !errors.As(err, &de) {
					t.Fatalf("got %v, want a *DataError", err)
				}
				want := DataError{Name: fmt.Sprintf("p/%d", tc.part), Offset: tc.partOff, CorpusOffset: tc.corpOff, Reason: "invalid UTF-8"}
				if *de != want {
					t.Errorf("got %+v, want %+v", *de, want)
				}
			})
		}
	}
}

// TestTokenizeFilesSplitRune checks characters split across files on disk.
func TestTokenizeFilesSplitRune(t *testing.T) {
	t.Run("valid", func(t *testing.T) {
		c, err := Open(writeTree(t, map[string]string{"1": "a\xe4\xb8", "2": "\xad", "3/x": "\xe6\x96\x87b"}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		text, err := Tokenize(t.Context(), c, TokenizeConfig{})
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		checkText(t, text, referenceIDs(sortedChars("a中文b"), "a中文b", -1), 1)
	})
	t.Run("invalid", func(t *testing.T) {
		root := writeTree(t, map[string]string{"1": "abc\xe4\xb8", "2": "de"})
		c, err := Open(root)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = Tokenize(t.Context(), c, TokenizeConfig{})
		var de *DataError
		if !errors.As(err, &de) {
			t.Fatalf("got %v, want a *DataError", err)
		}
		want := DataError{Name: filepath.Join(root, "1"), Offset: 3, CorpusOffset: 3, Reason: "invalid UTF-8"}
		if *de != want {
			t.Errorf("got %+v, want %+v", *de, want)
		}
		if got, want := err.Error(), "loader: "+filepath.Join(root, "1")+": byte 3: invalid UTF-8"; got != want {
			t.Errorf("message: got %q, want %q", got, want)
		}
	})
}

func TestTokenizeGivenVocab(t *testing.T) {
	vocab, err := NewVocab([]string{"a", "b", "é", "?", "😀", "\n"})
	if err != nil {
		t.Fatal(err)
	}
	chars := vocab.Strings()
	for _, tc := range []struct {
		name    string
		s       string
		unknown string
		errOff  int64  // -1: no error
		reason  string // of the error
		mapped  int64  // characters that became unknown
	}{
		{name: "all known", s: "ab\néé😀?a", errOff: -1},
		{name: "unknown ASCII", s: "abéxa", errOff: 4, reason: `character "x" (U+0078) is not in the vocabulary`},
		{name: "unknown 2-byte", s: "ab\nü", errOff: 3, reason: `character "ü" (U+00FC) is not in the vocabulary`},
		{name: "unknown 4-byte", s: "😀🚀", errOff: 4, reason: `character "🚀" (U+1F680) is not in the vocabulary`},
		{name: "unknown control", s: "a\x00", errOff: 1, reason: `character "\x00" (U+0000) is not in the vocabulary`},
		{name: "invalid before unknown", s: "a\xffx", errOff: 1, reason: "invalid UTF-8"},
		{name: "unknown mapped", s: "xaüb😀🚀\r\n", unknown: "?", errOff: -1, mapped: 4}, // x ü 🚀 \r
		{name: "all unknown, ASCII", s: "xyz", unknown: "?", errOff: -1, mapped: 3},
		{name: "the unknown character itself", s: "a?b", unknown: "?", errOff: -1, mapped: 0},
		{name: "unknown mapped, invalid still an error", s: "ab\xff", unknown: "?", errOff: 2, reason: "invalid UTF-8"},
	} {
		for _, p := range []textParams{{chunk: 1, readChunk: 4}, {chunk: tokenizeChunk, readChunk: textReadChunk}} {
			t.Run(fmt.Sprintf("%s/chunk %d", tc.name, p.chunk), func(t *testing.T) {
				text, err := tokenizeWith(t.Context(), stringCorpus(tc.s), TokenizeConfig{Vocab: vocab, Unknown: tc.unknown}, p)
				if tc.errOff >= 0 {
					want := &DataError{Name: "mem", Offset: tc.errOff, CorpusOffset: tc.errOff, Reason: tc.reason}
					var de *DataError
					if !errors.As(err, &de) || *de != *want {
						t.Fatalf("got %v, want %v", err, want)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if text.Vocab() != vocab {
					t.Errorf("Vocab: got %p, want the given %p", text.Vocab(), vocab)
				}
				unknown := int32(-1)
				if tc.unknown != "" {
					unknown, _ = vocab.ID([]rune(tc.unknown)[0])
				}
				checkText(t, text, referenceIDs(chars, tc.s, unknown), 1)
				if got := text.Mapped(); got != tc.mapped {
					t.Errorf("Mapped: got %d, want %d", got, tc.mapped)
				}
			})
		}
	}
}

func TestTokenizeConfigErrors(t *testing.T) {
	vocab, err := NewVocab([]string{"a", "?"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  TokenizeConfig
	}{
		{"unknown without vocab", TokenizeConfig{Unknown: "?"}},
		{"unknown not in vocab", TokenizeConfig{Vocab: vocab, Unknown: "x"}},
		{"unknown two chars", TokenizeConfig{Vocab: vocab, Unknown: "?a"}},
		{"unknown invalid", TokenizeConfig{Vocab: vocab, Unknown: "\xff"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Tokenize(t.Context(), stringCorpus("a"), tc.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), "loader: ") {
				t.Errorf("got %v, want a loader error", err)
			}
		})
	}
	if _, err := Tokenize(t.Context(), nil, TokenizeConfig{}); err == nil {
		t.Errorf("nil corpus: got nil error, want one")
	}
}

func TestTokenizeEmpty(t *testing.T) {
	dir, err := Open(writeTree(t, map[string]string{"a": "", ".b": "hidden"}))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	for name, c := range map[string]*Corpus{
		"NewCorpus": NewCorpus(bytes.NewReader(nil), 0, "mem"),
		"directory": dir,
	} {
		t.Run(name, func(t *testing.T) {
			text, err := Tokenize(t.Context(), c, TokenizeConfig{})
			if !errors.Is(err, ErrEmpty) || text != nil {
				t.Errorf("got %v, %v, want nil, ErrEmpty", text, err)
			}
		})
	}
}

// cancelOnRead cancels a context on its first ReadAt.
type cancelOnRead struct {
	r      io.ReaderAt
	cancel context.CancelFunc
	reads  int
}

func (c *cancelOnRead) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	c.cancel()
	return c.r.ReadAt(p, off)
}

func TestTokenizeCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Tokenize(ctx, stringCorpus("abc"), TokenizeConfig{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before: got %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	src := &cancelOnRead{r: strings.NewReader("abcdefgh"), cancel: cancel}
	_, err := tokenizeWith(ctx, NewCorpus(src, 8, "mem"), TokenizeConfig{}, textParams{chunk: 2, readChunk: 4})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during: got %v, want context.Canceled", err)
	}
	if src.reads != 1 {
		t.Errorf("reads after cancellation: got %d reads, want 1", src.reads)
	}
}

// failingReader fails every read at or past offset failAt.
type failingReader struct {
	data   []byte
	failAt int64
}

var errDisk = errors.New("disk on fire")

func (f *failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.failAt {
		return 0, errDisk
	}
	return copy(p, f.data[off:]), nil
}

func TestTokenizeReadFailure(t *testing.T) {
	src := &failingReader{data: []byte("abcdefgh"), failAt: 5}
	_, err := tokenizeWith(t.Context(), NewCorpus(src, 8, "mem"), TokenizeConfig{}, textParams{chunk: 2, readChunk: 4})
	if !errors.Is(err, errDisk) {
		t.Errorf("got %v, want errDisk", err)
	}
	text, err := tokenizeWith(t.Context(), NewCorpus(src, 4, "mem"), TokenizeConfig{}, textParams{chunk: 2, readChunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	src.failAt = 2
	if err := text.Read(0, make([]int32, 4)); !errors.Is(err, errDisk) {
		t.Errorf("Read: got %v, want errDisk", err)
	}
}

// TestTextCorpusChanged checks that Read reports bytes that Tokenize did
// not see instead of returning wrong ids.
func TestTextCorpusChanged(t *testing.T) {
	for _, tc := range []struct {
		name, before, after string
		reason              string
		off                 int64
	}{
		{"ASCII char replaced", "abcab", "abzab", `character "z" (U+007A) is not in the vocabulary (the corpus changed after Tokenize)`, 2},
		{"multibyte char replaced", "aébé", "aébü", `character "ü" (U+00FC) is not in the vocabulary (the corpus changed after Tokenize)`, 4},
		{"invalid byte", "aébé", "aéb\xff\xff", "invalid UTF-8 (the corpus changed after Tokenize)", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.before)
			text, err := Tokenize(t.Context(), NewCorpus(bytes.NewReader(data), int64(len(data)), "mem"), TokenizeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			copy(data, tc.after)
			err = text.Read(0, make([]int32, text.Len()))
			want := &DataError{Name: "mem", Offset: tc.off, CorpusOffset: tc.off, Reason: tc.reason}
			var de *DataError
			if !errors.As(err, &de) || *de != *want {
				t.Errorf("got %v, want %v", err, want)
			}
		})
	}
}

func TestDataErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  DataError
		want string
	}{
		{DataError{Name: "data/a.txt", Offset: 1234, CorpusOffset: 9999, Reason: "invalid UTF-8"}, "loader: data/a.txt: byte 1234: invalid UTF-8"},
		{DataError{Name: "b", Offset: 0, Reason: notInVocab('é')}, `loader: b: byte 0: character "é" (U+00E9) is not in the vocabulary`},
		{DataError{Offset: 7, Reason: "invalid UTF-8"}, "loader: byte 7: invalid UTF-8"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestTextSplit(t *testing.T) {
	s := randomChars(4, mixedChars, 1000)
	text, err := Tokenize(t.Context(), stringCorpus(s), TokenizeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := referenceIDs(sortedChars(s), s, -1)
	for _, tc := range []struct {
		frac float64
		val  int64
	}{
		{0, 0}, {0.0005, 0}, {0.001, 1}, {0.1, 100}, {0.25, 250}, {0.5, 500}, {0.9999, 999},
	} {
		t.Run(fmt.Sprint(tc.frac), func(t *testing.T) {
			train, val, err := text.Split(tc.frac)
			if err != nil {
				t.Fatal(err)
			}
			if val.Len() != tc.val || train.Len() != 1000-tc.val {
				t.Fatalf("sizes: got train %d, val %d, want %d, %d", train.Len(), val.Len(), 1000-tc.val, tc.val)
			}
			checkText(t, train, want[:train.Len()], 101)
			checkText(t, val, want[train.Len():], 101)
			if train.Vocab() != text.Vocab() || val.Vocab() != text.Vocab() {
				t.Errorf("Vocab: got a different vocabulary, want the text's")
			}
		})
	}
	for _, frac := range []float64{-0.1, 1, 1.5, math.NaN(), math.Inf(1)} {
		if _, _, err := text.Split(frac); err == nil {
			t.Errorf("Split(%v): got nil error, want one", frac)
		}
	}
	// Splitting a slice splits that slice.
	train, val, err := text.Slice(100, 300).Split(0.5)
	if err != nil {
		t.Fatal(err)
	}
	checkText(t, train, want[100:200], 7)
	checkText(t, val, want[200:300], 7)
}

func TestTextSlice(t *testing.T) {
	for name, s := range map[string]string{
		"ascii": randomChars(5, []rune("abc \n"), 2500),
		"mixed": randomChars(6, mixedChars, 2500),
	} {
		t.Run(name, func(t *testing.T) {
			text, err := Tokenize(t.Context(), stringCorpus(s), TokenizeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			want := referenceIDs(sortedChars(s), s, -1)
			for _, r := range [][2]int64{{0, 2500}, {1000, 1030}, {1023, 2049}, {7, 7}, {2499, 2500}, {0, 0}, {2500, 2500}} {
				sl := text.Slice(r[0], r[1])
				checkText(t, sl, want[r[0]:r[1]], 13)
				if r[1]-r[0] >= 10 {
					checkText(t, sl.Slice(3, 9), want[r[0]+3:r[0]+9], 1)
				}
			}
			for _, r := range [][2]int64{{-1, 5}, {5, 4}, {0, 2501}, {2501, 2501}} {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("Slice(%d, %d): got no panic, want one", r[0], r[1])
						}
					}()
					text.Slice(r[0], r[1])
				}()
			}
		})
	}
}

func TestTextReadOutOfRange(t *testing.T) {
	text, err := Tokenize(t.Context(), stringCorpus("abcdéfghij"), TokenizeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sl := text.Slice(2, 6)
	for _, tc := range []struct {
		text  *Text
		start int64
		n     int
		ok    bool
	}{
		{text, 0, 10, true}, {text, 10, 0, true}, {text, 9, 1, true},
		{text, -1, 1, false}, {text, 0, 11, false}, {text, 10, 1, false}, {text, 11, 0, false}, {text, math.MaxInt64, 1, false},
		{sl, 0, 4, true}, {sl, 4, 0, true}, {sl, 3, 2, false}, {sl, 5, 0, false}, {sl, -1, 0, false},
	} {
		err := tc.text.Read(tc.start, make([]int32, tc.n))
		if (err == nil) != tc.ok {
			t.Errorf("Read(%d, %d tokens) of %d: got %v, want ok=%v", tc.start, tc.n, tc.text.Len(), err, tc.ok)
		}
	}
	var zero Text
	if zero.Len() != 0 || zero.BytesRead() != 0 || zero.Read(0, nil) != nil {
		t.Errorf("zero Text: got Len %d, want an empty text", zero.Len())
	}
}

func TestTextConcurrentRead(t *testing.T) {
	for name, s := range map[string]string{
		"ascii": randomChars(7, []rune("abcdefgh \n"), 50000),
		"mixed": randomChars(8, mixedChars, 50000),
	} {
		t.Run(name, func(t *testing.T) {
			text, err := tokenizeWith(t.Context(), partsCorpus("p", []byte(s[:len(s)/3]), []byte(s[len(s)/3:])), TokenizeConfig{}, textParams{chunk: 4096, readChunk: 512})
			if err != nil {
				t.Fatal(err)
			}
			want := referenceIDs(sortedChars(s), s, -1)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 3))
					dst := make([]int32, 3000)
					for range 200 {
						start := rng.IntN(len(want))
						n := rng.IntN(min(len(dst), len(want)-start) + 1)
						if err := text.Read(int64(start), dst[:n]); err != nil {
							errs <- err
							return
						}
						if !slices.Equal(dst[:n], want[start:start+n]) {
							errs <- fmt.Errorf("Read(%d, %d tokens): got a different sequence than the reference", start, n)
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
		})
	}
}

func TestTextBytesRead(t *testing.T) {
	t.Run("ascii", func(t *testing.T) {
		text, err := Tokenize(t.Context(), stringCorpus(strings.Repeat("abcd", 1000)), TokenizeConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if got := text.BytesRead(); got != 0 {
			t.Errorf("after Tokenize: got %d, want 0", got)
		}
		if err := text.Read(10, make([]int32, 100)); err != nil {
			t.Fatal(err)
		}
		if got := text.BytesRead(); got != 100 {
			t.Errorf("after reading 100 ASCII tokens: got %d, want 100", got)
		}
		train, val, err := text.Split(0.5)
		if err != nil {
			t.Fatal(err)
		}
		if err := val.Read(0, make([]int32, 50)); err != nil {
			t.Fatal(err)
		}
		for name, tx := range map[string]*Text{"text": text, "train": train, "val": val} {
			if got := tx.BytesRead(); got != 150 {
				t.Errorf("%s after reading 150 tokens through two texts: got %d, want 150", name, got)
			}
		}
	})
	t.Run("mixed", func(t *testing.T) {
		s := randomChars(9, mixedChars, 5000)
		text, err := Tokenize(t.Context(), stringCorpus(s), TokenizeConfig{})
		if err != nil {
			t.Fatal(err)
		}
		// Reading tokens [2000, 2100) starts at token 1024, so it reads at
		// least their bytes and at most those up to the end of the corpus.
		if err := text.Read(2000, make([]int32, 100)); err != nil {
			t.Fatal(err)
		}
		lo := int64(len(string([]rune(s)[1024:2100])))
		hi := int64(len(s) - len(string([]rune(s)[:1024])))
		if got := text.BytesRead(); got < lo || got > hi {
			t.Errorf("got %d, want in [%d, %d]", got, lo, hi)
		}
	})
}

// FuzzTokenize tokenizes bytes cut into up to three files, with small
// chunks, and checks the result against the standard library's decoder.
func FuzzTokenize(f *testing.F) {
	f.Add([]byte("hello, world"), uint16(3), uint16(7), uint8(0))
	f.Add([]byte("h€llo wörld 😀"), uint16(2), uint16(6), uint8(1))
	f.Add([]byte("a\xf0\x9f\x98\x80b"), uint16(2), uint16(4), uint8(2))
	f.Add([]byte("ab\xe2\x82cd"), uint16(3), uint16(4), uint8(3))
	f.Add([]byte("\xff\xfe\xfd"), uint16(1), uint16(2), uint8(4))
	f.Add([]byte("\xed\xa0\x80\xc0\xaf"), uint16(0), uint16(5), uint8(5))
	f.Add([]byte("\uFEFFa\r\n\uFFFD"), uint16(1), uint16(3), uint8(6))
	f.Add([]byte(strings.Repeat("é", 1030)+"x"), uint16(1023), uint16(2049), uint8(7))
	f.Add([]byte{}, uint16(0), uint16(0), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint16, sizes uint8) {
		a := min(int(cut1), len(data))
		b := min(max(int(cut2), a), len(data))
		parts := [][]byte{data[:a], data[a:b], data[b:]}
		p := textParams{chunk: 1 + int(sizes&7), readChunk: 4 + int(sizes>>3)}
		text, err := tokenizeWith(t.Context(), partsCorpus("p", parts...), TokenizeConfig{}, p)
		if len(data) == 0 {
			if !errors.Is(err, ErrEmpty) {
				t.Fatalf("empty input: got %v, want ErrEmpty", err)
			}
			return
		}
		if !utf8.Valid(data) {
			var de *DataError
			if !errors.As(err, &de) {
				t.Fatalf("invalid UTF-8 %q: got %v, want a *DataError", data, err)
			}
			off := de.CorpusOffset
			if off < 0 || off >= int64(len(data)) || !utf8.Valid(data[:off]) {
				t.Fatalf("%q: got offset %d, want the first invalid byte", data, off)
			}
			if r, size := utf8.DecodeRune(data[off:]); r != utf8.RuneError || size != 1 {
				t.Fatalf("%q: got offset %d, which decodes as %q (%d bytes), want an invalid byte", data, off, r, size)
			}
			start, ok := map[string]int64{"p/0": 0, "p/1": int64(a), "p/2": int64(b)}[de.Name]
			if !ok || start+de.Offset != off {
				t.Fatalf("%q: got %s byte %d, want the file holding corpus byte %d", data, de.Name, de.Offset, off)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid UTF-8 %q: got %v, want no error", data, err)
		}
		s := string(data)
		want := referenceIDs(sortedChars(s), s, -1)
		if got := text.Vocab().Strings(); !slices.Equal(got, sortedChars(s)) {
			t.Fatalf("vocabulary: got %q, want %q", got, sortedChars(s))
		}
		if text.Len() != int64(len(want)) {
			t.Fatalf("Len: got %d, want %d", text.Len(), len(want))
		}
		rng := rand.New(rand.NewPCG(uint64(len(data)), uint64(cut1)))
		dst := make([]int32, len(want))
		for range 20 {
			start := rng.IntN(len(want) + 1)
			n := rng.IntN(len(want) - start + 1)
			if err := text.Read(int64(start), dst[:n]); err != nil {
				t.Fatalf("Read(%d, %d tokens): %v", start, n, err)
			}
			if !slices.Equal(dst[:n], want[start:start+n]) {
				t.Fatalf("Read(%d, %d tokens): got %v, want %v", start, n, dst[:n], want[start:start+n])
			}
		}
	})
}

// benchCorpus writes about 8 MB of generated text of chars to a file and
// opens it.
func benchCorpus(b *testing.B, chars []rune) *Corpus {
	b.Helper()
	const size = 8 << 20
	var sb strings.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	for sb.Len() < size {
		sb.WriteRune(chars[rng.IntN(len(chars))])
	}
	p := filepath.Join(b.TempDir(), "corpus.txt")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	c, err := Open(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// benchTexts are the generated corpora of the benchmarks: ASCII, and mixed
// text of about 15% non-ASCII characters.
var benchTexts = []struct {
	name  string
	chars []rune
}{
	{"ascii", []rune("etaoinshrdlucmfwypvbgkjqxz ETAOIN.,;\n ")},
	{"mixed", []rune("etaoinshrdlucmfwypvbgkjqxz ETAOIN.,;\n éüßλ€中😀")},
}

func BenchmarkTokenize(b *testing.B) {
	for _, bt := range benchTexts {
		b.Run(bt.name, func(b *testing.B) {
			c := benchCorpus(b, bt.chars)
			b.SetBytes(c.Size())
			b.ReportAllocs()
			var tokens int64
			for b.Loop() {
				text, err := Tokenize(b.Context(), c, TokenizeConfig{})
				if err != nil {
					b.Fatal(err)
				}
				tokens += text.Len()
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkRead(b *testing.B) {
	for _, bt := range benchTexts {
		c := benchCorpus(b, bt.chars)
		text, err := Tokenize(b.Context(), c, TokenizeConfig{})
		if err != nil {
			b.Fatal(err)
		}
		bytesPerToken := float64(c.Size()) / float64(text.Len())
		// window: random training windows; stream: long sequential reads.
		for _, n := range []int{257, 65536} {
			b.Run(fmt.Sprintf("%s/tokens=%d", bt.name, n), func(b *testing.B) {
				dst := make([]int32, n)
				rng := rand.New(rand.NewPCG(3, 4))
				b.SetBytes(int64(float64(n) * bytesPerToken))
				b.ReportAllocs()
				before := text.BytesRead()
				var reads int64
				for b.Loop() {
					start := rng.Int64N(text.Len() - int64(n))
					if err := text.Read(start, dst); err != nil {
						b.Fatal(err)
					}
					reads++
				}
				b.ReportMetric(float64(reads)*float64(n)/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric(float64(text.BytesRead()-before)/float64(reads)/float64(n), "readB/token")
			})
		}
	}
}

// TokenizeConfig.OnRead reports the pass's progress once per chunk: the
// bytes read so far, rising to the corpus's size, and the size.
func TestTokenizeOnRead(t *testing.T) {
	s := strings.Repeat("héllo, wörld\n", 10) // 150 bytes, 2-byte characters across chunk ends
	var reads []int64
	cfg := TokenizeConfig{OnRead: func(read, size int64) {
		if size != int64(len(s)) {
			t.Errorf("OnRead size %d, want %d", size, len(s))
		}
		reads = append(reads, read)
	}}
	if _, err := tokenizeWith(t.Context(), stringCorpus(s), cfg, textParams{chunk: 16, readChunk: 16}); err != nil {
		t.Fatal(err)
	}
	var want []int64
	for n := int64(16); n < int64(len(s)); n += 16 {
		want = append(want, n)
	}
	want = append(want, int64(len(s)))
	if !slices.Equal(reads, want) {
		t.Errorf("OnRead calls %v, want %v", reads, want)
	}
}
