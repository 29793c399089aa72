package alloc_test

import (
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

// checkInvariants fails the test if c's figures disagree with its
// snapshot and internal structures (see CheckInvariants).
func checkInvariants(t testing.TB, c *alloc.Caching) {
	t.Helper()
	if err := alloc.CheckInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// newSim returns a simulated device of capacity bytes and a Caching over it.
func newSim(t testing.TB, capacity int64, cfg alloc.Config) (*alloctest.Simulated, *alloc.Caching) {
	t.Helper()
	sim := alloctest.NewSimulated(capacity)
	c, err := alloc.NewCaching(sim, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sim, c
}

func mustAlloc(t testing.TB, c *alloc.Caching, size int64, s alloc.Stream) alloc.Ptr {
	t.Helper()
	p, err := c.Alloc(size, s)
	if err != nil {
		t.Fatalf("Alloc(%d, stream %d): %v", size, s, err)
	}
	return p
}

func mustFree(t testing.TB, c *alloc.Caching, p alloc.Ptr) {
	t.Helper()
	if err := c.Free(p); err != nil {
		t.Fatalf("Free(%v): %v", p, err)
	}
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)
