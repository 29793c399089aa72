package alloc_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/internal/closedtest"
)

// TestSizingVectors checks rounding, pool choice, segment size and the split
// decision on real allocations. The rows are the worked vectors of
// docs/research/allocator.md §1.2, computed from PyTorch's round_size,
// get_pool, get_allocation_size and should_split with the default config;
// the 10.5 MiB row is ours (remainder 1.5 MiB > 1 MiB, so it splits).
func TestSizingVectors(t *testing.T) {
	tests := []struct {
		request, rounded int64
		pool             alloc.Pool
		segment          int64
		remainder        int64 // size of the free block split off, 0 if not split
	}{
		{1, 512, alloc.SmallPool, 2097152, 2096640},
		{1000, 1024, alloc.SmallPool, 2097152, 2096128},
		{1048576, 1048576, alloc.SmallPool, 2097152, 1048576},
		{1048577, 1049088, alloc.LargePool, 20971520, 19922432},
		{9 * mib, 9437184, alloc.LargePool, 20971520, 11534336},
		{10 * mib, 10485760, alloc.LargePool, 10485760, 0},
		{11 * mib, 11534336, alloc.LargePool, 12582912, 0},
		{21 * mib / 2, 11010048, alloc.LargePool, 12582912, 1572864},
		{19 * mib, 19922944, alloc.LargePool, 20971520, 0},
		{100000000, 100000256, alloc.LargePool, 100663296, 0},
	}
	for _, tt := range tests {
		t.Run(alloc.FormatSize(tt.request), func(t *testing.T) {
			var cfg alloc.Config
			if got := cfg.RoundSize(tt.request); got != tt.rounded {
				t.Errorf("RoundSize(%d) = %d, want %d", tt.request, got, tt.rounded)
			}
			if got := alloc.PoolOf(tt.rounded); got != tt.pool {
				t.Errorf("PoolOf(%d) = %v, want %v", tt.rounded, got, tt.pool)
			}
			if got := alloc.SegmentSize(tt.rounded); got != tt.segment {
				t.Errorf("SegmentSize(%d) = %d, want %d", tt.rounded, got, tt.segment)
			}
			_, c := newSim(t, gib, cfg)
			p := mustAlloc(t, c, tt.request, 0)
			snap := c.Snapshot()
			if len(snap.Segments) != 1 {
				t.Fatalf("got %d segments, want 1", len(snap.Segments))
			}
			seg := snap.Segments[0]
			if seg.TotalSize != tt.segment || seg.Pool != tt.pool {
				t.Errorf("segment of %d bytes in %v, want %d in %v", seg.TotalSize, seg.Pool, tt.segment, tt.pool)
			}
			wantBlocks := []alloc.BlockInfo{{Address: p, Size: tt.rounded, RequestedSize: tt.request, State: alloc.BlockActiveAllocated}}
			if tt.remainder != 0 {
				wantBlocks = append(wantBlocks, alloc.BlockInfo{Address: p + alloc.Ptr(tt.rounded), Size: tt.remainder, State: alloc.BlockInactive})
			} else {
				wantBlocks[0].Size = tt.segment // not split: the caller gets the whole segment
			}
			if !slices.Equal(seg.Blocks, wantBlocks) {
				t.Errorf("blocks %+v, want %+v", seg.Blocks, wantBlocks)
			}
			checkInvariants(t, c)
		})
	}
}

// TestRoundupPower2 checks roundup_power2_divisions against the values
// PyTorch asserts (test_cuda.py test_allocator_settings, the docs' 1200 ->
// 1280 example) and our interval lookup.
func TestRoundupPower2(t *testing.T) {
	all := func(d int) alloc.Config {
		var c alloc.Config
		for i := range c.RoundupPower2Divisions {
			c.RoundupPower2Divisions[i] = d
		}
		return c
	}
	only := func(i, d int) alloc.Config {
		var c alloc.Config
		c.RoundupPower2Divisions[i] = d
		return c
	}
	if got := alloc.RoundupPower2NextDivision(1200, 4); got != 1280 {
		t.Errorf("RoundupPower2NextDivision(1200, 4) = %d, want 1280", got)
	}
	tests := []struct {
		name string
		cfg  alloc.Config
		size int64
		want int64
	}{
		// 1200 <= 512*4, so the power-of-two path is skipped: plain 512 rounding.
		{"1200 div4", all(4), 1200, 1536},
		{"84MiB div4", all(4), 84 * mib, 96 * mib},
		{"84MiB div8", all(8), 84 * mib, 88 * mib},
		{"400MiB div2", all(2), 400 * mib, 512 * mib},
		{"power of two kept", all(4), 64 * mib, 64 * mib},
		{"div1 is next power of two", all(1), 84 * mib, 128 * mib},
		// Interval 6 is [64 MiB, 128 MiB): 84 MiB uses it, 40 MiB (interval 5) does not.
		{"interval 6 on, 84MiB", only(6, 4), 84 * mib, 96 * mib},
		{"interval 6 on, 40MiB", only(6, 4), 40*mib + 1, 40*mib + 512},
		// Interval 0 also takes everything below 1 MiB: 3000 B with 4 divisions
		// of [2048, 4096) rounds to 3072.
		{"below 1MiB uses interval 0", only(0, 4), 3000, 3072},
		// Interval 15 takes everything from 32 GiB up.
		{"above 32GiB uses interval 15", only(15, 2), 100 * gib, 128 * gib},
		{"off", alloc.Config{}, 84*mib + 1, 84*mib + 512},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.RoundSize(tt.size); got != tt.want {
				t.Errorf("RoundSize(%d) = %d, want %d", tt.size, got, tt.want)
			}
		})
	}
	// Sizes that differ a little share a block size with divisions, which is
	// why the option exists (pytorch/pytorch#74213: batch sizes 1001, 1021
	// and 1023 each got their own block size).
	cfg := all(4)
	var sizes []int64
	for _, n := range []int64{1001, 1021, 1023} {
		sizes = append(sizes, cfg.RoundSize(n*64*kib))
	}
	if sizes[0] != sizes[1] || sizes[1] != sizes[2] {
		t.Errorf("with 4 divisions, sizes for batch 1001/1021/1023 round to %v, want one size", sizes)
	}
}

// TestBestFit checks that a request takes the smallest cached block that
// fits, not the first or the largest.
func TestBestFit(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	// One 20 MiB segment laid out as 3 | sep | 5 | sep | 7 | rest, with
	// 1.5 MiB separators so the freed blocks cannot merge.
	sep := 3 * mib / 2
	a := mustAlloc(t, c, 3*mib, 0)
	s1 := mustAlloc(t, c, sep, 0)
	b := mustAlloc(t, c, 5*mib, 0)
	s2 := mustAlloc(t, c, sep, 0)
	d := mustAlloc(t, c, 7*mib, 0)
	if n := len(c.Snapshot().Segments); n != 1 {
		t.Fatalf("layout took %d segments, want 1", n)
	}
	for _, p := range []alloc.Ptr{a, b, d} {
		mustFree(t, c, p)
	}
	checkInvariants(t, c)
	if got := mustAlloc(t, c, 4*mib, 0); got != b {
		t.Errorf("4 MiB request got %v, want the 5 MiB block at %v (best fit)", got, b)
	}
	if got := mustAlloc(t, c, 6*mib, 0); got != d {
		t.Errorf("6 MiB request got %v, want the 7 MiB block at %v", got, d)
	}
	if got := mustAlloc(t, c, 2*mib, 0); got != a {
		t.Errorf("2 MiB request got %v, want the 3 MiB block at %v", got, a)
	}
	_, _ = s1, s2
	checkInvariants(t, c)
}

// TestMerge covers merging with the previous, the next and both
// neighbours, and that neighbouring segments never merge even when their
// addresses touch.
func TestMerge(t *testing.T) {
	t.Run("prev next both", func(t *testing.T) {
		_, c := newSim(t, gib, alloc.Config{})
		p := make([]alloc.Ptr, 4)
		for i := range p {
			p[i] = mustAlloc(t, c, 4*kib, 0)
		}
		blocks := func() int { return len(c.Snapshot().Segments[0].Blocks) }
		// 4 allocated + the free tail of the 2 MiB segment.
		if got := blocks(); got != 5 {
			t.Fatalf("got %d blocks, want 5", got)
		}
		mustFree(t, c, p[0]) // no free neighbour: 5 blocks
		mustFree(t, c, p[1]) // merges with prev p[0]
		if got := blocks(); got != 4 {
			t.Errorf("after merge-prev: %d blocks, want 4", got)
		}
		mustFree(t, c, p[3]) // merges with the free tail (next)
		if got := blocks(); got != 3 {
			t.Errorf("after merge-next: %d blocks, want 3", got)
		}
		mustFree(t, c, p[2]) // merges both ways: one block
		if got := blocks(); got != 1 {
			t.Errorf("after merge-both: %d blocks, want 1", got)
		}
		checkInvariants(t, c)
	})
	t.Run("segments stay apart", func(t *testing.T) {
		sim, c := newSim(t, gib, alloc.Config{})
		// 10 MiB requests get exact 10 MiB segments; the simulated device
		// hands out addresses first fit, so the two segments touch.
		a := mustAlloc(t, c, 10*mib, 0)
		b := mustAlloc(t, c, 10*mib, 0)
		if b != a+alloc.Ptr(10*mib) {
			t.Fatalf("segments at %v and %v, want adjacent addresses for this test", a, b)
		}
		mustFree(t, c, a)
		mustFree(t, c, b)
		snap := c.Snapshot()
		if len(snap.Segments) != 2 {
			t.Fatalf("got %d segments, want 2", len(snap.Segments))
		}
		for _, s := range snap.Segments {
			if len(s.Blocks) != 1 || s.Blocks[0].Size != 10*mib {
				t.Errorf("segment %v blocks %+v, want one 10 MiB block", s.Address, s.Blocks)
			}
		}
		// A 20 MiB request must not be served by the two touching segments.
		mustAlloc(t, c, 20*mib, 0)
		if allocs, _, _ := sim.Counts(); allocs != 3 {
			t.Errorf("source allocations = %d, want 3 (no merge across segments)", allocs)
		}
		checkInvariants(t, c)
	})
}

// TestTiledBlocksMerge tiles one segment with 1,000 blocks of 512 bytes and
// frees them in random order; every merge must leave a consistent segment
// and the end state is one free block (PyTorch's test_memory_snapshot).
func TestTiledBlocksMerge(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	ptrs := make([]alloc.Ptr, 1000)
	for i := range ptrs {
		ptrs[i] = mustAlloc(t, c, 512, 0)
	}
	if n := len(c.Snapshot().Segments); n != 1 {
		t.Fatalf("1000 x 512 B took %d segments, want 1 (2 MiB holds 4096)", n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(ptrs), func(i, j int) { ptrs[i], ptrs[j] = ptrs[j], ptrs[i] })
	for _, p := range ptrs {
		mustFree(t, c, p)
		checkInvariants(t, c)
	}
	seg := c.Snapshot().Segments[0]
	if len(seg.Blocks) != 1 || seg.Blocks[0].Size != alloc.SmallBuffer {
		t.Errorf("after freeing all: blocks %+v, want one free 2 MiB block", seg.Blocks)
	}
}

// TestStatsArithmetic is RMM's PeakAllocations scenario
// (statistics_mr_tests.cpp) on our figures.
func TestStatsArithmetic(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	var ps []alloc.Ptr
	for range 10 {
		ps = append(ps, mustAlloc(t, c, 10*mib, 0))
	}
	for i := 0; i < 10; i += 2 {
		mustFree(t, c, ps[i])
	}
	st := c.Stats()
	if got := st.AllocatedBytes[alloc.AllPools]; got.Current != 50*mib || got.Peak != 100*mib || got.Allocated != 100*mib {
		t.Errorf("after 10 allocs and 5 frees: allocated_bytes %+v, want current 50 MiB, peak 100 MiB, allocated 100 MiB", got)
	}
	for range 10 {
		ps = append(ps, mustAlloc(t, c, 10*mib, 0))
	}
	for i, p := range ps {
		if i < 10 && i%2 == 0 {
			continue
		}
		mustFree(t, c, p)
	}
	st = c.Stats()
	if got := st.AllocatedBytes[alloc.AllPools]; got.Current != 0 || got.Peak != 150*mib || got.Allocated != 200*mib || got.Freed != 200*mib {
		t.Errorf("after all frees: allocated_bytes %+v, want current 0, peak 150 MiB, allocated = freed = 200 MiB", got)
	}
	if got := st.Allocation[alloc.AllPools]; got.Peak != 15 || got.Allocated != 20 {
		t.Errorf("allocation %+v, want peak 15, allocated 20", got)
	}
	if got := st.AllocatedBytes[alloc.SmallPool]; got != (alloc.Stat{}) {
		t.Errorf("small pool %+v, want untouched", got)
	}
	checkInvariants(t, c)
}

// TestActiveBytesExact follows PyTorch's test_memory_stats: 256 floats
// (1,024 bytes) are 1,024 active bytes, and freeing them counts 1,024 freed.
func TestActiveBytesExact(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	before := c.Stats()
	p := mustAlloc(t, c, 256*4, 0)
	st := c.Stats()
	if d := st.ActiveBytes[alloc.AllPools].Current - before.ActiveBytes[alloc.AllPools].Current; d != 1024 {
		t.Errorf("active_bytes grew by %d, want 1024", d)
	}
	if st.ActiveBytes[alloc.AllPools].Freed != 0 {
		t.Errorf("active_bytes.freed = %d, want 0", st.ActiveBytes[alloc.AllPools].Freed)
	}
	mustFree(t, c, p)
	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	st = c.Stats()
	if st.ActiveBytes[alloc.AllPools].Freed != 1024 || st.ActiveBytes[alloc.SmallPool].Freed != 1024 {
		t.Errorf("active_bytes.freed all/small = %d/%d, want 1024", st.ActiveBytes[alloc.AllPools].Freed, st.ActiveBytes[alloc.SmallPool].Freed)
	}
	if st.ReservedBytes[alloc.AllPools].Current != 0 {
		t.Errorf("reserved after EmptyCache = %d, want 0", st.ReservedBytes[alloc.AllPools].Current)
	}
	peak := st.ActiveBytes[alloc.AllPools].Peak
	c.ResetPeak()
	if got := c.Stats().ActiveBytes[alloc.AllPools].Peak; got != 0 || peak != 1024 {
		t.Errorf("peak before/after ResetPeak = %d/%d, want 1024/0", peak, got)
	}
	c.ResetAccumulated()
	st = c.Stats()
	if st.ActiveBytes[alloc.AllPools].Allocated != 0 || st.ActiveBytes[alloc.AllPools].Freed != 0 || st.DeviceAllocs != 0 || st.DeviceFrees != 0 {
		t.Errorf("after ResetAccumulated: %+v, device allocs %d frees %d, want zeros", st.ActiveBytes[alloc.AllPools], st.DeviceAllocs, st.DeviceFrees)
	}
}

// TestMemoryStatsWorkload is PyTorch's _test_memory_stats_generator (N=35)
// with the stats-snapshot consistency check after every step, plus the
// invariants PyTorch asserts around it.
func TestMemoryStatsWorkload(t *testing.T) {
	_, c := newSim(t, 4*gib, alloc.Config{})
	rng := rand.New(rand.NewPCG(35, 0))
	const n = 35
	var live []alloc.Ptr
	lastPeak := int64(0)
	step := func(what string) {
		t.Helper()
		checkInvariants(t, c)
		st := c.Stats()
		a := st.AllocatedBytes[alloc.AllPools]
		if a.Peak < lastPeak {
			t.Fatalf("%s: allocated peak fell from %d to %d without a reset", what, lastPeak, a.Peak)
		}
		lastPeak = a.Peak
	}
	allocate := func(size int64) {
		live = append(live, mustAlloc(t, c, size, 0))
		step("alloc")
	}
	for range 3 {
		allocate(int64(rng.IntN(4*1024)) + 1)
	}
	for i := range n / 2 {
		allocate(int64(i*1000) + 1) // small
	}
	for i := range n / 2 {
		allocate(int64(i+1) * 3 * mib) // large
	}
	p, err := c.Alloc(0, 0)
	if err != nil || p != 0 {
		t.Fatalf("Alloc(0) = %v, %v; want 0, nil", p, err)
	}
	rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	for len(live) > 2*n/3 {
		mustFree(t, c, live[len(live)-1])
		live = live[:len(live)-1]
		step("free half")
	}
	reserved := c.Stats().ReservedBytes[alloc.AllPools].Current
	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().ReservedBytes[alloc.AllPools].Current; got > reserved {
		t.Errorf("EmptyCache raised reserved from %d to %d", reserved, got)
	}
	step("empty cache")
	for i := range 2 * n / 3 {
		allocate(int64(rng.IntN(12*int(mib))) + int64(i) + 1)
	}
	c.ResetPeak()
	lastPeak = 0
	st := c.Stats()
	if a := st.AllocatedBytes[alloc.AllPools]; a.Peak != a.Current {
		t.Errorf("after ResetPeak: peak %d, current %d, want equal", a.Peak, a.Current)
	}
	for _, p := range live {
		mustFree(t, c, p)
		step("free all")
	}
	if got := c.Stats().AllocatedBytes[alloc.AllPools].Current; got != 0 {
		t.Errorf("allocated after freeing everything = %d, want 0", got)
	}
	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	step("final empty cache")
	if got := c.Stats().ReservedBytes[alloc.AllPools].Current; got != 0 {
		t.Errorf("reserved after the final EmptyCache = %d, want 0", got)
	}
}

// TestNoOverlap allocates every size from 1 to 1,023 bytes and then random
// sizes, claiming each block in the simulated device's shadow map, which
// fails on any byte shared by two live blocks (TensorFlow's NoDups).
func TestNoOverlap(t *testing.T) {
	sim, c := newSim(t, 16*gib, alloc.Config{})
	type live struct {
		p    alloc.Ptr
		size int64
	}
	var blocks []live
	claim := func(size int64) {
		p := mustAlloc(t, c, size, 0)
		if err := sim.Claim(p, size); err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, live{p, size})
	}
	for n := int64(1); n <= 1023; n++ {
		claim(n)
	}
	// 512 requests round to 512 bytes and 511 to 1,024: 512*512 + 511*1024.
	if got, want := c.Stats().AllocatedBytes[alloc.AllPools].Current, int64(512*512+511*1024); got != want {
		t.Errorf("allocated bytes = %d, want %d", got, want)
	}
	sorted := slices.Clone(blocks)
	slices.SortFunc(sorted, func(a, b live) int { return int(a.p - b.p) })
	for i := 1; i < len(sorted); i++ {
		if gap := int64(sorted[i].p - sorted[i-1].p); gap < sorted[i-1].size {
			t.Fatalf("blocks %v and %v are %d apart, want >= %d", sorted[i-1].p, sorted[i].p, gap, sorted[i-1].size)
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 5000 {
		if len(blocks) > 0 && rng.IntN(100) < 55 { // frees outweigh allocations: live memory stays bounded
			i := rng.IntN(len(blocks))
			if err := sim.Unclaim(blocks[i].p); err != nil {
				t.Fatal(err)
			}
			mustFree(t, c, blocks[i].p)
			blocks[i] = blocks[len(blocks)-1]
			blocks = blocks[:len(blocks)-1]
			continue
		}
		claim(int64(rng.IntN(3<<20)) + 1)
	}
	checkInvariants(t, c)
}

// TestCoalescingNoGrowth repeats one allocation pattern 1,000 times; the
// memory held after the first round must not grow (TensorFlow's
// ExerciseCoalescing: 4 KB, 8 MB, 16 KB, 40 MB).
func TestCoalescingNoGrowth(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	sizes := []int64{4 * kib, 8 * mib, 16 * kib, 40 * mib}
	var first []alloc.Ptr
	var reserved1 int64
	for it := range 1000 {
		ps := make([]alloc.Ptr, len(sizes))
		for i, s := range sizes {
			ps[i] = mustAlloc(t, c, s, 0)
		}
		if it == 0 {
			first = ps
		} else if !slices.Equal(ps, first) {
			t.Fatalf("iteration %d got %v, want the first iteration's %v", it, ps, first)
		}
		for _, p := range ps {
			mustFree(t, c, p)
		}
		if it == 0 {
			reserved1 = c.Stats().ReservedBytes[alloc.AllPools].Current
		}
	}
	st := c.Stats()
	if got := st.ReservedBytes[alloc.AllPools].Current; got != reserved1 {
		t.Errorf("reserved after 1000 rounds = %d, after 1 = %d; want equal", got, reserved1)
	}
	if st.DeviceAllocs != 3 { // small 2 MiB, large 20 MiB (8 MiB), large 40 MiB
		t.Errorf("device allocations = %d, want 3", st.DeviceAllocs)
	}
	checkInvariants(t, c)
}

// TestMaxSplitSize checks the oversize rules: blocks of at least
// MaxSplitSize are not split, smaller requests do not take them, and larger
// ones take them only within MaxNonSplitRounding.
func TestMaxSplitSize(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{MaxSplitSize: 40 * mib})
	big := mustAlloc(t, c, 60*mib, 0)
	mustFree(t, c, big)
	// A 30 MiB request is below the split limit: it must not take the
	// 60 MiB cached block.
	p := mustAlloc(t, c, 30*mib, 0)
	if p == big {
		t.Errorf("30 MiB request took the 60 MiB oversize block")
	}
	// 45 MiB is oversize and 60 < 45 + 20: it reuses the block, unsplit.
	q := mustAlloc(t, c, 45*mib, 0)
	if q != big {
		t.Errorf("45 MiB request got %v, want the cached 60 MiB block %v", q, big)
	}
	st := c.Stats()
	if st.OversizeAllocations.Current != 1 || st.OversizeSegments.Current != 1 {
		t.Errorf("oversize allocations/segments = %d/%d, want 1/1", st.OversizeAllocations.Current, st.OversizeSegments.Current)
	}
	mustFree(t, c, q)
	// 40 MiB is oversize but 60 >= 40 + 20: a new segment.
	r := mustAlloc(t, c, 40*mib, 0)
	if r == big {
		t.Errorf("40 MiB request took the 60 MiB block; it is 20 MiB or more larger")
	}
	var whole bool
	for _, s := range c.Snapshot().Segments {
		if s.Address == r {
			whole = len(s.Blocks) == 1
		}
	}
	if !whole {
		t.Errorf("the 40 MiB oversize block was split")
	}
	checkInvariants(t, c)
}

// TestMaxSplitLimitScenario is PyTorch's test_max_split_expandable on the
// native allocator: with 120 MiB allowed and max_split_size_mb:40, three
// 40 MiB blocks fit and a fourth does not; after freeing them a 120 MiB
// request succeeds by releasing the cached oversize segments.
func TestMaxSplitLimitScenario(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{MaxSplitSize: 40 * mib, MemoryLimit: 120 * mib})
	var ps []alloc.Ptr
	for range 3 {
		ps = append(ps, mustAlloc(t, c, 40*mib, 0))
	}
	_, err := c.Alloc(40*mib, 0)
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("fourth 40 MiB: err %v, want *OutOfMemoryError", err)
	}
	if oom.Limit != 120*mib {
		t.Errorf("error limit = %d, want %d", oom.Limit, 120*mib)
	}
	for _, p := range ps {
		mustFree(t, c, p)
	}
	retries := c.Stats().AllocRetries
	mustAlloc(t, c, 120*mib, 0)
	st := c.Stats()
	if st.DeviceFrees != 3 {
		t.Errorf("device frees = %d, want the 3 oversize segments released", st.DeviceFrees)
	}
	if st.AllocRetries != retries {
		t.Errorf("alloc retries went from %d to %d; releasing oversize blocks should have sufficed", retries, st.AllocRetries)
	}
	checkInvariants(t, c)
}

// TestGarbageCollection is PyTorch's test_garbage_collect scenario: with a
// 120 MiB limit and threshold 0.5, an 80 MiB request after freeing two of
// three 40 MiB blocks succeeds by garbage collection, without the flush
// that counts a retry; without the threshold it needs the flush.
func TestGarbageCollection(t *testing.T) {
	for _, tt := range []struct {
		threshold   float64
		wantRetries int64
	}{{0.5, 0}, {0, 1}} {
		_, c := newSim(t, gib, alloc.Config{MemoryLimit: 120 * mib, GarbageCollectionThreshold: tt.threshold})
		a := mustAlloc(t, c, 40*mib, 0)
		b := mustAlloc(t, c, 40*mib, 0)
		mustAlloc(t, c, 40*mib, 0)
		mustFree(t, c, a)
		mustFree(t, c, b)
		mustAlloc(t, c, 80*mib, 0)
		st := c.Stats()
		if st.AllocRetries != tt.wantRetries || st.DeviceFrees != 2 {
			t.Errorf("threshold %v: retries %d, device frees %d; want %d, 2", tt.threshold, st.AllocRetries, st.DeviceFrees, tt.wantRetries)
		}
		checkInvariants(t, c)
	}
}

// TestGarbageCollectionAge checks that collection releases the cached
// segments that waited longest and keeps the ones reused recently.
func TestGarbageCollectionAge(t *testing.T) {
	// Threshold 0.5 of 100 MiB: collection starts above 50 MiB reserved.
	_, c := newSim(t, gib, alloc.Config{MemoryLimit: 100 * mib, GarbageCollectionThreshold: 0.5})
	old := mustAlloc(t, c, 30*mib, 0)
	recent := mustAlloc(t, c, 28*mib, 0)
	mustFree(t, c, old)
	for range 10 { // every search ages the cached old block; recent re-enters the pool each time
		mustFree(t, c, recent)
		if got := mustAlloc(t, c, 28*mib, 0); got != recent {
			t.Fatalf("28 MiB request got %v, want the cached %v", got, recent)
		}
	}
	mustFree(t, c, recent)
	// 58 MiB cached, a 40 MiB request fits neither block: collection must
	// reclaim 58 - 50 = 8 MiB, which the older segment alone covers.
	mustAlloc(t, c, 40*mib, 0)
	found := map[alloc.Ptr]bool{}
	for _, s := range c.Snapshot().Segments {
		found[s.Address] = true
	}
	if found[old] || !found[recent] {
		t.Errorf("after collection old present %v, recent present %v; want false, true", found[old], found[recent])
	}
	if st := c.Stats(); st.DeviceFrees != 1 || st.AllocRetries != 0 {
		t.Errorf("device frees %d, retries %d; want 1, 0", st.DeviceFrees, st.AllocRetries)
	}
	checkInvariants(t, c)
}

// TestInvalidFree checks that unknown, double and interior frees are
// errors, counted, and change nothing.
func TestInvalidFree(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	p := mustAlloc(t, c, 4096, 0)
	q := mustAlloc(t, c, 4096, 0)
	mustFree(t, c, q)
	before := c.Snapshot()
	for _, bad := range []alloc.Ptr{q, p + 512, 0xdead000, p - 4096} {
		if err := c.Free(bad); !errors.Is(err, alloc.ErrInvalidPointer) {
			t.Errorf("Free(%v) = %v, want ErrInvalidPointer", bad, err)
		}
	}
	if err := c.RecordStream(q, 1); !errors.Is(err, alloc.ErrInvalidPointer) {
		t.Errorf("RecordStream of a freed block = %v, want ErrInvalidPointer", err)
	}
	if got := c.Stats().InvalidFrees; got != 5 {
		t.Errorf("invalid frees = %d, want 5", got)
	}
	if after := c.Snapshot(); !slices.EqualFunc(before.Segments, after.Segments, func(a, b alloc.SegmentInfo) bool {
		return a.Address == b.Address && slices.Equal(a.Blocks, b.Blocks)
	}) {
		t.Errorf("invalid frees changed the allocator: %+v -> %+v", before, after)
	}
	if err := c.Free(0); err != nil {
		t.Errorf("Free(nil) = %v, want nil", err)
	}
	if _, err := c.Alloc(-1, 0); err == nil {
		t.Errorf("Alloc(-1) succeeded")
	}
	mustFree(t, c, p)
	checkInvariants(t, c)
}

func TestClose(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	p := mustAlloc(t, c, 3*mib, 0)
	mustAlloc(t, c, 100, 0)
	if err := c.Close(); err == nil {
		t.Fatal("Close with 2 live blocks succeeded")
	}
	if _, _, live := sim.Counts(); live != 2 {
		t.Errorf("a refused Close released segments: %d live, want 2", live)
	}
	mustFree(t, c, p)
	for _, s := range c.Snapshot().Segments {
		for _, b := range s.Blocks {
			if b.State == alloc.BlockActiveAllocated {
				mustFree(t, c, b.Address)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close after freeing everything: %v", err)
	}
	if _, _, live := sim.Counts(); live != 0 {
		t.Errorf("%d segments live after Close, want 0", live)
	}
	if _, err := c.Alloc(1, 0); !errors.Is(err, alloc.ErrClosed) {
		t.Errorf("Alloc after Close = %v, want ErrClosed", err)
	}
	if err := c.Free(p); !errors.Is(err, alloc.ErrClosed) {
		t.Errorf("Free after Close = %v, want ErrClosed", err)
	}
}

func TestTraceAndSnapshot(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{TraceEntries: 4})
	p := mustAlloc(t, c, 5000, 3)
	tr := c.Trace()
	if len(tr) != 2 || tr[0].Action != alloc.TraceSegmentAlloc || tr[1].Action != alloc.TraceAlloc {
		t.Fatalf("trace %+v, want segment_alloc, alloc", tr)
	}
	if tr[1].Ptr != p || tr[1].Requested != 5000 || tr[1].Size != 5120 || tr[1].Stream != 3 {
		t.Errorf("alloc entry %+v, want ptr %v, requested 5000, size 5120, stream 3", tr[1], p)
	}
	mustFree(t, c, p)
	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	tr = c.Trace()
	// Five events happened; the ring of 4 keeps the newest, in order.
	want := []alloc.TraceAction{alloc.TraceAlloc, alloc.TraceFreeRequested, alloc.TraceFreeCompleted, alloc.TraceSegmentFree}
	var got []alloc.TraceAction
	for _, e := range tr {
		got = append(got, e.Action)
	}
	if !slices.Equal(got, want) {
		t.Errorf("trace actions %v, want %v", got, want)
	}
	for i := 1; i < len(tr); i++ {
		if tr[i].Time.Before(tr[i-1].Time) {
			t.Errorf("trace entry %d is older than entry %d", i, i-1)
		}
	}
	_, quiet := newSim(t, gib, alloc.Config{})
	mustAlloc(t, quiet, 1, 0)
	if n := len(quiet.Trace()); n != 0 {
		t.Errorf("trace without TraceEntries has %d entries, want 0", n)
	}
}

func TestFragmentation(t *testing.T) {
	if got := (&alloc.Snapshot{}).Fragmentation(); got != 0 {
		t.Errorf("empty snapshot fragmentation = %v, want 0", got)
	}
	_, c := newSim(t, gib, alloc.Config{})
	// 2 MiB small segment: allocate 4 x 512 KiB, free the 1st and 3rd: two
	// free 512 KiB blocks, largest 512 KiB of 1 MiB free: 1 - 1/2.
	var ps []alloc.Ptr
	for range 4 {
		ps = append(ps, mustAlloc(t, c, 512*kib, 0))
	}
	mustFree(t, c, ps[0])
	mustFree(t, c, ps[2])
	snap := c.Snapshot()
	if got := snap.Fragmentation(); got != 0.5 {
		t.Errorf("fragmentation = %v, want 0.5", got)
	}
}

// TestClosedCaching: after Close, every exported method of Caching (the
// table must name them all) either returns an error matching ErrClosed
// (what allocates, frees or waits) or, for the figures and for Close,
// CloseScope and ReleaseAll, answers without one: closing what is closed
// is harmless. None panics.
func TestClosedCaching(t *testing.T) {
	_, c := newSim(t, gib, alloc.Config{})
	p := mustAlloc(t, c, 100, 0)
	sc, err := c.NewScope("job", 0)
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, c, p)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed := func(f func() error) closedtest.Call { return closedtest.Call{Closed: true, F: f, Says: "alloc"} }
	ok := func(f func() error) closedtest.Call { return closedtest.Call{F: f} }
	noPanic := func(f func()) closedtest.Call { return ok(func() error { f(); return nil }) }
	closedtest.Check(t, "Caching", c, alloc.ErrClosed, map[string]closedtest.Call{
		"Alloc":                 closed(func() error { _, err := c.Alloc(1, 0); return err }),
		"AllocCategory":         closed(func() error { _, err := c.AllocCategory(1, 0, alloc.Workspace); return err }),
		"AllocIn":               closed(func() error { _, err := c.AllocIn(1, 0, alloc.Workspace, sc); return err }),
		"Free":                  closed(func() error { return c.Free(p) }),
		"RecordStream":          closed(func() error { return c.RecordStream(p, 1) }),
		"EmptyCache":            closed(c.EmptyCache),
		"EmptyScopeCache":       closed(func() error { return c.EmptyScopeCache(sc) }),
		"NewScope":              closed(func() error { _, err := c.NewScope("late", 0); return err }),
		"CloseScope":            ok(func() error { return c.CloseScope(sc) }),
		"ReleaseAll":            ok(c.ReleaseAll),
		"Close":                 ok(c.Close),
		"Config":                noPanic(func() { c.Config() }),
		"Limit":                 noPanic(func() { c.Limit() }),
		"Stats":                 noPanic(func() { c.Stats() }),
		"ResetPeak":             noPanic(c.ResetPeak),
		"ResetAccumulated":      noPanic(c.ResetAccumulated),
		"Fragmentation":         noPanic(func() { c.Fragmentation() }),
		"Snapshot":              noPanic(func() { c.Snapshot() }),
		"Trace":                 noPanic(func() { c.Trace() }),
		"Report":                noPanic(func() { c.Report(nil) }),
		"ScopeStats":            noPanic(func() { c.ScopeStats(sc) }),
		"ScopeBytes":            noPanic(func() { c.ScopeBytes(sc) }),
		"Scopes":                noPanic(func() { c.Scopes() }),
		"ScopeReport":           noPanic(func() { c.ScopeReport(sc) }),
		"ResetScopePeak":        noPanic(func() { c.ResetScopePeak(sc) }),
		"ResetScopeAccumulated": noPanic(func() { c.ResetScopeAccumulated(sc) }),
	})
}
