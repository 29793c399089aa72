package alloc_test

import (
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
)

// TestCategories follows the figures of tagged allocations through a
// forward-and-backward-shaped sequence: parameters stay, activations rise
// and fall, a workspace comes and goes. Sizes are multiples of 512 bytes,
// so rounded block sizes equal the requests.
func TestCategories(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	alloc1 := func(n int64, cat alloc.Category) alloc.Ptr {
		t.Helper()
		p, err := c.AllocCategory(n, 0, cat)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	params := alloc1(4*mib, alloc.Parameters)
	grads := alloc1(4*mib, alloc.Gradients)
	act := alloc1(30*mib, alloc.Activations)
	work := alloc1(2*mib, alloc.Workspace)
	checkInvariants(t, c)
	mustFree(t, c, work)
	mustFree(t, c, act)
	opt := alloc1(8*mib, alloc.OptimizerState)
	other := mustAlloc(t, c, 512, 0) // untagged
	checkInvariants(t, c)

	st := c.Stats()
	want := map[alloc.Category][2]int64{ // current, peak
		alloc.Parameters:     {4 * mib, 4 * mib},
		alloc.Gradients:      {4 * mib, 4 * mib},
		alloc.Activations:    {0, 30 * mib},
		alloc.Workspace:      {0, 2 * mib},
		alloc.OptimizerState: {8 * mib, 8 * mib},
		alloc.Other:          {512, 512},
		alloc.Batches:        {0, 0},
		alloc.State:          {0, 0},
	}
	for cat, w := range want {
		if g := st.CategoryBytes[cat]; g.Current != w[0] || g.Peak != w[1] {
			t.Errorf("%v: current %d, peak %d; want %d, %d", cat, g.Current, g.Peak, w[0], w[1])
		}
	}
	// The peak (40 MiB) was reached with the workspace allocated.
	if st.AllocatedBytes[alloc.AllPools].Peak != 40*mib {
		t.Fatalf("peak %d, want 40 MiB", st.AllocatedBytes[alloc.AllPools].Peak)
	}
	wantAt := [alloc.NumCategories]int64{}
	wantAt[alloc.Parameters], wantAt[alloc.Gradients], wantAt[alloc.Activations], wantAt[alloc.Workspace] = 4*mib, 4*mib, 30*mib, 2*mib
	if st.AtPeak != wantAt {
		t.Errorf("at the peak %v, want %v", st.AtPeak, wantAt)
	}
	m := st.Map()
	if m["category_bytes.activations.peak"] != 30*mib || m["category_bytes.parameters.at_peak"] != 4*mib {
		t.Errorf("Map: activations peak %d, parameters at peak %d", m["category_bytes.activations.peak"], m["category_bytes.parameters.at_peak"])
	}

	// A snapshot says what each allocated block holds.
	cats := map[alloc.Ptr]alloc.Category{}
	for _, seg := range c.Snapshot().Segments {
		for _, b := range seg.Blocks {
			if b.State == alloc.BlockActiveAllocated {
				cats[b.Address] = b.Category
			}
		}
	}
	for p, w := range map[alloc.Ptr]alloc.Category{params: alloc.Parameters, grads: alloc.Gradients, opt: alloc.OptimizerState, other: alloc.Other} {
		if cats[p] != w {
			t.Errorf("snapshot: block %v holds %v, want %v", p, cats[p], w)
		}
	}

	c.ResetPeak()
	st = c.Stats()
	if g := st.CategoryBytes[alloc.Activations]; g.Peak != 0 {
		t.Errorf("activations peak after ResetPeak = %d, want 0", g.Peak)
	}
	if st.AtPeak[alloc.OptimizerState] != 8*mib || st.AtPeak[alloc.Activations] != 0 {
		t.Errorf("at the peak after ResetPeak %v, want the currents", st.AtPeak)
	}
	for _, p := range []alloc.Ptr{params, grads, opt, other} {
		mustFree(t, c, p)
	}
	checkInvariants(t, c)
	if st := c.Stats(); st.CategoryBytes.Total() != 0 {
		t.Errorf("categories hold %d bytes after every free", st.CategoryBytes.Total())
	}

	if _, err := c.AllocCategory(512, 0, alloc.NumCategories); err == nil {
		t.Error("AllocCategory accepted a category out of range")
	}
}

func TestCategoryNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range alloc.Categories() {
		s := c.String()
		if seen[s] {
			t.Errorf("name %q twice", s)
		}
		seen[s] = true
		back, err := alloc.ParseCategory(s)
		if err != nil || back != c {
			t.Errorf("ParseCategory(%q) = %v, %v; want %v", s, back, err, c)
		}
	}
	if len(seen) != int(alloc.NumCategories) {
		t.Errorf("Categories lists %d, want %d", len(seen), alloc.NumCategories)
	}
	if _, err := alloc.ParseCategory("weights"); err == nil {
		t.Error(`ParseCategory("weights") succeeded`)
	}
}

// TestReport checks that the report's figures add up, and that memory
// another allocator holds on the same device shows as outside this one.
func TestReport(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	other, err := alloc.NewCaching(sim, alloc.Config{}) // another user of the device
	if err != nil {
		t.Fatal(err)
	}
	params, err := c.AllocCategory(4*mib, 0, alloc.Parameters)
	if err != nil {
		t.Fatal(err)
	}
	act, err := c.AllocCategory(3*mib, 0, alloc.Activations)
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, c, act) // cached for reuse
	theirs := mustAlloc(t, other, 30*mib, 0)
	staging := alloc.NewHostCache(alloc.NewHost(0))
	sp, err := staging.Alloc(mib)
	if err != nil {
		t.Fatal(err)
	}

	r := c.Report(staging)
	if r.Categories.Total() != r.Allocated || r.Allocated != 4*mib {
		t.Errorf("categories add up to %d, allocated %d; want both 4 MiB", r.Categories.Total(), r.Allocated)
	}
	if r.Allocated+r.Cached != r.Reserved || r.Cached < 3*mib {
		t.Errorf("allocated %d + cached %d != reserved %d (or the freed 3 MiB is not cached)", r.Allocated, r.Cached, r.Reserved)
	}
	if r.DeviceTotal != gib || r.Reserved+r.Outside+r.DeviceFree != r.DeviceTotal {
		t.Errorf("reserved %d + outside %d + free %d != total %d (want 1 GiB)", r.Reserved, r.Outside, r.DeviceFree, r.DeviceTotal)
	}
	if want := other.Stats().ReservedBytes[alloc.AllPools].Current; r.Outside != want {
		t.Errorf("outside = %d, want %d, what the other allocator reserved", r.Outside, want)
	}
	if r.AtPeak[alloc.Activations] != 3*mib || r.PeakAllocated != 7*mib {
		t.Errorf("at the peak: activations %d of %d, want 3 MiB of 7 MiB", r.AtPeak[alloc.Activations], r.PeakAllocated)
	}
	if r.Staging < mib {
		t.Errorf("staging %d, want at least 1 MiB", r.Staging)
	}
	table := r.Table()
	for _, s := range []string{"parameters", "activations", "4.00 MiB", "3.00 MiB", "used outside the allocator", "host staging"} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q:\n%s", s, table)
		}
	}
	if strings.Contains(table, "optimizer_state") {
		t.Errorf("table lists a category that never held memory:\n%s", table)
	}
	mustFree(t, c, params)
	mustFree(t, other, theirs)
	if err := staging.Free(sp); err != nil {
		t.Fatal(err)
	}
}

// TestScopes keeps the books of two jobs sharing a device: each scope's
// bytes by category, current and peak, beside the device's, which count
// every scope's.
func TestScopes(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	in := func(n int64, cat alloc.Category, scope alloc.Scope) alloc.Ptr {
		t.Helper()
		p, err := c.AllocIn(n, 0, cat, scope)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a1 := in(4*mib, alloc.Parameters, 1)
	a2 := in(6*mib, alloc.Activations, 1)
	b1 := in(2*mib, alloc.Parameters, 2)
	own := in(mib, alloc.Workspace, 0)
	checkInvariants(t, c)
	mustFree(t, c, a2)
	checkInvariants(t, c)
	if got := c.Scopes(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("Scopes() = %v, want [1 2]", got)
	}
	s1, s2 := c.ScopeBytes(1), c.ScopeBytes(2)
	if s1[alloc.Parameters].Current != 4*mib || s1[alloc.Activations].Current != 0 || s1[alloc.Activations].Peak != 6*mib {
		t.Errorf("scope 1: %+v", s1)
	}
	if s2.Total() != 2*mib || s2[alloc.Activations].Peak != 0 {
		t.Errorf("scope 2: %+v", s2)
	}
	st := c.Stats()
	if st.CategoryBytes[alloc.Parameters].Current != 6*mib || st.CategoryBytes.Total() != 7*mib {
		t.Errorf("the device: parameters %d, all %d; want 6 MiB, 7 MiB", st.CategoryBytes[alloc.Parameters].Current, st.CategoryBytes.Total())
	}
	if z := c.ScopeBytes(9); z.Total() != 0 {
		t.Errorf("a scope that never allocated holds %d", z.Total())
	}
	r := c.Report(nil)
	if len(r.Scopes) != 2 || r.Scopes[1][alloc.Parameters].Current != 4*mib || !strings.Contains(r.Table(), "scope 2") {
		t.Errorf("report's scopes %v, table:\n%s", r.Scopes, r.Table())
	}
	c.ResetPeak()
	if p := c.ScopeBytes(1)[alloc.Activations].Peak; p != 0 {
		t.Errorf("scope 1's activations peak after ResetPeak: %d", p)
	}
	for _, p := range []alloc.Ptr{a1, b1, own} {
		mustFree(t, c, p)
	}
	checkInvariants(t, c)
}
