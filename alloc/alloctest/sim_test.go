package alloctest_test

import (
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

func TestSimulatedConformance(t *testing.T) {
	alloctest.TestSource(t, alloctest.NewSimulated(64<<20), true)
}

func TestSimulatedShadow(t *testing.T) {
	sim := alloctest.NewSimulated(mib)
	p, err := sim.Allocate(64 * kib)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		p       alloc.Ptr
		n       int64
		wantErr bool
	}{
		{"first", p, 1024, false},
		{"adjacent", p + 1024, 1024, false},
		{"overlaps end", p + 1023, 2, true},
		{"overlaps inside", p + 1500, 10, true},
		{"covers both", p, 4096, true},
		{"outside segment", p + alloc.Ptr(64*kib) - 10, 20, true},
		{"no segment", p + alloc.Ptr(512*kib), 20, true},
	}
	for _, tt := range tests {
		if err := sim.Claim(tt.p, tt.n); (err != nil) != tt.wantErr {
			t.Errorf("%s: Claim(%v, %d) = %v, want error %v", tt.name, tt.p, tt.n, err, tt.wantErr)
		}
	}
	if err := sim.Release(p, 64*kib); err == nil {
		t.Errorf("releasing a segment with claimed blocks succeeded")
	}
	for _, q := range []alloc.Ptr{p, p + 1024} {
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
