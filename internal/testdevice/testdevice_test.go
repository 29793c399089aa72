package testdevice

import (
	"errors"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
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
	// Which library is missing, or that the build has no cgo to load any.
	missing := strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") || strings.Contains(err.Error(), "CGO_ENABLED=0")
	if !errors.Is(err, device.ErrUnavailable) || !strings.Contains(err.Error(), "there is none usable") || !missing {
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

// TestEmulatedGPU opens "cuda" over the CUDA emulator, as a test binary
// does when the environment points the driver and cuBLAS at it: the
// device is the CUDA device, says it is the emulator, and is refused
// under GOCURRENT_REQUIRE_GPU=1.
func TestEmulatedGPU(t *testing.T) {
	lib := cudaemu.ForTest(t)
	t.Setenv(EnvDriver, lib.Path())
	t.Setenv(EnvCUBLAS, lib.Path())
	t.Setenv(EnvRequireGPU, "")
	d, err := open("cuda")
	if err != nil {
		t.Fatalf("open(cuda) over the emulator: %v", err)
	}
	desc := Describe(d)
	d.Close()
	if _, isCUDA := d.(*cuda.Device); !isCUDA || d.Name() != "cuda:0" || !strings.Contains(desc, "emulator") {
		t.Errorf("open(cuda) gave %T %q described as %q, want the CUDA device cuda:0 on the emulator", d, d.Name(), desc)
	}
	t.Setenv(EnvRequireGPU, "1")
	if d, err := open("cuda"); err == nil || !strings.Contains(err.Error(), "not a GPU") {
		if d != nil {
			d.Close()
		}
		t.Errorf("open(cuda) over the emulator under %s=1 = %v, want an error saying it is not a GPU", EnvRequireGPU, err)
	}
}
