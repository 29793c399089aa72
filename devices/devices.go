package devices

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/device/meta"
)

// Config configures the devices Open may open. The zero value opens each
// with its defaults.
type Config struct {
	// CPU configures the CPU device ("cpu", and "auto" without a GPU).
	CPU cpu.Config
	// CUDA configures a GPU ("auto", "cuda", "cuda:N"): the driver's and
	// cuBLAS's libraries, TF32, the allocator. Its Ordinal is ignored:
	// the spec names the GPU.
	CUDA cuda.Config
}

// ErrSpec is wrapped by the error of a spec Open does not know.
var ErrSpec = errors.New("want auto, cpu, cuda or cuda:N with N a GPU ordinal")

// Open opens the device spec names:
//
//   - "cpu": the CPU device, configured by cfg.CPU;
//   - "cuda": the first GPU, configured by cfg.CUDA; an error wrapping
//     device.ErrUnavailable on a machine without a usable GPU;
//   - "cuda:N": GPU N (0 is the first), as "cuda";
//   - "auto": the first GPU if one can be used, else the CPU. Only
//     device.ErrUnavailable falls back: a GPU that is there and fails
//     to open is an error.
//
// Any other spec is an error wrapping ErrSpec. The caller closes the
// device.
func Open(spec string, cfg Config) (device.Device, error) {
	switch {
	case spec == "cpu":
		return openCPU(cfg.CPU)
	case spec == "auto":
		d, err := openCUDA(cfg.CUDA, 0)
		if errors.Is(err, device.ErrUnavailable) {
			return openCPU(cfg.CPU)
		}
		return d, err
	case spec == "cuda":
		return openCUDA(cfg.CUDA, 0)
	case strings.HasPrefix(spec, "cuda:"):
		n, err := strconv.Atoi(spec[len("cuda:"):])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("devices: device %q: %w", spec, ErrSpec)
		}
		return openCUDA(cfg.CUDA, n)
	}
	return nil, fmt.Errorf("devices: unknown device %q: %w", spec, ErrSpec)
}

// openCPU returns the CPU device, or a nil interface (not a nil
// *cpu.Device) with the error.
func openCPU(cfg cpu.Config) (device.Device, error) {
	d, err := cpu.Open(cfg)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// openCUDA returns GPU ordinal, or a nil interface (not a nil
// *cuda.Device) with the error.
func openCUDA(cfg cuda.Config, ordinal int) (device.Device, error) {
	cfg.Ordinal = ordinal
	d, err := cuda.Open(cfg)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// MetaConfig describes d for the planner (meta.Open, models.PlanMemory):
// its name, its allocator's policy, the memory a run on it may use (what
// is free now plus what its allocator already holds, or the allocator's
// limit when that is lower), and for a GPU the cuBLAS workspace and the
// kernels' temporaries.
func MetaConfig(d device.Device) meta.Config {
	c := meta.Config{Name: d.Name()}
	if r, ok := device.MemoryReport(d); ok {
		c.Capacity = r.DeviceFree + r.Reserved
		if r.Limit > 0 && (c.Capacity == 0 || r.Limit < c.Capacity) {
			c.Capacity = r.Limit
		}
	}
	if a, ok := d.(device.Allocator); ok {
		c.Memory = a.Memory().Config()
	}
	if g, ok := d.(*cuda.Device); ok {
		c.Workspace, c.KernelTemporaries = g.BLASWorkspace(), true
	}
	c.ProductRows = device.ProductRows(d)
	return c
}
