package alloc_test

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

// TestReleaseAll: a device shutting down with blocks still allocated (and
// one waiting for another stream's event) gets every segment back to the
// Source, and the allocator is closed afterwards.
func TestReleaseAll(t *testing.T) {
	sim, c := newSim(t, 1<<30, alloc.Config{})
	mustAlloc(t, c, 100, 0)
	mustAlloc(t, c, 3<<20, 0)
	p := mustAlloc(t, c, 25<<20, 1)
	if err := c.RecordStream(p, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseAll(); err != nil {
		t.Fatal(err)
	}
	if _, _, live := sim.Counts(); live != 0 {
		t.Errorf("%d segments still held by the source, want 0", live)
	}
	st := c.Stats()
	if got := st.ReservedBytes[alloc.AllPools].Current; got != 0 {
		t.Errorf("reserved = %d after ReleaseAll, want 0", got)
	}
	if got := st.AllocatedBytes[alloc.AllPools].Current; got != 0 {
		t.Errorf("allocated = %d after ReleaseAll, want 0", got)
	}
	if _, err := c.Alloc(1, 0); !errors.Is(err, alloc.ErrClosed) {
		t.Errorf("Alloc after ReleaseAll: err = %v, want ErrClosed", err)
	}
}

func TestHostCacheReleaseAll(t *testing.T) {
	sim := alloctest.NewSimulated(1 << 30)
	c := alloc.NewHostCache(sim)
	for _, n := range []int64{10, 5000, 1 << 20} {
		if _, err := c.Alloc(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ReleaseAll(); err != nil {
		t.Fatal(err)
	}
	if _, _, live := sim.Counts(); live != 0 {
		t.Errorf("%d segments still held by the source, want 0", live)
	}
	if _, err := c.Alloc(1); !errors.Is(err, alloc.ErrClosed) {
		t.Errorf("Alloc after ReleaseAll: err = %v, want ErrClosed", err)
	}
}
