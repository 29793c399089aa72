package devices_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// noGPU is a CUDA configuration that cannot open on any machine: its
// driver library does not exist.
var noGPU = devices.Config{CUDA: cuda.Config{DriverLibrary: "/nonexistent/libcuda.so.1"}}

func open(t *testing.T, spec string, cfg devices.Config) device.Device {
	t.Helper()
	d, err := devices.Open(spec, cfg)
	if err != nil {
		t.Fatalf("Open(%q) = %v", spec, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("closing %s: %v", d.Name(), err)
		}
	})
	return d
}

// What is not one of the four forms is ErrSpec, naming the spec and the
// forms accepted; nothing is opened.
func TestUnknownSpec(t *testing.T) {
	for _, spec := range []string{"", "tpu", "CPU", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1.5", " cpu", "cuda0"} {
		t.Run(spec, func(t *testing.T) {
			d, err := devices.Open(spec, devices.Config{})
			if d != nil {
				d.Close()
				t.Errorf("Open(%q) returned a device, %s", spec, d.Name())
			}
			if !errors.Is(err, devices.ErrSpec) {
				t.Fatalf("Open(%q) = %v, want an error wrapping ErrSpec", spec, err)
			}
			if msg := err.Error(); !strings.Contains(msg, `"`+spec+`"`) || !strings.Contains(msg, "auto, cpu, cuda or cuda:N") {
				t.Errorf("Open(%q) = %q, want it to quote the spec and list the accepted forms", spec, msg)
			}
		})
	}
}

// "cpu" opens the CPU device with Config.CPU.
func TestCPU(t *testing.T) {
	d := open(t, "cpu", devices.Config{CPU: cpu.Config{Capacity: 4 << 20}})
	if _, ok := d.(*cpu.Device); !ok || d.Name() != "cpu" {
		t.Fatalf("Open(cpu) = %T %q, want the CPU device", d, d.Name())
	}
	// The capacity reached the device: 8 MiB does not fit in 4.
	b, err := d.Alloc(8<<20, device.Workspace)
	if err == nil {
		d.Free(b)
	}
	if !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Errorf("Alloc(8 MiB) on a CPU of 4 MiB = %v, want an error wrapping alloc.ErrOutOfMemory", err)
	}
}

// Without a usable GPU "auto" is the CPU, and "cuda" and "cuda:N" are
// errors matching device.ErrUnavailable.
func TestNoGPU(t *testing.T) {
	d := open(t, "auto", noGPU)
	if _, ok := d.(*cpu.Device); !ok {
		t.Errorf("Open(auto) without a GPU = %T %q, want the CPU device", d, d.Name())
	}
	for _, spec := range []string{"cuda", "cuda:0", "cuda:3"} {
		d, err := devices.Open(spec, noGPU)
		if d != nil {
			d.Close()
			t.Errorf("Open(%q) without a GPU returned a device, %s", spec, d.Name())
		}
		if !errors.Is(err, device.ErrUnavailable) {
			t.Errorf("Open(%q) without a GPU = %v, want an error wrapping device.ErrUnavailable", spec, err)
		}
	}
}

// Over the CUDA emulator, a GPU as far as the package can tell, "auto"
// and "cuda" open the CUDA device, and "cuda:N" passes N on.
func TestEmulatedGPU(t *testing.T) {
	lib := cudaemu.ForTest(t)
	cfg := devices.Config{CUDA: cuda.Config{DriverLibrary: lib.Path(), BLASLibrary: lib.Path(), Ordinal: 7}}
	for _, spec := range []string{"auto", "cuda", "cuda:0"} {
		d, err := devices.Open(spec, cfg)
		if err != nil {
			t.Fatalf("Open(%q) over the emulator: %v", spec, err)
		}
		_, isCUDA := d.(*cuda.Device)
		name := d.Name()
		if err := d.Close(); err != nil {
			t.Errorf("closing %s: %v", name, err)
		}
		if !isCUDA || name != "cuda:0" {
			t.Errorf("Open(%q) over the emulator = %T %q, want the CUDA device cuda:0 (the spec's ordinal, not Config.CUDA's)", spec, d, name)
		}
	}
	// The emulator has one GPU: ordinal 1 is not there.
	if d, err := devices.Open("cuda:1", cfg); err == nil {
		d.Close()
		t.Errorf("Open(cuda:1) over the one-GPU emulator opened %s", d.Name())
	}
}

// On the test device, "auto" opens what the tests run on: the GPU on a
// GPU machine (GOCURRENT_TEST_DEVICE=cuda, as .ci/gpu-run's layers stage
// sets it).
func TestAutoOnTestDevice(t *testing.T) {
	if testdevice.IsCPU() {
		t.Skip("the tests run on the CPU; with GOCURRENT_TEST_DEVICE=cuda this checks that auto picks the GPU")
	}
	want := testdevice.Open(t).Name()
	if want != "cuda:0" {
		t.Skipf("the test device is %s; auto picks cuda:0", want)
	}
	d := open(t, "auto", devices.Config{CUDA: testdevice.CUDAConfig(t)})
	if _, ok := d.(*cuda.Device); !ok || d.Name() != want {
		t.Errorf("Open(auto) on a GPU machine = %T %q, want the CUDA device %s", d, d.Name(), want)
	}
}
