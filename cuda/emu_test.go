package cuda

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/gocurrent/gocurrent/cuda/internal/emu"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/devicetest"
)

// TestEmulatedConformance runs the conformance suite on the device over
// the simulated driver with the kernels emulated on the CPU: the real
// kernel sources (compiled with g++ by package emu), the real launch code
// and argument packing, the allocators, copies and the status word. Only
// what the driver and cuBLAS do themselves is simulated. It skips where
// g++ is missing. On a GPU, TestConformance runs the same suite for real.
func TestEmulatedConformance(t *testing.T) {
	lib, err := emu.Build("kernels", t.TempDir())
	if errors.Is(err, exec.ErrNotFound) {
		t.Skipf("no g++ to build the kernel emulator: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	devicetest.Run(t, func(t testing.TB) device.Device {
		f := newFakeAPI()
		f.emu = lib
		d, err := open(f, Config{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
