package alloctest

import (
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/google/btree"

	"github.com/gocurrent/gocurrent/alloc"
)

// Simulated is a device for testing allocation policy without a GPU: a
// fixed capacity of fake addresses, streams whose events complete only when
// the test says so, failures injected on demand, and a shadow map that
// detects two live blocks sharing a byte. It never touches the memory it
// pretends to serve. It implements alloc.Source and alloc.Events; it is
// safe for concurrent use. It is a test double, never the shipped path.
type Simulated struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	holes    []span                  // free address ranges, sorted and coalesced
	segments map[alloc.Ptr]int64     // live segments: address -> size
	fail     []error                 // injected failures, served in order by Allocate
	recorded map[alloc.Stream]uint64 // events recorded so far, per stream
	finished map[alloc.Stream]uint64 // events with a sequence number up to this have completed
	waits    int64
	claims   *btree.BTreeG[span]
	allocs   int64
	releases int64
}

type span struct{ lo, hi alloc.Ptr } // [lo, hi)

// simBase is the first fake address: far from zero so that a nil or
// small-integer pointer is never mistaken for a valid one.
const simBase alloc.Ptr = 0x7000_0000_0000

// NewSimulated returns a simulated device with capacity bytes of memory.
func NewSimulated(capacity int64) *Simulated {
	if capacity <= 0 {
		panic("alloctest: NewSimulated: capacity must be positive")
	}
	return &Simulated{
		capacity: capacity,
		holes:    []span{{simBase, simBase + alloc.Ptr(roundUp(capacity, alloc.MinBlockSize))}},
		segments: make(map[alloc.Ptr]int64),
		recorded: make(map[alloc.Stream]uint64),
		finished: make(map[alloc.Stream]uint64),
		claims:   btree.NewG(8, func(a, b span) bool { return a.lo < b.lo }),
	}
}

var (
	_ alloc.Source = (*Simulated)(nil)
	_ alloc.Events = (*Simulated)(nil)
)

// Allocate serves a segment first fit from the fake address space, unless a
// failure was injected or the capacity is used up.
func (s *Simulated) Allocate(size int64) (alloc.Ptr, error) {
	if size <= 0 {
		return 0, fmt.Errorf("alloctest: simulated device: segment size %d is not positive", size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fail) > 0 {
		err := s.fail[0]
		s.fail = s.fail[1:]
		return 0, err
	}
	n := alloc.Ptr(roundUp(size, alloc.MinBlockSize))
	if s.used+int64(n) <= s.capacity {
		for i, h := range s.holes {
			if h.hi-h.lo < n {
				continue
			}
			p := h.lo
			if h.hi-h.lo == n {
				s.holes = append(s.holes[:i], s.holes[i+1:]...)
			} else {
				s.holes[i].lo += n
			}
			s.used += int64(n)
			s.segments[p] = size
			s.allocs++
			return p, nil
		}
	}
	return 0, fmt.Errorf("alloctest: simulated device: cannot allocate %d bytes with %d of %d free: %w",
		size, s.capacity-s.used, s.capacity, alloc.ErrOutOfMemory)
}

// Release frees a segment. It is an error to release an unknown segment, to
// give the wrong size, or to release a segment that still holds claims.
func (s *Simulated) Release(p alloc.Ptr, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok := s.segments[p]
	if !ok {
		return fmt.Errorf("alloctest: simulated device: release of unknown segment %v", p)
	}
	if got != size {
		return fmt.Errorf("alloctest: simulated device: release of segment %v with size %d, allocated with %d", p, size, got)
	}
	n := alloc.Ptr(roundUp(size, alloc.MinBlockSize))
	var inside bool
	s.claims.AscendGreaterOrEqual(span{lo: p}, func(c span) bool {
		inside = c.lo < p+n
		return false
	})
	if inside {
		return fmt.Errorf("alloctest: simulated device: segment %v released while a claimed block lies inside it", p)
	}
	delete(s.segments, p)
	s.used -= int64(n)
	s.releases++
	i := sort.Search(len(s.holes), func(i int) bool { return s.holes[i].lo > p })
	s.holes = append(s.holes, span{})
	copy(s.holes[i+1:], s.holes[i:])
	s.holes[i] = span{p, p + n}
	// Coalesce with the following and the preceding hole.
	if i+1 < len(s.holes) && s.holes[i].hi == s.holes[i+1].lo {
		s.holes[i].hi = s.holes[i+1].hi
		s.holes = append(s.holes[:i+1], s.holes[i+2:]...)
	}
	if i > 0 && s.holes[i-1].hi == s.holes[i].lo {
		s.holes[i-1].hi = s.holes[i].hi
		s.holes = append(s.holes[:i], s.holes[i+1:]...)
	}
	return nil
}

// MemInfo reports the free and total simulated memory.
func (s *Simulated) MemInfo() (free, total int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capacity - s.used, s.capacity, nil
}

// FailNext makes the next Allocate call return err; errors queue up, one per
// call. A nil err is replaced by an out-of-memory refusal.
func (s *Simulated) FailNext(err error) {
	if err == nil {
		err = fmt.Errorf("alloctest: simulated device: injected failure: %w", alloc.ErrOutOfMemory)
	}
	s.mu.Lock()
	s.fail = append(s.fail, err)
	s.mu.Unlock()
}

// Counts returns how many segments were allocated and released so far, and
// how many are live.
func (s *Simulated) Counts() (allocs, releases int64, live int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocs, s.releases, len(s.segments)
}

// Record enqueues an event on stream st. It stays pending until Complete
// or CompleteAll is called, or until someone waits for it.
func (s *Simulated) Record(st alloc.Stream) (alloc.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorded[st]++
	return &simEvent{sim: s, stream: st, seq: s.recorded[st]}, nil
}

// Complete finishes all work queued so far on stream st: every event
// recorded on it completes.
func (s *Simulated) Complete(st alloc.Stream) {
	s.mu.Lock()
	s.finished[st] = s.recorded[st]
	s.mu.Unlock()
}

// CompleteAll finishes the work of every stream.
func (s *Simulated) CompleteAll() {
	s.mu.Lock()
	for st, n := range s.recorded {
		s.finished[st] = n
	}
	s.mu.Unlock()
}

// Pending returns the number of events recorded on st that have not completed.
func (s *Simulated) Pending(st alloc.Stream) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.recorded[st] - s.finished[st])
}

// Waits returns how many times an event was waited for (a host-device sync).
func (s *Simulated) Waits() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waits
}

type simEvent struct {
	sim    *Simulated
	stream alloc.Stream
	seq    uint64
}

func (e *simEvent) Done() (bool, error) {
	e.sim.mu.Lock()
	defer e.sim.mu.Unlock()
	return e.sim.finished[e.stream] >= e.seq, nil
}

// Wait behaves as a synchronisation does on a GPU: the host blocks until the
// stream has run up to the event, so afterwards the event has completed.
func (e *simEvent) Wait() error {
	e.sim.mu.Lock()
	defer e.sim.mu.Unlock()
	e.sim.waits++
	if e.sim.finished[e.stream] < e.seq {
		e.sim.finished[e.stream] = e.seq
	}
	return nil
}

// Claim marks [p, p+n) as owned by a live block, as a test does when the
// allocator hands it out. It is an error if the range is not inside a live
// segment or overlaps another claim: two live blocks would share memory.
func (s *Simulated) Claim(p alloc.Ptr, n int64) error {
	if n <= 0 {
		return fmt.Errorf("alloctest: simulated device: claim of %d bytes at %v", n, p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := span{p, p + alloc.Ptr(n)}
	if !s.insideSegment(c) {
		return fmt.Errorf("alloctest: simulated device: block [%v, %v) is not inside a live segment", c.lo, c.hi)
	}
	var clash *span
	s.claims.DescendLessOrEqual(span{lo: c.hi - 1}, func(o span) bool {
		if o.hi > c.lo {
			clash = &o
		}
		return false
	})
	if clash != nil {
		return fmt.Errorf("alloctest: simulated device: block [%v, %v) overlaps live block [%v, %v)", c.lo, c.hi, clash.lo, clash.hi)
	}
	s.claims.ReplaceOrInsert(c)
	return nil
}

// Unclaim ends the claim that starts at p.
func (s *Simulated) Unclaim(p alloc.Ptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.claims.Delete(span{lo: p}); !ok {
		return fmt.Errorf("alloctest: simulated device: no claimed block at %v", p)
	}
	return nil
}

// insideSegment reports whether c lies within one live segment; s.mu held.
func (s *Simulated) insideSegment(c span) bool {
	for base, size := range s.segments {
		if c.lo >= base && c.hi <= base+alloc.Ptr(size) {
			return true
		}
	}
	return false
}

// String names the device in messages.
func (s *Simulated) String() string { return "simulated device" }

// roundUp rounds n up to a multiple of m.
func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// NewCaching returns a Simulated device of capacity bytes and a Caching
// over it with cfg, failing t if the Caching cannot be made.
func NewCaching(t testing.TB, capacity int64, cfg alloc.Config) (*Simulated, *alloc.Caching) {
	t.Helper()
	sim := NewSimulated(capacity)
	c, err := alloc.NewCaching(sim, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sim, c
}

// MustAlloc allocates size bytes on stream s from c, failing t on error.
func MustAlloc(t testing.TB, c *alloc.Caching, size int64, s alloc.Stream) alloc.Ptr {
	t.Helper()
	p, err := c.Alloc(size, s)
	if err != nil {
		t.Fatalf("Alloc(%d, stream %d): %v", size, s, err)
	}
	return p
}

// MustFree frees p in c, failing t on error.
func MustFree(t testing.TB, c *alloc.Caching, p alloc.Ptr) {
	t.Helper()
	if err := c.Free(p); err != nil {
		t.Fatalf("Free(%v): %v", p, err)
	}
}
