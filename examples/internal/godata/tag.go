package godata

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"path"
	"strconv"
	"strings"
)

// The tags, in the order of the package documentation.
const (
	tagNone    uint8 = iota // not decided yet (the default applies)
	tagDecl                 // a name being declared
	tagParam                // a parameter, result, receiver or type parameter name
	tagField                // a field or method name declared in a struct or interface type, a composite literal key
	tagType                 // a name in a type position
	tagPkg                  // a package name
	tagCall                 // the function or method being called
	tagSel                  // a selected field, method or package member, not called
	tagVar                  // any other use of a name
	tagBuiltin              // a predeclared function called, or true, false, nil, iota
	tagKw                   // a keyword
	tagOp                   // an operator
	tagPunct                // punctuation
	tagInt                  // an integer literal
	tagFloat                // a floating-point or imaginary literal
	tagStr                  // a string literal
	tagChar                 // a rune literal
	numTags
)

var tagNames = [numTags]string{
	tagDecl: "decl", tagParam: "param", tagField: "field", tagType: "type",
	tagPkg: "pkg", tagCall: "call", tagSel: "sel", tagVar: "var",
	tagBuiltin: "builtin", tagKw: "kw", tagOp: "op",
	tagPunct: "punct", tagInt: "int", tagFloat: "float", tagStr: "str",
	tagChar: "char",
}

// Tags returns the tags TagFile gives, in the order of the package
// documentation.
func Tags() []string {
	return append([]string(nil), tagNames[1:]...)
}

// Limits of a tagging sentence, in tokens.
const (
	// MinSentence is the fewest tokens of a line that makes a sentence.
	MinSentence = 3
	// MaxSentence is the most tokens a sentence keeps: a longer line is
	// cut after its first MaxSentence tokens.
	MaxSentence = 48
)

// Sentence is the tagged tokens of one source line.
type Sentence struct {
	// Line is the source line, from 1.
	Line int
	// Tokens are the line's Go tokens as Normalize writes them; Tags the
	// tag of each.
	Tokens, Tags []string
}

// TagFile returns the sentences of the Go source file src, named filename
// in errors: each line of at least MinSentence tokens (comments and
// automatically inserted semicolons are not tokens), cut to MaxSentence
// tokens, each token tagged with its syntactic role (see the package
// documentation). A file that does not parse is an error.
func TagFile(filename string, src []byte) ([]Sentence, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("godata: %w", err)
	}
	t := newTagger(fset.File(f.Pos()), f)
	ast.Inspect(f, t.visit)

	var out []Sentence
	var cur Sentence
	flush := func() {
		if len(cur.Tokens) >= MinSentence {
			out = append(out, cur)
		}
		cur = Sentence{}
	}
	err = scanTokens(src, func(line, off int, tok token.Token, text string) {
		if line != cur.Line {
			flush()
			cur.Line = line
		}
		if len(cur.Tokens) < MaxSentence {
			cur.Tokens = append(cur.Tokens, text)
			cur.Tags = append(cur.Tags, tagNames[t.tagOf(off, tok, text)])
		}
	})
	if err != nil {
		return nil, fmt.Errorf("godata: %s: %w", filename, err)
	}
	flush()
	return out, nil
}

// scanTokens calls fn with every token of src in order, with its line
// (from 1), its byte offset and its text as Normalize writes it;
// comments and automatically inserted semicolons are left out.
func scanTokens(src []byte, fn func(line, off int, tok token.Token, text string)) error {
	fset := token.NewFileSet()
	file := fset.AddFile("", -1, len(src))
	var errs scanner.ErrorList
	var s scanner.Scanner
	s.Init(file, src, errs.Add, 0)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.SEMICOLON && lit != ";" {
			continue // inserted at a newline or the end of the file
		}
		// The line as in the file, not as a //line directive says.
		fn(file.PositionFor(pos, false).Line, file.Offset(pos), tok, Normalize(tok, lit))
	}
	return errs.Err()
}

// Limits of the literals Normalize keeps as written.
const maxLiteral = 32

// Normalize is the text a token of kind tok with literal lit (as
// go/scanner returns them) takes in the datasets: the source text, except
// that a string literal longer than 32 bytes, or holding a byte outside
// printable ASCII (a tab, a newline of a raw string, any non-ASCII
// character), becomes the placeholder "…" (in double quotes), and such a
// rune literal '…'. Placeholders keep the vocabulary and the character
// set small (the text of long strings is prose and data, not Go) and keep
// every token free of tabs and newlines, which the TSV format cannot hold.
func Normalize(tok token.Token, lit string) string {
	switch tok {
	case token.STRING, token.CHAR:
		if !printableASCII(lit) || (tok == token.STRING && len(lit) > maxLiteral) {
			if tok == token.CHAR {
				return "'…'"
			}
			return `"…"`
		}
		return lit
	case token.IDENT, token.INT, token.FLOAT, token.IMAG:
		return lit
	}
	return tok.String()
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// The predeclared names of the universe scope, by the tag a use takes.
var (
	builtinFuncs = set("append", "cap", "clear", "close", "complex", "copy", "delete", "imag", "len", "make", "max", "min", "new", "panic", "print", "println", "real", "recover")
	builtinConst = set("true", "false", "nil", "iota")
	builtinTypes = set("any", "bool", "byte", "comparable", "complex64", "complex128", "error", "float32", "float64", "int", "int8", "int16", "int32", "int64", "rune", "string", "uint", "uint8", "uint16", "uint32", "uint64", "uintptr")
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// tagger decides the tags of a file's identifiers from its syntax tree.
// Decisions are taken top-down (ast.Inspect visits a node before its
// children) and the first one for an identifier stands: the parent knows
// the context (a call's function, a field's type), the child only itself.
type tagger struct {
	file    *token.File
	tags    []uint8 // by byte offset of the identifier
	imports map[string]bool
}

func newTagger(file *token.File, f *ast.File) *tagger {
	t := &tagger{file: file, tags: make([]uint8, file.Size()+1), imports: map[string]bool{}}
	for _, imp := range f.Imports {
		if imp.Name != nil {
			if imp.Name.Name != "_" && imp.Name.Name != "." {
				t.imports[imp.Name.Name] = true
			}
			continue
		}
		if p, err := strconv.Unquote(imp.Path.Value); err == nil {
			t.imports[importName(p)] = true
		}
	}
	return t
}

// importName is the name an import path is used by without a renaming:
// its last element, or the one before a major version suffix ("v2").
func importName(p string) string {
	name := path.Base(p)
	if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		if dir := path.Dir(p); dir != "." {
			name = path.Base(dir)
		}
	}
	return name
}

// tagOf is the tag of the token at byte offset off.
func (t *tagger) tagOf(off int, tok token.Token, text string) uint8 {
	switch {
	case tok == token.IDENT:
		if tag := t.tags[off]; tag != tagNone {
			return tag
		}
		switch {
		case builtinConst[text]:
			return tagBuiltin
		case builtinTypes[text]:
			return tagType
		}
		return tagVar
	case tok.IsKeyword():
		return tagKw
	}
	switch tok {
	case token.INT:
		return tagInt
	case token.FLOAT, token.IMAG:
		return tagFloat
	case token.STRING:
		return tagStr
	case token.CHAR:
		return tagChar
	case token.LPAREN, token.RPAREN, token.LBRACK, token.RBRACK, token.LBRACE, token.RBRACE,
		token.COMMA, token.SEMICOLON, token.PERIOD, token.COLON:
		return tagPunct
	}
	return tagOp
}

// set tags e if it is an identifier not tagged yet.
func (t *tagger) set(e ast.Expr, tag uint8) {
	id, ok := e.(*ast.Ident)
	if !ok {
		return
	}
	if off := t.file.Offset(id.Pos()); t.tags[off] == tagNone {
		t.tags[off] = tag
	}
}

func (t *tagger) setAll(ids []*ast.Ident, tag uint8) {
	for _, id := range ids {
		t.set(id, tag)
	}
}

// fields tags the names of a field list with tag and their types as types.
func (t *tagger) fields(fl *ast.FieldList, tag uint8) {
	if fl == nil {
		return
	}
	for _, f := range fl.List {
		t.setAll(f.Names, tag)
		t.typ(f.Type)
	}
}

// typ tags the names of the type expression e. Array lengths are values
// and left alone; function, struct and interface types are tagged when
// ast.Inspect reaches them.
func (t *tagger) typ(e ast.Expr) {
	switch e := e.(type) {
	case *ast.Ident:
		t.set(e, tagType)
	case *ast.SelectorExpr:
		t.set(e.X, tagPkg)
		t.set(e.Sel, tagType)
	case *ast.StarExpr:
		t.typ(e.X)
	case *ast.ParenExpr:
		t.typ(e.X)
	case *ast.ArrayType:
		t.typ(e.Elt)
	case *ast.MapType:
		t.typ(e.Key)
		t.typ(e.Value)
	case *ast.ChanType:
		t.typ(e.Value)
	case *ast.Ellipsis:
		t.typ(e.Elt)
	case *ast.IndexExpr:
		t.typ(e.X)
		t.typ(e.Index)
	case *ast.IndexListExpr:
		t.typ(e.X)
		for _, x := range e.Indices {
			t.typ(x)
		}
	case *ast.BinaryExpr: // a union in a constraint: ~int | ~string
		t.typ(e.X)
		t.typ(e.Y)
	case *ast.UnaryExpr: // ~T
		t.typ(e.X)
	}
}

// isTypeLiteral says whether e (unparenthesised) can only be a type.
func isTypeLiteral(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.ArrayType, *ast.MapType, *ast.ChanType, *ast.FuncType, *ast.StructType, *ast.InterfaceType:
		return true
	case *ast.StarExpr: // (*T)(x): a conversion far more often than a call through a pointer
		return true
	case *ast.ParenExpr:
		return isTypeLiteral(e.X)
	}
	return false
}

// looksLikeType says whether the index of x[index] looks like a type
// argument rather than a value: a type literal, a predeclared type, or a
// capitalised name, possibly of an imported package (type parameters and
// exported types; values are mostly lower case).
func (t *tagger) looksLikeType(e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return builtinTypes[e.Name] || ast.IsExported(e.Name)
	case *ast.SelectorExpr:
		id, ok := e.X.(*ast.Ident)
		return ok && t.imports[id.Name] && ast.IsExported(e.Sel.Name)
	}
	return isTypeLiteral(e)
}

func (t *tagger) visit(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.File:
		t.set(n.Name, tagPkg)
	case *ast.ImportSpec:
		if n.Name != nil {
			t.set(n.Name, tagPkg)
		}
	case *ast.FuncDecl:
		t.set(n.Name, tagDecl)
		t.fields(n.Recv, tagParam)
	case *ast.FuncType:
		t.fields(n.TypeParams, tagParam)
		t.fields(n.Params, tagParam)
		t.fields(n.Results, tagParam)
	case *ast.StructType:
		t.fields(n.Fields, tagField)
	case *ast.InterfaceType:
		t.fields(n.Methods, tagField)
	case *ast.TypeSpec:
		t.set(n.Name, tagDecl)
		t.fields(n.TypeParams, tagParam)
		t.typ(n.Type)
	case *ast.ValueSpec:
		t.setAll(n.Names, tagDecl)
		t.typ(n.Type)
	case *ast.AssignStmt:
		if n.Tok == token.DEFINE {
			for _, e := range n.Lhs {
				t.set(e, tagDecl)
			}
		}
	case *ast.RangeStmt:
		if n.Tok == token.DEFINE {
			t.set(n.Key, tagDecl)
			t.set(n.Value, tagDecl)
		}
	case *ast.LabeledStmt:
		// A label is declared; a branch's label is a use (var). Both
		// are on lines of one or two tokens in gofmt'ed code, which
		// make no sentence: a tag of their own would never be seen.
		t.set(n.Label, tagDecl)
	case *ast.TypeSwitchStmt:
		for _, s := range n.Body.List {
			for _, e := range s.(*ast.CaseClause).List {
				if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
					continue
				}
				t.typ(e)
			}
		}
	case *ast.TypeAssertExpr:
		t.typ(n.Type)
	case *ast.CompositeLit:
		t.typ(n.Type)
		switch ast.Unparen(n.Type).(type) {
		case *ast.MapType, *ast.ArrayType:
			// Keys are values (map keys, array indices).
		default:
			// A struct's field names, most likely: without type
			// checking a constant key of a map type's literal looks
			// the same, and is much rarer in practice.
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					t.set(kv.Key, tagField)
				}
			}
		}
	case *ast.CallExpr:
		t.call(n)
	case *ast.SelectorExpr:
		if id, ok := n.X.(*ast.Ident); ok && t.imports[id.Name] {
			t.set(id, tagPkg)
		}
		if isTypeLiteral(ast.Unparen(n.X)) { // a method expression: (*T).Method
			t.typ(n.X)
		}
		t.set(n.Sel, tagSel)
	case *ast.IndexListExpr: // an instantiation: f[int, string]
		for _, x := range n.Indices {
			t.typ(x)
		}
	}
	return true
}

// call tags the function of a call: a name (or a selected one) called, a
// builtin, or the type of a conversion.
func (t *tagger) call(n *ast.CallExpr) {
	fun := ast.Unparen(n.Fun)
	var typeArgs []ast.Expr
	switch f := fun.(type) {
	case *ast.IndexExpr:
		// f[T](x) instantiates a generic function; fs[i](x) calls an
		// element. Only the index tells them apart without type
		// checking.
		if t.looksLikeType(f.Index) {
			fun, typeArgs = ast.Unparen(f.X), []ast.Expr{f.Index}
		}
	case *ast.IndexListExpr:
		fun, typeArgs = ast.Unparen(f.X), f.Indices
	}
	for _, x := range typeArgs {
		t.typ(x)
	}
	switch f := fun.(type) {
	case *ast.Ident:
		switch {
		case builtinFuncs[f.Name]:
			t.set(f, tagBuiltin)
			if (f.Name == "make" || f.Name == "new") && len(n.Args) > 0 {
				t.typ(n.Args[0])
			}
		case builtinTypes[f.Name]:
			t.set(f, tagType)
		default:
			t.set(f, tagCall)
		}
	case *ast.SelectorExpr:
		t.set(f.Sel, tagCall)
	default:
		if isTypeLiteral(fun) {
			t.typ(fun)
		}
	}
}
