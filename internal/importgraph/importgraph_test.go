package importgraph

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRepository checks every Go file of the module.
func TestRepository(t *testing.T) {
	root := moduleRoot(t)
	imports, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	// The scan must see the packages it guards, or it would pass vacuously.
	seen := map[string]bool{}
	for _, im := range imports {
		seen[tree(im.File)] = true
	}
	for _, want := range []string{"alloc", "device", "internal"} {
		if !seen[want] {
			t.Errorf("scan of %s found no imports in %s/", root, want)
		}
	}
	for _, v := range Check(imports) {
		t.Errorf("%v", v)
	}
}

// TestCheck shows that each rule can fail.
func TestCheck(t *testing.T) {
	const m = Module + "/"
	tests := []struct {
		name string
		im   Import
		bad  bool
	}{
		{"device imports alloc", Import{File: "device/device.go", Path: m + "alloc"}, false},
		{"device/cpu imports device", Import{File: "device/cpu/device.go", Path: m + "device"}, false},
		{"alloc imports device", Import{File: "alloc/caching.go", Path: m + "device"}, true},
		{"rnn imports cuda", Import{File: "rnn/lstm.go", Path: m + "cuda"}, true},
		{"rnn test imports cuda", Import{File: "rnn/lstm_test.go", Path: m + "cuda", Test: true}, false},
		{"rnn imports loader", Import{File: "rnn/lstm.go", Path: m + "loader"}, true},
		{"loader imports rnn", Import{File: "loader/loader.go", Path: m + "rnn"}, true},
		{"loader imports device/cpu", Import{File: "loader/loader.go", Path: m + "device/cpu"}, false},
		{"train imports cuda", Import{File: "train/train.go", Path: m + "cuda"}, true},
		{"train imports rnn", Import{File: "train/train.go", Path: m + "rnn"}, false},
		{"device imports train", Import{File: "device/device.go", Path: m + "train"}, true},
		{"examples imports cuda", Import{File: "examples/charrnn/main.go", Path: m + "cuda"}, false},
		{"unknown tree", Import{File: "tools/x.go", Path: m + "alloc"}, true},
		{"alloc uses cgo", Import{File: "alloc/x.go", Path: "C", Cgo: true}, true},
		{"cuda uses cgo", Import{File: "cuda/dl.go", Path: "C", Cgo: true}, false},
		{"third party", Import{File: "alloc/x.go", Path: "github.com/google/btree"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := len(Check([]Import{tt.im})) > 0
			if got != tt.bad {
				t.Errorf("violation = %v, want %v", got, tt.bad)
			}
		})
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
