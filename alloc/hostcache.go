package alloc

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
)

// hostSizeClasses is the number of free lists, one per power of two
// (PyTorch's MAX_SIZE_INDEX). Blocks are at least MinBlockSize (2^9) and at
// most MaxRequest (2^60) bytes, so classes 9 to 60 are the ones used.
const hostSizeClasses = 64

// HostCache caches host staging buffers: pinned memory on CUDA, plain
// memory on the CPU device. It is PyTorch's CachingHostAllocator over any
// Source.
//
// # Policy
//
// Every request is rounded up to the next power of two, at least
// MinBlockSize (512) bytes, and each block is a segment of its own from
// Source.Allocate: blocks are never split or merged, so a staging buffer
// never shares a page lock or registration with another. Freed blocks are
// kept on one free list per power of two and handed out again last in,
// first out, so a loop that frees and allocates the same size reuses the
// same buffer and never calls the Source.
//
// A buffer that work queued on a stream still reads (an asynchronous copy
// out of it) must not be reused before that work is done. RecordStream
// tells the cache about such a stream; Free then records an event on every
// recorded stream (through the Source's Events capability) and keeps the
// block pending until all of them have completed. Alloc first polls the
// pending events, one first-in, first-out queue per stream, stopping at the
// first event of a queue that is not done, and moves the blocks whose events
// all completed to the free lists. Pooled events (those with a Release
// method) are released once the cache is done with them.
//
// When the Source refuses with ErrOutOfMemory the cache waits for every
// pending event (Stats.SyncAllStreams), takes the block from the free list
// of the request's size if that freed one up, and otherwise gives every
// cached free block back to the Source and asks once more
// (Stats.AllocRetries counts both outcomes). If that fails too the result is
// an *OutOfMemoryError with the figures (Stats.OOMs); the cache is left
// consistent and later requests that fit succeed. Any other Source error is
// returned wrapped, unchanged in kind.
//
// # Statistics
//
// Stats uses PyTorch's names: Allocation, AllocatedBytes (rounded sizes)
// and RequestedBytes (sizes asked for) count blocks handed out and not yet
// freed; Active and ActiveBytes count them plus the pending ones; Segment and
// ReservedBytes count every block held from the Source, cached or not;
// DeviceAllocs and DeviceFrees count Source calls. Each figure is kept in
// the AllPools row and in the row PoolOf gives for the block size (blocks up
// to 1 MiB in SmallPool, larger ones in LargePool), as Caching does. The
// split figures (InactiveSplit, Oversize) stay zero: blocks are never split.
//
// # Ownership and concurrency
//
// A pointer from Alloc belongs to the caller until it passes it to Free;
// Bytes gives its memory when the Source is host accessible. The caller must
// not touch the memory after Free, but work already queued on recorded
// streams may go on reading it: that is what RecordStream is for.
//
// A HostCache is safe for concurrent use. One mutex guards its state. It is
// held while polling events (Event.Done), recording them (Events.Record) and
// looking up HostAccessible.Bytes, which are cheap, and released around the
// expensive calls, as
// PyTorch does: Source.Allocate, Source.Release, Source.MemInfo and
// Event.Wait. Close waits for such calls still in flight; an Alloc that
// was in the Source when Close ran gives its new segment back and returns
// ErrClosed.
type HostCache struct {
	src    Source
	events Events         // src's Events capability, nil without it
	host   HostAccessible // src's HostAccessible capability, nil without it

	mu     sync.Mutex
	blocks map[Ptr]*hostBlock            // every block held from src: allocated, pending or free
	free   [hostSizeClasses][]*hostBlock // free blocks per size class, used as stacks
	queues map[Stream][]hostPending      // events recorded by Free, oldest first, per stream
	stats  Stats
	closed bool

	// inflight counts calls that dropped mu to call src or wait for events
	// and will come back to update the state; Close waits for them.
	inflight sync.WaitGroup
}

// hostBlock is one block, which is one whole segment of the Source.
type hostBlock struct {
	ptr       Ptr
	size      int64    // a power of two, the segment size
	requested int64    // the size asked for by the current owner, 0 when not allocated
	allocated bool     // handed out and not yet freed
	streams   []Stream // streams recorded since Alloc, without duplicates
	pending   int      // events recorded at Free that have not been seen complete
}

// hostPending is an event recorded by Free and the block it holds back.
type hostPending struct {
	stream Stream
	event  Event
	block  *hostBlock
}

// NewHostCache returns an empty cache over src. RecordStream needs src to
// implement Events, and Bytes needs it to implement HostAccessible.
func NewHostCache(src Source) *HostCache {
	if src == nil {
		panic("alloc: NewHostCache: nil Source")
	}
	c := &HostCache{
		src:    src,
		blocks: make(map[Ptr]*hostBlock),
		queues: make(map[Stream][]hostPending),
	}
	c.events, _ = src.(Events)
	c.host, _ = src.(HostAccessible)
	return c
}

// hostRoundSize returns the block size for a request of size bytes
// (0 < size <= MaxRequest): the next power of two, at least MinBlockSize.
func hostRoundSize(size int64) int64 {
	return max(MinBlockSize, int64(1)<<bits.Len64(uint64(size-1)))
}

// hostSizeClass returns the free list of a block size, a power of two.
func hostSizeClass(size int64) int { return bits.TrailingZeros64(uint64(size)) }

// Alloc returns a block of at least size bytes. Size 0 returns the nil
// Ptr. A negative size is an error; a size above MaxRequest is an
// *OutOfMemoryError, as is a request the Source cannot serve even after the
// cache gave back what it holds (see the type documentation).
func (c *HostCache) Alloc(size int64) (Ptr, error) {
	if size < 0 {
		return 0, fmt.Errorf("alloc: host cache: negative request of %d bytes", size)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, errClosed
	}
	if size == 0 {
		c.mu.Unlock()
		return 0, nil
	}
	if size > MaxRequest {
		c.mu.Unlock()
		return 0, c.outOfMemory(size, size, fmt.Errorf("alloc: host cache: request of %d bytes is above the maximum of %d (1 EiB)", size, int64(MaxRequest)))
	}
	rounded := hostRoundSize(size)
	if err := c.processEventsLocked(); err != nil {
		c.mu.Unlock()
		return 0, err
	}
	if b := c.popFreeLocked(rounded); b != nil {
		c.handOutLocked(b, size)
		c.mu.Unlock()
		return b.ptr, nil
	}
	c.inflight.Add(1)
	c.mu.Unlock()
	defer c.inflight.Done()
	return c.allocFromSource(size, rounded)
}

// allocFromSource serves a request the free lists could not: a new segment,
// or the recovery ladder when the Source is out of memory. mu is not held.
func (c *HostCache) allocFromSource(size, rounded int64) (Ptr, error) {
	p, err := c.src.Allocate(rounded)
	if errors.Is(err, ErrOutOfMemory) {
		var rerr error
		if p, rerr = c.reclaim(size, rounded); rerr != nil || p != 0 {
			return p, rerr
		}
		p, err = c.src.Allocate(rounded)
	}
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			return 0, c.outOfMemory(size, rounded, err)
		}
		return 0, fmt.Errorf("alloc: host cache: allocating %d bytes from %s: %w", rounded, sourceName(c.src), err)
	}

	c.mu.Lock()
	c.stats.DeviceAllocs++
	_, dup := c.blocks[p]
	if c.closed || dup {
		closed := c.closed
		c.mu.Unlock()
		rerr := c.src.Release(p, rounded)
		c.mu.Lock()
		if rerr == nil {
			c.stats.DeviceFrees++
		}
		c.mu.Unlock()
		if rerr != nil {
			rerr = fmt.Errorf("alloc: host cache: releasing %v: %w", p, rerr)
		}
		if closed {
			return 0, errors.Join(errClosed, rerr)
		}
		return 0, errors.Join(fmt.Errorf("alloc: host cache: %s returned %v, which is a live block", sourceName(c.src), p), rerr)
	}
	b := &hostBlock{ptr: p, size: rounded}
	c.blocks[p] = b
	pool := PoolOf(rounded)
	c.stats.Segment.add(pool, 1)
	c.stats.ReservedBytes.add(pool, rounded)
	c.handOutLocked(b, size)
	c.mu.Unlock()
	return p, nil
}

// reclaim is the recovery step after the Source refused a request: wait for
// every pending event, serve the request from the free list of its size if
// that freed a block up, and otherwise give every cached block back to the
// Source so that the retry has room. It returns the nil Ptr when the caller
// should retry. mu is not held.
func (c *HostCache) reclaim(size, rounded int64) (Ptr, error) {
	c.mu.Lock()
	c.stats.SyncAllStreams++
	c.stats.AllocRetries++
	pending := c.takePendingLocked()
	c.mu.Unlock()

	werr := c.waitAll(pending)

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, errClosed
	}
	if werr != nil {
		c.mu.Unlock()
		return 0, werr
	}
	if b := c.popFreeLocked(rounded); b != nil {
		c.handOutLocked(b, size)
		c.mu.Unlock()
		return b.ptr, nil
	}
	cached := c.takeFreeLocked()
	c.mu.Unlock()
	return 0, c.releaseBlocks(cached)
}

// outOfMemory builds the error for a request the Source refused after the
// recovery ladder, and counts it. mu is not held.
func (c *HostCache) outOfMemory(size, rounded int64, srcErr error) error {
	// A MemInfo failure leaves the device figures zero: the error being
	// built is the out-of-memory condition, not the failed query.
	free, total, _ := c.src.MemInfo()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.OOMs++
	largest, cached := int64(0), int64(0)
	for class := range c.free {
		if n := len(c.free[class]); n > 0 {
			largest = int64(1) << class
			cached += int64(n) << class
		}
	}
	e := &OutOfMemoryError{
		Device:        sourceName(c.src),
		Requested:     size,
		AllocSize:     rounded,
		DeviceFree:    free,
		DeviceTotal:   total,
		Allocated:     c.stats.AllocatedBytes[AllPools].Current,
		Reserved:      c.stats.ReservedBytes[AllPools].Current,
		LargestCached: largest,
		Fragmentation: fragmentation(largest, cached),
		SourceErr:     srcErr,
	}
	e.Hint = e.hint()
	return e
}

// Free gives back a block from Alloc. Freeing the nil Ptr does nothing. If
// streams were recorded on the block it stays pending until the events Free
// records on them have completed; if recording fails, the error is returned
// and the block stays allocated, so the call can be repeated. A pointer that
// is not allocated is an ErrInvalidPointer error, counted in
// Stats.InvalidFrees.
func (c *HostCache) Free(p Ptr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	if p == 0 {
		return nil
	}
	b, ok := c.blocks[p]
	if !ok || !b.allocated {
		c.stats.InvalidFrees++
		return fmt.Errorf("alloc: host cache: free of %v: %w", p, ErrInvalidPointer)
	}
	if len(b.streams) > 0 {
		evs := make([]Event, 0, len(b.streams))
		for _, s := range b.streams {
			ev, err := c.events.Record(s)
			if err != nil {
				for _, ev := range evs {
					releaseEvent(ev)
				}
				return fmt.Errorf("alloc: host cache: free of %v: recording an event on stream %d: %w", p, s, err)
			}
			evs = append(evs, ev)
		}
		for i, ev := range evs {
			s := b.streams[i]
			c.queues[s] = append(c.queues[s], hostPending{stream: s, event: ev, block: b})
		}
		b.pending = len(evs)
		b.streams = b.streams[:0]
	}
	pool := PoolOf(b.size)
	c.stats.Allocation.add(pool, -1)
	c.stats.AllocatedBytes.add(pool, -b.size)
	c.stats.RequestedBytes.add(pool, -b.requested)
	b.allocated, b.requested = false, 0
	if b.pending == 0 {
		c.pushFreeLocked(b)
	}
	return nil
}

// RecordStream marks the block at p as in use by work queued on stream s,
// such as an asynchronous copy out of it, so that after Free it is not
// handed out again before that work is done. p must be a pointer Alloc
// returned and not yet freed (ErrInvalidPointer otherwise, counted in
// Stats.InvalidFrees). Without the Source's Events capability it returns
// ErrNoEvents.
func (c *HostCache) RecordStream(p Ptr, s Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	if c.events == nil {
		return fmt.Errorf("alloc: host cache: record stream %d on %s: %w", s, sourceName(c.src), ErrNoEvents)
	}
	b, ok := c.blocks[p]
	if !ok || !b.allocated {
		c.stats.InvalidFrees++
		return fmt.Errorf("alloc: host cache: record stream %d on %v: %w", s, p, ErrInvalidPointer)
	}
	if !slices.Contains(b.streams, s) {
		b.streams = append(b.streams, s)
	}
	return nil
}

// Bytes returns the memory of the allocated block at p, as many bytes as
// were requested. The slice aliases the block and is valid until Free. It
// is an error if the Source is not HostAccessible or p is not allocated
// (ErrInvalidPointer).
func (c *HostCache) Bytes(p Ptr) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if c.host == nil {
		return nil, fmt.Errorf("alloc: host cache: Bytes on %s: %w", sourceName(c.src), ErrNotHostAccessible)
	}
	b, ok := c.blocks[p]
	if !ok || !b.allocated {
		return nil, fmt.Errorf("alloc: host cache: bytes of %v: %w", p, ErrInvalidPointer)
	}
	mem, err := c.host.Bytes(b.ptr, b.requested)
	if err != nil {
		return nil, fmt.Errorf("alloc: host cache: bytes of %v: %w", p, err)
	}
	return mem, nil
}

// Size returns the size requested for the allocated block at p (the block
// itself is that rounded up to a power of two), or ErrInvalidPointer.
func (c *HostCache) Size(p Ptr) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, errClosed
	}
	b, ok := c.blocks[p]
	if !ok || !b.allocated {
		return 0, fmt.Errorf("alloc: host cache: size of %v: %w", p, ErrInvalidPointer)
	}
	return b.requested, nil
}

// EmptyCache polls the pending events and gives every cached free block
// back to the Source. Pending blocks whose events have not completed stay
// held; they are cached once they complete.
func (c *HostCache) EmptyCache() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	perr := c.processEventsLocked()
	cached := c.takeFreeLocked()
	c.inflight.Add(1)
	c.mu.Unlock()
	defer c.inflight.Done()
	return errors.Join(perr, c.releaseBlocks(cached))
}

// Stats returns a copy of the figures. It may be called after Close.
func (c *HostCache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// ResetPeak sets every peak to its current value.
func (c *HostCache) ResetPeak() {
	c.mu.Lock()
	c.stats.resetPeak()
	c.mu.Unlock()
}

// ResetAccumulated zeroes the cumulative figures: the allocated and freed
// sums and the event counts (retries, OOMs, syncs, Source calls, invalid
// frees).
func (c *HostCache) ResetAccumulated() {
	c.mu.Lock()
	c.stats.resetAccumulated()
	c.mu.Unlock()
}

// Close waits for every pending event and gives every block back to the
// Source. While blocks are still allocated it returns an error that says how
// many and changes nothing, so the caller can free them and close again.
// After a Close that got past that check, every call that can fail returns
// ErrClosed; the error of Close itself reports blocks the Source refused to
// take back.
func (c *HostCache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	if n := c.stats.Allocation[AllPools].Current; n > 0 {
		bytes := c.stats.AllocatedBytes[AllPools].Current
		c.mu.Unlock()
		return fmt.Errorf("alloc: host cache: cannot close with %d blocks (%s) still allocated; free them first", n, FormatSize(bytes))
	}
	c.closed = true
	c.mu.Unlock()

	// Calls that were in the Source when closed was set come back and
	// settle their state first; none can start now.
	c.inflight.Wait()

	c.mu.Lock()
	pending := c.takePendingLocked()
	if len(pending) > 0 {
		c.stats.SyncAllStreams++
	}
	c.mu.Unlock()
	werr := c.waitAll(pending)
	c.mu.Lock()
	cached := c.takeFreeLocked()
	c.mu.Unlock()
	return errors.Join(werr, c.releaseBlocks(cached))
}

// handOutLocked gives block b to a caller that asked for size bytes.
func (c *HostCache) handOutLocked(b *hostBlock, size int64) {
	b.allocated, b.requested = true, size
	pool := PoolOf(b.size)
	c.stats.Allocation.add(pool, 1)
	c.stats.AllocatedBytes.add(pool, b.size)
	c.stats.RequestedBytes.add(pool, size)
	c.stats.Active.add(pool, 1)
	c.stats.ActiveBytes.add(pool, b.size)
}

// pushFreeLocked caches a block that is neither allocated nor pending.
func (c *HostCache) pushFreeLocked(b *hostBlock) {
	class := hostSizeClass(b.size)
	c.free[class] = append(c.free[class], b)
	pool := PoolOf(b.size)
	c.stats.Active.add(pool, -1)
	c.stats.ActiveBytes.add(pool, -b.size)
}

// popFreeLocked takes the most recently cached block of the given size, or
// returns nil.
func (c *HostCache) popFreeLocked(size int64) *hostBlock {
	class := hostSizeClass(size)
	list := c.free[class]
	if len(list) == 0 {
		return nil
	}
	b := list[len(list)-1]
	list[len(list)-1] = nil
	c.free[class] = list[:len(list)-1]
	return b
}

// takeFreeLocked empties the free lists and forgets their blocks, which
// the caller then releases to the Source (releaseBlocks).
func (c *HostCache) takeFreeLocked() []*hostBlock {
	var out []*hostBlock
	for class := range c.free {
		for _, b := range c.free[class] {
			delete(c.blocks, b.ptr)
			out = append(out, b)
		}
		c.free[class] = nil
	}
	return out
}

// releaseBlocks gives blocks taken by takeFreeLocked back to the Source.
// Blocks the Source refuses are cached again, since they are still held.
// mu is not held.
func (c *HostCache) releaseBlocks(bs []*hostBlock) error {
	if len(bs) == 0 {
		return nil
	}
	var errs []error
	failed := make([]bool, len(bs))
	for i, b := range bs {
		if err := c.src.Release(b.ptr, b.size); err != nil {
			failed[i] = true
			errs = append(errs, fmt.Errorf("alloc: host cache: releasing %v (%d bytes) to %s: %w", b.ptr, b.size, sourceName(c.src), err))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, b := range bs {
		if failed[i] {
			c.blocks[b.ptr] = b
			class := hostSizeClass(b.size)
			c.free[class] = append(c.free[class], b)
			continue
		}
		pool := PoolOf(b.size)
		c.stats.Segment.add(pool, -1)
		c.stats.ReservedBytes.add(pool, -b.size)
		c.stats.DeviceFrees++
	}
	return errors.Join(errs...)
}

// processEventsLocked polls each stream's queue from the oldest event,
// stopping at the first that is not done, and caches the blocks whose
// events have all completed.
func (c *HostCache) processEventsLocked() error {
	for s, q := range c.queues {
		i := 0
		for ; i < len(q); i++ {
			done, err := q[i].event.Done()
			if err != nil {
				c.dropDoneLocked(s, q, i)
				return fmt.Errorf("alloc: host cache: polling an event on stream %d: %w", s, err)
			}
			if !done {
				break
			}
			c.eventDoneLocked(q[i])
		}
		c.dropDoneLocked(s, q, i)
	}
	return nil
}

// dropDoneLocked removes the first n entries of stream s's queue q, whose
// events have been dealt with.
func (c *HostCache) dropDoneLocked(s Stream, q []hostPending, n int) {
	if n == len(q) {
		delete(c.queues, s)
		return
	}
	clear(q[:n])
	c.queues[s] = q[n:]
}

// eventDoneLocked settles a completed event: its block has one fewer event
// to wait for, and is cached when none is left.
func (c *HostCache) eventDoneLocked(pe hostPending) {
	releaseEvent(pe.event)
	pe.block.pending--
	if pe.block.pending == 0 {
		c.pushFreeLocked(pe.block)
	}
}

// takePendingLocked empties every event queue; the caller waits for the
// events (waitAll), which then settles them.
func (c *HostCache) takePendingLocked() []hostPending {
	var out []hostPending
	for s, q := range c.queues {
		out = append(out, q...)
		delete(c.queues, s)
	}
	return out
}

// waitAll waits for events taken by takePendingLocked and settles them.
// Events whose Wait fails go back to the front of their queues, so their
// blocks stay pending. mu is not held.
func (c *HostCache) waitAll(pending []hostPending) error {
	if len(pending) == 0 {
		return nil
	}
	var errs []error
	failed := make([]bool, len(pending))
	for i, pe := range pending {
		if err := pe.event.Wait(); err != nil {
			failed[i] = true
			errs = append(errs, fmt.Errorf("alloc: host cache: waiting for an event on stream %d: %w", pe.stream, err))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	requeue := make(map[Stream][]hostPending)
	for i, pe := range pending {
		if failed[i] {
			requeue[pe.stream] = append(requeue[pe.stream], pe)
			continue
		}
		c.eventDoneLocked(pe)
	}
	for s, q := range requeue {
		c.queues[s] = append(q, c.queues[s]...)
	}
	return errors.Join(errs...)
}

// releaseEvent hands a pooled event back to its pool.
func releaseEvent(ev Event) {
	if r, ok := ev.(releaser); ok {
		r.Release()
	}
}

// ReleaseAll frees every block still allocated and then closes the cache
// as Close does. It is for the owner of a device that is shutting down
// after its copies stopped: every pointer the cache handed out becomes
// invalid.
func (c *HostCache) ReleaseAll() error {
	c.mu.Lock()
	var live []Ptr
	for p, b := range c.blocks {
		if b.allocated {
			live = append(live, p)
		}
	}
	c.mu.Unlock()
	return freeAndClose(live, c.Free, c.Close)
}
