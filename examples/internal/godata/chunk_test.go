package godata_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/examples/internal/godata"
)

func TestChunks(t *testing.T) {
	// body(n) is a function body of n statements "x++" (two tokens
	// each; the inserted semicolons are not tokens).
	body := func(n int) string { return "{\n" + strings.Repeat("x++\n", n) + "}\n" }
	// "func name ( ) {" and "}" are 5+1 tokens.
	src := "package p\n\n" +
		"// short has 5+1+2*2 = 10 tokens: too short.\n" +
		"func short() " + body(2) +
		"// exact has 6+2*3 = 12 tokens: one chunk.\n" +
		"func exact() " + body(3) +
		"func (t *T) long() " + body(100) + // 10+200+1 = 211 tokens: 80, 80, 51
		"func (t T[P]) tail() " + body(40) + // 12+80+1 = 93: 80 and 13
		"func huge() " + body(1000) + // MaxChunksPerFunc chunks
		"func decl()\n" + // no body
		"var v = func() " + body(20) // not a declaration
	chunks, err := godata.Chunks("c.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range chunks {
		got = append(got, fmt.Sprintf("%s:%d", c.Func, len(c.Tokens)))
	}
	want := []string{"exact:12", "T.long:80", "T.long:80", "T.long:51", "T.tail:80", "T.tail:13"}
	for range godata.MaxChunksPerFunc {
		want = append(want, "huge:80")
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if got, want := strings.Join(chunks[0].Tokens, " "), "func exact ( ) { x ++ x ++ x ++ }"; got != want {
		t.Errorf("chunk 0: got %q, want %q", got, want)
	}
	if got, want := chunks[2].Tokens[0], "x"; got != want || chunks[2].Line <= chunks[1].Line {
		t.Errorf("second chunk of long starts with %q on line %d (the first on %d), want %q on a later line", got, chunks[2].Line, chunks[1].Line, want)
	}
	if _, err := godata.Chunks("bad.go", []byte("package p\nfunc {")); err == nil {
		t.Error("got no error for a file that does not parse")
	}
}

func TestClassOf(t *testing.T) {
	tests := []struct {
		rel, want string
	}{
		{"runtime/proc.go", "runtime"},
		{"internal/runtime/maps/map.go", "runtime"},
		{"crypto/tls/conn.go", "crypto"},
		{"net/http/server.go", "net"},
		{"encoding/json/decode.go", "encoding"},
		{"compress/flate/inflate.go", "encoding"},
		{"archive/tar/reader.go", "encoding"},
		{"go/parser/parser.go", "go"},
		{"cmd/compile/internal/ssa/func.go", "compiler"},
		{"cmd/compile/internal/types2/expr.go", ""},
		{"cmd/compile/internal/syntax/parser.go", ""},
		{"os/file.go", "os"},
		{"syscall/syscall_linux.go", "os"},
		{"internal/poll/fd_unix.go", "os"},
		{"math/big/nat.go", "math"},
		{"strconv/atoi.go", "math"},
		{"text/template/exec.go", "text"},
		{"strings/builder.go", "text"},
		{"fmt/print.go", "text"},
		{"cmd/go/main.go", ""},
		{"image/png/reader.go", ""},
		{"netip/x.go", ""}, // not under net/
		{"runtime.go", ""},
	}
	for _, tt := range tests {
		t.Run(tt.rel, func(t *testing.T) {
			got, ok := godata.ClassOf(tt.rel)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("got %q, %v, want %q", got, ok, tt.want)
			}
		})
	}
	if n := len(godata.Classes()); n < 6 || n > 10 {
		t.Errorf("got %d classes, want 6 to 10", n)
	}
}
