package alloc_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

// mustHostAlloc allocates or fails the test.
func mustHostAlloc(t testing.TB, c *alloc.HostCache, size int64) alloc.Ptr {
	t.Helper()
	p, err := c.Alloc(size)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", size, err)
	}
	if p == 0 {
		t.Fatalf("Alloc(%d) returned the nil Ptr", size)
	}
	return p
}

// mustHostFree frees or fails the test.
func mustHostFree(t testing.TB, c *alloc.HostCache, p alloc.Ptr) {
	t.Helper()
	if err := c.Free(p); err != nil {
		t.Fatalf("Free(%v): %v", p, err)
	}
}

func checkStat(t *testing.T, name string, got, want alloc.Stat) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %+v, want %+v", name, got, want)
	}
}

func checkCount(t *testing.T, name string, got, want int64) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %d, want %d", name, got, want)
	}
}

// The rounding rule of PyTorch's CachingHostAllocator (PowerOf2Ceil), with
// the 512-byte minimum every Source segment has (MinBlockSize).
func TestHostCacheRoundSize(t *testing.T) {
	tests := []struct {
		size, want int64
		pool       alloc.Pool
	}{
		{1, 512, alloc.SmallPool},                   // the minimum block
		{511, 512, alloc.SmallPool},                 // below the minimum
		{512, 512, alloc.SmallPool},                 // a power of two is kept
		{513, 1024, alloc.SmallPool},                // one byte over doubles
		{4096, 4096, alloc.SmallPool},               // a page
		{40960, 65536, alloc.SmallPool},             // 10*1024 float32s, test_host_memory_stats
		{81920, 131072, alloc.SmallPool},            // 20*1024 float32s, test_host_memory_stats
		{1 << 20, 1 << 20, alloc.SmallPool},         // SmallSize is still the small pool (PoolOf)
		{1<<20 + 1, 2 << 20, alloc.LargePool},       // one byte over 1 MiB doubles to 2 MiB
		{3 << 20, 4 << 20, alloc.LargePool},         // not a power of two
		{10<<20 + 12345, 16 << 20, alloc.LargePool}, // an odd size in a large class
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			if got := alloc.HostRoundSize(tc.size); got != tc.want {
				t.Fatalf("HostRoundSize(%d): got %d, want %d", tc.size, got, tc.want)
			}
			sim := alloctest.NewSimulated(16 << 20)
			c := alloc.NewHostCache(sim)
			p := mustHostAlloc(t, c, tc.size)
			st := c.Stats()
			checkCount(t, "AllocatedBytes.all.current", st.AllocatedBytes[alloc.AllPools].Current, tc.want)
			checkCount(t, "AllocatedBytes."+tc.pool.String()+".current", st.AllocatedBytes[tc.pool].Current, tc.want)
			checkCount(t, "ReservedBytes.all.current", st.ReservedBytes[alloc.AllPools].Current, tc.want)
			checkCount(t, "RequestedBytes.all.current", st.RequestedBytes[alloc.AllPools].Current, tc.size)
			if got, err := c.Size(p); err != nil || got != tc.size {
				t.Errorf("Size: got (%d, %v), want (%d, nil)", got, err, tc.size)
			}
			if err := sim.Claim(p, tc.want); err != nil {
				t.Errorf("the block does not span its rounded size in one segment: %v", err)
			}
		})
	}
	// MaxRequest (1 EiB) is itself a power of two, the largest class used.
	if got := alloc.HostRoundSize(alloc.MaxRequest); got != alloc.MaxRequest {
		t.Errorf("HostRoundSize(MaxRequest): got %d, want %d", got, int64(alloc.MaxRequest))
	}
}

// test_caching_pinned_memory (PyTorch test/test_cuda.py): freeing a pinned
// tensor and pinning another of the same size gives back the same pointer.
// The tensor there is torch.FloatTensor([1]): 4 bytes.
func TestHostCacheReuseSamePointer(t *testing.T) {
	sources := []struct {
		name string
		src  alloc.Source
	}{
		{"simulated", alloctest.NewSimulated(1 << 20)},
		{"host", alloc.NewHost(0)},
	}
	for _, s := range sources {
		t.Run(s.name, func(t *testing.T) {
			c := alloc.NewHostCache(s.src)
			defer c.Close()
			p := mustHostAlloc(t, c, 4)
			mustHostFree(t, c, p)
			q := mustHostAlloc(t, c, 4)
			if q != p {
				t.Errorf("free then alloc of 4 bytes: got %v, want the same pointer %v", q, p)
			}
			// Another request in the same size class (512 bytes) reuses it too.
			mustHostFree(t, c, q)
			r := mustHostAlloc(t, c, 500)
			if r != p {
				t.Errorf("alloc of 500 bytes after free: got %v, want %v (same 512-byte class)", r, p)
			}
			// A different class never gets it.
			other := mustHostAlloc(t, c, 4096)
			if other == p {
				t.Errorf("alloc of 4096 bytes while %v is live: got the same pointer", p)
			}
			// The free list is last in, first out: of two cached blocks of a
			// class, the one freed last comes back first.
			second := mustHostAlloc(t, c, 4)
			mustHostFree(t, c, second)
			mustHostFree(t, c, r)
			if got := mustHostAlloc(t, c, 4); got != r {
				t.Errorf("alloc after freeing %v then %v: got %v, want %v (LIFO)", second, r, got, r)
			}
			if got := mustHostAlloc(t, c, 4); got != second {
				t.Errorf("second alloc: got %v, want %v", got, second)
			}
			mustHostFree(t, c, r)
			mustHostFree(t, c, second)
			mustHostFree(t, c, other)
			if got := c.Stats().DeviceAllocs; got != 3 {
				t.Errorf("DeviceAllocs: got %d, want 3 (two 512-byte blocks, one 4096-byte)", got)
			}

			// Zero-size requests: the nil Ptr, and freeing it is a no-op.
			z, err := c.Alloc(0)
			if z != 0 || err != nil {
				t.Errorf("Alloc(0): got (%v, %v), want (0x0, nil)", z, err)
			}
			if err := c.Free(0); err != nil {
				t.Errorf("Free(0): got %v, want nil", err)
			}
		})
	}
}

// test_caching_pinned_memory's second half: while an async copy out of the
// buffer is pending, a new allocation must get a different pointer
// ("allocation re-used too soon"); once the stream has run, the same one.
func TestHostCacheRecordStreamDelaysReuse(t *testing.T) {
	tests := []struct {
		name    string
		streams []alloc.Stream
	}{
		{"one stream", []alloc.Stream{1}},
		{"two streams", []alloc.Stream{1, 2}},
		{"same stream twice", []alloc.Stream{3, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim := alloctest.NewSimulated(1 << 20)
			c := alloc.NewHostCache(sim)
			p := mustHostAlloc(t, c, 4)
			for _, s := range tc.streams {
				if err := c.RecordStream(p, s); err != nil {
					t.Fatalf("RecordStream(%v, %d): %v", p, s, err)
				}
			}
			mustHostFree(t, c, p)
			st := c.Stats()
			checkCount(t, "Active.all.current after Free", st.Active[alloc.AllPools].Current, 1)
			checkCount(t, "Allocation.all.current after Free", st.Allocation[alloc.AllPools].Current, 0)

			seen := map[alloc.Stream]bool{}
			for _, s := range tc.streams {
				if seen[s] {
					continue // a stream recorded twice holds one event
				}
				seen[s] = true
				if got := sim.Pending(s); got != 1 {
					t.Errorf("events pending on stream %d: got %d, want 1", s, got)
				}
				q := mustHostAlloc(t, c, 4)
				if q == p {
					t.Fatalf("allocation re-used too soon: got %v with stream %d still pending", q, s)
				}
				sim.Complete(s)
			}
			r := mustHostAlloc(t, c, 4)
			if r != p {
				t.Errorf("alloc after every stream completed: got %v, want %v", r, p)
			}
			if got := sim.Waits(); got != 0 {
				t.Errorf("event waits: got %d, want 0 (reuse polls, it never blocks)", got)
			}
		})
	}
}

// test_host_memory_stats (PyTorch test/test_cuda.py): torch.ones(10*1024,
// pin_memory=True) is 40,960 bytes of float32, served as 16*1024*4 = 65,536;
// torch.ones(20*1024) is 81,920 bytes, served as 32*1024*4 = 131,072.
func TestHostCacheStats(t *testing.T) {
	const (
		req1, size1 = 10 * 1024 * 4, 16 * 1024 * 4 // test_host_memory_stats alloc1, alloc1_aligned
		req2, size2 = 20 * 1024 * 4, 32 * 1024 * 4 // alloc2, alloc2_aligned
	)
	sim := alloctest.NewSimulated(1 << 20)
	c := alloc.NewHostCache(sim)

	t1 := mustHostAlloc(t, c, req1)
	st := c.Stats()
	checkStat(t, "Allocation", st.Allocation[alloc.AllPools], alloc.Stat{1, 1, 1, 0})
	checkStat(t, "AllocatedBytes", st.AllocatedBytes[alloc.AllPools], alloc.Stat{size1, size1, size1, 0})
	checkStat(t, "RequestedBytes", st.RequestedBytes[alloc.AllPools], alloc.Stat{req1, req1, req1, 0})
	checkStat(t, "Active", st.Active[alloc.AllPools], alloc.Stat{1, 1, 1, 0})
	checkStat(t, "ActiveBytes", st.ActiveBytes[alloc.AllPools], alloc.Stat{size1, size1, size1, 0})
	checkStat(t, "Segment", st.Segment[alloc.AllPools], alloc.Stat{1, 1, 1, 0})
	checkStat(t, "ReservedBytes", st.ReservedBytes[alloc.AllPools], alloc.Stat{size1, size1, size1, 0})
	checkStat(t, "AllocatedBytes.small_pool", st.AllocatedBytes[alloc.SmallPool], alloc.Stat{size1, size1, size1, 0})
	checkStat(t, "AllocatedBytes.large_pool", st.AllocatedBytes[alloc.LargePool], alloc.Stat{})
	checkCount(t, "DeviceAllocs", st.DeviceAllocs, 1)

	t2 := mustHostAlloc(t, c, req2)
	st = c.Stats()
	checkStat(t, "Allocation", st.Allocation[alloc.AllPools], alloc.Stat{2, 2, 2, 0})
	checkStat(t, "AllocatedBytes", st.AllocatedBytes[alloc.AllPools], alloc.Stat{size1 + size2, size1 + size2, size1 + size2, 0})
	checkStat(t, "RequestedBytes", st.RequestedBytes[alloc.AllPools], alloc.Stat{req1 + req2, req1 + req2, req1 + req2, 0})
	checkCount(t, "DeviceAllocs", st.DeviceAllocs, 2)

	// Emptying the cache with both blocks live changes nothing (as in
	// test_host_memory_stats).
	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats(); got != st {
		t.Errorf("stats after EmptyCache with live blocks: got %+v, want %+v", got, st)
	}

	mustHostFree(t, c, t1)
	st = c.Stats()
	checkStat(t, "Allocation after one free", st.Allocation[alloc.AllPools], alloc.Stat{1, 2, 2, 1})
	checkStat(t, "AllocatedBytes after one free", st.AllocatedBytes[alloc.AllPools], alloc.Stat{size2, size1 + size2, size1 + size2, size1})
	checkStat(t, "RequestedBytes after one free", st.RequestedBytes[alloc.AllPools], alloc.Stat{req2, req1 + req2, req1 + req2, req1})
	checkStat(t, "ActiveBytes after one free", st.ActiveBytes[alloc.AllPools], alloc.Stat{size2, size1 + size2, size1 + size2, size1})
	checkStat(t, "ReservedBytes after one free", st.ReservedBytes[alloc.AllPools], alloc.Stat{size1 + size2, size1 + size2, size1 + size2, 0})

	mustHostFree(t, c, t2)
	st = c.Stats()
	for _, x := range []struct {
		name string
		got  alloc.Stat
	}{
		{"Allocation", st.Allocation[alloc.AllPools]},
		{"AllocatedBytes", st.AllocatedBytes[alloc.AllPools]},
		{"RequestedBytes", st.RequestedBytes[alloc.AllPools]},
		{"Active", st.Active[alloc.AllPools]},
		{"ActiveBytes", st.ActiveBytes[alloc.AllPools]},
	} {
		checkCount(t, x.name+".current after freeing all", x.got.Current, 0)
	}
	checkStat(t, "ReservedBytes cached", st.ReservedBytes[alloc.AllPools], alloc.Stat{size1 + size2, size1 + size2, size1 + size2, 0})

	c.ResetPeak()
	st = c.Stats()
	checkStat(t, "AllocatedBytes after ResetPeak", st.AllocatedBytes[alloc.AllPools], alloc.Stat{0, 0, size1 + size2, size1 + size2})
	checkStat(t, "ReservedBytes after ResetPeak", st.ReservedBytes[alloc.AllPools], alloc.Stat{size1 + size2, size1 + size2, size1 + size2, 0})

	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	st = c.Stats()
	checkStat(t, "Segment after EmptyCache", st.Segment[alloc.AllPools], alloc.Stat{0, 2, 2, 2})
	checkStat(t, "ReservedBytes after EmptyCache", st.ReservedBytes[alloc.AllPools], alloc.Stat{0, size1 + size2, size1 + size2, size1 + size2})
	checkCount(t, "DeviceFrees", st.DeviceFrees, 2)

	c.ResetAccumulated()
	st = c.Stats()
	checkStat(t, "AllocatedBytes after ResetAccumulated", st.AllocatedBytes[alloc.AllPools], alloc.Stat{0, 0, 0, 0})
	checkStat(t, "ReservedBytes after ResetAccumulated", st.ReservedBytes[alloc.AllPools], alloc.Stat{0, size1 + size2, 0, 0})
	checkCount(t, "DeviceAllocs after ResetAccumulated", st.DeviceAllocs, 0)
	checkCount(t, "DeviceFrees after ResetAccumulated", st.DeviceFrees, 0)

	// Map exposes the figures under PyTorch's keys.
	c.ResetPeak()
	mustHostAlloc(t, c, req1)
	m := c.Stats()
	if got := m.Map()["allocated_bytes.all.current"]; got != size1 {
		t.Errorf(`Map()["allocated_bytes.all.current"]: got %d, want %d`, got, size1)
	}
}

// The out-of-memory ladder (allocator.md §5 items 10, 11 and 14) on a
// simulated device of 64 KiB: one block of the largest size fills it.
func TestHostCacheOutOfMemory(t *testing.T) {
	const capacity = 64 << 10

	// Item 14: a block held back by a pending event is reclaimed by waiting
	// for the event when the device is full, so the request succeeds.
	t.Run("pending block reclaimed", func(t *testing.T) {
		tests := []struct {
			name         string
			size         int64
			wantSame     bool  // served by the reclaimed block itself
			wantAllocs   int64 // Source.Allocate successes
			wantReleases int64 // Source.Release calls
		}{
			{"same class", capacity, true, 1, 0},
			{"other class", capacity / 2, false, 2, 1},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				sim := alloctest.NewSimulated(capacity)
				c := alloc.NewHostCache(sim)
				p := mustHostAlloc(t, c, capacity)
				if err := c.RecordStream(p, 1); err != nil {
					t.Fatal(err)
				}
				mustHostFree(t, c, p)
				q := mustHostAlloc(t, c, tc.size)
				if tc.wantSame && q != p {
					t.Errorf("pointer: got %v, want the reclaimed block %v", q, p)
				}
				if got := sim.Pending(1); got != 0 {
					t.Errorf("events pending on stream 1: got %d, want 0", got)
				}
				if got := sim.Waits(); got != 1 {
					t.Errorf("event waits: got %d, want 1", got)
				}
				st := c.Stats()
				checkCount(t, "AllocRetries", st.AllocRetries, 1)
				checkCount(t, "SyncAllStreams", st.SyncAllStreams, 1)
				checkCount(t, "OOMs", st.OOMs, 0)
				checkCount(t, "DeviceAllocs", st.DeviceAllocs, tc.wantAllocs)
				checkCount(t, "DeviceFrees", st.DeviceFrees, tc.wantReleases)
				checkCount(t, "AllocatedBytes.current", st.AllocatedBytes[alloc.AllPools].Current, alloc.HostRoundSize(tc.size))
				checkCount(t, "ReservedBytes.current", st.ReservedBytes[alloc.AllPools].Current, alloc.HostRoundSize(tc.size))
				checkCount(t, "Active.current", st.Active[alloc.AllPools].Current, 1)
			})
		}
	})

	// Items 10 and 11: a real shortage is an *OutOfMemoryError with the
	// figures, counted once; the cache stays usable.
	t.Run("real shortage", func(t *testing.T) {
		sim := alloctest.NewSimulated(capacity)
		c := alloc.NewHostCache(sim)
		p := mustHostAlloc(t, c, 40000) // rounds to 65,536: the whole device

		_, err := c.Alloc(1)
		if !errors.Is(err, alloc.ErrOutOfMemory) {
			t.Fatalf("Alloc(1) on a full device: got %v, want an error matching ErrOutOfMemory", err)
		}
		var oom *alloc.OutOfMemoryError
		if !errors.As(err, &oom) {
			t.Fatalf("Alloc(1) on a full device: got %T, want *OutOfMemoryError", err)
		}
		want := alloc.OutOfMemoryError{
			Device:      "simulated device", // Simulated.String
			Requested:   1,
			AllocSize:   512, // the 512-byte minimum block
			DeviceFree:  0,
			DeviceTotal: capacity,
			Allocated:   capacity,
			Reserved:    capacity,
		}
		got := *oom
		got.Hint, got.SourceErr = "", nil
		if got != want {
			t.Errorf("OutOfMemoryError: got %+v, want %+v", got, want)
		}
		if oom.Hint == "" {
			t.Error("OutOfMemoryError.Hint: got empty, want advice")
		}
		if !errors.Is(oom.SourceErr, alloc.ErrOutOfMemory) {
			t.Errorf("OutOfMemoryError.SourceErr: got %v, want the simulated device's refusal", oom.SourceErr)
		}
		for _, s := range []string{"out of memory on simulated device", "tried to allocate 512 bytes", "(request of 1 bytes)", "64.00 KiB"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("message %q: want it to contain %q", err, s)
			}
		}
		st := c.Stats()
		checkCount(t, "OOMs", st.OOMs, 1)
		checkCount(t, "AllocRetries", st.AllocRetries, 1)
		checkCount(t, "Allocation.current", st.Allocation[alloc.AllPools].Current, 1)
		checkCount(t, "ReservedBytes.current", st.ReservedBytes[alloc.AllPools].Current, capacity)

		// Freed, the 64 KiB block is cached and still fills the device: the
		// next small request needs the ladder to give it back first.
		mustHostFree(t, c, p)
		q := mustHostAlloc(t, c, 1)
		st = c.Stats()
		checkCount(t, "AllocRetries after the cached block was released", st.AllocRetries, 2)
		checkCount(t, "OOMs", st.OOMs, 1)
		checkCount(t, "DeviceFrees", st.DeviceFrees, 1)
		checkCount(t, "ReservedBytes.current", st.ReservedBytes[alloc.AllPools].Current, 512)
		mustHostFree(t, c, q)

		// A request larger than the device: the figures name the rounded size.
		_, err = c.Alloc(capacity + 1)
		if !errors.As(err, &oom) {
			t.Fatalf("Alloc(%d): got %v, want *OutOfMemoryError", capacity+1, err)
		}
		if oom.Requested != capacity+1 || oom.AllocSize != 2*capacity {
			t.Errorf("Requested, AllocSize: got %d, %d, want %d, %d", oom.Requested, oom.AllocSize, capacity+1, 2*capacity)
		}
		if oom.Reserved != 0 || oom.DeviceFree != capacity {
			t.Errorf("Reserved, DeviceFree after the ladder released the cache: got %d, %d, want 0, %d", oom.Reserved, oom.DeviceFree, capacity)
		}
		checkCount(t, "OOMs", c.Stats().OOMs, 2)

		// The next request that fits succeeds.
		r := mustHostAlloc(t, c, capacity)
		mustHostFree(t, c, r)
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, _, live := sim.Counts(); live != 0 {
			t.Errorf("live segments after Close: got %d, want 0", live)
		}
	})

	t.Run("above MaxRequest", func(t *testing.T) {
		sim := alloctest.NewSimulated(capacity)
		c := alloc.NewHostCache(sim)
		_, err := c.Alloc(alloc.MaxRequest + 1)
		var oom *alloc.OutOfMemoryError
		if !errors.As(err, &oom) || !errors.Is(err, alloc.ErrOutOfMemory) {
			t.Fatalf("Alloc(MaxRequest+1): got %v, want *OutOfMemoryError", err)
		}
		if oom.Requested != alloc.MaxRequest+1 {
			t.Errorf("Requested: got %d, want %d", oom.Requested, int64(alloc.MaxRequest+1))
		}
		if allocs, _, _ := sim.Counts(); allocs != 0 {
			t.Errorf("Source allocations: got %d, want 0 (refused before asking)", allocs)
		}
		checkCount(t, "OOMs", c.Stats().OOMs, 1)
	})

	t.Run("negative size", func(t *testing.T) {
		c := alloc.NewHostCache(alloctest.NewSimulated(capacity))
		_, err := c.Alloc(-1)
		if err == nil || errors.Is(err, alloc.ErrOutOfMemory) {
			t.Errorf("Alloc(-1): got %v, want an error that is not out of memory", err)
		}
		checkCount(t, "OOMs", c.Stats().OOMs, 0)
	})

	t.Run("transient refusal retried", func(t *testing.T) {
		sim := alloctest.NewSimulated(capacity)
		c := alloc.NewHostCache(sim)
		sim.FailNext(nil) // one out-of-memory refusal
		mustHostAlloc(t, c, 4096)
		st := c.Stats()
		checkCount(t, "AllocRetries", st.AllocRetries, 1)
		checkCount(t, "OOMs", st.OOMs, 0)
		checkCount(t, "DeviceAllocs", st.DeviceAllocs, 1)
	})

	t.Run("other source error passes through", func(t *testing.T) {
		sim := alloctest.NewSimulated(capacity)
		c := alloc.NewHostCache(sim)
		boom := errors.New("boom")
		sim.FailNext(boom)
		_, err := c.Alloc(4096)
		if !errors.Is(err, boom) {
			t.Errorf("Alloc with an injected fault: got %v, want it to wrap %v", err, boom)
		}
		var oom *alloc.OutOfMemoryError
		if errors.Is(err, alloc.ErrOutOfMemory) || errors.As(err, &oom) {
			t.Errorf("Alloc with an injected fault: got %v, want an error that is not out of memory", err)
		}
		st := c.Stats()
		checkCount(t, "OOMs", st.OOMs, 0)
		checkCount(t, "AllocRetries", st.AllocRetries, 0)
		checkCount(t, "Segment.current", st.Segment[alloc.AllPools].Current, 0)
		mustHostAlloc(t, c, 4096)
	})
}

func TestHostCacheInvalidPointer(t *testing.T) {
	tests := []struct {
		name string
		// bad returns the pointer the operation is called with.
		bad func(t *testing.T, c *alloc.HostCache) alloc.Ptr
		op  func(c *alloc.HostCache, p alloc.Ptr) error
	}{
		{
			name: "free of unknown pointer",
			bad:  func(t *testing.T, c *alloc.HostCache) alloc.Ptr { return 0x1234 },
			op:   (*alloc.HostCache).Free,
		},
		{
			name: "double free",
			bad: func(t *testing.T, c *alloc.HostCache) alloc.Ptr {
				p := mustHostAlloc(t, c, 100)
				mustHostFree(t, c, p)
				return p
			},
			op: (*alloc.HostCache).Free,
		},
		{
			name: "double free while pending",
			bad: func(t *testing.T, c *alloc.HostCache) alloc.Ptr {
				p := mustHostAlloc(t, c, 100)
				if err := c.RecordStream(p, 1); err != nil {
					t.Fatal(err)
				}
				mustHostFree(t, c, p)
				return p
			},
			op: (*alloc.HostCache).Free,
		},
		{
			name: "interior pointer",
			bad: func(t *testing.T, c *alloc.HostCache) alloc.Ptr {
				return mustHostAlloc(t, c, 100) + 8
			},
			op: (*alloc.HostCache).Free,
		},
		{
			name: "record stream on freed pointer",
			bad: func(t *testing.T, c *alloc.HostCache) alloc.Ptr {
				p := mustHostAlloc(t, c, 100)
				mustHostFree(t, c, p)
				return p
			},
			op: func(c *alloc.HostCache, p alloc.Ptr) error { return c.RecordStream(p, 1) },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := alloc.NewHostCache(alloctest.NewSimulated(1 << 20))
			p := tc.bad(t, c)
			before := c.Stats()
			err := tc.op(c, p)
			if !errors.Is(err, alloc.ErrInvalidPointer) {
				t.Fatalf("got %v, want an error matching ErrInvalidPointer", err)
			}
			after := c.Stats()
			checkCount(t, "InvalidFrees", after.InvalidFrees, before.InvalidFrees+1)
			after.InvalidFrees = before.InvalidFrees
			if after != before {
				t.Errorf("stats changed by a refused call: got %+v, want %+v", after, before)
			}
		})
	}

	t.Run("record stream without events", func(t *testing.T) {
		c := alloc.NewHostCache(alloc.NewHost(0)) // Host has no streams
		defer c.Close()
		p := mustHostAlloc(t, c, 100)
		defer c.Free(p)
		if err := c.RecordStream(p, 1); !errors.Is(err, alloc.ErrNoEvents) {
			t.Errorf("RecordStream on the host source: got %v, want ErrNoEvents", err)
		}
	})
}

func TestHostCacheBytes(t *testing.T) {
	c := alloc.NewHostCache(alloc.NewHost(0))
	defer c.Close()
	const n = 1000 // rounds to a 1 KiB block; the slice is the 1,000 requested
	p1 := mustHostAlloc(t, c, n)
	p2 := mustHostAlloc(t, c, n)
	b1, err := c.Bytes(p1)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := c.Bytes(p2)
	if err != nil {
		t.Fatal(err)
	}
	if len(b1) != n || cap(b1) != n || len(b2) != n {
		t.Fatalf("len, cap: got %d, %d and %d, want %d", len(b1), cap(b1), len(b2), n)
	}
	for i := range b1 {
		b1[i] = 0xaa
	}
	for i := range b2 {
		b2[i] = 0x55
	}
	again, err := c.Bytes(p1)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range again {
		if v != 0xaa {
			t.Fatalf("block 1 byte %d: got %#x, want 0xaa (blocks alias or the write was lost)", i, v)
		}
	}
	for i, v := range b2 {
		if v != 0x55 {
			t.Fatalf("block 2 byte %d: got %#x, want 0x55", i, v)
		}
	}
	if lo, hi := min(p1, p2), max(p1, p2); hi-lo < 1024 {
		t.Errorf("blocks %v and %v are %d bytes apart, want at least the 1024-byte block", p1, p2, hi-lo)
	}
	mustHostFree(t, c, p1)
	mustHostFree(t, c, p2)
	if _, err := c.Bytes(p1); !errors.Is(err, alloc.ErrInvalidPointer) {
		t.Errorf("Bytes after Free: got %v, want ErrInvalidPointer", err)
	}

	sc := alloc.NewHostCache(alloctest.NewSimulated(1 << 20))
	p := mustHostAlloc(t, sc, n)
	if b, err := sc.Bytes(p); !errors.Is(err, alloc.ErrNotHostAccessible) {
		t.Errorf("Bytes on the simulated device: got %d bytes and %v, want ErrNotHostAccessible", len(b), err)
	}
}

func TestHostCacheEmptyCache(t *testing.T) {
	sim := alloctest.NewSimulated(1 << 20)
	c := alloc.NewHostCache(sim)
	cached := mustHostAlloc(t, c, 4096)
	mustHostFree(t, c, cached)
	pending := mustHostAlloc(t, c, 8192)
	if err := c.RecordStream(pending, 1); err != nil {
		t.Fatal(err)
	}
	mustHostFree(t, c, pending)
	live := mustHostAlloc(t, c, 512)

	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if allocs, releases, n := sim.Counts(); allocs != 3 || releases != 1 || n != 2 {
		t.Errorf("segments allocated, released, live: got %d, %d, %d, want 3, 1, 2 (only the cached block goes)", allocs, releases, n)
	}
	if got := sim.Pending(1); got != 1 {
		t.Errorf("events pending: got %d, want 1 (EmptyCache does not wait)", got)
	}
	checkCount(t, "Segment.current", c.Stats().Segment[alloc.AllPools].Current, 2)

	sim.Complete(1)
	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if _, releases, n := sim.Counts(); releases != 2 || n != 1 {
		t.Errorf("segments released, live after the event completed: got %d, %d, want 2, 1", releases, n)
	}
	st := c.Stats()
	checkCount(t, "Segment.current", st.Segment[alloc.AllPools].Current, 1)
	checkCount(t, "ReservedBytes.current", st.ReservedBytes[alloc.AllPools].Current, 512)
	checkCount(t, "Active.current", st.Active[alloc.AllPools].Current, 1)
	mustHostFree(t, c, live)
}

func TestHostCacheClose(t *testing.T) {
	sim := alloctest.NewSimulated(1 << 20)
	c := alloc.NewHostCache(sim)
	p := mustHostAlloc(t, c, 100)
	q := mustHostAlloc(t, c, 5000)
	err := c.Close()
	if err == nil || !strings.Contains(err.Error(), "2 blocks") {
		t.Fatalf("Close with two live blocks: got %v, want an error naming 2 blocks", err)
	}
	// The refused Close changed nothing: the cache is still usable.
	if err := c.RecordStream(q, 7); err != nil {
		t.Fatalf("RecordStream after a refused Close: %v", err)
	}
	mustHostFree(t, c, p)
	mustHostFree(t, c, q) // pending on stream 7: Close must wait for it
	if err := c.Close(); err != nil {
		t.Fatalf("Close after freeing every block: %v", err)
	}
	if got := sim.Pending(7); got != 0 {
		t.Errorf("events pending after Close: got %d, want 0", got)
	}
	if _, _, live := sim.Counts(); live != 0 {
		t.Errorf("live segments after Close: got %d, want 0", live)
	}
	st := c.Stats()
	checkCount(t, "Segment.current after Close", st.Segment[alloc.AllPools].Current, 0)
	checkCount(t, "Active.current after Close", st.Active[alloc.AllPools].Current, 0)

	calls := []struct {
		name string
		call func() error
	}{
		{"Alloc", func() error { _, err := c.Alloc(100); return err }},
		{"Alloc(0)", func() error { _, err := c.Alloc(0); return err }},
		{"Free", func() error { return c.Free(p) }},
		{"Free(0)", func() error { return c.Free(0) }},
		{"RecordStream", func() error { return c.RecordStream(p, 1) }},
		{"Bytes", func() error { _, err := c.Bytes(p); return err }},
		{"Size", func() error { _, err := c.Size(p); return err }},
		{"EmptyCache", c.EmptyCache},
		{"Close", c.Close},
	}
	for _, x := range calls {
		if err := x.call(); !errors.Is(err, alloc.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", x.name, err)
		}
	}
}

// gatedSource holds every Allocate until gate is closed.
type gatedSource struct {
	*alloctest.Simulated
	gate chan struct{}
}

func (g *gatedSource) Allocate(size int64) (alloc.Ptr, error) {
	<-g.gate
	return g.Simulated.Allocate(size)
}

// Close waits for an Alloc that is inside the Source (the mutex is not held
// there), which then gives its segment back and returns ErrClosed.
func TestHostCacheCloseDuringAlloc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &gatedSource{Simulated: alloctest.NewSimulated(1 << 20), gate: make(chan struct{})}
		c := alloc.NewHostCache(src)
		allocErr := make(chan error, 1)
		go func() {
			_, err := c.Alloc(100)
			allocErr <- err
		}()
		synctest.Wait() // the Alloc is blocked inside the Source
		closeErr := make(chan error, 1)
		go func() { closeErr <- c.Close() }()
		synctest.Wait() // Close is blocked, or returned too early
		select {
		case err := <-closeErr:
			t.Fatalf("Close returned %v while an Alloc was inside the Source; want it to wait", err)
		default:
		}
		close(src.gate)
		if err := <-allocErr; !errors.Is(err, alloc.ErrClosed) {
			t.Errorf("Alloc overtaken by Close: got %v, want ErrClosed", err)
		}
		if err := <-closeErr; err != nil {
			t.Errorf("Close: got %v, want nil", err)
		}
		if allocs, releases, live := src.Counts(); allocs != 1 || releases != 1 || live != 0 {
			t.Errorf("segments allocated, released, live: got %d, %d, %d, want 1, 1, 0", allocs, releases, live)
		}
		st := c.Stats()
		checkCount(t, "DeviceAllocs", st.DeviceAllocs, 1)
		checkCount(t, "DeviceFrees", st.DeviceFrees, 1)
		checkCount(t, "Segment.current", st.Segment[alloc.AllPools].Current, 0)
	})
}

// pooledEvents gives Simulated's events a Release method, as a CUDA event
// pool would, and counts the releases.
type pooledEvents struct {
	*alloctest.Simulated
	released atomic.Int64
	twice    atomic.Int64 // events released more than once
	failNext atomic.Bool  // make the next Record fail
}

type pooledEvent struct {
	alloc.Event
	pool *pooledEvents
	done atomic.Bool
}

func (e *pooledEvent) Release() {
	if e.done.Swap(true) {
		e.pool.twice.Add(1)
	}
	e.pool.released.Add(1)
}

func (s *pooledEvents) Record(st alloc.Stream) (alloc.Event, error) {
	if s.failNext.Swap(false) {
		return nil, errors.New("injected record failure")
	}
	ev, err := s.Simulated.Record(st)
	if err != nil {
		return nil, err
	}
	return &pooledEvent{Event: ev, pool: s}, nil
}

func TestHostCachePooledEvents(t *testing.T) {
	src := &pooledEvents{Simulated: alloctest.NewSimulated(1 << 20)}
	c := alloc.NewHostCache(src)
	p := mustHostAlloc(t, c, 100)
	for _, s := range []alloc.Stream{1, 2} {
		if err := c.RecordStream(p, s); err != nil {
			t.Fatal(err)
		}
	}
	mustHostFree(t, c, p)
	src.Complete(1)
	other := mustHostAlloc(t, c, 100) // polls: stream 1's event is done
	if other == p {
		t.Fatalf("allocation re-used too soon: got %v with stream 2 pending", other)
	}
	checkCount(t, "events released after stream 1 ran", src.released.Load(), 1)
	src.CompleteAll()
	if got := mustHostAlloc(t, c, 100); got != p {
		t.Errorf("alloc after both streams ran: got %v, want %v", got, p)
	}
	checkCount(t, "events released after both ran", src.released.Load(), 2)

	// A failed Record leaves the block allocated, and Free can be repeated.
	q := mustHostAlloc(t, c, 4096)
	if err := c.RecordStream(q, 3); err != nil {
		t.Fatal(err)
	}
	src.failNext.Store(true)
	if err := c.Free(q); err == nil {
		t.Fatal("Free with a failing Record: got nil, want the error")
	}
	if _, err := c.Size(q); err != nil {
		t.Errorf("Size after the failed Free: got %v, want the block still allocated", err)
	}
	mustHostFree(t, c, q)

	// Close waits for the pending event and releases it too.
	mustHostFree(t, c, p)
	mustHostFree(t, c, other)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkCount(t, "events released after Close", src.released.Load(), 3)
	checkCount(t, "events released twice", src.twice.Load(), 0)
	checkCount(t, "SyncAllStreams", c.Stats().SyncAllStreams, 1)
}

// allocator.md §5 items 17 and 19: goroutines allocate, record streams and
// free at random while another completes the streams; the shadow map of the
// simulated device catches any two live blocks that overlap, and releasing a
// segment that holds a live block. The capacity is small enough that the
// out-of-memory ladder runs concurrently too. Run with -race.
func TestHostCacheConcurrent(t *testing.T) {
	const (
		goroutines = 8
		ops        = 400
		maxLive    = 4
		capacity   = 1536 << 10 // below the 2 MiB that 8 goroutines × 4 live blocks × 64 KiB can hold
	)
	sizes := []int64{1, 100, 512, 3000, 40000, 65536}
	sim := alloctest.NewSimulated(capacity)
	c := alloc.NewHostCache(sim)

	stop := make(chan struct{})
	var completer sync.WaitGroup
	completer.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				sim.CompleteAll()
				runtime.Gosched()
			}
		}
	})

	var ooms, served atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2024))
			var live []alloc.Ptr
			free := func(i int) {
				p := live[i]
				live = append(live[:i], live[i+1:]...)
				if err := sim.Unclaim(p); err != nil {
					t.Error(err)
				}
				if err := c.Free(p); err != nil {
					t.Errorf("Free(%v): %v", p, err)
				}
			}
			for op := range ops {
				if op%50 == 49 {
					if err := c.EmptyCache(); err != nil {
						t.Errorf("EmptyCache: %v", err)
					}
				}
				if len(live) == maxLive || (len(live) > 0 && rng.IntN(2) == 0) {
					free(rng.IntN(len(live)))
					continue
				}
				size := sizes[rng.IntN(len(sizes))]
				p, err := c.Alloc(size)
				if errors.Is(err, alloc.ErrOutOfMemory) {
					ooms.Add(1)
					continue
				}
				if err != nil {
					t.Errorf("Alloc(%d): %v", size, err)
					continue
				}
				served.Add(1)
				if err := sim.Claim(p, alloc.HostRoundSize(size)); err != nil {
					t.Errorf("Alloc(%d) = %v: %v", size, p, err)
					continue
				}
				if rng.IntN(2) == 0 {
					if err := c.RecordStream(p, alloc.Stream(1+g%3)); err != nil {
						t.Errorf("RecordStream(%v): %v", p, err)
					}
				}
				live = append(live, p)
			}
			for len(live) > 0 {
				free(0)
			}
		})
	}
	wg.Wait()
	close(stop)
	completer.Wait()

	sim.CompleteAll()
	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	for _, x := range []struct {
		name string
		got  int64
	}{
		{"Allocation.current", st.Allocation[alloc.AllPools].Current},
		{"AllocatedBytes.current", st.AllocatedBytes[alloc.AllPools].Current},
		{"RequestedBytes.current", st.RequestedBytes[alloc.AllPools].Current},
		{"Active.current", st.Active[alloc.AllPools].Current},
		{"Segment.current", st.Segment[alloc.AllPools].Current},
		{"ReservedBytes.current", st.ReservedBytes[alloc.AllPools].Current},
	} {
		checkCount(t, x.name+" at the end", x.got, 0)
	}
	checkCount(t, "Allocation.allocated", st.Allocation[alloc.AllPools].Allocated, served.Load())
	checkCount(t, "OOMs", st.OOMs, ooms.Load())
	checkCount(t, "DeviceAllocs - DeviceFrees", st.DeviceAllocs-st.DeviceFrees, 0)
	if _, _, live := sim.Counts(); live != 0 {
		t.Errorf("live segments at the end: got %d, want 0", live)
	}
	if served.Load() == 0 {
		t.Error("no allocation succeeded")
	}
	t.Logf("%d allocations served, %d out of memory, %d ladder runs", served.Load(), ooms.Load(), st.AllocRetries)
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A staging buffer freed and allocated again, as the loader does each
// batch: a 64 KiB host block served from the cache.
func BenchmarkHostCacheAllocFree(b *testing.B) {
	const size = 64 << 10
	c := alloc.NewHostCache(alloc.NewHost(0))
	b.Cleanup(func() {
		if err := c.Close(); err != nil {
			b.Error(err)
		}
	})
	mustHostFree(b, c, mustHostAlloc(b, c, size)) // warm the cache
	b.ReportAllocs()
	for b.Loop() {
		p, err := c.Alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Free(p); err != nil {
			b.Fatal(err)
		}
	}
}
