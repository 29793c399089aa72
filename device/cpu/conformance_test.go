package cpu_test

import (
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/device/devicetest"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

// TestConformance runs the suite on the device. Under the race detector
// (CI's second run) it leaves out the walks, which on the CPU are the
// per-step cell calls (device.LSTMWalk.Queue and the others), run by the
// Cells group's kernels on the same streams and threads: the detector
// sees nothing more there, and they were a third of the run's time.
func TestConformance(t *testing.T) {
	open := func(t testing.TB) device.Device {
		d, err := cpu.Open(cpu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if !raceEnabled {
		devicetest.Run(t, open)
		return
	}
	devicetest.RunGroups(t, open, devicetest.Without(t, "Walks"))
}

// TestConformanceOneThread runs the suite again with kernels on the stream
// goroutine alone, so that both the split and the unsplit paths are checked.
func TestConformanceOneThread(t *testing.T) {
	testfull.Skip(t, "the conformance suite again on one thread")
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
	testfull.Skip(t, "the conformance suite again on a scope")
	devicetest.Run(t, devicetest.InScope(func(t testing.TB) device.Device {
		d, err := cpu.Open(cpu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}))
}
