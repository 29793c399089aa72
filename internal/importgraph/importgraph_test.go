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
	for _, want := range []string{"alloc", "device", "internal", "models", "devices"} {
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
		{"examples imports models", Import{File: "examples/charrnn/charrnn/train_cmd.go", Path: m + "models"}, false},
		{"examples imports devices", Import{File: "examples/charrnn/charrnn/cli.go", Path: m + "devices"}, false},
		{"models imports train", Import{File: "models/charrnn.go", Path: m + "train"}, false},
		{"models imports rnn", Import{File: "models/charrnn.go", Path: m + "rnn"}, false},
		{"models imports cuda", Import{File: "models/charrnn.go", Path: m + "cuda"}, true},
		{"models imports devices", Import{File: "models/charrnn.go", Path: m + "devices"}, true},
		{"models imports examples", Import{File: "models/charrnn.go", Path: m + "examples/charrnn/charrnn"}, true},
		{"models test imports devices", Import{File: "models/charrnn_test.go", Path: m + "devices", Test: true}, false},
		{"models test imports examples", Import{File: "models/charrnn_test.go", Path: m + "examples/charrnn/charrnn", Test: true}, true},
		{"devices imports cuda", Import{File: "devices/devices.go", Path: m + "cuda"}, false},
		{"devices imports device/cpu", Import{File: "devices/devices.go", Path: m + "device/cpu"}, false},
		{"devices imports train", Import{File: "devices/devices.go", Path: m + "train"}, true},
		{"devices imports models", Import{File: "devices/devices.go", Path: m + "models"}, true},
		{"train imports models", Import{File: "train/train.go", Path: m + "models"}, true},
		{"train imports devices", Import{File: "train/train.go", Path: m + "devices"}, true},
		{"device/cpu imports device/driver", Import{File: "device/cpu/device.go", Path: m + "device/driver"}, false},
		{"cuda imports device/driver", Import{File: "cuda/device.go", Path: m + "device/driver"}, false},
		{"rnn imports device/driver", Import{File: "rnn/lstm.go", Path: m + "device/driver"}, true},
		{"rnn test imports device/driver", Import{File: "rnn/lstm_test.go", Path: m + "device/driver", Test: true}, true},
		{"loader imports device/driver", Import{File: "loader/loader.go", Path: m + "device/driver"}, true},
		{"train imports device/driver", Import{File: "train/trainer.go", Path: m + "device/driver"}, true},
		{"models imports device/driver", Import{File: "models/charrnn.go", Path: m + "device/driver"}, true},
		{"rnn imports devices", Import{File: "rnn/lstm.go", Path: m + "devices"}, true},
		{"internal imports devices", Import{File: "internal/testdevice/testdevice.go", Path: m + "devices"}, false},
		{"internal imports models", Import{File: "internal/charrnntest/charrnntest.go", Path: m + "models"}, false},
		{"internal imports examples", Import{File: "internal/charrnntest/charrnntest.go", Path: m + "examples/charrnn/charrnn"}, true},
		{"cuda imports examples", Import{File: "cuda/device.go", Path: m + "examples/charrnn/charrnn"}, true},
		{"alloc imports internal/checked", Import{File: "alloc/caching.go", Path: m + "internal/checked"}, false},
		{"rnn imports internal/checked", Import{File: "rnn/stack.go", Path: m + "internal/checked"}, false},
		{"rnn imports internal/plot", Import{File: "rnn/stack.go", Path: m + "internal/plot"}, true},
		{"internal/checked imports alloc", Import{File: "internal/checked/checked.go", Path: m + "alloc"}, true},
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
