package cuda_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/devicetest"
)

// gpuConfig is the configuration the GPU tests open with. GOCURRENT_CUBLAS
// points at cuBLAS where the loader does not find it (PyTorch's pip wheels
// keep it under site-packages/nvidia/cublas/lib).
func gpuConfig() cuda.Config {
	return cuda.Config{BLASLibrary: os.Getenv("GOCURRENT_CUBLAS")}
}

// openGPU opens the first GPU or skips the test, saying why.
func openGPU(t testing.TB) *cuda.Device {
	t.Helper()
	d, err := cuda.Open(gpuConfig())
	if errors.Is(err, device.ErrUnavailable) {
		t.Skipf("no usable GPU: %v", err)
	}
	if err != nil {
		t.Fatalf("cuda.Open: %v", err)
	}
	return d
}

func TestConformance(t *testing.T) {
	openGPU(t).Close() // skip the whole suite, once, where there is no GPU
	devicetest.Run(t, func(t testing.TB) device.Device { return openGPU(t) })
}

// TestOpenWithoutGPU checks what Open says on a machine without a usable
// GPU (CI, and this project's development machines): an error matching
// device.ErrUnavailable that names what is missing, never a panic or an
// exit. On a GPU machine it checks the device's description instead.
func TestOpenWithoutGPU(t *testing.T) {
	d, err := cuda.Open(gpuConfig())
	if err == nil {
		defer d.Close()
		info := d.Info()
		if info.Name == "" || info.TotalMemory <= 0 || info.ComputeCapability[0] < 8 || info.PTX == "" {
			t.Errorf("Info() = %+v: want a name, memory, compute capability 8.0 or later and the PTX loaded", info)
		}
		if d.Name() != "cuda:0" {
			t.Errorf("Name() = %q, want cuda:0", d.Name())
		}
		t.Logf("opened %+v", info)
		return
	}
	if !errors.Is(err, device.ErrUnavailable) {
		t.Fatalf("Open without a GPU = %v, want an error matching device.ErrUnavailable", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "cuda") || len(msg) < 30 {
		t.Errorf("Open's error %q does not say what is missing", msg)
	}
	t.Logf("without a GPU: %v", err)
}

func TestOpenMissingLibraries(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  cuda.Config
		want string
	}{
		{"driver", cuda.Config{DriverLibrary: "/nonexistent/libcuda.so.1"}, "/nonexistent/libcuda.so.1"},
		{"ordinal", cuda.Config{Ordinal: 4096}, "cuda"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := cuda.Open(tc.cfg)
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
	if _, err := cuda.Open(cuda.Config{Ordinal: -1}); err == nil || errors.Is(err, device.ErrUnavailable) {
		t.Errorf("Open with ordinal -1 = %v, want a configuration error (not ErrUnavailable)", err)
	}
}
