package testdevice

import (
	"errors"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

func TestParse(t *testing.T) {
	t.Setenv(EnvDriver, "/x/libcuda.so.1")
	t.Setenv(EnvCUBLAS, "/y/libcublas.so.13")
	for _, c := range []struct {
		name, spec string
		ordinal    int
		err        string
	}{
		{"cpu", "cpu", 0, ""},
		{"cuda", "cuda", 0, ""},
		{"cuda:3", "cuda:3", 3, ""},
		{"cuda:-1", "", 0, "want cuda:N"},
		{"cuda:x", "", 0, "want cuda:N"},
		{"gpu", "", 0, "want cpu, cuda or cuda:N"},
	} {
		spec, cfg, err := parse(c.name)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parse(%q) = %v, want an error saying %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || spec != c.spec || cfg.Ordinal != c.ordinal {
			t.Errorf("parse(%q) = %q, ordinal %d, %v; want %q, ordinal %d", c.name, spec, cfg.Ordinal, err, c.spec, c.ordinal)
		}
		if cfg.DriverLibrary != "/x/libcuda.so.1" || cfg.BLASLibrary != "/y/libcublas.so.13" {
			t.Errorf("parse(%q) libraries %q and %q, want the environment's", c.name, cfg.DriverLibrary, cfg.BLASLibrary)
		}
	}
}

// TestNoSilentFallback checks the two ways a run could pass having tested
// something other than what was asked: a GPU that is not there, and the
// CPU under GOCURRENT_REQUIRE_GPU.
func TestNoSilentFallback(t *testing.T) {
	t.Setenv(EnvDriver, "/nonexistent/libcuda.so.1")
	d, err := open("cuda")
	if err == nil {
		d.Close()
		t.Fatal("open(cuda) with a missing driver succeeded")
	}
	if !errors.Is(err, device.ErrUnavailable) || !strings.Contains(err.Error(), "there is none usable") ||
		!strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Errorf("open(cuda) without a driver = %v, want ErrUnavailable saying no GPU is usable and which library is missing", err)
	}
	t.Setenv(EnvRequireGPU, "1")
	if d, err := open("cpu"); err == nil || !strings.Contains(err.Error(), EnvRequireGPU) {
		if d != nil {
			d.Close()
		}
		t.Errorf("open(cpu) under %s=1 = %v, want an error", EnvRequireGPU, err)
	}
	t.Setenv(EnvRequireGPU, "0")
	d, err = open("cpu")
	if err != nil {
		t.Fatalf("open(cpu) = %v", err)
	}
	if d.Name() != "cpu" {
		t.Errorf("open(cpu) opened %q", d.Name())
	}
	d.Close()
}
