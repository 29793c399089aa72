// Package alloc is the allocator: it serves every byte of device memory in
// gocurrent (parameters, gradients, activations, batches and workspaces on
// the GPU, and the same on the CPU device). It is pure Go and imports
// nothing else of gocurrent.
//
// The package has two layers, in the shape of RAPIDS RMM. A Source is the
// raw memory underneath: it allocates and releases whole segments and
// reports the device's free and total memory. Host (anonymous mmap, off the
// Go heap) is the CPU device's source; the CUDA device adds its own for
// device and pinned host memory. Caching puts PyTorch's caching policy on
// top of any Source, and HostCache does the same for host staging buffers.
// Optional capabilities of a Source (Events for stream-ordered devices,
// HostAccessible for memory the host can touch) are found by type
// assertion. Config (with ParseConfig for PYTORCH_CUDA_ALLOC_CONF-style
// strings) sets the policy; Stats, Snapshot, the recorded trace and
// OutOfMemoryError report on it.
//
// Two packages sit beside it. alloc/alloctest is for tests: TestSource,
// the conformance suite every Source passes (Host here, the CUDA device's
// sources in package cuda), and Simulated, a fake device with injected
// failures, hand-driven events and a check for overlapping blocks. Package
// alloc/trace holds trace files: it writes what Caching.Trace recorded,
// parses the text format and replays it under another policy.
//
// # Allocation policy
//
// Caching follows PyTorch's CUDA caching allocator, with its constants.
// Every request is rounded up to a multiple of 512 bytes (or, if
// Config.RoundupPower2Divisions is set for its size, to the next of that
// many steps between two powers of two). Blocks of at most 1 MiB come from
// the small pool, whose segments are 2 MiB; larger ones from the large pool,
// whose segments are 20 MiB for blocks under 10 MiB and otherwise the block
// size rounded up to 2 MiB. A request takes the smallest cached block of its
// pool and stream that fits (best fit, one O(log n) search in a tree ordered
// by stream, size and address). The block is split when the remainder is
// worth keeping: at least 512 bytes in the small pool, more than 1 MiB in
// the large pool, and never for blocks of at least Config.MaxSplitSize. A
// freed block merges with the free neighbours of its own segment (never
// across segments) and goes back to its pool; memory returns to the Source
// only when a whole segment is free and the cache is emptied or memory runs
// short.
//
// Blocks belong to the stream they were allocated on and are reused on that
// stream at once, since its work runs in order. If a block was used on other
// streams (RecordStream), Free records an event on each of them and the
// block is reused only after those events completed; pending events are
// polled, one queue per stream, at the start of every allocation.
//
// When no cached block fits, the allocator climbs a ladder before it fails:
// with a memory limit and a garbage-collection threshold, it first releases
// the oldest whole cached segments until it is under the threshold; then it
// asks the Source for a segment (refused at once if that would pass the
// limit); if refused and MaxSplitSize is set, it releases cached oversize
// segments of the stream that could make room, and asks again; if still
// refused, it waits for every pending event, releases every cached segment
// that is wholly free, counts an allocation retry, and asks a last time.
// Only then does it return an *OutOfMemoryError. An out-of-memory error
// leaves the allocator consistent: the next request that fits succeeds.
//
// # Figures
//
// Stats has PyTorch's figures (allocation, segment, active and
// inactive-split counts and bytes, requested bytes; current, peak,
// allocated and freed; per pool and in total; retries, OOMs, device allocs
// and frees). Snapshot lists segments and blocks, and Fragmentation sums
// them up in one figure. With Config.TraceEntries set, Caching keeps its
// latest events in a ring (Caching.Trace); package alloc/trace saves them
// and re-runs them under another policy.
//
// # Scopes
//
// Jobs sharing a device allocate in scopes of their own (NewScope,
// AllocIn): a scope's blocks come from segments that serve only it, so
// ScopeStats is a full Stats of the job's memory, and ScopeReport its
// report. A scope's limit caps what its segments reserve: past it, the
// allocator releases the scope's own free segments and asks again, never
// touching another scope's memory, then fails with an *OutOfMemoryError
// that names the scope. CloseScope frees what a finished (or failed) job
// still holds.
//
// # Errors
//
// Out-of-memory errors match ErrOutOfMemory with errors.Is and are
// *OutOfMemoryError with errors.As, carrying the request, the device's free
// and total memory, the bytes allocated and reserved, the limit and a hint.
// Freeing an unknown or already freed pointer returns ErrInvalidPointer,
// changes nothing and is counted. Sources report device faults as errors;
// the allocator passes them on wrapped.
//
// # Concurrency
//
// Caching, HostCache and every Source here are safe for concurrent use.
// Each allocator has one mutex; a cached allocation and free take it once
// each and allocate nothing on the Go heap.
//
// Example:
//
//	c, err := alloc.NewCaching(alloc.NewHost(0), alloc.Config{})
//	if err != nil { ... }
//	p, err := c.Alloc(4096, 0) // 4 KiB on the default stream
//	if err != nil { ... }
//	defer c.Free(p)
package alloc
