// Package testdevice opens the device that the tests of rnn, loader,
// train, models and the examples run on, so that one test binary checks
// the CPU device on any machine and the CUDA device on a GPU machine:
//
//	GOCURRENT_TEST_DEVICE=cuda ./rnn.test      # every rnn test on the first GPU
//
// GOCURRENT_TEST_DEVICE names the device: "cpu" (the default), "cuda" or
// "cuda:N". For the CUDA device, GOCURRENT_CUDA_DRIVER and GOCURRENT_CUBLAS
// give the driver's and cuBLAS's paths where the dynamic loader would not
// find them (.ci/gpu-run sets them from the libraries PyTorch loaded), and
// GOCURRENT_WALK_CELLS_UP_TO sets cuda.Config.WalkCellsUpTo, so that the
// layers' tests run their walks as the persistent kernel.
//
// A device that was asked for and cannot be opened fails the test that
// asked, saying why; it never runs on the CPU instead. Under
// GOCURRENT_REQUIRE_GPU=1 (set by every stage of .ci/gpu-run) a device
// that is not a real GPU fails too, so a GPU run cannot pass having
// tested the CPU.
//
// Only tests import this package.
package testdevice

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
)

// The environment variables this package reads.
const (
	EnvDevice     = "GOCURRENT_TEST_DEVICE"
	EnvRequireGPU = "GOCURRENT_REQUIRE_GPU"
	EnvCUBLAS     = "GOCURRENT_CUBLAS"
	EnvDriver     = "GOCURRENT_CUDA_DRIVER"
	EnvWalkCells  = "GOCURRENT_WALK_CELLS_UP_TO"
)

// Name is the device the tests run on, as GOCURRENT_TEST_DEVICE names it:
// "cpu" when it is unset or empty.
func Name() string {
	if n := strings.TrimSpace(os.Getenv(EnvDevice)); n != "" {
		return n
	}
	return "cpu"
}

// RequireGPU reports whether GOCURRENT_REQUIRE_GPU is set to a true value
// (1, true): then a GPU test that would skip for want of a GPU fails.
func RequireGPU() bool {
	v, err := strconv.ParseBool(os.Getenv(EnvRequireGPU))
	return err == nil && v
}

// IsCPU reports whether the tests run on the CPU device. Tests use it
// only where a figure differs between devices for a reason the test
// states (an exact float32 result the CPU's own GEMM gives, say).
func IsCPU() bool { return Name() == "cpu" }

// Spec is the device in the syntax of devices.Open and the examples'
// -device ("cpu", "cuda", "cuda:N"; never "auto", which could fall back),
// with CUDAConfig the configuration that goes with it; an unknown name
// fails the test.
func Spec(t testing.TB) string {
	t.Helper()
	spec, _, err := parse(Name())
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// CUDAConfig is the cuda.Config the CUDA device is opened with: the
// ordinal the name gives, the libraries and the walks' bound the
// environment gives.
func CUDAConfig(t testing.TB) cuda.Config {
	t.Helper()
	_, cfg, err := parse(Name())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// parse turns a device name into the -device spec and CUDA configuration.
func parse(name string) (spec string, cfg cuda.Config, err error) {
	cfg = cuda.Config{DriverLibrary: os.Getenv(EnvDriver), BLASLibrary: os.Getenv(EnvCUBLAS)}
	if v := os.Getenv(EnvWalkCells); v != "" {
		if cfg.WalkCellsUpTo, err = strconv.Atoi(v); err != nil {
			return "", cfg, fmt.Errorf("testdevice: %s=%q is not a whole number", EnvWalkCells, v)
		}
	}
	switch {
	case name == "cpu", name == "cuda":
		return name, cfg, nil
	case strings.HasPrefix(name, "cuda:"):
		n, err := strconv.Atoi(name[len("cuda:"):])
		if err != nil || n < 0 {
			return "", cfg, fmt.Errorf("testdevice: %s=%q: want cuda:N with N a GPU ordinal", EnvDevice, name)
		}
		cfg.Ordinal = n
		return name, cfg, nil
	}
	return "", cfg, fmt.Errorf("testdevice: %s=%q: want cpu, cuda or cuda:N", EnvDevice, name)
}

// Open opens the test device and closes it when the test ends, failing
// the test if the Close reports an error (work that failed after the
// test's last check, a buffer of another device).
func Open(t testing.TB) device.Device {
	t.Helper()
	d, err := open(Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("closing the test device: %v", err)
		}
	})
	return d
}

// open opens the named device, or says why it cannot: a device that is
// not there, or not a GPU under GOCURRENT_REQUIRE_GPU.
func open(name string) (device.Device, error) {
	spec, cfg, err := parse(name)
	if err != nil {
		return nil, err
	}
	if spec == "cpu" && RequireGPU() {
		return nil, fmt.Errorf("testdevice: %s=1 but the tests run on the CPU: set %s=cuda", EnvRequireGPU, EnvDevice)
	}
	d, err := devices.Open(spec, devices.Config{CUDA: cfg})
	if errors.Is(err, device.ErrUnavailable) {
		return nil, fmt.Errorf("testdevice: %s=%s asks for a GPU, and there is none usable: %w", EnvDevice, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("testdevice: %s=%s: %w", EnvDevice, name, err)
	}
	if g, ok := d.(*cuda.Device); ok && RequireGPU() && cudaemu.IsEmulator(g.Info().Name) {
		d.Close()
		return nil, fmt.Errorf("testdevice: %s=1 but %s is %q, not a GPU", EnvRequireGPU, d.Name(), g.Info().Name)
	}
	announce(Describe(d))
	return d, nil
}

// Describe is one line about d: for a GPU its name, compute capability,
// driver, cuBLAS and the PTX loaded.
func Describe(d device.Device) string {
	g, ok := d.(*cuda.Device)
	if !ok {
		return d.Name()
	}
	i := g.Info()
	return fmt.Sprintf("%s = %s (compute %d.%d, %d SMs, %d KiB shared a block, cooperative %v, %.1f GiB, driver %d, cuBLAS %d from %s, %s, TF32 %v)",
		g.Name(), i.Name, i.ComputeCapability[0], i.ComputeCapability[1], i.Multiprocessors, i.SharedPerBlock>>10, i.Cooperative,
		float64(i.TotalMemory)/(1<<30), i.DriverVersion, i.BLASVersion, i.BLASLibrary, i.PTX, i.TF32)
}

// Emulated reports whether d is the CUDA device over the CUDA emulator
// (internal/cudaemu), whose kernels run on the CPU, thread by thread: a
// test whose grid of cases is there only to multiply the shapes may take
// part of it there, and the whole on the CPU device and on a GPU.
func Emulated(d device.Device) bool {
	g, ok := d.(*cuda.Device)
	return ok && strings.Contains(strings.ToLower(g.Info().Name), "emulator")
}

var announced sync.Once

// announce writes, once per test binary, what the tests run on, to
// standard error: .ci/gpu-run's layers stage reads it to tell a GPU run
// from anything else.
func announce(what string) {
	announced.Do(func() { fmt.Fprintf(os.Stderr, "testdevice: tests run on %s\n", what) })
}
