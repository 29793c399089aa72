package alloc

import (
	"errors"
	"testing"
)

// testSource is the conformance suite every Source passes: segments are
// distinct, aligned and non-overlapping, releases are checked, memory
// figures move with allocations, and a capacity is enforced with
// ErrOutOfMemory. capacity is the source's total in bytes.
func testSource(t *testing.T, src Source, capacity int64) {
	sizes := []int64{512, 4096, SmallBuffer, LargeBuffer, 3 * RoundLarge}
	type seg struct {
		p    Ptr
		size int64
	}
	free0, total, err := src.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if total != capacity || free0 != capacity {
		t.Errorf("MemInfo before use = %d free of %d, want %d of %d", free0, total, capacity, capacity)
	}
	var segs []seg
	var used int64
	for _, n := range sizes {
		p, err := src.Allocate(n)
		if err != nil {
			t.Fatalf("Allocate(%d): %v", n, err)
		}
		if p == 0 || p%MinBlockSize != 0 {
			t.Errorf("Allocate(%d) = %v, want a non-nil address aligned to %d", n, p, MinBlockSize)
		}
		for _, s := range segs {
			if p < s.p+Ptr(s.size) && s.p < p+Ptr(n) {
				t.Errorf("segment [%v,+%d) overlaps [%v,+%d)", p, n, s.p, s.size)
			}
		}
		segs = append(segs, seg{p, n})
		used += n
	}
	if free, _, _ := src.MemInfo(); free != capacity-used {
		t.Errorf("free after allocating %d bytes = %d, want %d", used, free, capacity-used)
	}
	if h, ok := src.(HostAccessible); ok {
		for i, s := range segs {
			b, err := h.Bytes(s.p, s.size)
			if err != nil {
				t.Fatal(err)
			}
			for j := range b {
				b[j] = byte(i + 1)
			}
		}
		for i, s := range segs {
			b, _ := h.Bytes(s.p, s.size)
			if b[0] != byte(i+1) || b[len(b)-1] != byte(i+1) {
				t.Errorf("segment %d reads back %d..%d, want %d", i, b[0], b[len(b)-1], i+1)
			}
		}
		if _, err := h.Bytes(segs[0].p, segs[0].size+1); err == nil {
			t.Errorf("Bytes past the end of a segment succeeded")
		}
	}
	if _, err := src.Allocate(capacity); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Allocate beyond the capacity = %v, want ErrOutOfMemory", err)
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
	if free, _, _ := src.MemInfo(); free != capacity {
		t.Errorf("free after releasing everything = %d, want %d", free, capacity)
	}
	// After releasing, the whole capacity can be had again in one piece.
	p, err := src.Allocate(capacity)
	if err != nil {
		t.Fatalf("Allocate(capacity) after releasing all: %v", err)
	}
	if err := src.Release(p, capacity); err != nil {
		t.Fatal(err)
	}
}

func TestSources(t *testing.T) {
	const capacity = 64 << 20
	t.Run("simulated", func(t *testing.T) { testSource(t, NewSimulated(capacity), capacity) })
	t.Run("host", func(t *testing.T) { testSource(t, NewHost(capacity), capacity) })
}

func TestHostMemInfoUncapped(t *testing.T) {
	free, total, err := NewHost(0).MemInfo()
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
	h := NewHost(0)
	c, err := NewCaching(h, Config{})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int64{100, 4096, 3 * mib, 12 * mib}
	var ps []Ptr
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
	if len(h.segs) != 0 {
		t.Errorf("%d host segments mapped after Close, want 0", len(h.segs))
	}
}

func TestSimulatedShadow(t *testing.T) {
	sim := NewSimulated(mib)
	p, err := sim.Allocate(64 * kib)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		p       Ptr
		n       int64
		wantErr bool
	}{
		{"first", p, 1024, false},
		{"adjacent", p + 1024, 1024, false},
		{"overlaps end", p + 1023, 2, true},
		{"overlaps inside", p + 1500, 10, true},
		{"covers both", p, 4096, true},
		{"outside segment", p + Ptr(64*kib) - 10, 20, true},
		{"no segment", p + Ptr(512*kib), 20, true},
	}
	for _, tt := range tests {
		if err := sim.Claim(tt.p, tt.n); (err != nil) != tt.wantErr {
			t.Errorf("%s: Claim(%v, %d) = %v, want error %v", tt.name, tt.p, tt.n, err, tt.wantErr)
		}
	}
	if err := sim.Release(p, 64*kib); err == nil {
		t.Errorf("releasing a segment with claimed blocks succeeded")
	}
	for _, q := range []Ptr{p, p + 1024} {
		if err := sim.Unclaim(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.Unclaim(p); err == nil {
		t.Errorf("double Unclaim succeeded")
	}
	if err := sim.Release(p, 64*kib); err != nil {
		t.Fatal(err)
	}
}
