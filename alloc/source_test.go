package alloc_test

import (
	"errors"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

func TestSourceConformance(t *testing.T) {
	const capacity = 64 << 20
	t.Run("host capped", func(t *testing.T) { alloctest.TestSource(t, alloc.NewHost(capacity), true) })
	t.Run("host", func(t *testing.T) { alloctest.TestSource(t, alloc.NewHost(0), false) })
}

func TestHostMemInfoUncapped(t *testing.T) {
	free, total, err := alloc.NewHost(0).MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if total <= 0 || free <= 0 || free > total {
		t.Errorf("MemInfo = %d free of %d, want 0 < free <= total", free, total)
	}
}

// TestCachingOnHost runs the allocator on real host memory: blocks are
// writable, distinct, and survive other blocks' frees.
func TestCachingOnHost(t *testing.T) {
	h := alloc.NewHost(0)
	c, err := alloc.NewCaching(h, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int64{100, 4096, 3 * mib, 12 * mib}
	var ps []alloc.Ptr
	for i, n := range sizes {
		p := mustAlloc(t, c, n, 0)
		b, err := h.Bytes(p, n)
		if err != nil {
			t.Fatal(err)
		}
		for j := range b {
			b[j] = byte(i + 1)
		}
		ps = append(ps, p)
	}
	mustFree(t, c, ps[0])
	mustFree(t, c, ps[2])
	for i := 1; i < len(sizes); i += 2 {
		b, _ := h.Bytes(ps[i], sizes[i])
		for j, v := range b {
			if v != byte(i+1) {
				t.Fatalf("block %d byte %d = %d, want %d", i, j, v, i+1)
			}
		}
	}
	mustFree(t, c, ps[1])
	mustFree(t, c, ps[3])
	checkInvariants(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := alloc.HostSegments(h); n != 0 {
		t.Errorf("%d host segments mapped after Close, want 0", n)
	}
}

// TestHostRefusesMoreThanTheMachine: without a capacity the machine's
// memory caps the host source (issue 46: a model's values and gradients,
// each mapped lazily below the machine's size, got the process killed
// once initialised), and sizes whose sum overflows int64 are refused, not
// wrapped.
func TestHostRefusesMoreThanTheMachine(t *testing.T) {
	h := alloc.NewHost(0)
	_, total, err := h.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{total + 1, 1 << 62, math.MaxInt64} {
		p, err := h.Allocate(size)
		if !errors.Is(err, alloc.ErrOutOfMemory) {
			t.Errorf("Allocate(%d) on a machine of %d bytes = %v, %v; want an error matching ErrOutOfMemory", size, total, p, err)
		}
	}
	// A segment in use counts: what is left is less than the machine.
	p, err := h.Allocate(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Allocate(total - (1 << 20) + 1); !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Errorf("Allocate(total - 1 MiB + 1) with 1 MiB in use = %v, want ErrOutOfMemory", err)
	}
	if err := h.Release(p, 1<<20); err != nil {
		t.Fatal(err)
	}
	c := alloc.NewHost(64 << 20)
	if _, err := c.Allocate(math.MaxInt64); !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Errorf("capped Allocate(MaxInt64) = %v, want ErrOutOfMemory", err)
	}
}
