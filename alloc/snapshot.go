package alloc

// Snapshot is the allocator's memory at one moment: every segment held from
// the Source with its blocks, ordered by address (PyTorch's
// torch.cuda.memory_snapshot()).
type Snapshot struct {
	Segments []SegmentInfo
}

// SegmentInfo describes one segment.
type SegmentInfo struct {
	Address       Ptr
	TotalSize     int64 // bytes held from the Source
	RequestedSize int64 // bytes callers asked for in its allocated blocks
	AllocatedSize int64 // bytes in its allocated blocks
	ActiveSize    int64 // bytes in blocks allocated or still in use by a stream
	Stream        Stream
	Pool          Pool  // SmallPool or LargePool
	Scope         Scope // the allocation scope it serves (0: the device's own)
	Blocks        []BlockInfo
}

// BlockState is what a block is doing.
type BlockState int

const (
	BlockInactive          BlockState = iota // cached, free for reuse
	BlockActiveAllocated                     // handed to a caller
	BlockActivePendingFree                   // freed, but a recorded stream may still use it
)

func (s BlockState) String() string {
	switch s {
	case BlockInactive:
		return "inactive"
	case BlockActiveAllocated:
		return "active_allocated"
	case BlockActivePendingFree:
		return "active_pending_free"
	}
	return "state?"
}

// BlockInfo describes one block of a segment.
type BlockInfo struct {
	Address       Ptr
	Size          int64
	RequestedSize int64 // 0 unless allocated
	State         BlockState
	Category      Category // what an allocated block holds
	Scope         Scope    // the scope an allocated block is in (its segment's)
}

// Fragmentation is 1 - largest cached block / cached bytes over the whole
// snapshot: 0 when the free cached memory is one block (or there is none),
// close to 1 when it is spread over many small blocks that a large request
// cannot use.
func (s *Snapshot) Fragmentation() float64 {
	var largest, free int64
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if b.State == BlockInactive {
				largest = max(largest, b.Size)
				free += b.Size
			}
		}
	}
	return fragmentation(largest, free)
}
