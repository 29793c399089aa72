package loader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync/atomic"
	"unicode/utf8"
)

// The reserved ids of a Words vocabulary.
const (
	PadID     = 0 // "<pad>": padding
	UnknownID = 1 // "<unk>": a word (or character) outside the vocabulary
)

// Words is a vocabulary of words or characters for an embedding: id 0 is
// padding ("<pad>"), id 1 stands for anything outside the vocabulary
// ("<unk>"), and the rest are the items.
type Words struct {
	items []string
	ids   map[string]int32
}

// NewWords makes the vocabulary whose ids are items' indices (as a
// checkpoint records it): items[0] must be "<pad>", items[1] "<unk>", and
// no item may repeat.
func NewWords(items []string) (*Words, error) {
	if len(items) < 2 || items[0] != "<pad>" || items[1] != "<unk>" {
		return nil, errors.New(`loader: a word vocabulary starts with "<pad>", "<unk>"`)
	}
	w := &Words{items: slices.Clone(items), ids: make(map[string]int32, len(items))}
	for i, s := range items {
		if _, dup := w.ids[s]; dup {
			return nil, fmt.Errorf("loader: %q appears twice in the word vocabulary", s)
		}
		w.ids[s] = int32(i)
	}
	return w, nil
}

// ID is s's id, UnknownID for a string outside the vocabulary; a word that
// is literally "<pad>" or "<unk>" reads as unknown too, so that text never
// becomes padding.
func (w *Words) ID(s string) int32 {
	if id, ok := w.ids[s]; ok && id > UnknownID {
		return id
	}
	return UnknownID
}

// Len is the number of ids, the reserved two included.
func (w *Words) Len() int { return len(w.items) }

// Item is the string of id.
func (w *Words) Item(id int32) string { return w.items[id] }

// Items returns the strings in id order, "<pad>" and "<unk>" first: what
// NewWords takes back.
func (w *Words) Items() []string { return slices.Clone(w.items) }

// Labels is a vocabulary of tags or labels, ids from 0.
type Labels struct {
	items []string
	ids   map[string]int32
}

// NewLabels makes the vocabulary whose ids are items' indices; no item may
// repeat or be empty.
func NewLabels(items []string) (*Labels, error) {
	if len(items) == 0 {
		return nil, errors.New("loader: an empty label vocabulary")
	}
	l := &Labels{items: slices.Clone(items), ids: make(map[string]int32, len(items))}
	for i, s := range items {
		if _, dup := l.ids[s]; dup || s == "" {
			return nil, fmt.Errorf("loader: label %q is empty or appears twice", s)
		}
		l.ids[s] = int32(i)
	}
	return l, nil
}

// ID is s's id, and false for a label outside the vocabulary.
func (l *Labels) ID(s string) (int32, bool) {
	id, ok := l.ids[s]
	return id, ok
}

// Len is the number of labels.
func (l *Labels) Len() int { return len(l.items) }

// Item is the label of id.
func (l *Labels) Item(id int32) string { return l.items[id] }

// Items returns the labels in id order.
func (l *Labels) Items() []string { return slices.Clone(l.items) }

// Counts counts strings, to build a vocabulary from.
type Counts map[string]int

// Words is the vocabulary of the strings seen at least minCount times
// (minCount ≤ 1: all), most frequent first, ties in byte order, after
// the two reserved ids.
func (c Counts) Words(minCount int) *Words {
	var items []string
	for s, n := range c {
		if n >= minCount {
			items = append(items, s)
		}
	}
	slices.SortFunc(items, func(a, b string) int {
		return cmp.Or(cmp.Compare(c[b], c[a]), cmp.Compare(a, b))
	})
	w, _ := NewWords(append([]string{"<pad>", "<unk>"}, items...))
	return w
}

// Labels is the vocabulary of the strings seen, in byte order.
func (c Counts) Labels() (*Labels, error) {
	items := make([]string, 0, len(c))
	for s := range c {
		items = append(items, s)
	}
	slices.Sort(items)
	return NewLabels(items)
}

// DatasetConfig says how to read a labelled dataset and its vocabularies.
type DatasetConfig struct {
	ReadConfig
	// MinCount leaves out of the word vocabulary the words seen fewer
	// times (they read as unknown); 0 or 1 keeps every word.
	MinCount int
	// Words, Chars and Labels, when set (from a checkpoint), are used as
	// they are instead of built from the data: a word or character
	// outside them reads as unknown, and a tag or label outside Labels is
	// an error naming its file and line.
	Words, Chars *Words
	Labels       *Labels
}

// Dataset is a labelled dataset on disk: its vocabularies and an index of
// its examples (where each starts, its length), built in one pass; the
// examples themselves are read from the file when asked for, so memory
// holds a few numbers per example, not the data.
type Dataset struct {
	path   string
	cfg    ReadConfig
	f      io.ReaderAt
	closer io.Closer // the file OpenDataset opened; nil for NewDataset
	closed atomic.Bool
	size   int64
	// Words, Chars and Labels are the vocabularies: of the data's words
	// (or the given ones), of the characters of its words or texts, and of
	// its tags or labels.
	Words, Chars *Words
	Labels       *Labels
	// Tagging says the examples carry a tag per token; otherwise one
	// label per sequence.
	Tagging bool
	// Texts says the examples are texts ({"text": ...} lines), read as
	// characters in Chars; otherwise sequences of words in Words.
	Texts bool
	// offsets[i] and lines[i] are where example i's reading starts: the
	// byte after the previous example, and the lines before it.
	offsets []int64
	lines   []int32
	lengths []int32
	tokens  int64
	// longestWord is the most characters of a word, 0 without words.
	longestWord int
}

// OpenDataset reads the labelled data at path once: it checks every line,
// builds the vocabularies cfg does not give, and indexes the examples.
// An empty file, a file mixing tagged and labelled examples, or a tag
// outside a given Labels is an error.
func OpenDataset(ctx context.Context, path string, cfg DatasetConfig) (*Dataset, error) {
	if _, err := cfg.ReadConfig.resolve(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("loader: %w", err)
	}
	d, err := NewDataset(ctx, f, fi.Size(), path, cfg)
	if err != nil {
		f.Close()
		return nil, err
	}
	d.closer = f
	return d, nil
}

// NewDataset is OpenDataset over size bytes of r, which name names in
// messages (and, without cfg.Format, gives the format by its extension):
// for data that is not a file of its own, such as a section of one or
// bytes made in memory. The Dataset reads r whenever an example is asked
// for; its Close does nothing.
func NewDataset(ctx context.Context, r io.ReaderAt, size int64, name string, cfg DatasetConfig) (*Dataset, error) {
	rc, err := cfg.ReadConfig.resolve(name)
	if err != nil {
		return nil, err
	}
	d := &Dataset{path: name, cfg: rc, f: r, size: size, Words: cfg.Words, Chars: cfg.Chars, Labels: cfg.Labels}
	path := name
	x, err := NewExampleReader(io.NewSectionReader(r, 0, d.size), path, 0, rc)
	if err != nil {
		return nil, err
	}
	words, chars, labels := Counts{}, Counts{}, Counts{}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("loader: reading %s: %w", path, err)
		}
		off, line := x.Offset(), x.Line()
		ex, err := x.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		tagging, text := ex.Tags != nil, ex.Text != ""
		switch {
		case len(d.offsets) == 0:
			d.Tagging, d.Texts = tagging, text
		case tagging != d.Tagging:
			return nil, &LineError{File: path, Line: ex.Line, Reason: "a tagged sequence and a labelled one in one file"}
		case text != d.Texts:
			return nil, &LineError{File: path, Line: ex.Line, Reason: "a text and a sequence of tokens in one file"}
		}
		n := len(ex.Tokens)
		for _, w := range ex.Tokens {
			words[w]++
			k := 0
			for _, r := range w {
				chars[string(r)]++
				k++
			}
			d.longestWord = max(d.longestWord, k)
		}
		if ex.Text != "" {
			n = utf8.RuneCountInString(ex.Text)
			for _, r := range ex.Text {
				chars[string(r)]++
			}
		}
		for _, t := range append(ex.Tags, ex.Label) {
			if t == "" {
				continue
			}
			if d.Labels != nil {
				if _, ok := d.Labels.ID(t); !ok {
					return nil, &LineError{File: path, Line: ex.Line, Reason: fmt.Sprintf("tag or label %q is not one of the %d given", t, d.Labels.Len())}
				}
			}
			labels[t]++
		}
		d.offsets, d.lines, d.lengths = append(d.offsets, off), append(d.lines, int32(line)), append(d.lengths, int32(n))
		d.tokens += int64(n)
	}
	if len(d.offsets) == 0 {
		return nil, fmt.Errorf("%w: %s holds no example", ErrEmpty, path)
	}
	if d.Words == nil {
		d.Words = words.Words(cfg.MinCount)
	}
	if d.Chars == nil {
		d.Chars = chars.Words(0)
	}
	if d.Labels == nil {
		if d.Labels, err = labels.Labels(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Len is the number of examples.
func (d *Dataset) Len() int { return len(d.offsets) }

// Tokens is the number of tokens of all examples (characters for
// {"text": ...} examples).
func (d *Dataset) Tokens() int64 { return d.tokens }

// Length is example i's number of tokens (characters of a text).
func (d *Dataset) Length(i int) int { return int(d.lengths[i]) }

// LongestWord is the most characters of any word of the examples (what a
// batch's HostBatch.WordLen can reach), 0 when they hold no words (texts).
func (d *Dataset) LongestWord() int { return d.longestWord }

// Example reads example i from the file; after Close, an error matching
// ErrClosed. It is safe for concurrent use.
func (d *Dataset) Example(i int) (Example, error) {
	if d.closed.Load() {
		return Example{}, fmt.Errorf("loader: Dataset.Example: the dataset %s is %w", d.path, ErrClosed)
	}
	if i < 0 || i >= len(d.offsets) {
		return Example{}, fmt.Errorf("loader: example %d of %d", i, len(d.offsets))
	}
	off := d.offsets[i]
	x, err := NewExampleReader(io.NewSectionReader(d.f, off, d.size-off), d.path, int(d.lines[i]), d.cfg)
	if err != nil {
		return Example{}, err
	}
	ex, err := x.Next()
	if errors.Is(err, fs.ErrClosed) && d.closed.Load() {
		return Example{}, fmt.Errorf("loader: Dataset.Example: the dataset %s is %w: %w", d.path, ErrClosed, err)
	}
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("loader: %s: example %d is gone (the file changed after it was indexed): %w", d.path, i, io.ErrUnexpectedEOF)
	}
	return ex, err
}

// Close closes the file OpenDataset opened. Example then returns an error
// matching ErrClosed (for a NewDataset too, whose source Close leaves
// open); the vocabularies, Len, Tokens, Length and LongestWord stay. A
// second Close does nothing.
func (d *Dataset) Close() error {
	if d.closed.Swap(true) || d.closer == nil {
		return nil
	}
	return d.closer.Close()
}
