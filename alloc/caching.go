package alloc

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/google/btree"
)

// Caching is PyTorch's caching allocator over a Source: it keeps freed
// blocks to serve later requests without asking the device, splits cached
// blocks to fit, merges neighbours back, and walks a recovery ladder before
// it reports out of memory. The policy is in the package documentation.
//
// Every block is tied to the stream it was allocated on. A caller that uses
// a block on another stream says so with RecordStream; the block then goes
// back to the cache only after that stream's work, as of the Free, has
// completed.
//
// Caching is safe for concurrent use; one mutex guards it, held also while
// the Source allocates or releases a segment.
type Caching struct {
	mu     sync.Mutex
	src    Source
	events Events // nil when the source cannot record events
	name   string
	cfg    Config
	limit  int64 // bytes, 0 = none

	small, large blockPool
	live         map[Ptr]*block   // allocated blocks, by address
	segments     map[Ptr]*segment // by base address
	pending      []*eventQueue    // per stream, blocks waiting for events
	npending     int              // events in pending
	stats        Stats
	trace        traceRing
	spare        []*block // recycled block structs, so steady state allocates nothing
	key          block    // search key for the pools; a field so searches allocate nothing
	closed       bool

	lastSourceErr error       // the Source's last out-of-memory refusal, for the error
	refusedBy     *scopeState // the scope whose limit refused the last segment, for the ladder

	scopes    map[Scope]*scopeState // the allocation scopes but 0
	lastScope Scope                 // the highest scope id given out
}

// block is a piece of a segment: allocated, pending (freed but in use by a
// stream), or cached in its pool.
type block struct {
	ptr        Ptr
	size       int64
	requested  int64
	stream     Stream
	seg        *segment
	prev, next *block   // neighbours in the same segment, by address
	cat        Category // what it holds, while allocated
	allocated  bool
	inPool     bool
	split      bool // counted in InactiveSplit while in the pool
	eventCount int
	uses       []Stream // streams other than stream that used the block
	gcBase     int64    // pool.getCount when the block entered the pool
}

type segment struct {
	head   *block // the block at the segment's base; never changes
	size   int64
	stream Stream
	scope  *scopeState // the allocation scope whose requests it serves; nil for scope 0
	pool   Pool
}

func (b *block) isSplit() bool { return b.prev != nil || b.next != nil }

// blockPool holds the cached blocks of one pool, ordered by (stream, size,
// address), so best fit on a stream is one ordered search.
type blockPool struct {
	kind     Pool
	blocks   *btree.BTreeG[*block]
	getCount int64 // searches so far: a block's age for garbage collection
}

func blockLess(a, b *block) bool {
	if a.stream != b.stream {
		return a.stream < b.stream
	}
	if a.size != b.size {
		return a.size < b.size
	}
	return a.ptr < b.ptr
}

type eventQueue struct {
	stream Stream
	events []pendingEvent // FIFO: recorded in order on one stream
}

type pendingEvent struct {
	ev Event
	b  *block
}

// NewCaching returns a caching allocator over src with the policy cfg.
func NewCaching(src Source, cfg Config) (*Caching, error) {
	if src == nil {
		return nil, errors.New("alloc: NewCaching: nil Source")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Caching{
		src:      src,
		name:     sourceName(src),
		cfg:      cfg,
		live:     make(map[Ptr]*block),
		segments: make(map[Ptr]*segment),
	}
	c.events, _ = src.(Events)
	switch {
	case cfg.MemoryLimit > 0:
		c.limit = cfg.MemoryLimit
	case cfg.MemoryFraction > 0:
		_, total, err := src.MemInfo()
		if err != nil {
			return nil, fmt.Errorf("alloc: NewCaching: reading %s memory for MemoryFraction: %w", c.name, err)
		}
		c.limit = int64(cfg.MemoryFraction * float64(total))
	}
	free := btree.NewFreeListG[*block](64)
	c.small = blockPool{kind: SmallPool, blocks: btree.NewWithFreeListG(16, blockLess, free)}
	c.large = blockPool{kind: LargePool, blocks: btree.NewWithFreeListG(16, blockLess, free)}
	c.trace.init(cfg.TraceEntries)
	c.stats.MaxSplitSize = cfg.MaxSplitSize
	c.stats.Limit = c.limit
	return c, nil
}

// Config returns the policy the allocator was made with.
func (c *Caching) Config() Config { return c.cfg }

// Limit returns the memory limit in bytes, 0 if none.
func (c *Caching) Limit() int64 { return c.limit }

func (c *Caching) pool(p Pool) *blockPool {
	if p == SmallPool {
		return &c.small
	}
	return &c.large
}

// Alloc returns a block of at least size bytes for use on stream s. A size
// of 0 returns the nil Ptr. When no cached block fits and the Source cannot
// provide a segment, it frees cached memory step by step before giving up
// with an *OutOfMemoryError; an error from the Source that is not an
// out-of-memory refusal is returned as it is, wrapped. The block is counted
// in the Other category; AllocCategory says what it holds.
func (c *Caching) Alloc(size int64, s Stream) (Ptr, error) {
	return c.AllocCategory(size, s, Other)
}

// AllocCategory is Alloc of a block that holds cat: its bytes count in
// Stats.CategoryBytes[cat] until it is freed.
func (c *Caching) AllocCategory(size int64, s Stream, cat Category) (Ptr, error) {
	return c.AllocIn(size, s, cat, 0)
}

// AllocIn is AllocCategory for the allocation scope scope (a job sharing
// the device with others; 0 is the device's own): the block's bytes count
// in the scope's figures too (ScopeBytes) until it is freed.
func (c *Caching) AllocIn(size int64, s Stream, cat Category, scope Scope) (Ptr, error) {
	if cat >= NumCategories {
		return 0, fmt.Errorf("alloc: Alloc: %v is not a category", cat)
	}
	if size < 0 {
		return 0, fmt.Errorf("alloc: Alloc: negative size %d", size)
	}
	if size == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, errClosed
	}
	var sc *scopeState
	if scope != 0 {
		sc = c.scopeOf(scope)
	}
	if size > MaxRequest {
		return 0, c.oom(size, size, s, cat, sc, "Requests of more than 1 EiB are refused.")
	}
	if c.npending > 0 {
		if err := c.processEvents(); err != nil {
			return 0, err
		}
	}
	rounded := c.cfg.RoundSize(size)
	pool := c.pool(PoolOf(rounded))
	segSize := SegmentSize(rounded)
	c.lastSourceErr, c.refusedBy = nil, nil

	b := c.getFreeBlock(pool, s, rounded, sc)
	if b == nil {
		var err error
		if c.limit > 0 && c.cfg.GarbageCollectionThreshold > 0 {
			if err = c.garbageCollect(); err != nil {
				return 0, err
			}
		}
		b, err = c.allocSegment(segSize, s, pool.kind, sc)
		if b == nil && err == nil {
			var released bool
			if released, err = c.releaseAvailableCachedBlocks(pool, s, rounded, sc); released && err == nil {
				b, err = c.allocSegment(segSize, s, pool.kind, sc)
			}
		}
		if b == nil && err == nil {
			// A scope's own limit refused: only its own cache can make
			// room, and the other scopes' is left alone.
			if err = c.releaseCachedBlocks(c.refusedBy); err == nil {
				c.stats.AllocRetries++
				if sc != nil {
					sc.stats.AllocRetries++
				}
				b, err = c.allocSegment(segSize, s, pool.kind, sc)
			}
		}
		if err != nil {
			return 0, err
		}
		if b == nil {
			return 0, c.oom(size, segSize, s, cat, sc, "")
		}
	}
	c.allocFoundBlock(pool, b, rounded, size, cat)
	return b.ptr, nil
}

// getFreeBlock takes the best-fitting cached block on stream s, in a
// segment of scope sc, out of the pool, or returns nil. Like PyTorch, a request below MaxSplitSize is not
// served from a block at or above it, and a request at or above it only
// from a block less than MaxNonSplitRounding larger.
func (c *Caching) getFreeBlock(p *blockPool, s Stream, size int64, sc *scopeState) *block {
	p.getCount++
	c.key = block{stream: s, size: size}
	var found *block
	p.blocks.AscendGreaterOrEqual(&c.key, func(b *block) bool {
		found = b
		return false
	})
	if found == nil || found.stream != s || found.seg.scope != sc {
		return nil
	}
	maxSplit := c.cfg.maxSplit()
	if size < maxSplit && found.size >= maxSplit {
		return nil
	}
	if size >= maxSplit && found.size >= size+c.cfg.maxNonSplitRounding() {
		return nil
	}
	c.removeFromPool(p, found)
	return found
}

func (c *Caching) shouldSplit(b *block, size int64) bool {
	remaining := b.size - size
	if b.seg.pool == SmallPool {
		return remaining >= MinBlockSize
	}
	return size < c.cfg.maxSplit() && remaining > SmallSize
}

// allocFoundBlock hands out b (out of the pool) for a request of requested
// bytes rounded to size, splitting off the rest when the rules allow.
func (c *Caching) allocFoundBlock(p *blockPool, b *block, size, requested int64, cat Category) {
	if c.shouldSplit(b, size) {
		r := c.newBlock()
		*r = block{ptr: b.ptr + Ptr(size), size: b.size - size, stream: b.stream, seg: b.seg, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = r
		}
		b.next = r
		b.size = size
		c.insertIntoPool(p, r)
	}
	b.allocated = true
	b.requested = requested
	b.cat = cat
	c.live[b.ptr] = b
	oversize := b.size >= c.cfg.maxSplit()
	c.stats.allocated(b.seg.pool, b.size, requested, cat, oversize)
	if sc := b.seg.scope; sc != nil {
		sc.stats.allocated(b.seg.pool, b.size, requested, cat, oversize)
	}
	c.trace.add(TraceAlloc, b.ptr, b.size, requested, b.stream)
}

// Free returns the block at p to the allocator. If streams were recorded on
// it, it is cached only once the work queued on them so far has completed.
// Freeing the nil Ptr does nothing; an unknown or already freed pointer is
// ErrInvalidPointer and changes nothing.
func (c *Caching) Free(p Ptr) error {
	if p == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.lookup(p, "Free")
	if err != nil {
		return err
	}
	delete(c.live, p)
	b.allocated = false
	oversize := b.size >= c.cfg.maxSplit()
	c.stats.freed(b.seg.pool, b.size, b.requested, b.cat, oversize)
	if sc := b.seg.scope; sc != nil {
		sc.stats.freed(b.seg.pool, b.size, b.requested, b.cat, oversize)
	}
	c.trace.add(TraceFreeRequested, b.ptr, b.size, b.requested, b.stream)
	if len(b.uses) > 0 {
		return c.insertEvents(b)
	}
	c.freeBlock(b)
	return nil
}

// RecordStream records that the block at p is used by work on stream s, so
// Free keeps it from reuse until that work is done. Recording the stream
// the block was allocated on does nothing.
func (c *Caching) RecordStream(p Ptr, s Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.lookup(p, "RecordStream")
	if err != nil {
		return err
	}
	if s == b.stream {
		return nil
	}
	if c.events == nil {
		return fmt.Errorf("alloc: RecordStream(%v, stream %d) on %s: %w", p, s, c.name, ErrNoEvents)
	}
	for _, u := range b.uses {
		if u == s {
			return nil
		}
	}
	b.uses = append(b.uses, s)
	return nil
}

// lookup returns the allocated block at p for the call op, counting an
// unknown pointer as an invalid free; c.mu held.
func (c *Caching) lookup(p Ptr, op string) (*block, error) {
	if c.closed {
		return nil, errClosed
	}
	b := c.live[p]
	if b == nil {
		c.stats.InvalidFrees++
		return nil, fmt.Errorf("alloc: %s(%v): %w", op, p, ErrInvalidPointer)
	}
	return b, nil
}

// insertEvents records an event on every stream that used b; b returns to
// the pool when they have all completed. If an event cannot be recorded the
// block is never reused (nothing could tell when that stream is done with
// it) and the error is returned.
func (c *Caching) insertEvents(b *block) error {
	for _, s := range b.uses {
		ev, err := c.events.Record(s)
		if err != nil {
			b.eventCount++ // stands for the event that will never complete
			return fmt.Errorf("alloc: recording an event on stream %d for block %v (kept out of reuse): %w", s, b.ptr, err)
		}
		b.eventCount++
		c.npending++
		q := c.queue(s)
		q.events = append(q.events, pendingEvent{ev, b})
	}
	return nil
}

func (c *Caching) queue(s Stream) *eventQueue {
	for _, q := range c.pending {
		if q.stream == s {
			return q
		}
	}
	q := &eventQueue{stream: s}
	c.pending = append(c.pending, q)
	return q
}

// processEvents returns to the pool the pending blocks whose events have all
// completed. Each stream's queue is polled in order and stops at its first
// pending event, so one busy stream does not hold up the others.
func (c *Caching) processEvents() error {
	for _, q := range c.pending {
		n := 0
		for _, pe := range q.events {
			done, err := pe.ev.Done()
			if err != nil {
				q.events = q.events[n:]
				return fmt.Errorf("alloc: polling an event on stream %d: %w", q.stream, err)
			}
			if !done {
				break
			}
			n++
			c.eventCompleted(pe)
		}
		q.events = q.events[n:]
	}
	return nil
}

// synchronizeEvents waits for every pending event and returns the blocks
// they held to the pool.
func (c *Caching) synchronizeEvents() error {
	if c.npending == 0 {
		return nil
	}
	c.stats.SyncAllStreams++
	for _, q := range c.pending {
		for i, pe := range q.events {
			if err := pe.ev.Wait(); err != nil {
				q.events = q.events[i:]
				return fmt.Errorf("alloc: waiting for an event on stream %d: %w", q.stream, err)
			}
			c.eventCompleted(pe)
		}
		q.events = q.events[:0]
	}
	return nil
}

func (c *Caching) eventCompleted(pe pendingEvent) {
	releaseEvent(pe.ev)
	c.npending--
	pe.b.eventCount--
	if pe.b.eventCount == 0 {
		c.freeBlock(pe.b)
	}
}

// freeBlock puts a block nobody uses any more back in its pool, merged with
// free neighbours of its segment.
func (c *Caching) freeBlock(b *block) {
	k := b.seg.pool
	c.stats.inactive(k, b.size)
	if sc := b.seg.scope; sc != nil {
		sc.stats.inactive(k, b.size)
	}
	c.trace.add(TraceFreeCompleted, b.ptr, b.size, b.requested, b.stream)
	b.uses = b.uses[:0]
	b.requested = 0
	p := c.pool(k)
	if prev := b.prev; prev != nil && prev.inPool {
		c.removeFromPool(p, prev)
		prev.size += b.size
		prev.next = b.next
		if b.next != nil {
			b.next.prev = prev
		}
		c.recycle(b)
		b = prev
	}
	if next := b.next; next != nil && next.inPool {
		c.removeFromPool(p, next)
		b.size += next.size
		b.next = next.next
		if next.next != nil {
			next.next.prev = b
		}
		c.recycle(next)
	}
	c.insertIntoPool(p, b)
}

func (c *Caching) insertIntoPool(p *blockPool, b *block) {
	b.inPool = true
	b.gcBase = p.getCount
	b.split = b.isSplit()
	if b.split {
		c.stats.split(p.kind, 1, b.size)
		if sc := b.seg.scope; sc != nil {
			sc.stats.split(p.kind, 1, b.size)
		}
	}
	p.blocks.ReplaceOrInsert(b)
}

func (c *Caching) removeFromPool(p *blockPool, b *block) {
	p.blocks.Delete(b)
	b.inPool = false
	if b.split {
		c.stats.split(p.kind, -1, -b.size)
		if sc := b.seg.scope; sc != nil {
			sc.stats.split(p.kind, -1, -b.size)
		}
		b.split = false
	}
}

func (c *Caching) newBlock() *block {
	if n := len(c.spare); n > 0 {
		b := c.spare[n-1]
		c.spare = c.spare[:n-1]
		return b
	}
	return new(block)
}

func (c *Caching) recycle(b *block) {
	uses := b.uses[:0]
	*b = block{uses: uses}
	c.spare = append(c.spare, b)
}

// allocSegment asks the Source for a segment of size bytes for scope sc
// and returns it as one free block outside the pool. It returns (nil, nil)
// when the scope's limit (noted in c.refusedBy), the allocator's limit or
// the device has no room.
func (c *Caching) allocSegment(size int64, s Stream, k Pool, sc *scopeState) (*block, error) {
	if sc != nil && sc.limit > 0 && sc.stats.ReservedBytes[AllPools].Current+size > sc.limit {
		c.refusedBy = sc
		return nil, nil
	}
	if c.limit > 0 && c.stats.ReservedBytes[AllPools].Current+size > c.limit {
		return nil, nil
	}
	ptr, err := c.src.Allocate(size)
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			c.lastSourceErr = err
			return nil, nil
		}
		return nil, fmt.Errorf("alloc: allocating a %s segment on %s: %w", FormatSize(size), c.name, err)
	}
	seg := &segment{size: size, stream: s, pool: k, scope: sc}
	b := c.newBlock()
	*b = block{ptr: ptr, size: size, stream: s, seg: seg, uses: b.uses}
	seg.head = b
	c.segments[ptr] = seg
	oversize := size >= c.cfg.maxSplit()
	c.stats.segment(k, size, oversize)
	if sc != nil {
		sc.stats.segment(k, size, oversize)
	}
	c.trace.add(TraceSegmentAlloc, ptr, size, size, s)
	return b, nil
}

// releaseSegment gives an unsplit cached block, a whole segment, back to
// the Source.
func (c *Caching) releaseSegment(p *blockPool, b *block) error {
	if err := c.src.Release(b.ptr, b.size); err != nil {
		return fmt.Errorf("alloc: releasing a %s segment to %s: %w", FormatSize(b.size), c.name, err)
	}
	c.removeFromPool(p, b)
	delete(c.segments, b.ptr)
	oversize := b.size >= c.cfg.maxSplit()
	c.stats.segment(p.kind, -b.size, oversize)
	if sc := b.seg.scope; sc != nil {
		sc.stats.segment(p.kind, -b.size, oversize)
	}
	c.trace.add(TraceSegmentFree, b.ptr, b.size, b.size, b.stream)
	c.recycle(b)
	return nil
}

// releaseAvailableCachedBlocks frees cached oversize segments of stream s
// and scope sc that could make room for a block of size bytes: the smallest
// one at least max(size, MaxSplitSize) if there is one, else the largest
// ones until their sizes add up to that. It acts only when MaxSplitSize is
// set.
func (c *Caching) releaseAvailableCachedBlocks(p *blockPool, s Stream, size int64, sc *scopeState) (bool, error) {
	if c.cfg.MaxSplitSize == 0 {
		return false, nil
	}
	need := max(size, c.cfg.MaxSplitSize)
	c.key = block{stream: s, size: need}
	var fit *block
	p.blocks.AscendGreaterOrEqual(&c.key, func(b *block) bool {
		if b.stream == s && !b.isSplit() && b.seg.scope == sc {
			fit = b
		}
		return b.stream == s && fit == nil
	})
	if fit != nil {
		return true, c.releaseSegment(p, fit)
	}
	var victims []*block
	var total int64
	p.blocks.DescendLessOrEqual(&c.key, func(b *block) bool {
		if b.stream != s || b.size < c.cfg.MaxSplitSize {
			return false
		}
		if !b.isSplit() && b.seg.scope == sc {
			victims = append(victims, b)
			total += b.size
		}
		return total < need
	})
	for _, b := range victims {
		if err := c.releaseSegment(p, b); err != nil {
			return false, err
		}
	}
	return total >= need, nil
}

// releaseCachedBlocks waits for every pending event, then gives every
// unsplit cached segment of both pools back to the Source: only scope
// only's when only is not nil. Split segments stay: some of their blocks
// are in use.
func (c *Caching) releaseCachedBlocks(only *scopeState) error {
	if err := c.synchronizeEvents(); err != nil {
		return err
	}
	for _, p := range []*blockPool{&c.small, &c.large} {
		var whole []*block
		p.blocks.Ascend(func(b *block) bool {
			if !b.isSplit() && (only == nil || b.seg.scope == only) {
				whole = append(whole, b)
			}
			return true
		})
		for _, b := range whole {
			if err := c.releaseSegment(p, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// garbageCollect releases whole cached large segments, oldest first in
// rounds of "at least the average age", until the memory held is back under
// GarbageCollectionThreshold of the limit. Unlike releaseCachedBlocks it
// does not wait for events.
func (c *Caching) garbageCollect() error {
	threshold := int64(c.cfg.GarbageCollectionThreshold * float64(c.limit))
	reserved := c.stats.ReservedBytes[AllPools].Current
	if reserved <= threshold {
		return nil
	}
	target := reserved - threshold
	p := &c.large
	var candidates []*block
	var totalAge int64
	p.blocks.Ascend(func(b *block) bool {
		if !b.isSplit() {
			candidates = append(candidates, b)
			totalAge += p.getCount - b.gcBase
		}
		return true
	})
	var reclaimed int64
	for reclaimed < target && len(candidates) > 0 {
		avg := float64(totalAge) / float64(len(candidates))
		kept := candidates[:0]
		freed := false
		for _, b := range candidates {
			age := p.getCount - b.gcBase
			if reclaimed >= target || float64(age) < avg {
				kept = append(kept, b)
				continue
			}
			reclaimed += b.size
			totalAge -= age
			freed = true
			if err := c.releaseSegment(p, b); err != nil {
				return err
			}
		}
		candidates = kept
		if !freed {
			break
		}
	}
	return nil
}

// EmptyCache waits for the work pending on recorded streams, then gives
// every cached segment that holds no allocated block back to the Source.
// Memory in split segments stays reserved. The allocator does this itself
// before reporting out of memory, so calling it in a training loop only
// slows training down; call it to hand memory to other programs.
func (c *Caching) EmptyCache() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	return c.releaseCachedBlocks(nil)
}

// Close releases every segment back to the Source. While blocks are still
// allocated it closes nothing and returns an error that says how many, so
// no live block is ever pulled from under its user. After Close every call
// returns ErrClosed.
func (c *Caching) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if n := len(c.live); n > 0 {
		return fmt.Errorf("alloc: Close: %d blocks (%s) are still allocated; free them first",
			n, FormatSize(c.stats.AllocatedBytes[AllPools].Current))
	}
	if err := c.releaseCachedBlocks(nil); err != nil {
		return err
	}
	if len(c.segments) != 0 {
		return fmt.Errorf("alloc: Close: %d segments could not be released", len(c.segments))
	}
	c.closed = true
	return nil
}

// Stats returns a copy of the allocator's figures.
func (c *Caching) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// ResetPeak sets every peak to its current value.
func (c *Caching) ResetPeak() {
	c.mu.Lock()
	c.stats.resetPeak()
	for _, sc := range c.scopes {
		sc.stats.resetPeak()
	}
	c.mu.Unlock()
}

// ResetAccumulated zeroes the cumulative figures (allocated and freed
// amounts, and the event counters).
func (c *Caching) ResetAccumulated() {
	c.mu.Lock()
	c.stats.resetAccumulated()
	for _, sc := range c.scopes {
		sc.stats.resetAccumulated()
	}
	c.mu.Unlock()
}

// Fragmentation is 1 - largest cached block / cached bytes, as
// Snapshot().Fragmentation() but without building the snapshot: cheap
// enough to follow after every operation, as trace.Replay does. It walks
// the cached blocks, so it costs time in their number.
func (c *Caching) Fragmentation() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fragmentation(c.largestCached())
}

// largestCached returns the largest cached block and the cached bytes.
func (c *Caching) largestCached() (largest, free int64) {
	for _, p := range []*blockPool{&c.small, &c.large} {
		p.blocks.Ascend(func(b *block) bool {
			largest = max(largest, b.size)
			free += b.size
			return true
		})
	}
	return largest, free
}

// oom builds the out-of-memory error of a request in scope sc (nil for
// scope 0), counts it and traces it.
func (c *Caching) oom(requested, allocSize int64, s Stream, cat Category, sc *scopeState, hint string) error {
	c.stats.OOMs++
	e := &OutOfMemoryError{
		Device:     c.name,
		Requested:  requested,
		AllocSize:  allocSize,
		Stream:     s,
		Category:   cat,
		Categories: c.stats.CategoryBytes.currents(),
		Allocated:  c.stats.AllocatedBytes[AllPools].Current,
		Reserved:   c.stats.ReservedBytes[AllPools].Current,
		Limit:      c.limit,
		SourceErr:  c.lastSourceErr,
	}
	e.DeviceFree, e.DeviceTotal, _ = c.src.MemInfo()
	var free int64
	e.LargestCached, free = c.largestCached()
	e.Fragmentation = fragmentation(e.LargestCached, free)
	if sc != nil {
		sc.stats.OOMs++
		e.Categories = sc.stats.CategoryBytes.currents() // the job's, not its neighbours'
		e.Scope = sc.describe()
		e.ScopeLimit = sc.limit
		e.ScopeAllocated = sc.stats.AllocatedBytes[AllPools].Current
		e.ScopeReserved = sc.stats.ReservedBytes[AllPools].Current
		e.ScopeRefused = c.refusedBy == sc
	}
	e.Hint = hint
	if e.Hint == "" {
		e.Hint = e.hint()
	}
	c.trace.add(TraceOOM, 0, allocSize, requested, s)
	return e
}

// fragmentation is 1 - largest free block / free bytes: 0 when the cached
// memory is one block (or there is none), near 1 when it is in slivers.
func fragmentation(largest, free int64) float64 {
	if free == 0 {
		return 0
	}
	return 1 - float64(largest)/float64(free)
}

// Snapshot returns the allocator's segments and their blocks, ordered by
// address.
func (c *Caching) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	segs := make([]SegmentInfo, 0, len(c.segments))
	for base, seg := range c.segments {
		si := SegmentInfo{Address: base, TotalSize: seg.size, Stream: seg.stream, Pool: seg.pool}
		if seg.scope != nil {
			si.Scope = seg.scope.id
		}
		for b := seg.head; b != nil; b = b.next {
			bi := BlockInfo{Address: b.ptr, Size: b.size, RequestedSize: b.requested, State: BlockInactive}
			switch {
			case b.allocated:
				bi.State = BlockActiveAllocated
				bi.Category = b.cat
				if sc := b.seg.scope; sc != nil {
					bi.Scope = sc.id
				}
				si.AllocatedSize += b.size
				si.RequestedSize += b.requested
				si.ActiveSize += b.size
			case !b.inPool:
				bi.State = BlockActivePendingFree
				si.ActiveSize += b.size
			}
			si.Blocks = append(si.Blocks, bi)
		}
		segs = append(segs, si)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].Address < segs[j].Address })
	return Snapshot{Segments: segs}
}

// Trace returns the recorded trace entries, oldest first. It is empty
// unless Config.TraceEntries is set. Package alloc/trace writes them as a
// file that it can replay under another policy.
func (c *Caching) Trace() []TraceEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trace.entries()
}

// ReleaseAll frees every block still allocated and then closes the
// allocator as Close does, returning all memory to the Source. It is for
// the owner of a device that is shutting down after its work stopped:
// every pointer the allocator handed out becomes invalid.
func (c *Caching) ReleaseAll() error {
	c.mu.Lock()
	live := make([]Ptr, 0, len(c.live))
	for p := range c.live {
		live = append(live, p)
	}
	c.mu.Unlock()
	return freeAndClose(live, c.Free, c.Close)
}

// freeAndClose frees every pointer in live, then closes: ReleaseAll for
// both allocators.
func freeAndClose(live []Ptr, free func(Ptr) error, close func() error) error {
	for _, p := range live {
		if err := free(p); err != nil {
			return err
		}
	}
	return close()
}
