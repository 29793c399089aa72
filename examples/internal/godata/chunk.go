package godata

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
)

// classes maps each class to the directories under GOROOT/src its
// examples come from, and those of them it leaves out, in the order of
// the package documentation.
var classes = []struct {
	name         string
	dirs, except []string
}{
	{"runtime", []string{"runtime", "internal/runtime"}, nil},
	{"crypto", []string{"crypto"}, nil},
	{"net", []string{"net"}, nil},
	{"encoding", []string{"encoding", "compress", "archive"}, nil},
	{"go", []string{"go"}, nil},
	// The compiler's type checker and parser are twins of go/types and
	// go/parser (many files of go/types are generated from types2's and
	// left out; the others are hand-written copies): only the rest of
	// the compiler is told apart from package go.
	{"compiler", []string{"cmd/compile"}, []string{"cmd/compile/internal/types2", "cmd/compile/internal/syntax"}},
	{"os", []string{"os", "syscall", "internal/syscall", "internal/poll"}, nil},
	{"math", []string{"math", "strconv", "internal/strconv"}, nil},
	{"text", []string{"text", "html", "regexp", "strings", "bytes", "unicode", "fmt"}, nil},
}

// Classes returns the classification labels in the order of the package
// documentation.
func Classes() []string {
	out := make([]string, len(classes))
	for i, c := range classes {
		out[i] = c.name
	}
	return out
}

// ClassOf is the class of the file at rel, a slash-separated path
// relative to GOROOT/src, and false for a file in none of the classes'
// directories.
func ClassOf(rel string) (string, bool) {
	for _, c := range classes {
		if under(rel, c.dirs) && !under(rel, c.except) {
			return c.name, true
		}
	}
	return "", false
}

// under says whether the file at rel is in one of dirs or below.
func under(rel string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return false
}

// Limits of a classification chunk, in tokens.
const (
	// MinChunk is the fewest tokens of a chunk: shorter functions, and
	// shorter tails of long ones, are left out.
	MinChunk = 12
	// MaxChunk is the most tokens of a chunk: a longer function is cut
	// into consecutive chunks of MaxChunk tokens.
	MaxChunk = 80
	// MaxChunksPerFunc is the most chunks one function gives: its first
	// ones, so that a few very long functions do not make up much of a
	// class.
	MaxChunksPerFunc = 4
)

// Chunk is a run of the tokens of one function declaration.
type Chunk struct {
	// Func is the function's name, Type.Method for a method.
	Func string
	// Line is the source line of the chunk's first token, from 1.
	Line int
	// Tokens are the chunk's Go tokens as Normalize writes them.
	Tokens []string
}

// Chunks returns the chunks of the function declarations with a body of
// the Go source file src, named filename in errors, in source order: a
// function's tokens (comments and automatically inserted semicolons left
// out) from the func keyword to its closing brace, cut into chunks of
// MaxChunk tokens; a function of fewer than MinChunk tokens gives none,
// a last chunk of fewer than MinChunk tokens is dropped, and a function
// gives at most MaxChunksPerFunc chunks. A file that does not parse is
// an error.
func Chunks(filename string, src []byte) ([]Chunk, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("godata: %w", err)
	}
	file := fset.File(f.Pos())
	type tok struct {
		line, off int
		text      string
	}
	var toks []tok
	err = scanTokens(src, func(line, off int, _ token.Token, text string) {
		toks = append(toks, tok{line, off, text})
	})
	if err != nil {
		return nil, fmt.Errorf("godata: %s: %w", filename, err)
	}
	var out []Chunk
	i := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := file.Offset(fd.Pos()), file.Offset(fd.End())
		for i < len(toks) && toks[i].off < start {
			i++
		}
		j := i
		for j < len(toks) && toks[j].off < end {
			j++
		}
		name := funcName(fd)
		for k := 0; k < MaxChunksPerFunc && j-i >= MinChunk; k++ {
			n := min(j-i, MaxChunk)
			c := Chunk{Func: name, Line: toks[i].line, Tokens: make([]string, n)}
			for m := range n {
				c.Tokens[m] = toks[i+m].text
			}
			out = append(out, c)
			i += n
		}
		i = j
	}
	return out, nil
}

// funcName is fd's name, with its receiver's base type for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.ParenExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}
