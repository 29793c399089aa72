// Package importgraph checks gocurrent's dependency direction (the layout
// section of docs/ARCHITECTURE.md): alloc imports nothing of ours; device
// imports alloc; cuda imports device and alloc; dist (the communicators)
// imports device, and its NCCL backend cuda; rnn and loader import device
// (never cuda, never each other); nn (modules, heads, losses) imports
// rnn and device; train imports dist, nn, rnn, loader and device;
// models imports train, nn, rnn, loader, device and device/meta (never cuda or
// devices);
// devices, which opens a device by name, is the one library package that
// imports both device/cpu and cuda; only devices, examples, internal
// helpers and tests import cuda, and nothing but examples imports
// examples. Only the devices (device/..., cuda) import device/driver, the
// implementer side of the seam.
package importgraph

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Module is the module path of gocurrent.
const Module = "github.com/gocurrent/gocurrent"

// allowed lists, for each top-level package tree, the other trees its
// non-test files may import. A tree may always import within itself.
var allowed = map[string][]string{
	"alloc":    nil,
	"device":   {"alloc"},
	"cuda":     {"device", "alloc"},
	"rnn":      {"device", "alloc"},
	"loader":   {"device", "alloc"},
	"nn":       {"rnn", "device", "alloc"},
	"dist":     {"cuda", "device", "alloc"},
	"train":    {"dist", "nn", "rnn", "loader", "device", "alloc"},
	"models":   {"train", "nn", "rnn", "loader", "device", "alloc"},
	"devices":  {"cuda", "device", "alloc"},
	"examples": {"models", "devices", "train", "dist", "nn", "rnn", "loader", "cuda", "device", "alloc", "internal"},
	"internal": {"models", "devices", "train", "dist", "nn", "rnn", "loader", "cuda", "device", "alloc"},
}

// testAllowed is what test files may import on top of allowed: the CUDA
// device and devices, to run the same tests on a GPU, the shared test
// helpers, and the communicators, to run a package's tests as the ranks
// of a job.
var testAllowed = []string{"cuda", "devices", "internal", "dist"}

// implementers are the only trees that may import device/driver, the
// implementer side of the device seam (NewBuffer, the Free, Upload and copy
// prologues): the devices themselves. Layers, loader, trainer and models
// see device only.
var implementers = []string{"device", "cuda"}

// leaves are packages every tree may import: they import nothing of the
// module's. internal/checked is the overflow-checked arithmetic of sizes
// that a caller's numbers derive (the allocator's, the layers', the
// loader's alike); internal/inuse the state word that refuses a second
// goroutine's call and a call after Close (the layers', the models');
// internal/testfull whether the tests run their exhaustive suites (the
// conformance suite's, in device/devicetest, among them).
var leaves = []string{"internal/checked", "internal/inuse", "internal/testfull"}

// driverPath is the implementer package, relative to the module root.
const driverPath = "device/driver"

// Import is one import of one file.
type Import struct {
	File string // slash-separated, relative to the module root
	Path string // the imported package
	Test bool   // the file is a _test.go file
	Cgo  bool   // the import is "C"
}

// Violation is an import against the architecture's direction.
type Violation struct {
	Import
	Reason string
}

func (v Violation) String() string { return fmt.Sprintf("%s imports %q: %s", v.File, v.Path, v.Reason) }

// Scan parses the imports of every Go file under root (the module root),
// skipping testdata and hidden directories.
func Scan(root string) ([]Import, error) {
	var out []Import
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			out = append(out, Import{File: rel, Path: p, Test: strings.HasSuffix(rel, "_test.go"), Cgo: p == "C"})
		}
		return nil
	})
	return out, err
}

// Check returns the imports that break the rules: an import of one of our
// trees that the importing tree may not use, a file outside the known
// trees importing ours, and cgo in alloc or device (which stay pure Go).
func Check(imports []Import) []Violation {
	var out []Violation
	for _, im := range imports {
		from := tree(im.File)
		if im.Cgo {
			if from == "alloc" || from == "device" {
				out = append(out, Violation{im, "alloc and device are pure Go; cgo belongs in cuda"})
			}
			continue
		}
		if im.Path != Module && !strings.HasPrefix(im.Path, Module+"/") {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(im.Path, Module), "/")
		if (rel == driverPath || strings.HasPrefix(rel, driverPath+"/")) && !slices.Contains(implementers, from) {
			out = append(out, Violation{im, fmt.Sprintf("%s is for device implementations (%v); consumers use device", driverPath, implementers)})
			continue
		}
		if dir := path.Dir(im.File); slices.Contains(leaves, dir) {
			out = append(out, Violation{im, fmt.Sprintf("%s is a leaf every tree imports: it imports nothing of the module's", dir)})
			continue
		}
		to := tree(rel)
		if slices.Contains(leaves, rel) {
			continue
		}
		if to == from {
			continue
		}
		ok, known := allowed[from]
		if !known {
			out = append(out, Violation{im, fmt.Sprintf("%q is not a package tree of the architecture", from)})
			continue
		}
		if slices.Contains(ok, to) || (im.Test && slices.Contains(testAllowed, to)) {
			continue
		}
		out = append(out, Violation{im, fmt.Sprintf("%s may import only %v", from, ok)})
	}
	return out
}

// tree is the first element of a slash-separated path.
func tree(p string) string {
	first, _, _ := strings.Cut(p, "/")
	return first
}
