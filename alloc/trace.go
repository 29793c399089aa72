package alloc

import "time"

// TraceAction is the kind of a trace entry (PyTorch's TraceEntry actions).
type TraceAction int

const (
	TraceAlloc         TraceAction = iota // a block was handed out
	TraceFreeRequested                    // Free was called
	TraceFreeCompleted                    // the block went back to the cache
	TraceSegmentAlloc                     // a segment was taken from the Source
	TraceSegmentFree                      // a segment was given back to the Source
	TraceOOM                              // an allocation failed; Size is what was tried
)

func (a TraceAction) String() string {
	switch a {
	case TraceAlloc:
		return "alloc"
	case TraceFreeRequested:
		return "free_requested"
	case TraceFreeCompleted:
		return "free_completed"
	case TraceSegmentAlloc:
		return "segment_alloc"
	case TraceSegmentFree:
		return "segment_free"
	case TraceOOM:
		return "oom"
	}
	return "action?"
}

// TraceEntry is one recorded allocator event (see Caching.Trace; package
// alloc/trace writes a trace's allocations and frees to a file).
type TraceEntry struct {
	Action    TraceAction
	Ptr       Ptr
	Size      int64 // the block's or segment's size
	Requested int64 // what the caller asked for
	Stream    Stream
	Time      time.Time
}

// traceRing keeps the newest entries in a fixed ring; with capacity 0 it
// records nothing and costs one branch.
type traceRing struct {
	buf  []TraceEntry
	next int
	full bool
}

func (r *traceRing) init(n int) {
	if n > 0 {
		r.buf = make([]TraceEntry, n)
	}
}

func (r *traceRing) add(a TraceAction, p Ptr, size, requested int64, s Stream) {
	if r.buf == nil {
		return
	}
	r.buf[r.next] = TraceEntry{Action: a, Ptr: p, Size: size, Requested: requested, Stream: s, Time: time.Now()}
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

func (r *traceRing) entries() []TraceEntry {
	if !r.full {
		return append([]TraceEntry(nil), r.buf[:r.next]...)
	}
	return append(append([]TraceEntry(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}
