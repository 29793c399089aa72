package cuda

import (
	"testing"

	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

// TestSourceConformance runs alloc's Source conformance suite over the
// device's two memory sources, device memory (cuMemAlloc) and pinned host
// memory (cuMemHostAlloc), on the simulated driver. Each subtest makes a
// source of its own beside the ones the opened device's allocators hold,
// as the suite needs segments that nothing else hands out.
//
// Over an opened device the figures are not exact: the device already
// holds its status word and cuBLAS workspace, and pinned memory reports
// the machine's memory. The bare driver, with no device opened over it,
// has nothing allocated, and its cuMemGetInfo follows its allocations byte
// for byte, so there the device source is checked exactly.
func TestSourceConformance(t *testing.T) {
	t.Run("device", func(t *testing.T) {
		d := openFake(t, newFakeAPI(), Config{})
		alloctest.TestSource(t, &deviceSource{d: d}, false)
	})
	t.Run("device on a bare driver", func(t *testing.T) {
		// Only the fields the source reads: the driver, the context and
		// the name.
		d := &Device{api: newFakeAPI(), name: "fake GPU"}
		alloctest.TestSource(t, &deviceSource{d: d}, true)
	})
	t.Run("pinned", func(t *testing.T) {
		d := openFake(t, newFakeAPI(), Config{})
		alloctest.TestSource(t, &pinnedSource{d: d}, false)
	})
}
