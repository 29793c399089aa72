package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gocurrent/gocurrent/alloc"
)

// Op is one step of an allocation trace to replay: an allocation of Size
// bytes on Stream under ID, or (Free true) the free of the block allocated
// under ID. IDs name live allocations and may be reused after their free.
type Op struct {
	Free   bool
	ID     int64
	Size   int64
	Stream alloc.Stream
}

// Parse reads the text trace format: one op per line, "a <id> <bytes>
// <stream>" or "f <id>"; blank lines and lines starting with '#' are skipped.
// It checks that every free names a live id and no live id is allocated
// again.
func Parse(r io.Reader) ([]Op, error) {
	var ops []Op
	live := make(map[int64]bool)
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		f := strings.Fields(text)
		var op Op
		var err error
		switch {
		case f[0] == "a" && len(f) == 4:
			var s uint64
			op.ID, err = strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				op.Size, err = strconv.ParseInt(f[2], 10, 64)
			}
			if err == nil {
				s, err = strconv.ParseUint(f[3], 10, 64)
				op.Stream = alloc.Stream(s)
			}
			if err == nil && op.Size <= 0 {
				err = fmt.Errorf("size %d is not positive", op.Size)
			}
			if err == nil && live[op.ID] {
				err = fmt.Errorf("id %d allocated while live", op.ID)
			}
			live[op.ID] = true
		case f[0] == "f" && len(f) == 2:
			op.Free = true
			op.ID, err = strconv.ParseInt(f[1], 10, 64)
			if err == nil && !live[op.ID] {
				err = fmt.Errorf("free of id %d, which is not live", op.ID)
			}
			delete(live, op.ID)
		default:
			err = fmt.Errorf("want \"a <id> <bytes> <stream>\" or \"f <id>\"")
		}
		if err != nil {
			return nil, fmt.Errorf("trace: line %d %q: %w", line, text, err)
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: reading: %w", err)
	}
	return ops, nil
}

// Write writes the alloc and free-requested entries of a recorded trace
// (alloc.Caching.Trace) in the format Parse reads, so an allocation pattern
// recorded in one run can be replayed under another policy. Frees of
// blocks allocated before the trace's first entry are skipped.
func Write(w io.Writer, entries []alloc.TraceEntry) error {
	bw := bufio.NewWriter(w)
	ids := make(map[alloc.Ptr]int64)
	var next int64
	for _, e := range entries {
		switch e.Action {
		case alloc.TraceAlloc:
			ids[e.Ptr] = next
			fmt.Fprintf(bw, "a %d %d %d\n", next, e.Requested, e.Stream)
			next++
		case alloc.TraceFreeRequested:
			if id, ok := ids[e.Ptr]; ok {
				fmt.Fprintf(bw, "f %d\n", id)
				delete(ids, e.Ptr)
			}
		}
	}
	return bw.Flush()
}

// ReplayResult sums up a replay.
type ReplayResult struct {
	Ops                   int
	PeakAllocatedBytes    int64
	PeakReservedBytes     int64
	PeakRequestedBytes    int64
	DeviceAllocs          int64
	AllocRetries          int64
	OOMs                  int64
	Fragmentation         float64 // of the cache at the point of peak reserved memory
	MaxFragmentation      float64 // the highest seen after any op
	FinalReservedBytes    int64
	FinalFragmentation    float64
	ReservedOverAllocated float64 // PeakReservedBytes / PeakAllocatedBytes: the cost of caching and rounding
}

// Replay runs ops against c and reports the peaks and fragmentation it saw.
// An out-of-memory error on an allocation is counted and the op skipped
// (its free is skipped too); any other error stops the replay. Blocks still
// live at the end are freed. c must not be used by anyone else meanwhile:
// the figures after each op are read as that op left them.
func Replay(c *alloc.Caching, ops []Op) (ReplayResult, error) {
	c.ResetPeak()
	before := c.Stats()
	var res ReplayResult
	live := make(map[int64]alloc.Ptr)
	defer func() {
		for _, p := range live {
			c.Free(p)
		}
	}()
	for i, op := range ops {
		if op.Free {
			p, ok := live[op.ID]
			if !ok {
				continue // its allocation failed
			}
			delete(live, op.ID)
			if err := c.Free(p); err != nil {
				return res, fmt.Errorf("trace: replay op %d: %w", i, err)
			}
		} else {
			p, err := c.Alloc(op.Size, op.Stream)
			if err != nil {
				if oom := (*alloc.OutOfMemoryError)(nil); errors.As(err, &oom) {
					continue
				}
				return res, fmt.Errorf("trace: replay op %d: %w", i, err)
			}
			live[op.ID] = p
		}
		res.Ops++
		reserved := c.Stats().ReservedBytes[alloc.AllPools].Current
		frag := c.Fragmentation()
		res.MaxFragmentation = max(res.MaxFragmentation, frag)
		if reserved > res.PeakReservedBytes {
			res.PeakReservedBytes, res.Fragmentation = reserved, frag
		}
	}
	after := c.Stats()
	res.PeakAllocatedBytes = after.AllocatedBytes[alloc.AllPools].Peak
	res.PeakRequestedBytes = after.RequestedBytes[alloc.AllPools].Peak
	res.DeviceAllocs = after.DeviceAllocs - before.DeviceAllocs
	res.AllocRetries = after.AllocRetries - before.AllocRetries
	res.OOMs = after.OOMs - before.OOMs
	res.FinalReservedBytes = after.ReservedBytes[alloc.AllPools].Current
	res.FinalFragmentation = c.Fragmentation()
	if res.PeakAllocatedBytes > 0 {
		res.ReservedOverAllocated = float64(res.PeakReservedBytes) / float64(res.PeakAllocatedBytes)
	}
	return res, nil
}
