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
// # Errors
//
// TagFile and Chunks return go/parser's error for a file that does not
// parse.
package godata
