package alloc

import "testing"

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
