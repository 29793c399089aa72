package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmulatorTestsAreNamed: a test of this package that opens the
// emulator (openEmulated) has Emulated in its name. The GPU kit's tests
// stage runs this package's test binary with -test.skip Emulated, on a
// machine where the emulator cannot be built (no sources, no g++), and CI
// does not run that stage: a test named otherwise would fail only on the
// rare GPU run.
func TestEmulatorTestsAreNamed(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	fset := token.NewFileSet()
	found := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && id.Name == "openEmulated" {
					found++
					if !strings.Contains(fn.Name.Name, "Emulated") {
						t.Errorf("%s: %s opens the emulator; name it ...Emulated...", fset.Position(fn.Pos()), fn.Name.Name)
					}
					return false
				}
				return true
			})
		}
	}
	if found == 0 {
		t.Error("no test opens the emulator: the check found nothing to check")
	}
}
