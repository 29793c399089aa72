package alloc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
)

// TestScopeLimit runs two jobs on one device, each in its own scope on its
// own stream: B's limit fails B's request with an out-of-memory error that
// names B and its limit, after B released its own cache trying, and A's
// live and cached memory are left exactly as they were.
func TestScopeLimit(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	a, err := c.NewScope("job-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.NewScope("job-b", 64*mib)
	if err != nil {
		t.Fatal(err)
	}
	const sa, sb = alloc.Stream(1), alloc.Stream(2)
	in := func(n int64, s alloc.Stream, scope alloc.Scope) alloc.Ptr {
		t.Helper()
		p, err := c.AllocIn(n, s, alloc.Activations, scope)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	bLive := in(20*mib, sb, b)
	mustFree(t, c, in(40*mib, sb, b)) // B's cache: 60 MiB reserved of its 64
	checkInvariants(t, c)

	// 44 MiB more (a segment of its own: the cached 40 MiB block is too
	// small) fits B's limit only once B's cached 40 MiB is released.
	p := in(44*mib, sb, b)
	if got := c.ScopeStats(b).ReservedBytes[alloc.AllPools].Current; got != 64*mib {
		t.Errorf("B reserves %d MiB after its cache made room, want 64", got/mib)
	}
	checkInvariants(t, c)

	aLive := in(100*mib, sa, a)
	mustFree(t, c, in(50*mib, sa, a)) // A's cache: a whole free segment, last in the address space
	aBefore := c.ScopeStats(a)

	// 12 MiB more does not fit B's limit however the cache is emptied.
	_, err = c.AllocIn(12*mib, sb, alloc.Activations, b)
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("B past its limit: got %v, want an *OutOfMemoryError", err)
	}
	if !oom.ScopeRefused || oom.Scope != "job-b" || oom.ScopeLimit != 64*mib || oom.ScopeReserved != 64*mib {
		t.Errorf("the error's scope figures: refused %v, scope %q, limit %d, reserved %d; want true, job-b, 64 MiB, 64 MiB",
			oom.ScopeRefused, oom.Scope, oom.ScopeLimit, oom.ScopeReserved)
	}
	if got := oom.Categories[alloc.Activations]; got != 64*mib {
		t.Errorf("the error's activations: %d MiB, want B's own 64 (not A's too)", got/mib)
	}
	for _, want := range []string{"job-b holds", "of its limit of 64.00 MiB", "The limit of job-b is what binds", "job-b's allocations by category: activations 64.00 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the message lacks %q:\n%v", want, err)
		}
	}
	if got := c.ScopeStats(b).OOMs; got != 1 {
		t.Errorf("B's OOMs = %d, want 1", got)
	}
	aAfter := c.ScopeStats(a)
	if aAfter.ReservedBytes != aBefore.ReservedBytes || aAfter.AllocatedBytes != aBefore.AllocatedBytes || aAfter.OOMs != 0 {
		t.Errorf("A's memory changed when B ran out: reserved %d -> %d MiB, allocated %d -> %d MiB",
			aBefore.ReservedBytes[alloc.AllPools].Current/mib, aAfter.ReservedBytes[alloc.AllPools].Current/mib,
			aBefore.AllocatedBytes[alloc.AllPools].Current/mib, aAfter.AllocatedBytes[alloc.AllPools].Current/mib)
	}
	checkInvariants(t, c)

	// The device running out (not B's limit) may release every scope's
	// cache, but never a live block: A's 100 MiB stays. 820 MiB fits the
	// simulated address space only once A's cached 50 MiB, the segment
	// before its free tail of 810 MiB, is released.
	big, err := c.AllocIn(820*mib, 3, alloc.Activations, 0)
	if err != nil {
		t.Fatalf("a request that fits once the cache is emptied: %v", err)
	}
	if got := c.ScopeStats(a).AllocatedBytes[alloc.AllPools].Current; got != 100*mib {
		t.Errorf("A's allocated bytes after the device's ladder: %d MiB, want 100", got/mib)
	}
	checkInvariants(t, c)
	for _, q := range []alloc.Ptr{aLive, bLive, p, big} {
		mustFree(t, c, q)
	}
	checkInvariants(t, c)
	if _, releases, _ := sim.Counts(); releases != 2 {
		t.Errorf("%d segments released, want B's cached 40 MiB and A's cached 50 MiB", releases)
	}
}

// TestCloseScope closes a scope that still holds blocks, as a job that
// failed halfway does: its blocks are freed and its segments given back,
// and the other scope keeps its own.
func TestCloseScope(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	a, _ := c.NewScope("a", 0)
	b, _ := c.NewScope("b", 0)
	keep, err := c.AllocIn(10*mib, 1, alloc.Parameters, a)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.AllocIn(int64(i+1)*mib, 2, alloc.Activations, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AllocIn(100*1024, 2, alloc.Workspace, b); err != nil { // the small pool too
		t.Fatal(err)
	}
	checkInvariants(t, c)
	_, releasesBefore, _ := sim.Counts()
	segs := c.ScopeStats(b).Segment[alloc.AllPools].Current
	if segs < 2 {
		t.Fatalf("B holds %d segments, want one per pool at least", segs)
	}
	if err := c.CloseScope(b); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, c)
	_, releases, _ := sim.Counts()
	if releases-releasesBefore != segs {
		t.Errorf("closing B released %d segments, want its %d", releases-releasesBefore, segs)
	}
	if got := c.Scopes(); len(got) != 1 || got[0] != a {
		t.Errorf("Scopes() after closing B = %v, want [%d]", got, a)
	}
	if st := c.Stats(); st.AllocatedBytes[alloc.AllPools].Current != 10*mib || st.ReservedBytes[alloc.AllPools].Current != 10*mib {
		t.Errorf("the device holds %d allocated, %d reserved; want A's 10 MiB each", st.AllocatedBytes[alloc.AllPools].Current, st.ReservedBytes[alloc.AllPools].Current)
	}
	if z := c.ScopeStats(b); z.ReservedBytes[alloc.AllPools].Current != 0 {
		t.Errorf("a closed scope reports %d bytes", z.ReservedBytes[alloc.AllPools].Current)
	}
	if id, _ := c.NewScope("c", 0); id <= b {
		t.Errorf("a new scope got id %d, want one above the closed %d (ids are never reused)", id, b)
	}
	mustFree(t, c, keep)
	if err := c.CloseScope(0); err == nil {
		t.Error("CloseScope(0) succeeded, want an error: scope 0 is the allocator's own")
	}
}

// TestScopeReport reports one scope: its categories, its cache and its
// limit, and what it does not hold as outside.
func TestScopeReport(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	a, _ := c.NewScope("job-a", 256*mib)
	// Requests of 10 MiB or more get segments of their own size.
	p, err := c.AllocIn(12*mib, 1, alloc.Parameters, a)
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, c, mustAllocIn(t, c, 16*mib, 1, alloc.Activations, a))
	other := mustAllocIn(t, c, 14*mib, 2, alloc.Parameters, 0)
	r := c.ScopeReport(a)
	if r.Allocated != 12*mib || r.Reserved != 28*mib || r.Cached != 16*mib || r.LargestCached != 16*mib || r.Limit != 256*mib {
		t.Errorf("report: allocated %d, reserved %d, cached %d, largest %d, limit %d; want 12, 28, 16, 16 MiB and 256 MiB",
			r.Allocated, r.Reserved, r.Cached, r.LargestCached, r.Limit)
	}
	if r.Categories[alloc.Parameters].Current != 12*mib || r.Categories[alloc.Activations].Peak != 16*mib {
		t.Errorf("report's categories: %+v", r.Categories)
	}
	if r.Reserved+r.Outside+r.DeviceFree != r.DeviceTotal || r.Outside != 14*mib {
		t.Errorf("reserved %d + outside %d + free %d != total %d (outside should be the other 14 MiB)", r.Reserved, r.Outside, r.DeviceFree, r.DeviceTotal)
	}
	if !strings.Contains(r.Device, "job-a") {
		t.Errorf("report's device %q does not name the scope", r.Device)
	}
	mustFree(t, c, p)
	mustFree(t, c, other)
}

func mustAllocIn(t *testing.T, c *alloc.Caching, n int64, s alloc.Stream, cat alloc.Category, scope alloc.Scope) alloc.Ptr {
	t.Helper()
	p, err := c.AllocIn(n, s, cat, scope)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
