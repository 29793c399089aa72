package alloc

// Stat is one figure tracked over time, PyTorch's shape: the current value,
// its peak since the last ResetPeak, and the cumulative amounts added and
// removed since the last ResetAccumulated.
type Stat struct {
	Current   int64
	Peak      int64
	Allocated int64 // sum of increases
	Freed     int64 // sum of decreases
}

func (s *Stat) add(d int64) {
	s.Current += d
	if d > 0 {
		s.Allocated += d
	} else {
		s.Freed -= d
	}
	if s.Current > s.Peak {
		s.Peak = s.Current
	}
}

// Pool selects a row of a StatArray.
type Pool int

const (
	AllPools  Pool = iota // the aggregate over both pools
	SmallPool             // blocks of at most 1 MiB, served from 2 MiB segments
	LargePool             // blocks over 1 MiB
	numPools
)

func (p Pool) String() string {
	switch p {
	case AllPools:
		return "all"
	case SmallPool:
		return "small_pool"
	case LargePool:
		return "large_pool"
	}
	return "pool?"
}

// StatArray holds a Stat per pool, indexed by Pool: the aggregate, the small
// pool and the large pool.
type StatArray [numPools]Stat

func (a *StatArray) add(p Pool, d int64) {
	a[AllPools].add(d)
	if p != AllPools {
		a[p].add(d)
	}
}

// Stats are an allocator's figures, with PyTorch's names and meanings
// (torch.cuda.memory_stats). Byte figures count rounded block sizes except
// RequestedBytes, which counts what callers asked for.
type Stats struct {
	Allocation    StatArray // blocks handed to callers and not yet freed
	Segment       StatArray // segments held from the Source
	Active        StatArray // blocks allocated or still in use by a stream after Free
	InactiveSplit StatArray // free cached blocks inside split segments (cannot be released)

	AllocatedBytes     StatArray
	ReservedBytes      StatArray // bytes in segments held from the Source
	ActiveBytes        StatArray
	InactiveSplitBytes StatArray
	RequestedBytes     StatArray

	// CategoryBytes are the allocated bytes (rounded block sizes) by what
	// they hold: the currents add up to AllocatedBytes[AllPools].Current.
	// AtPeak is what each category held when AllocatedBytes[AllPools]
	// last reached its peak, so the peak can be told apart by category.
	CategoryBytes CategoryArray
	AtPeak        [NumCategories]int64

	// Oversize figures count blocks and segments of at least MaxSplitSize;
	// they stay zero while no MaxSplitSize is set.
	OversizeAllocations Stat
	OversizeSegments    Stat

	AllocRetries   int64 // allocations that needed the full flush (release every cached segment) to succeed or fail
	OOMs           int64 // out-of-memory errors returned
	SyncAllStreams int64 // times every pending event was waited for
	DeviceAllocs   int64 // segments obtained from the Source
	DeviceFrees    int64 // segments given back to the Source
	InvalidFrees   int64 // Free or RecordStream calls with an unknown or already freed pointer

	MaxSplitSize int64 // the configured MaxSplitSize, 0 if unlimited
	Limit        int64 // the memory limit in bytes, 0 if none
}

func (s *Stats) resetPeak() {
	for _, a := range []*StatArray{&s.Allocation, &s.Segment, &s.Active, &s.InactiveSplit,
		&s.AllocatedBytes, &s.ReservedBytes, &s.ActiveBytes, &s.InactiveSplitBytes, &s.RequestedBytes} {
		for i := range a {
			a[i].Peak = a[i].Current
		}
	}
	s.OversizeAllocations.Peak = s.OversizeAllocations.Current
	s.OversizeSegments.Peak = s.OversizeSegments.Current
	for i := range s.CategoryBytes {
		s.CategoryBytes[i].Peak = s.CategoryBytes[i].Current
	}
	s.AtPeak = s.CategoryBytes.currents()
}

func (s *Stats) resetAccumulated() {
	for _, a := range []*StatArray{&s.Allocation, &s.Segment, &s.Active, &s.InactiveSplit,
		&s.AllocatedBytes, &s.ReservedBytes, &s.ActiveBytes, &s.InactiveSplitBytes, &s.RequestedBytes} {
		for i := range a {
			a[i].Allocated, a[i].Freed = 0, 0
		}
	}
	for _, st := range []*Stat{&s.OversizeAllocations, &s.OversizeSegments} {
		st.Allocated, st.Freed = 0, 0
	}
	for i := range s.CategoryBytes {
		s.CategoryBytes[i].Allocated, s.CategoryBytes[i].Freed = 0, 0
	}
	s.AllocRetries, s.OOMs, s.SyncAllStreams = 0, 0, 0
	s.DeviceAllocs, s.DeviceFrees, s.InvalidFrees = 0, 0, 0
}

// Map flattens the figures into PyTorch's memory_stats keys, e.g.
// "allocated_bytes.all.peak" or "num_alloc_retries", so they can be logged
// or compared with torch.cuda.memory_stats() key for key.
func (s *Stats) Map() map[string]int64 {
	m := make(map[string]int64, 200)
	arrays := []struct {
		name string
		a    *StatArray
	}{
		{"allocation", &s.Allocation}, {"segment", &s.Segment}, {"active", &s.Active},
		{"inactive_split", &s.InactiveSplit}, {"allocated_bytes", &s.AllocatedBytes},
		{"reserved_bytes", &s.ReservedBytes}, {"active_bytes", &s.ActiveBytes},
		{"inactive_split_bytes", &s.InactiveSplitBytes}, {"requested_bytes", &s.RequestedBytes},
	}
	put := func(prefix string, st *Stat) {
		m[prefix+".current"] = st.Current
		m[prefix+".peak"] = st.Peak
		m[prefix+".allocated"] = st.Allocated
		m[prefix+".freed"] = st.Freed
	}
	for _, x := range arrays {
		for p := AllPools; p < numPools; p++ {
			put(x.name+"."+p.String(), &x.a[p])
		}
	}
	for c := range s.CategoryBytes {
		put("category_bytes."+Category(c).String(), &s.CategoryBytes[c])
		m["category_bytes."+Category(c).String()+".at_peak"] = s.AtPeak[c]
	}
	put("oversize_allocations", &s.OversizeAllocations)
	put("oversize_segments", &s.OversizeSegments)
	m["num_alloc_retries"] = s.AllocRetries
	m["num_ooms"] = s.OOMs
	m["num_sync_all_streams"] = s.SyncAllStreams
	m["num_device_alloc"] = s.DeviceAllocs
	m["num_device_free"] = s.DeviceFrees
	m["num_invalid_frees"] = s.InvalidFrees
	m["max_split_size"] = s.MaxSplitSize
	m["memory_limit"] = s.Limit
	return m
}

// allocated counts a block of size bytes (requested asked for) handed out
// from pool k for category cat.
func (s *Stats) allocated(k Pool, size, requested int64, cat Category, oversize bool) {
	s.Allocation.add(k, 1)
	s.AllocatedBytes.add(k, size)
	s.CategoryBytes[cat].add(size)
	if all := &s.AllocatedBytes[AllPools]; all.Current >= all.Peak {
		s.AtPeak = s.CategoryBytes.currents()
	}
	s.RequestedBytes.add(k, requested)
	s.Active.add(k, 1)
	s.ActiveBytes.add(k, size)
	if oversize {
		s.OversizeAllocations.add(1)
	}
}

// freed counts the Free of a block allocated is counted for.
func (s *Stats) freed(k Pool, size, requested int64, cat Category, oversize bool) {
	s.Allocation.add(k, -1)
	s.AllocatedBytes.add(k, -size)
	s.RequestedBytes.add(k, -requested)
	s.CategoryBytes[cat].add(-size)
	if oversize {
		s.OversizeAllocations.add(-1)
	}
}

// inactive counts a freed block that no stream uses any more.
func (s *Stats) inactive(k Pool, size int64) {
	s.Active.add(k, -1)
	s.ActiveBytes.add(k, -size)
}

// split counts n cached blocks of bytes in split segments entering (n > 0)
// or leaving the pool.
func (s *Stats) split(k Pool, n, bytes int64) {
	s.InactiveSplit.add(k, n)
	s.InactiveSplitBytes.add(k, bytes)
}

// segment counts a segment of size bytes obtained from the Source (size >
// 0) or given back (size < 0).
func (s *Stats) segment(k Pool, size int64, oversize bool) {
	n := int64(1)
	if size < 0 {
		n = -1
		s.DeviceFrees++
	} else {
		s.DeviceAllocs++
	}
	s.Segment.add(k, n)
	s.ReservedBytes.add(k, size)
	if oversize {
		s.OversizeSegments.add(n)
	}
}
