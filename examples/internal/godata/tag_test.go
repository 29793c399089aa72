package godata_test

import (
	"go/token"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gocurrent/gocurrent/examples/internal/godata"
)

// tagLines tags src (a file body after "package p" and its imports) and
// returns each sentence as "token/tag token/tag ...".
func tagLines(t *testing.T, src string) []string {
	t.Helper()
	sents, err := godata.TagFile("snippet.go", []byte(src))
	if err != nil {
		t.Fatalf("TagFile: %v", err)
	}
	var out []string
	for _, s := range sents {
		if len(s.Tokens) != len(s.Tags) {
			t.Fatalf("line %d: %d tokens and %d tags", s.Line, len(s.Tokens), len(s.Tags))
		}
		var b strings.Builder
		for i := range s.Tokens {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(s.Tokens[i] + "/" + s.Tags[i])
		}
		out = append(out, b.String())
	}
	return out
}

// The tags of hand-written snippets, one sentence each: the expectations
// are written from the Go specification's terms, not from TagFile's
// output. The head of every snippet is "package p" and imports of bytes,
// fmt and io, on lines of fewer than three tokens: no sentences.
func TestTagFile(t *testing.T) {
	const head = "package p\n\nimport (\n\"bytes\"\n\"fmt\"\n\"io\"\n)\n\n"
	tests := []struct {
		name, line, want string
	}{
		// The same name, three roles: declared on the left of :=,
		// called before "(", used inside the call.
		{"define and call", "func g() { x := f(x) }",
			"func/kw g/decl (/punct )/punct {/punct x/decl :=/op f/call (/punct x/var )/punct }/punct"},
		// A package before "." and a variable before "." differ only
		// by what the file imports; a selected name differs by
		// whether "(" follows.
		{"package and variable selectors", "func g() { fmt.Println(f.Name, f.Name()) }",
			"func/kw g/decl (/punct )/punct {/punct fmt/pkg ./punct Println/call (/punct f/var ./punct Name/sel ,/punct f/var ./punct Name/call (/punct )/punct )/punct }/punct"},
		{"package member", "var e = io.EOF",
			"var/kw e/decl =/op io/pkg ./punct EOF/sel"},
		{"method declaration", "func (r *T) M(a int, b []string) (n int, err error) {}",
			"func/kw (/punct r/param */op T/type )/punct M/decl (/punct a/param int/type ,/punct b/param [/punct ]/punct string/type )/punct (/punct n/param int/type ,/punct err/param error/type )/punct {/punct }/punct"},
		{"struct type", "type T struct { Name string; next *T; bytes.Buffer }",
			"type/kw T/decl struct/kw {/punct Name/field string/type ;/punct next/field */op T/type ;/punct bytes/pkg ./punct Buffer/type }/punct"},
		{"interface type", "type R interface { Read(p []byte) (int, error) }",
			"type/kw R/decl interface/kw {/punct Read/field (/punct p/param [/punct ]/punct byte/type )/punct (/punct int/type ,/punct error/type )/punct }/punct"},
		// T is a type before "{" and in a declaration, a call before
		// "(": a conversion to a named type reads as a call.
		{"composite literal and conversion", "var v, w = T{Name: \"x\", next: nil}, T(u)",
			"var/kw v/decl ,/punct w/decl =/op T/type {/punct Name/field :/punct \"x\"/str ,/punct next/field :/punct nil/builtin }/punct ,/punct T/call (/punct u/var )/punct"},
		{"map literal keys are values", "var m = map[string]int{k: 1}",
			"var/kw m/decl =/op map/kw [/punct string/type ]/punct int/type {/punct k/var :/punct 1/int }/punct"},
		{"builtins", "var n = len(s) + cap(s) + copy(a, b)",
			"var/kw n/decl =/op len/builtin (/punct s/var )/punct +/op cap/builtin (/punct s/var )/punct +/op copy/builtin (/punct a/var ,/punct b/var )/punct"},
		{"make and new take a type", "var c, q = make(chan int, 1), new(bytes.Buffer)",
			"var/kw c/decl ,/punct q/decl =/op make/builtin (/punct chan/kw int/type ,/punct 1/int )/punct ,/punct new/builtin (/punct bytes/pkg ./punct Buffer/type )/punct"},
		{"predeclared conversions", "var b, i = []byte(s), int(f)",
			"var/kw b/decl ,/punct i/decl =/op [/punct ]/punct byte/type (/punct s/var )/punct ,/punct int/type (/punct f/var )/punct"},
		{"constants", "const ( a = iota; b = true; c = 'a'; d = 1.5; e = 2i; h = 0x1F )",
			"const/kw (/punct a/decl =/op iota/builtin ;/punct b/decl =/op true/builtin ;/punct c/decl =/op 'a'/char ;/punct d/decl =/op 1.5/float ;/punct e/decl =/op 2i/float ;/punct h/decl =/op 0x1F/int )/punct"},
		{"range", "func g() { for i, v := range xs { use(i, v) } }",
			"func/kw g/decl (/punct )/punct {/punct for/kw i/decl ,/punct v/decl :=/op range/kw xs/var {/punct use/call (/punct i/var ,/punct v/var )/punct }/punct }/punct"},
		{"assignment is not declaration", "func g() { x, y = <-ch, x[i:] }",
			"func/kw g/decl (/punct )/punct {/punct x/var ,/punct y/var =/op <-/op ch/var ,/punct x/var [/punct i/var :/punct ]/punct }/punct"},
		{"type switch", "func g() { switch v := x.(type) { case *bytes.Buffer, error, nil: } }",
			"func/kw g/decl (/punct )/punct {/punct switch/kw v/decl :=/op x/var ./punct (/punct type/kw )/punct {/punct case/kw */op bytes/pkg ./punct Buffer/type ,/punct error/type ,/punct nil/builtin :/punct }/punct }/punct"},
		{"type assertion", "var r, ok = x.(io.Reader)",
			"var/kw r/decl ,/punct ok/decl =/op x/var ./punct (/punct io/pkg ./punct Reader/type )/punct"},
		{"generic function", "func Map[T, U any](xs []T, f func(T) U) []U { return nil }",
			"func/kw Map/decl [/punct T/param ,/punct U/param any/type ]/punct (/punct xs/param [/punct ]/punct T/type ,/punct f/param func/kw (/punct T/type )/punct U/type )/punct [/punct ]/punct U/type {/punct return/kw nil/builtin }/punct"},
		{"instantiation", "var y = Map[int, string](xs, g)",
			"var/kw y/decl =/op Map/call [/punct int/type ,/punct string/type ]/punct (/punct xs/var ,/punct g/var )/punct"},
		{"constraint", "type Number interface { ~int | ~float64 }",
			"type/kw Number/decl interface/kw {/punct ~/op int/type |/op ~/op float64/type }/punct"},
		{"element call is not an instantiation", "func g() { fs[i](x) }",
			"func/kw g/decl (/punct )/punct {/punct fs/var [/punct i/var ]/punct (/punct x/var )/punct }/punct"},
		{"method expression", "var m = (*T).M",
			"var/kw m/decl =/op (/punct */op T/type )/punct ./punct M/sel"},
		{"function literal", "var h = func(n int) { sum += n }",
			"var/kw h/decl =/op func/kw (/punct n/param int/type )/punct {/punct sum/var +=/op n/var }/punct"},
		{"explicit semicolons and labels", "func g() { outer: for i := 0; i < 3; i++ { break outer } }",
			"func/kw g/decl (/punct )/punct {/punct outer/decl :/punct for/kw i/decl :=/op 0/int ;/punct i/var </op 3/int ;/punct i/var ++/op {/punct break/kw outer/var }/punct }/punct"},
		{"variadic", "func g(args ...any) { f(args...) }",
			"func/kw g/decl (/punct args/param .../op any/type )/punct {/punct f/call (/punct args/var .../op )/punct }/punct"},
		{"builtin shadowed by a value", "func g() { max := 3; _ = max }",
			"func/kw g/decl (/punct )/punct {/punct max/decl :=/op 3/int ;/punct _/var =/op max/var }/punct"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tagLines(t, head+tt.line+"\n")
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("got %q\nwant [%q]", got, tt.want)
			}
			for _, s := range got {
				for _, tok := range strings.Split(s, " ") {
					seen[tok[strings.LastIndexByte(tok, '/')+1:]] = true
				}
			}
		})
	}
	// The import forms and the package clause, on lines long enough to
	// be sentences.
	got := tagLines(t, "package p; import str \"strings\"\nimport . \"fmt\"\nvar s = str.ToUpper(Sprint(1))\n")
	want := []string{
		"package/kw p/pkg ;/punct import/kw str/pkg \"strings\"/str",
		"import/kw ./punct \"fmt\"/str",
		"var/kw s/decl =/op str/pkg ./punct ToUpper/call (/punct Sprint/call (/punct 1/int )/punct )/punct",
	}
	if !slices.Equal(got, want) {
		t.Errorf("imports: got %q\nwant %q", got, want)
	}
	for _, tag := range godata.Tags() {
		if !seen[tag] {
			t.Errorf("tag %q is exercised by no case", tag)
		}
	}
	if n := len(godata.Tags()); n < 12 || n > 20 {
		t.Errorf("got %d tags, want 12 to 20", n)
	}
}

// Lines are sentences of MinSentence to MaxSentence tokens: comments and
// the semicolons the scanner inserts at line ends are not tokens, short
// lines make no sentence, long ones are cut; lines are the file's, //line
// directives notwithstanding.
func TestTagFileSentences(t *testing.T) {
	long := "var v = []int{" + strings.Repeat("1, ", 30) + "}"
	src := "package p // the package\n\n" +
		"//line other.go:100\n" + // a comment, and no change to the lines counted

		"var a = 1 /* inline */ + 2 // trailing\n" +
		"var (\n" +
		"b int = 3\n" +
		")\n" +
		long + "\n"
	sents, err := godata.TagFile("s.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, s := range sents {
		lines = append(lines, s.Line)
	}
	if want := []int{4, 6, 8}; !slices.Equal(lines, want) {
		t.Fatalf("got sentences on lines %v, want %v", lines, want)
	}
	if got, want := strings.Join(sents[0].Tokens, " "), "var a = 1 + 2"; got != want {
		t.Errorf("line 4: got %q, want %q", got, want)
	}
	if got, want := strings.Join(sents[1].Tags, " "), "decl type op int"; got != want {
		t.Errorf("line 6 (b int = 3): got %q, want %q", got, want)
	}
	if got := len(sents[2].Tokens); got != godata.MaxSentence {
		t.Errorf("a line of 66 tokens: got %d, want %d", got, godata.MaxSentence)
	}
}

func TestTagFileError(t *testing.T) {
	_, err := godata.TagFile("bad.go", []byte("package p\nfunc {\n"))
	if err == nil || !strings.Contains(err.Error(), "bad.go:2") {
		t.Errorf("got %v, want an error naming bad.go:2", err)
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		tok       token.Token
		lit, want string
	}{
		{token.STRING, `"short"`, `"short"`},
		{token.STRING, `"` + strings.Repeat("x", 30) + `"`, `"` + strings.Repeat("x", 30) + `"`},
		{token.STRING, `"` + strings.Repeat("x", 31) + `"`, `"…"`},
		{token.STRING, "`a\nb`", `"…"`},
		{token.STRING, "\"a\tb\"", `"…"`},
		{token.STRING, `"π"`, `"…"`},
		{token.CHAR, `'\t'`, `'\t'`},
		{token.CHAR, `'π'`, `'…'`},
		{token.IDENT, "π", "π"},
		{token.INT, "0x1F", "0x1F"},
		{token.ADD_ASSIGN, "", "+="},
		{token.FUNC, "func", "func"},
	}
	for _, tt := range tests {
		t.Run(tt.lit, func(t *testing.T) {
			if got := godata.Normalize(tt.tok, tt.lit); got != tt.want {
				t.Errorf("Normalize(%v, %q): got %q, want %q", tt.tok, tt.lit, got, tt.want)
			}
		})
	}
}

// checkSentences checks what the TSV format and the loader need of every
// sentence: a tag per token, a known tag, a token without tabs, line
// breaks or surrounding space, valid UTF-8.
func checkSentences(t *testing.T, sents []godata.Sentence) {
	t.Helper()
	tags := godata.Tags()
	for _, s := range sents {
		if n := len(s.Tokens); n < godata.MinSentence || n > godata.MaxSentence || len(s.Tags) != n {
			t.Fatalf("line %d: %d tokens and %d tags", s.Line, n, len(s.Tags))
		}
		for i, tok := range s.Tokens {
			if tok == "" || strings.ContainsAny(tok, "\t\n\r") || strings.TrimSpace(tok) != tok || !utf8.ValidString(tok) {
				t.Fatalf("line %d: token %q", s.Line, tok)
			}
			if !slices.Contains(tags, s.Tags[i]) {
				t.Fatalf("line %d: tag %q", s.Line, s.Tags[i])
			}
		}
	}
}

func FuzzTagFile(f *testing.F) {
	f.Add("package p\nfunc g() { x := f(x); fmt.Println(`a\tb`, 'c') }\n")
	f.Add("package p\ntype T[P ~int | string] struct { a, b P; c map[P]chan<- *T[P] }\n")
	f.Add("package p\nvar _ = (*T).M; var s = []struct{ x int }{{x: 1}}\n")
	f.Fuzz(func(t *testing.T, src string) {
		sents, err := godata.TagFile("fuzz.go", []byte(src))
		if err != nil {
			return
		}
		checkSentences(t, sents)
	})
}
