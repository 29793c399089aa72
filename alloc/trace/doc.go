// Package trace holds allocation traces as files: it writes what an
// alloc.Caching recorded, parses the text format, and replays a trace
// against a Caching to measure an allocation policy.
//
// Recording stays in the allocator: with Config.TraceEntries set, a
// Caching keeps its latest events in a ring, and Caching.Trace returns them
// as alloc.TraceEntry values. This package turns them into a file (Write),
// reads a file back as a sequence of Ops (Parse), and re-runs those Ops on
// another Caching, over any Source, under another Config (Replay), which
// reports peak allocated and reserved memory, device allocations, retries,
// out-of-memory errors and fragmentation.
//
// # Format
//
// A trace is text, one op per line:
//
//	# comment lines start with '#'; blank lines are skipped
//	a <id> <bytes> <stream>   an allocation of <bytes> (> 0) on <stream>, named <id>
//	f <id>                    the free of the live allocation named <id>
//
// An id names one live allocation and may be used again after its free.
// Write names allocations 0, 1, 2, ... in order and writes the requested
// size, not the rounded one, so a replay rounds under its own Config. The
// same format comes from PyTorch: alloc/testdata/record_trace.py records a
// char-RNN workload's allocations with torch.profiler
// (alloc/testdata/charrnn_lstm.trace), which alloc's tests replay under
// several policies.
//
// # Errors
//
// Parse reports the first malformed line with its number, a free of an id
// that is not live, and an allocation under an id that is still live.
// Replay counts an out-of-memory error as an outcome (the op and its free
// are skipped) and stops at any other error.
//
// # Concurrency
//
// Replay drives one Caching from one goroutine, which nothing else may use
// meanwhile. Parse and Write hold no state between calls.
//
// Example:
//
//	f, err := os.Open("alloc/testdata/charrnn_lstm.trace")
//	if err != nil { ... }
//	ops, err := trace.Parse(f)
//	if err != nil { ... }
//	c, err := alloc.NewCaching(alloctest.NewSimulated(4<<30), alloc.Config{MaxSplitSize: 64 << 20})
//	if err != nil { ... }
//	res, err := trace.Replay(c, ops)
//	fmt.Println(res.PeakReservedBytes, res.Fragmentation)
package trace
