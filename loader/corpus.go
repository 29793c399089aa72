package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// corpusMaxOpen bounds the files a directory corpus keeps open while idle.
// A file being read is never closed under its reader, so the number open at
// once is at most corpusMaxOpen plus the number of concurrent ReadAt calls.
const corpusMaxOpen = 32

// Corpus is a read-only byte sequence: one file, the regular files of a
// directory tree read as one continuous stream, or any io.ReaderAt with a
// size. Offsets are corpus offsets, counted from the first byte of the first
// file; the bytes of one file follow those of the previous one directly, with
// nothing in between, so a character may begin in one file and end in the
// next.
//
// A Corpus is safe for concurrent use. Its size is fixed when it is created:
// a file that grows afterwards is read up to its old size, one that shrinks
// makes ReadAt fail.
type Corpus struct {
	name  string // the path given to Open, or the name given to NewCorpus
	size  int64
	parts []corpusPart // in stream order; empty files are left out
	files *corpusFiles // open file handles; nil for NewCorpus
	// skipped are the files of a directory left out as not text, in
	// stream order.
	skipped []SkippedFile
	closed  atomic.Bool
}

// SkippedFile is a file of a directory that Open left out of the corpus
// because it is not text.
type SkippedFile struct {
	// Path is the directory given to Open joined with the file's path
	// under it.
	Path string
	// Reason says how the file's start showed it is not text.
	Reason SkipReason
}

// SkipReason is why Open left a file of a directory out.
type SkipReason string

const (
	// SkipBinary is a file whose first sniffLen bytes (8 KiB) hold a NUL
	// byte or bytes that are not UTF-8, as git and grep tell binary files
	// (they look for a NUL in the first 8,000 bytes); the bytes of a
	// character cut by the file's start or by the end of those 8 KiB do
	// not count, since a character may span files.
	SkipBinary SkipReason = "binary"
	// SkipCheckpoint is a safetensors file, such as the checkpoint a
	// training run writes into the directory it reads: 8 bytes of
	// little-endian header length N, a header that starts with '{', and
	// at least 8+N bytes.
	SkipCheckpoint SkipReason = "checkpoint"
)

// sniffLen is how much of each file of a directory Open reads to tell
// text from the rest.
const sniffLen = 8 << 10

// corpusPart is one file (or the whole source of NewCorpus) within the stream.
type corpusPart struct {
	name  string      // for errors and Where: the path as Open found it
	start int64       // corpus offset of the part's first byte
	size  int64       // bytes
	src   io.ReaderAt // the source when not a file on disk; nil: open name
}

// Open opens the file or directory at path as a corpus.
//
// A directory is walked recursively and its regular files are read in the
// lexical (byte-wise) order of their slash-separated paths relative to path,
// so "a.txt" comes before "a/b.txt" ('.' < '/') and "B" before "a". Names
// starting with "." (hidden files and directories such as .git) are skipped,
// and so is everything that is not a regular file or a directory (devices,
// sockets, pipes). Symbolic links are followed; a directory reached a second
// time, through a link or a link cycle, is skipped. A link that leads
// nowhere is an error. The root itself is opened even when its name starts
// with ".".
//
// Files of a directory that are not text are left out and listed by
// Skipped: Open reads the first 8 KiB of each and leaves out a file whose
// start is a safetensors header (SkipCheckpoint: a run's own checkpoint,
// written into the directory it trains on) or holds a NUL byte or bytes
// that are not UTF-8 (SkipBinary). Invalid UTF-8 further into a file is
// still Tokenize's error, with its offset. A single file given as path is
// taken as it is, whatever it holds. A training run's lock and temporary
// files (".NAME.lock", ".NAME.tmp-gocurrent-*") are hidden names, left
// out with the rest.
//
// A directory without regular files, or whose files are all empty or not
// text, is not an error: the corpus has size 0 and Tokenize reports
// ErrEmpty.
//
// Files are opened when first read and closed when a small cache of open
// files is full, so a directory of any number of files stays within the
// process's file descriptor limit. A single file is opened at once, so Open
// reports a file that cannot be read. The caller closes the corpus with
// Close.
func Open(path string) (*Corpus, error) { return OpenFunc(path, nil) }

// OpenFunc is Open for a directory whose files are chosen by keep, called
// with each regular file's slash-separated path relative to path (keep nil
// takes every file). A file given as path is always taken.
func OpenFunc(path string, keep func(rel string) bool) (*Corpus, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("loader: open corpus: %w", err)
	}
	c := &Corpus{name: path, files: &corpusFiles{open: make(map[int]*corpusHandle)}}
	switch {
	case fi.Mode().IsRegular():
		if fi.Size() > 0 {
			c.parts = []corpusPart{{name: path, size: fi.Size()}}
			c.size = fi.Size()
			h, err := c.files.acquire(0, path)
			if err != nil {
				return nil, err
			}
			c.files.release(h)
		}
	case fi.IsDir():
		var found []corpusFound
		visited := make(map[string]bool)
		if err := walkCorpusDir(path, "", visited, &found); err != nil {
			return nil, err
		}
		slices.SortFunc(found, func(a, b corpusFound) int { return strings.Compare(a.rel, b.rel) })
		buf := make([]byte, sniffLen)
		for _, f := range found {
			if f.size == 0 || (keep != nil && !keep(f.rel)) {
				continue
			}
			name := filepath.Join(path, filepath.FromSlash(f.rel))
			why, err := sniff(name, f.size, buf)
			if err != nil {
				return nil, err
			}
			if why != "" {
				c.skipped = append(c.skipped, SkippedFile{Path: name, Reason: why})
				continue
			}
			c.parts = append(c.parts, corpusPart{name: name, start: c.size, size: f.size})
			c.size += f.size
		}
	default:
		return nil, fmt.Errorf("loader: open corpus %s: not a regular file or directory (mode %v)", path, fi.Mode())
	}
	return c, nil
}

// sniff reads the start of the file at name, size bytes long when the
// directory was walked, into buf and says why the file is not text: ""
// when it may be (the corpus's reads check the rest).
func sniff(name string, size int64, buf []byte) (SkipReason, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", fmt.Errorf("loader: open corpus: %w", err)
	}
	defer f.Close() // read-only: nothing to lose on close
	n, err := io.ReadFull(f, buf[:min(int64(len(buf)), size)])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", fmt.Errorf("loader: open corpus: %s: %w", name, err)
	}
	return sniffed(buf[:n], size), nil
}

// sniffed says why a file of size bytes that starts with b is not text.
func sniffed(b []byte, size int64) SkipReason {
	if len(b) > 8 && b[8] == '{' {
		if n := binary.LittleEndian.Uint64(b); n <= uint64(size-8) {
			return SkipCheckpoint
		}
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return SkipBinary
	}
	// The end of a character begun in the previous file (at most 3
	// continuation bytes) is the corpus's to check.
	i := 0
	for i < len(b) && i < utf8.UTFMax-1 && !utf8.RuneStart(b[i]) {
		i++
	}
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			if !utf8.FullRune(b[i:]) {
				break // cut by the end of b: the corpus checks the rest
			}
			return SkipBinary
		}
		i += n
	}
	return ""
}

// Skipped lists the files of a directory that Open left out because they
// are not text, in the order the corpus would have read them; nil for a
// single file, NewCorpus, or a directory of text only.
func (c *Corpus) Skipped() []SkippedFile { return slices.Clone(c.skipped) }

// corpusFound is a regular file found while walking a directory corpus.
type corpusFound struct {
	rel  string // slash-separated path relative to the root
	size int64
}

// walkCorpusDir appends the regular files under dir to out. visited holds the
// resolved absolute paths of the directories walked so far; a directory is
// walked once, which also breaks symbolic link cycles.
func walkCorpusDir(dir, rel string, visited map[string]bool, out *[]corpusFound) error {
	real, err := filepath.EvalSymlinks(dir)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return fmt.Errorf("loader: open corpus: %w", err)
	}
	if visited[real] {
		return nil
	}
	visited[real] = true
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("loader: open corpus: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		full := filepath.Join(dir, name)
		var fi fs.FileInfo
		if e.Type()&fs.ModeSymlink != 0 {
			fi, err = os.Stat(full) // follows the link
		} else {
			fi, err = e.Info()
		}
		if err != nil {
			return fmt.Errorf("loader: open corpus: %w", err)
		}
		switch {
		case fi.IsDir():
			if err := walkCorpusDir(full, path.Join(rel, name), visited, out); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			*out = append(*out, corpusFound{rel: path.Join(rel, name), size: fi.Size()})
		}
	}
	return nil
}

// NewCorpus returns a corpus of the first size bytes of r, called name in
// errors and by Where. r must allow concurrent ReadAt calls, as io.ReaderAt
// requires. Close does not close r.
func NewCorpus(r io.ReaderAt, size int64, name string) *Corpus {
	if size < 0 {
		panic(fmt.Sprintf("loader: NewCorpus: negative size %d", size))
	}
	c := &Corpus{name: name, size: size}
	if size > 0 {
		c.parts = []corpusPart{{name: name, size: size, src: r}}
	}
	return c
}

// Size returns the length of the corpus in bytes.
func (c *Corpus) Size() int64 { return c.size }

// ReadAt reads len(p) bytes at corpus offset off, across file boundaries,
// with io.ReaderAt semantics: fewer than len(p) bytes come with an error,
// io.EOF (unwrapped) when the corpus ends first. Other errors are prefixed
// "loader: " and name the file; a file that became shorter than it was when
// the corpus was opened gives an error wrapping io.ErrUnexpectedEOF, a
// closed corpus one wrapping both ErrClosed and fs.ErrClosed. ReadAt is safe for concurrent use.
func (c *Corpus) ReadAt(p []byte, off int64) (int, error) {
	if c.closed.Load() {
		return 0, fmt.Errorf("loader: Corpus.ReadAt: the corpus %s is %w: %w", c.name, ErrClosed, fs.ErrClosed)
	}
	if off < 0 {
		return 0, fmt.Errorf("loader: read corpus %s: negative offset %d", c.name, off)
	}
	if off >= c.size {
		return 0, io.EOF
	}
	eof := false
	if int64(len(p)) > c.size-off {
		p = p[:c.size-off]
		eof = true
	}
	i := c.partAt(off)
	n := 0
	for n < len(p) {
		part := &c.parts[i]
		inPart := off + int64(n) - part.start
		m := int(min(int64(len(p)-n), part.size-inPart))
		if err := c.readPart(i, p[n:n+m], inPart); err != nil {
			return n, err
		}
		n += m
		i++
	}
	if eof {
		return n, io.EOF
	}
	return n, nil
}

// partAt returns the index of the part holding corpus offset off, which must
// be in [0, c.size).
func (c *Corpus) partAt(off int64) int {
	return sort.Search(len(c.parts), func(i int) bool {
		return c.parts[i].start+c.parts[i].size > off
	})
}

// readPart fills p from offset off of part i, which holds all of p.
func (c *Corpus) readPart(i int, p []byte, off int64) error {
	part := &c.parts[i]
	var (
		n   int
		err error
	)
	if part.src != nil {
		n, err = part.src.ReadAt(p, off)
	} else {
		h, aerr := c.files.acquire(i, part.name)
		if aerr != nil {
			return aerr
		}
		n, err = h.f.ReadAt(p, off)
		c.files.release(h)
	}
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("loader: %s: %d bytes long when opened, now ends before byte %d: %w",
			part.name, part.size, off+int64(n), io.ErrUnexpectedEOF)
	}
	if errors.Is(err, fs.ErrClosed) && c.closed.Load() {
		return fmt.Errorf("loader: Corpus.ReadAt: the corpus %s is %w: %w", c.name, ErrClosed, fs.ErrClosed)
	}
	return fmt.Errorf("loader: %s: %w", part.name, err)
}

// Where returns the file holding corpus offset off and the offset within
// it, for error messages. An offset before the corpus is reported in its
// first file, one at or past its end in its last file (at an offset past
// that file's end). A corpus from NewCorpus, or one without files, reports
// its own name and off.
func (c *Corpus) Where(off int64) (name string, fileOff int64) {
	if len(c.parts) == 0 {
		return c.name, off
	}
	i := 0
	switch {
	case off >= c.size:
		i = len(c.parts) - 1
	case off > 0:
		i = c.partAt(off)
	}
	return c.parts[i].name, off - c.parts[i].start
}

// Close closes the files Open opened; a read in progress finishes first.
// ReadAt fails after Close. Close does not close the source of NewCorpus.
// Closing twice returns nil.
func (c *Corpus) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.files == nil {
		return nil
	}
	if err := c.files.close(); err != nil {
		return fmt.Errorf("loader: close corpus %s: %w", c.name, err)
	}
	return nil
}

// corpusFiles is the cache of open files of a corpus opened from disk.
type corpusFiles struct {
	mu     sync.Mutex
	open   map[int]*corpusHandle // by part index
	clock  uint64                // advances on every acquire; orders use
	closed bool
}

// corpusHandle is an open file; refs counts the reads using it, which keep
// it from being closed.
type corpusHandle struct {
	part    int
	f       *os.File
	refs    int
	lastUse uint64
}

// acquire returns an open handle for part i at path; the caller releases it.
func (fc *corpusFiles) acquire(i int, path string) (*corpusHandle, error) {
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return nil, fmt.Errorf("loader: read %s: the corpus is %w: %w", path, ErrClosed, fs.ErrClosed)
	}
	fc.clock++
	if h, ok := fc.open[i]; ok {
		h.refs++
		h.lastUse = fc.clock
		fc.mu.Unlock()
		return h, nil
	}
	fc.mu.Unlock()

	f, err := os.Open(path) // outside the lock: other reads go on meanwhile
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}

	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		_ = f.Close() // read-only: nothing to lose on close
		return nil, fmt.Errorf("loader: read %s: the corpus is %w: %w", path, ErrClosed, fs.ErrClosed)
	}
	fc.clock++
	if h, ok := fc.open[i]; ok { // another reader opened it meanwhile
		h.refs++
		h.lastUse = fc.clock
		fc.mu.Unlock()
		_ = f.Close() // read-only: nothing to lose on close
		return h, nil
	}
	var evict *corpusHandle
	if len(fc.open) >= corpusMaxOpen {
		for _, h := range fc.open {
			if h.refs == 0 && (evict == nil || h.lastUse < evict.lastUse) {
				evict = h
			}
		}
		if evict != nil {
			delete(fc.open, evict.part)
		}
	}
	h := &corpusHandle{part: i, f: f, refs: 1, lastUse: fc.clock}
	fc.open[i] = h
	fc.mu.Unlock()
	if evict != nil {
		_ = evict.f.Close() // read-only: nothing to lose on close
	}
	return h, nil
}

// release ends a read using h. Handles left over after close are closed by
// their last reader.
func (fc *corpusFiles) release(h *corpusHandle) {
	fc.mu.Lock()
	h.refs--
	closeNow := fc.closed && h.refs == 0
	if closeNow {
		delete(fc.open, h.part)
	}
	fc.mu.Unlock()
	if closeNow {
		_ = h.f.Close() // read-only: nothing to lose on close
	}
}

// close closes the idle handles; those in use are closed on release.
func (fc *corpusFiles) close() error {
	fc.mu.Lock()
	fc.closed = true
	var idle []*corpusHandle
	for i, h := range fc.open {
		if h.refs == 0 {
			idle = append(idle, h)
			delete(fc.open, i)
		}
	}
	fc.mu.Unlock()
	var errs []error
	for _, h := range idle {
		if err := h.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// openCount returns the number of open files, for tests.
func (fc *corpusFiles) openCount() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return len(fc.open)
}
