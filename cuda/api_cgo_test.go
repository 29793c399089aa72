//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/gocurrent/gocurrent/device"
)

// TestCgoCallsWithoutGPU drives every C wrapper of the real bindings on a
// machine that has the driver library but no GPU (cuInit fails): each call
// must come back as an *Error, never a crash, and its arguments must pass
// cgo's pointer checks (the launch arguments live in a struct that also
// holds Go pointers, as Device.args does). It skips where the driver is
// missing (failing under GOCURRENT_REQUIRE_GPU=1), and where a GPU is
// present (the GPU tests cover that case).
func TestCgoCallsWithoutGPU(t *testing.T) {
	a, err := loadAPI(gpuConfig().libraries())
	if err != nil {
		noGPU(t, fmt.Sprintf("no driver library: %v", err))
	}
	if err := a.Init(); err == nil {
		t.Skip("cuInit succeeded: a GPU is present, and the GPU tests run instead")
	} else if !errors.Is(err, device.ErrUnavailable) {
		t.Errorf("cuInit = %v, want an error matching device.ErrUnavailable", err)
	}
	holder := struct {
		next *int // a Go pointer beside the arguments, as in Device
		args [32]uint64
	}{next: new(int), args: [32]uint64{1, 2, 3}}
	var c cuContext
	buf := make([]byte, 64)
	var asErr *Error
	for name, call := range map[string]func() error{
		"DeviceGet":      func() error { _, err := a.DeviceGet(0); return err },
		"DeviceName":     func() error { _, err := a.DeviceName(0); return err },
		"MemAlloc":       func() error { _, err := a.MemAlloc(c, 1<<20); return err },
		"MemcpyHtoD":     func() error { return a.MemcpyHtoDAsync(c, 0, unsafe.Pointer(&buf[0]), 64, 0) },
		"MemcpyDtoH":     func() error { return a.MemcpyDtoHAsync(c, unsafe.Pointer(&buf[0]), 0, 64, 0) },
		"ModuleLoadData": func() error { _, err := a.ModuleLoadData(c, []byte(".version 7.8\x00")); return err },
		"ModuleGetFunction": func() error {
			_, err := a.ModuleGetFunction(c, 0, "gc_fill_f32")
			return err
		},
		"Launch": func() error {
			return a.Launch(c, 0, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, 0, holder.args[:3])
		},
		"EventQuery": func() error { _, err := a.EventQuery(c, 0); return err },
	} {
		err := call()
		if !errors.As(err, &asErr) {
			t.Errorf("%s without a GPU = %v, want an *Error", name, err)
		}
	}
	// cuBLAS loads and answers without a GPU, where the loader finds it.
	if v, err := a.BLASVersion(); err != nil {
		t.Logf("cuBLAS: %v", err)
	} else if v < 110000 {
		t.Errorf("cuBLAS version %d, want 11.0 or later", v)
	} else {
		t.Logf("cuBLAS %d", v)
		if _, err := a.BLASCreate(c); !errors.As(err, &asErr) {
			t.Errorf("cublasCreate without a GPU = %v, want an *Error", err)
		}
	}
}
