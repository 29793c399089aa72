package cuda

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestKernelsEmulated compiles the CUDA C kernels in kernels/ with g++
// over a CPU emulation of CUDA (kernels/emu/cuda_emu.h: one std::thread per
// CUDA thread, barriers for __syncthreads and the warp shuffles, per-block
// shared memory) and runs kernels/emu/emu_test.cc, which checks every
// kernel, in float32 and float64, against sequential reference loops:
// arithmetic, the aliasing ABI.md allows, NULL optional buffers, status
// bits, launch shapes smaller than the data, and bit-identical reductions.
// It needs no GPU and no CUDA toolkit, only a C++20 compiler; without g++
// it is skipped. kernels/emu/run.sh runs the same checks from a shell.
func TestKernelsEmulated(t *testing.T) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found; the emulated kernel test needs a C++20 compiler")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "emu_test")
	src := filepath.Join("kernels", "emu", "emu_test.cc")
	build := exec.CommandContext(ctx, cxx, "-std=c++20", "-O1", "-pthread", "-o", bin, src)
	if out, err := build.CombinedOutput(); err != nil {
		// A compiler too old for C++20's <barrier> is the machine's
		// limitation, not the kernels' fault.
		if s := string(out); strings.Contains(s, "barrier: No such file") || strings.Contains(s, "std=c++20") {
			t.Skipf("%s cannot compile C++20 with <barrier> (needs g++ 11 or later):\n%s", cxx, out)
		}
		t.Fatalf("%s %s: %v\n%s", cxx, src, err, out)
	}
	var out bytes.Buffer
	run := exec.CommandContext(ctx, bin)
	run.Stdout = &out
	run.Stderr = &out
	if err := run.Run(); err != nil {
		t.Fatalf("emulated kernel checks failed (%v):\n%s", err, failures(out.String()))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	t.Log(lines[len(lines)-1])
}

// failures returns the lines of the harness's output that are not passing
// checks (failures, emulator aborts, the summary), or all of it if there
// are none.
func failures(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, "ok ") {
			b.WriteString(l + "\n")
		}
	}
	if b.Len() == 0 {
		return out
	}
	return b.String()
}
