package godata

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Kind is which dataset Write writes.
type Kind int

const (
	// Tagging is the token-tagging dataset: TSV, token<TAB>tag.
	Tagging Kind = iota + 1
	// Classification is the function-classification dataset: JSON lines,
	// {"tokens": [...], "label": ...}.
	Classification
)

// String returns "tagging" or "classification".
func (k Kind) String() string {
	switch k {
	case Tagging:
		return "tagging"
	case Classification:
		return "classification"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// generator names the files of each kind and says which version of this
// package's output they hold: change the version whenever the output
// changes (tags, classes, sampling, normalisation), so that files written
// before are not reused.
const generator = "v1"

// Sampling and splitting; changing one changes the output (see generator).
const (
	// sentenceEvery keeps about one line in sentenceEvery: the lines of
	// GOROOT/src (Go 1.26) make some 370,000 sentences, about 13 times
	// the size aimed at (a training run of a minute or two on a CPU).
	sentenceEvery = 13
	// validationEvery puts about one source file in validationEvery in
	// the validation split (for classification, files holding one chunk
	// in validationEvery of each class).
	validationEvery = 10
	// maxPerClass caps the training chunks of each class (and
	// maxPerClass/9 its validation chunks); every class gets as many as
	// the smallest, up to this.
	maxPerClass = 2000
)

// Split is one file of a dataset and what it holds.
type Split struct {
	// Path is the file.
	Path string `json:"-"`
	// Examples is the number of sentences (tagging) or chunks
	// (classification); Tokens the number of tokens in them.
	Examples int `json:"examples"`
	Tokens   int `json:"tokens"`
	// Labels counts the tags (tagging, per token) or the labels
	// (classification, per chunk).
	Labels map[string]int `json:"labels"`
}

// Files is a dataset Write wrote or found.
type Files struct {
	// Kind is the dataset's kind.
	Kind Kind `json:"kind"`
	// Train and Validation are the two splits; no source file gives
	// examples to both.
	Train      Split `json:"train"`
	Validation Split `json:"validation"`
	// Sources is the number of source files read (hand-written, with a
	// class for Classification); Unparsed the number of those that did
	// not parse (Go source newer than this program's go/parser) and were
	// left out.
	Sources  int `json:"sources"`
	Unparsed int `json:"unparsed"`
	// Reused says the files were already there and were not written
	// again.
	Reused bool `json:"-"`
}

// Write makes sure that dir holds the dataset kind derived from the Go
// source under goroot/src (goroot "" asks `go env GOROOT`) and returns
// its files. The file names hold the generator's version and a hash of
// the kind and of the names, sizes and modification times of the source
// files, so a new Go installation or a new version of this package writes
// new files, while files already there are reused without reading the
// source again. Files are written under temporary names and renamed, the
// description (a .json file next to them) last, so an interrupted Write
// leaves nothing that a later one reuses. Write creates dir if needed and
// never removes files written for another GOROOT or version.
//
// A missing goroot/src is an error that tells the user to pass -data.
// Write checks ctx between source files and, once ctx is done, returns
// an error wrapping ctx.Err() and leaves no file behind.
func Write(ctx context.Context, goroot, dir string, kind Kind) (Files, error) {
	if kind != Tagging && kind != Classification {
		return Files{}, fmt.Errorf("godata: unknown kind %d", int(kind))
	}
	if err := ctx.Err(); err != nil {
		return Files{}, fmt.Errorf("godata: %w", err)
	}
	src, err := sourceDir(ctx, goroot)
	if err != nil {
		return Files{}, err
	}
	srcs, err := listSources(ctx, src)
	if err != nil {
		return Files{}, err
	}
	base := baseName(kind, srcs)
	ext := map[Kind]string{Tagging: ".tsv", Classification: ".jsonl"}[kind]
	trainPath := filepath.Join(dir, base+"-train"+ext)
	valPath := filepath.Join(dir, base+"-val"+ext)
	descPath := filepath.Join(dir, base+".json")
	if fl, ok := reuse(descPath, trainPath, valPath, kind); ok {
		return fl, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, fmt.Errorf("godata: %w", err)
	}
	train, err := newOutput(trainPath)
	if err != nil {
		return Files{}, err
	}
	defer train.abort()
	val, err := newOutput(valPath)
	if err != nil {
		return Files{}, err
	}
	defer val.abort()

	fl := Files{Kind: kind}
	switch kind {
	case Tagging:
		err = writeTagging(ctx, srcs, train, val, &fl)
	case Classification:
		err = writeClassification(ctx, srcs, train, val, &fl)
	}
	if err != nil {
		return Files{}, err
	}
	if fl.Train.Examples == 0 || fl.Validation.Examples == 0 {
		return Files{}, fmt.Errorf("godata: %s gives %d training and %d validation examples for the %s data; pass -data", src, fl.Train.Examples, fl.Validation.Examples, kind)
	}
	if err := train.commit(); err != nil {
		return Files{}, err
	}
	if err := val.commit(); err != nil {
		return Files{}, err
	}
	desc, err := newOutput(descPath)
	if err != nil {
		return Files{}, err
	}
	defer desc.abort()
	b, err := json.MarshalIndent(fl, "", "\t")
	if err != nil {
		return Files{}, fmt.Errorf("godata: %w", err)
	}
	if _, err := desc.w.Write(append(b, '\n')); err != nil {
		return Files{}, fmt.Errorf("godata: %w", err)
	}
	if err := desc.commit(); err != nil {
		return Files{}, err
	}
	fl.Train.Path, fl.Validation.Path = trainPath, valPath
	return fl, nil
}

// sourceDir is goroot/src, goroot "" asking `go env GOROOT`.
func sourceDir(ctx context.Context, goroot string) (string, error) {
	if goroot == "" {
		out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
		if goroot = strings.TrimSpace(string(out)); err != nil || goroot == "" {
			return "", fmt.Errorf("godata: no Go installation found for the default data (go env GOROOT: %v); set GOROOT or pass -data", cmdError(err))
		}
	}
	dir := filepath.Join(goroot, "src")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("godata: the default data is derived from Go's own source, and %s is not a directory; pass -data", dir)
	}
	return dir, nil
}

// cmdError is err of a command that failed, with what it wrote to
// standard error, or "empty output" for a command that succeeded.
func cmdError(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "empty output"
	case errors.As(err, &ee) && len(ee.Stderr) > 0:
		return fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err.Error()
}

// source is a Go file under GOROOT/src.
type source struct {
	rel, path string // slash-separated, relative to GOROOT/src; on disk
	size      int64
	modTime   int64 // Unix nanoseconds
}

// listSources lists the Go files under src that may be hand-written
// library code, in lexical order of their paths: outside testdata and
// vendor directories and directories the go command ignores (names
// starting with "." or "_"), not _test.go files. Generated files are
// left out when read (see generated).
func listSources(ctx context.Context, src string) ([]source, error) {
	var out []source
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != src && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out = append(out, source{rel: filepath.ToSlash(rel), path: p, size: fi.Size(), modTime: fi.ModTime().UnixNano()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("godata: listing %s: %w", src, err)
	}
	return out, nil
}

// baseName is the file name prefix of a dataset: its kind, the generator
// version and a hash of the kind and the source files.
func baseName(kind Kind, srcs []source) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s %d\n", generator, kind, len(srcs))
	for _, s := range srcs {
		fmt.Fprintf(h, "%q %d %d\n", s.rel, s.size, s.modTime)
	}
	prefix := map[Kind]string{Tagging: "gotags", Classification: "gofuncs"}[kind]
	return prefix + "-" + generator + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// reuse returns the dataset described by descPath if it and both of its
// files are there.
func reuse(descPath, trainPath, valPath string, kind Kind) (Files, bool) {
	b, err := os.ReadFile(descPath)
	if err != nil {
		return Files{}, false
	}
	var fl Files
	if err := json.Unmarshal(b, &fl); err != nil || fl.Kind != kind {
		return Files{}, false
	}
	for _, p := range []string{trainPath, valPath} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return Files{}, false
		}
	}
	fl.Train.Path, fl.Validation.Path, fl.Reused = trainPath, valPath, true
	return fl, true
}

// output is a file being written under a temporary name in its
// directory, renamed to its name by commit.
type output struct {
	path string
	f    *os.File
	w    *bufio.Writer
	done bool
}

func newOutput(path string) (*output, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("godata: %w", err)
	}
	if err := f.Chmod(0o644); err != nil { // CreateTemp's 0600 is for secrets
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("godata: %w", err)
	}
	return &output{path: path, f: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

// commit writes out what is buffered, closes the file and renames it.
func (o *output) commit() error {
	err := o.w.Flush()
	if err == nil {
		err = o.f.Sync()
	}
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(o.f.Name(), o.path)
	}
	if err != nil {
		os.Remove(o.f.Name())
		return fmt.Errorf("godata: writing %s: %w", o.path, err)
	}
	o.done = true
	return nil
}

// abort removes the temporary file of an output not committed.
func (o *output) abort() {
	if !o.done {
		o.f.Close()
		os.Remove(o.f.Name())
		o.done = true
	}
}

// generated matches Go's marker of a generated file
// (https://go.dev/s/generatedcode).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// eachSource calls fn with the content of every hand-written source file
// of srcs that keep accepts (nil: all), in order, checking ctx before
// each.
func eachSource(ctx context.Context, srcs []source, keep func(rel string) bool, fn func(s source, b []byte) error) error {
	for _, s := range srcs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("godata: reading the Go source: %w", err)
		}
		if keep != nil && !keep(s.rel) {
			continue
		}
		b, err := os.ReadFile(s.path)
		if err != nil {
			return fmt.Errorf("godata: %w", err)
		}
		if bytes.Contains(b, []byte(" DO NOT EDIT.")) && generated.Match(b) { // the regexp alone takes a sixth of the time
			continue
		}
		if err := fn(s, b); err != nil {
			return err
		}
	}
	return nil
}

// hash64 is the FNV-1a hash of parts, each followed by a zero byte.
func hash64(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		io.WriteString(h, p)
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// validation says whether the file at rel belongs to the validation split.
func validation(rel string) bool {
	return hash64("split", rel)%validationEvery == 0
}

// count adds an example to a split's counts.
func (s *Split) count(tokens int, labels ...string) {
	if s.Labels == nil {
		s.Labels = map[string]int{}
	}
	s.Examples++
	s.Tokens += tokens
	for _, l := range labels {
		s.Labels[l]++
	}
}

// writeTagging writes the sentences of about one line in sentenceEvery of
// every hand-written file (chosen by a hash of the file's path and the
// line number, so evenly spread over the library), each file's into
// train or val.
func writeTagging(ctx context.Context, srcs []source, train, val *output, fl *Files) error {
	return eachSource(ctx, srcs, nil, func(s source, b []byte) error {
		fl.Sources++
		sents, err := TagFile(s.rel, b)
		if err != nil {
			fl.Unparsed++
			return nil
		}
		out, split := train, &fl.Train
		if validation(s.rel) {
			out, split = val, &fl.Validation
		}
		for _, st := range sents {
			if hash64("line", s.rel, strconv.Itoa(st.Line))%sentenceEvery != 0 {
				continue
			}
			for i, tok := range st.Tokens {
				out.w.WriteString(tok)
				out.w.WriteByte('\t')
				out.w.WriteString(st.Tags[i])
				out.w.WriteByte('\n')
			}
			out.w.WriteByte('\n')
			split.count(len(st.Tokens), st.Tags...)
		}
		return nil
	})
}

// classified is a chunk of a class, with where it comes from and the key
// that decides whether it is kept.
type classified struct {
	key    uint64
	file   int // index of the source file in srcs
	seq    int // index of the chunk in the file
	label  string
	tokens []string
}

// writeClassification writes the chunks of the functions of the classes'
// directories. Each class's files are split first: in the order of a hash
// of their paths, files go to validation until they hold a tenth of the
// class's chunks. Then every class keeps as many training chunks as the
// smallest class has (at most maxPerClass), and as many validation chunks
// as the smallest class has (at most maxPerClass/9), the chunks with the
// smallest hashes of their file's path and their place in it (so spread
// evenly over the class's files). The files list them in source order.
func writeClassification(ctx context.Context, srcs []source, train, val *output, fl *Files) error {
	byClass := map[string][]classified{}
	keep := func(rel string) bool { _, ok := ClassOf(rel); return ok }
	index := map[string]int{}
	for i, s := range srcs {
		index[s.rel] = i
	}
	err := eachSource(ctx, srcs, keep, func(s source, b []byte) error {
		fl.Sources++
		chunks, err := Chunks(s.rel, b)
		if err != nil {
			fl.Unparsed++
			return nil
		}
		label, _ := ClassOf(s.rel)
		for i, c := range chunks {
			key := hash64("chunk", s.rel, strconv.Itoa(i))
			byClass[label] = append(byClass[label], classified{key: key, file: index[s.rel], seq: i, label: label, tokens: c.Tokens})
		}
		return nil
	})
	if err != nil {
		return err
	}
	trainPool, valPool := map[string][]classified{}, map[string][]classified{}
	perTrain, perVal := maxPerClass, maxPerClass/(validationEvery-1)
	for _, c := range Classes() {
		cs := byClass[c]
		if len(cs) == 0 {
			return fmt.Errorf("godata: the Go source has no functions of the class %q (in %s/); pass -data", c, strings.Join(classDirs(c), "/, "))
		}
		isVal := validationFiles(srcs, cs)
		for _, x := range cs {
			if isVal[x.file] {
				valPool[c] = append(valPool[c], x)
			} else {
				trainPool[c] = append(trainPool[c], x)
			}
		}
		perTrain, perVal = min(perTrain, len(trainPool[c])), min(perVal, len(valPool[c]))
	}
	for _, sp := range []struct {
		pool  map[string][]classified
		per   int
		out   *output
		split *Split
	}{{trainPool, perTrain, train, &fl.Train}, {valPool, perVal, val, &fl.Validation}} {
		var kept []classified
		for _, c := range Classes() {
			cs := sp.pool[c]
			slices.SortFunc(cs, func(a, b classified) int {
				return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.file, b.file), cmp.Compare(a.seq, b.seq))
			})
			kept = append(kept, cs[:sp.per]...)
		}
		slices.SortFunc(kept, func(a, b classified) int {
			return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.seq, b.seq))
		})
		enc := json.NewEncoder(sp.out.w)
		enc.SetEscapeHTML(false)
		for _, c := range kept {
			if err := enc.Encode(struct {
				Tokens []string `json:"tokens"`
				Label  string   `json:"label"`
			}{c.tokens, c.label}); err != nil {
				return fmt.Errorf("godata: %w", err)
			}
			sp.split.count(len(c.tokens), c.label)
		}
	}
	return nil
}

// validationFiles chooses the validation files of one class's chunks cs
// (by index in srcs): in the order of a hash of their paths, until they
// hold a tenth of cs.
func validationFiles(srcs []source, cs []classified) map[int]bool {
	counts := map[int]int{}
	var files []int
	for _, c := range cs {
		if counts[c.file] == 0 {
			files = append(files, c.file)
		}
		counts[c.file]++
	}
	slices.SortFunc(files, func(a, b int) int {
		return cmp.Or(cmp.Compare(hash64("split", srcs[a].rel), hash64("split", srcs[b].rel)), cmp.Compare(a, b))
	})
	want := (len(cs) + validationEvery - 1) / validationEvery
	isVal, n := map[int]bool{}, 0
	for _, f := range files {
		if n >= want {
			break
		}
		isVal[f], n = true, n+counts[f]
	}
	return isVal
}

// classDirs is the directories of class c.
func classDirs(c string) []string {
	for _, cl := range classes {
		if cl.name == c {
			return cl.dirs
		}
	}
	return nil
}
