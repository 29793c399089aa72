package loader

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Format is a labelled-data file format.
type Format string

const (
	// CoNLLU is Universal Dependencies' CoNLL-U: one word per line, ten
	// tab-separated fields (ID, FORM, LEMMA, UPOS, XPOS, FEATS, HEAD,
	// DEPREL, DEPS, MISC), a blank line after each sentence, comment lines
	// starting with "#". Multiword-token lines (ID "1-2") and empty nodes
	// (ID "1.1") are not words of the sentence and are skipped; the words'
	// IDs run 1, 2, ... within a sentence.
	CoNLLU Format = "conllu"
	// TSV is two columns, token<TAB>tag, one token per line, a blank line
	// between sentences.
	TSV Format = "tsv"
	// JSONL is one JSON object per line: {"tokens": [...], "tags": [...]}
	// (a tag per token), {"tokens": [...], "label": ...} or {"text": ...,
	// "label": ...} (a label per sequence). Blank lines are skipped.
	JSONL Format = "jsonl"
)

// FormatOf is the format a file name's extension says: .conllu, .tsv,
// .jsonl or .json; "" for another.
func FormatOf(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".conllu":
		return CoNLLU
	case ".tsv":
		return TSV
	case ".jsonl", ".json":
		return JSONL
	}
	return ""
}

// Example is one labelled sequence of a dataset.
type Example struct {
	// Tokens are the sequence's words (or, for {"text": ...}, nil).
	Tokens []string
	// Text is the text of a {"text": ..., "label": ...} line; "" otherwise.
	Text string
	// Tags are the per-token labels (tagging), one per token; nil for a
	// labelled sequence.
	Tags []string
	// Label is the sequence's label (classification); "" for tagging.
	Label string
	// Line is the line the example starts on, from 1.
	Line int
}

// ErrMalformed is wrapped by the error of labelled data that does not
// follow its format; the error is a *LineError saying where and why.
var ErrMalformed = errors.New("loader: malformed labelled data")

// LineError is an error in a labelled-data file: the file, the line
// (from 1) and the reason.
type LineError struct {
	File   string
	Line   int
	Reason string
}

// Error returns, for example,
// `loader: train.conllu:12: 9 fields, want 10 (tab-separated)`.
func (e *LineError) Error() string {
	return fmt.Sprintf("loader: %s:%d: %s", e.File, e.Line, e.Reason)
}

// Unwrap makes a LineError match ErrMalformed.
func (e *LineError) Unwrap() error { return ErrMalformed }

// ReadConfig says how to read labelled data.
type ReadConfig struct {
	// Format is the file's format; "" takes it from the extension
	// (FormatOf).
	Format Format
	// Column is the CoNLL-U tag column: "upos" (the default) or "xpos".
	Column string
	// MaxLine is the most bytes a line may hold, its line ending ("\n" or
	// "\r\n") not counted: 0 takes DefaultMaxLine (1 MiB), a negative
	// value is an error. A longer line is a *LineError saying "line
	// longer than N bytes", found having read at most N+1 bytes of it and
	// a buffer (64 KiB): a reader holds at most about twice MaxLine,
	// however long the lines of its input, where it used to hold whole
	// lines (a 1 GB JSON line took 4.7 GB to decode).
	MaxLine int
}

// DefaultMaxLine is ReadConfig.MaxLine's default, 1 MiB: far more than a
// sentence of CoNLL-U, TSV or JSON holds (the longest line of Universal
// Dependencies' treebanks is a few kilobytes), and little memory.
const DefaultMaxLine = 1 << 20

// resolve fills in the defaults for path and checks the configuration.
func (c ReadConfig) resolve(path string) (ReadConfig, error) {
	if c.Format == "" {
		if c.Format = FormatOf(path); c.Format == "" {
			return c, fmt.Errorf("loader: %s: no format given and none known for the extension %q (want .conllu, .tsv, .jsonl or .json)", path, filepath.Ext(path))
		}
	}
	switch c.Format {
	case CoNLLU, TSV, JSONL:
	default:
		return c, fmt.Errorf("loader: format %q, want conllu, tsv or jsonl", c.Format)
	}
	switch c.Column {
	case "":
		c.Column = "upos"
	case "upos", "xpos":
	default:
		return c, fmt.Errorf("loader: CoNLL-U column %q, want upos or xpos", c.Column)
	}
	switch {
	case c.MaxLine < 0:
		return c, fmt.Errorf("loader: ReadConfig.MaxLine %d, want 0 (the default, %d bytes) or a positive number of bytes", c.MaxLine, DefaultMaxLine)
	case c.MaxLine == 0:
		c.MaxLine = DefaultMaxLine
	}
	return c, nil
}

// ExampleReader reads the examples of one file in order, one at a time:
// the file is streamed, never held in memory.
type ExampleReader struct {
	cfg  ReadConfig
	name string
	r    *bufio.Reader
	line int   // lines read so far
	off  int64 // bytes read so far
	// err is the error of a line too long, returned by every later call:
	// the reader stopped inside that line, so what follows is not a line.
	err error
}

// NewExampleReader reads the examples of r, which is named name in
// errors, in the format of cfg (cfg.Format "" takes it from name's
// extension). r's first line is line line+1 of name (0 for a whole file).
func NewExampleReader(r io.Reader, name string, line int, cfg ReadConfig) (*ExampleReader, error) {
	cfg, err := cfg.resolve(name)
	if err != nil {
		return nil, err
	}
	return &ExampleReader{cfg: cfg, name: name, r: bufio.NewReaderSize(r, 64<<10), line: line}, nil
}

// Offset is the number of bytes of the input read so far: where the next
// example starts (or blank lines before it), and Line the lines read.
func (x *ExampleReader) Offset() int64 { return x.off }

// Line is the number of lines read so far, counting from NewExampleReader's
// line.
func (x *ExampleReader) Line() int { return x.line }

// nextLine returns the next line without its line ending ("\n" or
// "\r\n"), the offset it starts at, and io.EOF after the last. A line
// longer than cfg.MaxLine fails as soon as more than MaxLine+1 of its
// bytes are read, so that no line is held whole: the bytes a line spans
// beyond the buffer are gathered only up to that bound.
func (x *ExampleReader) nextLine() ([]byte, int64, error) {
	start := x.off
	if x.err != nil {
		return nil, start, x.err
	}
	// At most one '\r' before the '\n' is not the line's, so a line
	// that has more than MaxLine+1 bytes and no '\n' yet is too long.
	limit := x.cfg.MaxLine + 1
	b, err := x.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A line longer than the buffer: gather it, up to the bound.
		var long []byte
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(b) > limit {
				return nil, start, x.tooLong()
			}
			long = append(long, b...)
			b, err = x.r.ReadSlice('\n')
		}
		b = append(long, b...)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, start, fmt.Errorf("loader: %s: %w", x.name, err)
	}
	if len(b) == 0 && errors.Is(err, io.EOF) {
		return nil, start, io.EOF
	}
	x.off += int64(len(b))
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) > x.cfg.MaxLine {
		return nil, start, x.tooLong()
	}
	x.line++
	if !utf8.Valid(b) {
		return nil, start, x.fail("invalid UTF-8")
	}
	return b, start, nil
}

// tooLong is the error of the line after x.line being longer than
// cfg.MaxLine; it stays the reader's error.
func (x *ExampleReader) tooLong() error {
	x.line++
	x.err = x.fail("line longer than %d bytes", x.cfg.MaxLine)
	return x.err
}

func (x *ExampleReader) fail(format string, args ...any) error {
	return &LineError{File: x.name, Line: x.line, Reason: fmt.Sprintf(format, args...)}
}

// Next returns the next example, and io.EOF after the last one.
func (x *ExampleReader) Next() (Example, error) {
	switch x.cfg.Format {
	case CoNLLU:
		return x.nextSentence(x.conlluWord)
	case TSV:
		return x.nextSentence(x.tsvWord)
	}
	return x.nextJSON()
}

// nextSentence reads the lines of one sentence (comment lines skipped
// for CoNLL-U), up to a blank line or the end, each turned into a word and
// its tag by word (ok false: a line that is not a word of the sentence).
func (x *ExampleReader) nextSentence(word func(line []byte, n int) (form, tag string, ok bool, err error)) (Example, error) {
	var ex Example
	for {
		b, _, err := x.nextLine()
		end := errors.Is(err, io.EOF)
		switch {
		case end && ex.Line == 0:
			return ex, io.EOF
		case err != nil && !end:
			return ex, err
		case end || len(bytes.TrimSpace(b)) == 0:
			if ex.Line == 0 {
				continue // blank lines between sentences
			}
			if len(ex.Tokens) == 0 {
				return ex, &LineError{File: x.name, Line: ex.Line, Reason: "a sentence of no words"}
			}
			return ex, nil
		}
		if x.cfg.Format == CoNLLU && b[0] == '#' {
			if ex.Line == 0 {
				continue
			}
			if len(ex.Tokens) > 0 {
				return ex, x.fail("a comment line inside a sentence (a blank line must end the sentence first)")
			}
			continue
		}
		if ex.Line == 0 {
			ex.Line = x.line
		}
		form, tag, ok, err := word(b, len(ex.Tokens))
		if err != nil {
			return ex, err
		}
		if ok {
			ex.Tokens, ex.Tags = append(ex.Tokens, form), append(ex.Tags, tag)
		}
	}
}

// conlluWord reads a CoNLL-U word line: n is the number of words before
// it in the sentence.
func (x *ExampleReader) conlluWord(b []byte, n int) (form, tag string, ok bool, err error) {
	f := strings.Split(string(b), "\t")
	if len(f) != 10 {
		return "", "", false, x.fail("%d fields, want 10 (tab-separated: ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC)", len(f))
	}
	id := f[0]
	switch {
	case strings.Contains(id, "-"):
		// A multiword token: its words follow on their own lines.
		lo, hi, found := strings.Cut(id, "-")
		a, e1 := strconv.Atoi(lo)
		z, e2 := strconv.Atoi(hi)
		if !found || e1 != nil || e2 != nil || a != n+1 || z < a {
			return "", "", false, x.fail("multiword token ID %q, want %d-N with N ≥ %d", id, n+1, n+1)
		}
		return "", "", false, nil
	case strings.Contains(id, "."):
		// An empty node: not a word of the surface sentence.
		lo, hi, _ := strings.Cut(id, ".")
		a, e1 := strconv.Atoi(lo)
		_, e2 := strconv.Atoi(hi)
		if e1 != nil || e2 != nil || a != n {
			return "", "", false, x.fail("empty node ID %q, want %d.N", id, n)
		}
		return "", "", false, nil
	}
	if v, err := strconv.Atoi(id); err != nil || v != n+1 {
		return "", "", false, x.fail("word ID %q, want %d", id, n+1)
	}
	if f[1] == "" {
		return "", "", false, x.fail("an empty FORM")
	}
	tag = f[3]
	if x.cfg.Column == "xpos" {
		tag = f[4]
	}
	if tag == "" {
		return "", "", false, x.fail("an empty %s", strings.ToUpper(x.cfg.Column))
	}
	return f[1], tag, true, nil
}

// tsvWord reads a token<TAB>tag line.
func (x *ExampleReader) tsvWord(b []byte, _ int) (form, tag string, ok bool, err error) {
	f := strings.Split(string(b), "\t")
	if len(f) != 2 {
		return "", "", false, x.fail("%d fields, want 2 (token<TAB>tag)", len(f))
	}
	if f[0] == "" || f[1] == "" {
		return "", "", false, x.fail("an empty token or tag")
	}
	return f[0], f[1], true, nil
}

// jsonExample is what a JSON line may hold.
type jsonExample struct {
	Tokens []string `json:"tokens"`
	Tags   []string `json:"tags"`
	Text   *string  `json:"text"`
	Label  *string  `json:"label"`
}

// nextJSON reads one JSON line.
func (x *ExampleReader) nextJSON() (Example, error) {
	for {
		b, _, err := x.nextLine()
		if err != nil {
			return Example{}, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var j jsonExample
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			return Example{}, x.fail("%v", err)
		}
		if dec.More() {
			return Example{}, x.fail("more than one JSON value on the line")
		}
		ex := Example{Line: x.line}
		switch {
		case j.Tokens != nil && j.Tags != nil && j.Text == nil && j.Label == nil:
			if len(j.Tokens) != len(j.Tags) {
				return ex, x.fail("%d tokens and %d tags, want one tag per token", len(j.Tokens), len(j.Tags))
			}
			ex.Tokens, ex.Tags = j.Tokens, j.Tags
		case j.Label != nil && j.Tags == nil && (j.Tokens != nil) != (j.Text != nil):
			ex.Tokens, ex.Label = j.Tokens, *j.Label
			if j.Text != nil {
				ex.Text = *j.Text
			}
		default:
			return ex, x.fail(`want {"tokens": [...], "tags": [...]}, {"tokens": [...], "label": ...} or {"text": ..., "label": ...}`)
		}
		if len(ex.Tokens) == 0 && ex.Text == "" {
			return ex, x.fail("an empty sequence")
		}
		for _, part := range [][]string{ex.Tokens, ex.Tags} {
			for _, s := range part {
				if s == "" {
					return ex, x.fail("an empty token or tag")
				}
			}
		}
		if j.Label != nil && ex.Label == "" {
			return ex, x.fail("an empty label")
		}
		return ex, nil
	}
}

// ReadExamples calls fn with every example of the file at path, in order,
// streaming it; it stops at the first error (fn's included) and checks
// ctx between examples.
func ReadExamples(ctx context.Context, path string, cfg ReadConfig, fn func(Example) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	defer f.Close()
	x, err := NewExampleReader(f, path, 0, cfg)
	if err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("loader: reading %s: %w", path, err)
		}
		ex, err := x.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(ex); err != nil {
			return err
		}
	}
}
