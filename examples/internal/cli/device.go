package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/devices"
)

// OpenDevice opens the device a -device flag names (devices.Open: auto,
// cpu, cuda, cuda:N) with gpu for a GPU and its allocator held to limit
// bytes (0: none), the CPU's as a GPU's; a spec devices does not know is a
// usage error.
func OpenDevice(spec string, gpu cuda.Config, limit int64) (device.Device, error) {
	cfg := devices.Config{CUDA: gpu}
	cfg.CPU.Memory.MemoryLimit = limit
	cfg.CUDA.Memory.MemoryLimit = limit
	d, err := devices.Open(spec, cfg)
	if errors.Is(err, devices.ErrSpec) {
		return nil, fmt.Errorf("%w: -device %q: %w", ErrUsage, spec, devices.ErrSpec)
	}
	return d, err
}

// PlanTarget describes the device a plan command plans for: with capacity
// > 0, one of that many bytes that -device spec names, not opened (a cuda
// one with the cuBLAS workspace it would take, cuda.Config.WorkspaceUnder
// its limit, and the kernels' temporaries); otherwise the device spec opens (read, then
// closed). Either is held to limit bytes when that is lower (0: none), as
// a run's -memory-limit holds it.
func PlanTarget(spec string, gpu cuda.Config, capacity, limit int64) (meta.Config, error) {
	var t meta.Config
	if capacity > 0 {
		t = meta.Config{Name: spec, Capacity: capacity}
		if strings.HasPrefix(spec, "cuda") {
			// The workspace the device would take under the limit it
			// would run with.
			lim := limit
			for _, l := range []int64{gpu.Memory.MemoryLimit, int64(gpu.Memory.MemoryFraction * float64(capacity))} {
				if l > 0 && (lim == 0 || l < lim) {
					lim = l
				}
			}
			t = meta.CUDA(spec, capacity, gpu.Memory, gpu.WorkspaceUnder(lim))
		}
	} else {
		d, err := OpenDevice(spec, gpu, limit)
		if err != nil {
			return t, err
		}
		t = devices.MetaConfig(d)
		if err := d.Close(); err != nil {
			return t, err
		}
	}
	if limit > 0 && (t.Capacity == 0 || limit < t.Capacity) {
		t.Capacity = limit
	}
	return t, nil
}
