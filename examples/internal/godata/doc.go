// Package godata derives the default datasets of the tagger and classify
// examples from the Go standard library's source under GOROOT/src, so
// that they train out of the box with nothing to download: a tagging
// dataset (each token of a line of Go tagged with its syntactic role) and
// a classification dataset (a run of a function's tokens labelled with
// the part of the library it comes from). Both are read from the
// hand-written Go files of GOROOT/src: not _test.go files, not in testdata
// or vendor directories (nor ones whose names start with "." or "_"), and
// without the "// Code generated ... DO NOT EDIT." line. A file that
// go/parser cannot parse (a GOROOT newer than the program) is left out
// and counted.
//
// # Tokens
//
// The tokens are those of go/scanner: identifiers, keywords, operators,
// punctuation and literals, without comments and without the semicolons
// the scanner inserts at line ends (a semicolon written in the source is a
// token). Normalize gives their text: the source's, except that a string
// literal longer than 32 bytes or holding anything but printable ASCII
// (tabs, the newlines of raw strings, non-ASCII text) becomes "…" in
// double quotes, and such a rune literal '…'. Long strings are messages
// and data rather than Go, and the placeholders keep the word and
// character vocabularies small and every token free of the tabs and
// newlines the TSV format cannot hold. Identifiers are kept as written,
// non-ASCII ones included.
//
// # Tagging
//
// TagFile makes a sentence of each source line of at least MinSentence
// tokens, cut after MaxSentence, and tags every token with its role as
// go/ast sees it in the whole file. An identifier's tag depends on both
// sides of it: x in "x := f(x)" is decl then var, f is call because "("
// follows; fmt in "fmt.Println" is pkg (it names an import) where f in
// "f.Name" is var; Name is call before "(" and sel otherwise. The 16
// tags, with examples (the tagged token is the one named):
//
//	decl     a name being declared: x in "x := 1" and "var x int", i and v in
//	         "for i, v := range xs", T in "type T struct", f in "func f()",
//	         M in "func (r *T) M()", a label ("outer:")
//	param    a parameter, result, receiver or type parameter name: a in
//	         "func f(a int)", err in "(n int, err error)", r in "func (r *T)",
//	         T in "func Map[T any]"
//	field    a name declared in a struct or interface type, or a key of a
//	         composite literal: Name in "struct{ Name string }", Read in
//	         "interface{ Read(p []byte) (int, error) }", Name in "T{Name: s}"
//	type     a name in a type position: int in "var n int", T in "T{}",
//	         "x.(T)" and "case T:", Buffer in "bytes.Buffer", byte in "[]byte(s)"
//	pkg      a package name: fmt in "fmt.Println", bytes in "bytes.Buffer",
//	         p in "package p", str in `import str "strings"`
//	call     the function or method called: f in "f(x)", Println in
//	         "fmt.Println(x)", Close in "r.Close()", Map in "Map[int](xs)"
//	sel      a selected name not called: Name in "f.Name", EOF in "io.EOF"
//	var      any other use of a name: x in "f(x)", err in "return err", the
//	         label in "break outer", a builtin name used as a value ("max := 3")
//	builtin  a predeclared function called (len in "len(s)", make, append...)
//	         or constant (true, false, nil, iota)
//	kw       a keyword: func, if, return, map, chan, range...
//	op       an operator: + := == && <- * & ... ~ ++
//	punct    punctuation: ( ) [ ] { } , ; . :
//	int      an integer literal: 42, 0x1F, 1_000
//	float    a floating-point or imaginary literal: 1.5, 1e9, 2i
//	str      a string literal: "x", `raw`, "…"
//	char     a rune literal: 'a', '\n', '…'
//
// The tags come from syntax alone, without type checking, so a few are
// guesses: a conversion to a named type reads as a call (T in "T(x)"; to
// a predeclared or literal type it is a type: "int(x)", "[]byte(s)"); a
// key of a composite literal whose type is not a map or array type
// literal is taken for a field; "x[i](y)" is an instantiation when i
// looks like a type (a predeclared type, or capitalised) and an indexed
// call otherwise; an identifier that names an import of the file is a
// package even where a local variable shadows it. Labels declared and
// used never make a sentence of their own (gofmt puts them on lines of
// one or two tokens), hence no tag of their own. A tagger that reads the
// line in one direction only cannot tell x in "x := f(x)" from x in
// "x = f(x)" or a call from a selection; a bidirectional one can.
//
// Write's tagging dataset keeps about one sentence in 13, chosen by a
// hash of the file's path and the line number, so the sentences are
// spread evenly over the whole library. From Go 1.26's source (3,427
// files) that is 28,913 training sentences of 271,115 tokens and 4,106
// validation sentences of 37,471 tokens. The training tags, most frequent
// first: punct 40.7%, var 14.2%, op 9.4%, kw 5.6%, sel 5.0%, type 4.5%,
// call 4.3%, decl 3.9%, int 3.3%, pkg 2.9%, param 2.0%, builtin 1.8%, str
// 1.5%, field 0.7%, char 0.25%, float 0.07%. Identifiers are 39% of the
// tokens. A baseline that gives each token its most frequent training
// tag (and var to a token never seen) is right on 86.1% of the
// validation tokens and 67.1% of the validation identifiers.
//
// # Classification
//
// Chunks cuts each function declaration with a body into runs of
// MaxChunk tokens from its func keyword (at most MaxChunksPerFunc runs; a
// function, or a last run, shorter than MinChunk tokens gives none), and
// ClassOf labels them with the part of the library their file is in,
// one of 9 classes by directory under GOROOT/src:
//
//	runtime   runtime, internal/runtime
//	crypto    crypto
//	net       net (net/http included)
//	encoding  encoding, compress, archive
//	go        go (go/ast, go/parser, go/types...)
//	compiler  cmd/compile, but for its types2 and syntax packages
//	os        os, syscall, internal/syscall, internal/poll
//	math      math, strconv, internal/strconv
//	text      text, html, regexp, strings, bytes, unicode, fmt
//
// Other directories (cmd/go, image, sort...) are in no class. The
// compiler's types2 and syntax packages are left out because go/types and
// go/parser are their twins: many go/types files are generated from
// types2's (and left out as generated), the rest are hand-written copies.
//
// Write's classification dataset is balanced: every class has as many
// training chunks as the smallest (at most 2,000), and as many validation
// chunks as the smallest, so the majority-class baseline is 1/9 (11.1%)
// of either split. The chunks kept are those with the smallest hashes of
// their file's path and their place in it. From Go 1.26's source (2,195
// files with a class) that is 1,314 training and 146 validation chunks
// per class: 11,826 training chunks of 660,585 tokens and 1,314
// validation chunks of 73,890 tokens; the math class is the smallest.
//
// # Splits
//
// The training and validation splits are disjoint by source file: no file
// gives examples to both. For tagging, a file is in validation when a
// hash of its path (relative to GOROOT/src) says so, one file in 10. For
// classification, each class's files go to validation in the order of
// that hash until they hold a tenth of the class's chunks, so that every
// class has validation chunks.
//
// # Files
//
// Write writes the tagging dataset as TSV (token<TAB>tag, a blank line
// after each sentence) and the classification dataset as JSON lines
// ({"tokens": [...], "label": "..."}), the formats loader.OpenDataset
// reads, into a directory the caller chooses (a cache). Their names hold
// a version of this generator and a hash of the source files' names,
// sizes and modification times, so a new Go or a new generator makes new
// files while the same Go reuses the files without parsing anything.
// The same GOROOT gives byte-identical files: directories are walked in
// lexical order and nothing depends on map order or the time. Each file
// is written under a temporary name and renamed, and a description of
// the dataset (its counts, a .json file) is renamed last: Write reuses a
// dataset only when its description is there, so a crash never leaves a
// half-written file that a later Write reuses. Two Writes into one
// directory at once write the same bytes and rename them in turn.
//
// Write works on one goroutine. On a 2-core virtual machine, Go 1.26's
// source takes about 1.8 seconds to turn into the tagging dataset and
// 0.9 seconds into the classification one; reusing either takes about 30
// milliseconds, the walk of GOROOT/src.
//
// # Errors
//
// A missing GOROOT/src is an error that tells the user to pass -data, as
// is a GOROOT that gives no validation example or no function of a
// class. Write checks its context between source files and returns an
// error wrapping the context's error when it is cancelled; it then leaves
// no file behind. TagFile and Chunks return go/parser's error for a file
// that does not parse.
//
// # Example
//
//	files, err := godata.Write(ctx, "", cacheDir, godata.Tagging)
//	if err != nil {
//		return err
//	}
//	train, err := loader.OpenDataset(ctx, files.Train.Path, loader.DatasetConfig{})
package godata
