package cuda

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/devicetest"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
)

// The GPU tests and benchmarks open the first GPU. GOCURRENT_CUBLAS and
// GOCURRENT_CUDA_DRIVER give cuBLAS's and the driver's paths where the
// dynamic loader does not find them (.ci/gpu-run sets both from the
// libraries PyTorch loaded). Where no GPU is usable they skip, saying
// why, except under GOCURRENT_REQUIRE_GPU=1 (set by every stage of
// .ci/gpu-run): then the missing GPU is a failure, and so is the CUDA
// emulator standing in for one, so a GPU run cannot pass having run
// nothing on a GPU.

// requireGPU reports whether GOCURRENT_REQUIRE_GPU is set to a true value.
func requireGPU() bool {
	v, err := strconv.ParseBool(os.Getenv("GOCURRENT_REQUIRE_GPU"))
	return err == nil && v
}

// gpuConfig is the configuration the GPU tests open with.
func gpuConfig() Config {
	return Config{BLASLibrary: os.Getenv("GOCURRENT_CUBLAS"), DriverLibrary: os.Getenv("GOCURRENT_CUDA_DRIVER")}
}

// noGPU ends a test that needs a GPU and has none: a skip that says why,
// or under GOCURRENT_REQUIRE_GPU=1 a failure that says why.
func noGPU(t testing.TB, why string) {
	t.Helper()
	if requireGPU() {
		t.Fatalf("GOCURRENT_REQUIRE_GPU=1 and no GPU to run on: %s", why)
	}
	t.Skipf("no usable GPU: %s", why)
}

// openGPU opens the first GPU with cfg, closing it when the test ends; it
// ends the test through noGPU where there is none.
func openGPU(t testing.TB, cfg Config) *Device {
	t.Helper()
	d, err := Open(cfg)
	if errors.Is(err, device.ErrUnavailable) {
		noGPU(t, err.Error())
	}
	if err != nil {
		t.Fatalf("cuda.Open: %v", err)
	}
	if requireGPU() && cudaemu.IsEmulator(d.Info().Name) {
		d.Close()
		t.Fatalf("GOCURRENT_REQUIRE_GPU=1 and the device is %q, not a GPU", d.Info().Name)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// TestConformance runs the conformance suite every device passes on the
// GPU: the real kernels JIT-compiled by the driver, cuBLAS, copies,
// streams, events and the status word.
func TestConformance(t *testing.T) {
	d := openGPU(t, gpuConfig()) // skip (or fail) the whole suite once where there is no GPU
	t.Logf("conformance on %s: %+v", d.Name(), d.Info())
	devicetest.Run(t, func(t testing.TB) device.Device {
		d, err := Open(gpuConfig())
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

// TestConformanceInScope runs the conformance suite on a scope of the GPU
// device, but for the groups that do not apply to a scope (Scopes, which
// makes scopes of the device; Counts, which a scope does not keep) and
// would skip: the GPU kit's tests stage fails on any skip.
func TestConformanceInScope(t *testing.T) {
	openGPU(t, gpuConfig())
	devicetest.RunGroups(t, devicetest.InScope(func(t testing.TB) device.Device {
		d, err := Open(gpuConfig())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}), func(group string) bool { return group != "Scopes" && group != "Counts" })
}

// TestOpenWithoutGPU checks what Open says on a machine without a usable
// GPU (CI, and this project's development machines): an error matching
// device.ErrUnavailable that names what is missing, never a panic or an
// exit. On a GPU machine it checks the device's description instead: the
// PTX for the GPU's architecture, a cuBLAS of CUDA 11 or later and where
// it was loaded from.
func TestOpenWithoutGPU(t *testing.T) {
	d, err := Open(gpuConfig())
	if err == nil {
		defer d.Close()
		info := d.Info()
		if info.Name == "" || info.TotalMemory <= 0 || info.ComputeCapability[0] < 8 || info.Multiprocessors <= 0 {
			t.Errorf("Info() = %+v: want a name, memory, multiprocessors and compute capability 8.0 or later", info)
		}
		// ptxArchs: one architecture, JIT-compiled for every GPU from 8.0.
		wantPTX := "compute_80"
		if info.PTX != wantPTX {
			t.Errorf("Info().PTX = %q on compute capability %d.%d, want %s", info.PTX, info.ComputeCapability[0], info.ComputeCapability[1], wantPTX)
		}
		if info.BLASVersion < 110000 || info.BLASLibrary == "" || info.DriverVersion < 11000 {
			t.Errorf("Info() = %+v: want cuBLAS 11.0 or later, the library it came from, a CUDA 11 or later driver", info)
		}
		if d.Name() != "cuda:0" {
			t.Errorf("Name() = %q, want cuda:0", d.Name())
		}
		t.Logf("opened %+v", info)
		if requireGPU() && cudaemu.IsEmulator(info.Name) {
			t.Errorf("GOCURRENT_REQUIRE_GPU=1 and the device is %q, not a GPU", info.Name)
		}
		return
	}
	if !errors.Is(err, device.ErrUnavailable) {
		t.Fatalf("Open without a GPU = %v, want an error matching device.ErrUnavailable", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "cuda") || len(msg) < 30 {
		t.Errorf("Open's error %q does not say what is missing", msg)
	}
	if requireGPU() {
		t.Fatalf("GOCURRENT_REQUIRE_GPU=1 and no GPU to run on: %v", err)
	}
	t.Logf("without a GPU: %v", err)
}

func TestOpenMissingLibraries(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"driver", Config{DriverLibrary: "/nonexistent/libcuda.so.1"}, "/nonexistent/libcuda.so.1"},
		{"cuBLAS", Config{DriverLibrary: gpuConfig().DriverLibrary, BLASLibrary: "/nonexistent/libcublas.so.13"}, "cuda"},
		{"ordinal", Config{DriverLibrary: gpuConfig().DriverLibrary, BLASLibrary: gpuConfig().BLASLibrary, Ordinal: 4096}, "cuda"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !cgoBuild {
				tc.want = "CGO_ENABLED=0" // no library is ever opened: Open says why
			}
			d, err := Open(tc.cfg)
			if err == nil {
				d.Close()
				t.Fatalf("Open(%+v) succeeded", tc.cfg)
			}
			if !errors.Is(err, device.ErrUnavailable) {
				t.Errorf("Open(%+v) = %v, want an error matching device.ErrUnavailable", tc.cfg, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%+v) = %q, want it to mention %q", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := Open(Config{Ordinal: -1}); err == nil || errors.Is(err, device.ErrUnavailable) {
		t.Errorf("Open with ordinal -1 = %v, want a configuration error (not ErrUnavailable)", err)
	}
}
