package alloctest

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
)

// TestSource checks src: segments are non-nil, aligned to 512 bytes and
// disjoint; host-accessible memory reads back what was written and is
// bounds-checked; a request beyond the device is refused with
// alloc.ErrOutOfMemory; zero sizes, wrong sizes, unknown and double
// releases are errors; and MemInfo moves with allocations.
//
// If exact, MemInfo must track the source's own allocations byte for byte
// and start fully free (a simulated device, a capped host source); on a GPU
// shared with other work pass false, and the figures are only checked to
// move in the right direction.
func TestSource(t *testing.T, src alloc.Source, exact bool) {
	t.Helper()
	sizes := []int64{512, 4096, alloc.SmallBuffer, alloc.LargeBuffer, 3 * alloc.RoundLarge}
	type seg struct {
		p    alloc.Ptr
		size int64
	}
	free0, total, err := src.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if total <= 0 || free0 < 0 || free0 > total || (exact && free0 != total) {
		t.Fatalf("MemInfo before use = %d free of %d, want 0 <= free <= total (equal when exact)", free0, total)
	}
	var segs []seg
	var used int64
	for _, n := range sizes {
		p, err := src.Allocate(n)
		if err != nil {
			t.Fatalf("Allocate(%d): %v", n, err)
		}
		if p == 0 || p%alloc.MinBlockSize != 0 {
			t.Errorf("Allocate(%d) = %v, want a non-nil address aligned to %d", n, p, alloc.MinBlockSize)
		}
		for _, s := range segs {
			if p < s.p+alloc.Ptr(s.size) && s.p < p+alloc.Ptr(n) {
				t.Errorf("segment [%v,+%d) overlaps [%v,+%d)", p, n, s.p, s.size)
			}
		}
		segs = append(segs, seg{p, n})
		used += n
	}
	free1, _, err := src.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if exact && free1 != free0-used {
		t.Errorf("free after allocating %d bytes = %d, want %d", used, free1, free0-used)
	}
	if !exact && free1 >= free0 {
		t.Logf("free memory did not fall after allocating %d bytes (%d -> %d); other work may have freed memory", used, free0, free1)
	}
	if h, ok := src.(alloc.HostAccessible); ok {
		for i, s := range segs {
			b, err := h.Bytes(s.p, s.size)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(b)) != s.size {
				t.Fatalf("Bytes(%v, %d) has length %d", s.p, s.size, len(b))
			}
			for j := range b {
				b[j] = byte(i + 1)
			}
		}
		for i, s := range segs {
			b, _ := h.Bytes(s.p, s.size)
			for j, v := range b {
				if v != byte(i+1) {
					t.Fatalf("segment %d byte %d reads back %d, want %d", i, j, v, i+1)
				}
			}
		}
		if _, err := h.Bytes(segs[0].p, segs[0].size+1); err == nil {
			t.Errorf("Bytes past the end of a segment succeeded")
		}
	}
	if _, err := src.Allocate(2 * total); !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Errorf("Allocate(twice the total) = %v, want ErrOutOfMemory", err)
	}
	if _, err := src.Allocate(0); err == nil {
		t.Errorf("Allocate(0) succeeded")
	}
	if err := src.Release(segs[0].p, segs[0].size+512); err == nil {
		t.Errorf("Release with the wrong size succeeded")
	}
	if err := src.Release(segs[0].p+1<<40, 512); err == nil {
		t.Errorf("Release of an unknown address succeeded")
	}
	for _, s := range segs {
		if err := src.Release(s.p, s.size); err != nil {
			t.Fatalf("Release(%v, %d): %v", s.p, s.size, err)
		}
	}
	if err := src.Release(segs[0].p, segs[0].size); err == nil {
		t.Errorf("double Release succeeded")
	}
	if !exact {
		return
	}
	if free, _, _ := src.MemInfo(); free != free0 {
		t.Errorf("free after releasing everything = %d, want %d", free, free0)
	}
	// After releasing, the whole capacity can be had again in one piece.
	p, err := src.Allocate(total)
	if err != nil {
		t.Fatalf("Allocate(total) after releasing all: %v", err)
	}
	if _, err := src.Allocate(512); !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Errorf("Allocate(512) on a full source = %v, want ErrOutOfMemory", err)
	}
	if err := src.Release(p, total); err != nil {
		t.Fatal(err)
	}
}
