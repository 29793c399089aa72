package cpu_test

import (
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/device/devicetest"
)

func TestConformance(t *testing.T) {
	devicetest.Run(t, func(t testing.TB) device.Device {
		d, err := cpu.Open(cpu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

// TestConformanceOneThread runs the suite again with kernels on the stream
// goroutine alone, so that both the split and the unsplit paths are checked.
func TestConformanceOneThread(t *testing.T) {
	devicetest.Run(t, func(t testing.TB) device.Device {
		d, err := cpu.Open(cpu.Config{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

// TestConformanceInScope runs the suite on a scope of the device: a scope
// is a device.Device of its own and must pass everything the device does.
func TestConformanceInScope(t *testing.T) {
	devicetest.Run(t, devicetest.InScope(func(t testing.TB) device.Device {
		d, err := cpu.Open(cpu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}))
}
