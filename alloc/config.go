package alloc

import (
	"fmt"
	"math/bits"
)

// Sizes of PyTorch's caching allocator, kept exactly so that memory figures
// and out-of-memory behaviour carry over (c10/cuda/CUDACachingAllocator.cpp).
const (
	MinBlockSize  = 512      // every block size is a multiple of this
	SmallSize     = 1 << 20  // blocks up to this size come from the small pool
	SmallBuffer   = 2 << 20  // the segment size of the small pool
	MinLargeAlloc = 10 << 20 // large requests below this get a LargeBuffer segment
	LargeBuffer   = 20 << 20 // the segment size for large requests below MinLargeAlloc
	RoundLarge    = 2 << 20  // larger segments are rounded up to a multiple of this

	// MaxRequest is the largest request served (1 EiB, PyTorch's guard);
	// larger ones are refused at once with an out-of-memory error.
	MaxRequest = 1 << 60

	// roundupIntervals is the number of power-of-two intervals, from 1 MiB
	// up, that RoundupPower2Divisions configures.
	roundupIntervals = 16
	roundupStartLog2 = 20
)

// Config sets the caching allocator's policy. The zero value is PyTorch's
// default: no split limit, no rounding to power-of-two divisions, no memory
// limit, no garbage collection, no trace. ParseConfig reads the same
// settings from a PYTORCH_CUDA_ALLOC_CONF-style string.
type Config struct {
	// MaxSplitSize, in bytes: blocks of at least this size are never split,
	// and a request below it is never served from one, so large cached
	// blocks are not chopped into slivers. 0 means unlimited (every block
	// may be split). When set it must be at least 20 MiB. Beware the
	// minimum itself: at 20 MiB every whole 20 MiB segment counts as
	// oversize, so once wholly free it can serve no request under 20 MiB;
	// replaying the char-RNN trace in testdata, peak reserved memory goes
	// from 70 MiB (unlimited, or 64 MiB) to 240 MiB. Key: max_split_size_mb.
	MaxSplitSize int64

	// MaxNonSplitRounding, in bytes: a request of at least MaxSplitSize is
	// served from an unsplittable cached block only if that block is less
	// than this much larger. 0 means 20 MiB. Key: max_non_split_rounding_mb.
	MaxNonSplitRounding int64

	// RoundupPower2Divisions[i] divides the sizes in [2^(20+i), 2^(21+i))
	// (the first interval also takes everything smaller, the last everything
	// larger) into that many steps, and requests are rounded up to the next
	// step, so that slightly different sizes share cached blocks. Each value
	// is 0 (off: round to 512 bytes) or a power of two.
	// Key: roundup_power2_divisions.
	RoundupPower2Divisions [roundupIntervals]int

	// GarbageCollectionThreshold, in (0, 1), or 0 for off: when the memory
	// held exceeds this fraction of the limit, the allocator releases the
	// least recently reused whole cached segments before asking the Source
	// for more. Like PyTorch, it acts only together with a memory limit
	// (MemoryFraction or MemoryLimit); alone it is an error rather than a
	// silent no-op. Key: garbage_collection_threshold.
	GarbageCollectionThreshold float64

	// MemoryFraction, in (0, 1], or 0 for none: the allocator holds at most
	// this fraction of the device's total memory. Key:
	// per_process_memory_fraction.
	MemoryFraction float64

	// MemoryLimit, in bytes, or 0 for none: the allocator holds at most this
	// many bytes. At most one of MemoryFraction and MemoryLimit is set.
	MemoryLimit int64

	// TraceEntries is how many of the most recent trace events are kept
	// (alloc, free, segment alloc and free, OOM); 0 records none.
	TraceEntries int

	// Pinned host memory settings, for the CUDA device's pinned-host source
	// (the CPU device's staging memory is ordinary host memory and does not
	// read them). PinnedUseHostRegister: allocate with malloc and register
	// the pages rather than cuMemHostAlloc. PinnedNumRegisterThreads: 0
	// (meaning 1) or a power of two up to 128. Keys:
	// pinned_use_cuda_host_register, pinned_num_register_threads.
	PinnedUseHostRegister    bool
	PinnedNumRegisterThreads int
}

const maxPinnedRegisterThreads = 128 // PyTorch's upper bound for pinned_num_register_threads

// Validate reports the first setting that is out of range.
func (c *Config) Validate() error {
	if c.MaxSplitSize != 0 && c.MaxSplitSize < LargeBuffer {
		return fmt.Errorf("alloc: MaxSplitSize %d bytes is below the minimum of %d (20 MiB); use 0 for unlimited", c.MaxSplitSize, LargeBuffer)
	}
	if c.MaxNonSplitRounding < 0 {
		return fmt.Errorf("alloc: MaxNonSplitRounding %d bytes is negative", c.MaxNonSplitRounding)
	}
	for i, d := range c.RoundupPower2Divisions {
		if d < 0 || (d != 0 && d&(d-1) != 0) {
			return fmt.Errorf("alloc: RoundupPower2Divisions[%d] = %d is not 0 or a power of two", i, d)
		}
	}
	if g := c.GarbageCollectionThreshold; g != 0 && !(g > 0 && g < 1) {
		return fmt.Errorf("alloc: GarbageCollectionThreshold %v is outside (0, 1)", g)
	}
	if f := c.MemoryFraction; f != 0 && !(f > 0 && f <= 1) {
		return fmt.Errorf("alloc: MemoryFraction %v is outside (0, 1]", f)
	}
	if c.MemoryLimit < 0 {
		return fmt.Errorf("alloc: MemoryLimit %d bytes is negative", c.MemoryLimit)
	}
	if c.MemoryFraction != 0 && c.MemoryLimit != 0 {
		return fmt.Errorf("alloc: both MemoryFraction (%v) and MemoryLimit (%d bytes) are set; set one", c.MemoryFraction, c.MemoryLimit)
	}
	if c.GarbageCollectionThreshold != 0 && c.MemoryFraction == 0 && c.MemoryLimit == 0 {
		return fmt.Errorf("alloc: GarbageCollectionThreshold %v needs a memory limit (MemoryFraction or MemoryLimit) to be a fraction of", c.GarbageCollectionThreshold)
	}
	if c.TraceEntries < 0 {
		return fmt.Errorf("alloc: TraceEntries %d is negative", c.TraceEntries)
	}
	if n := c.PinnedNumRegisterThreads; n < 0 || n > maxPinnedRegisterThreads || (n != 0 && n&(n-1) != 0) {
		return fmt.Errorf("alloc: PinnedNumRegisterThreads %d is not a power of two up to %d", n, maxPinnedRegisterThreads)
	}
	return nil
}

func (c *Config) maxSplit() int64 {
	if c.MaxSplitSize == 0 {
		return MaxRequest + 1 // unlimited
	}
	return c.MaxSplitSize
}

func (c *Config) maxNonSplitRounding() int64 {
	if c.MaxNonSplitRounding == 0 {
		return LargeBuffer
	}
	return c.MaxNonSplitRounding
}

// roundupDivisions returns the number of divisions configured for size.
func (c *Config) roundupDivisions(size int64) int {
	i := bits.Len64(uint64(size)) - 1 - roundupStartLog2
	i = max(0, min(i, roundupIntervals-1))
	return c.RoundupPower2Divisions[i]
}

// RoundSize returns the block size a request of size bytes is served with:
// at least 512 bytes, a multiple of 512, or the next of RoundupPower2Divisions
// steps when they are configured for size's interval.
func (c *Config) RoundSize(size int64) int64 {
	if size < MinBlockSize {
		return MinBlockSize
	}
	if d := c.roundupDivisions(size); d > 0 && size > MinBlockSize*int64(d) {
		return RoundupPower2NextDivision(size, d)
	}
	return roundUp(size, MinBlockSize)
}

// RoundupPower2NextDivision rounds size up to the next of divisions equal
// steps between the power of two at or below size and the one above it.
// Powers of two are returned unchanged. With 4 divisions, 1200 becomes 1280
// (steps of 256 between 1024 and 2048).
func RoundupPower2NextDivision(size int64, divisions int) int64 {
	if size <= 4 || size&(size-1) == 0 {
		return size
	}
	floor := int64(1) << (bits.Len64(uint64(size)) - 1)
	step := floor >> (bits.Len(uint(divisions)) - 1)
	if step == 0 {
		return 2 * floor
	}
	return roundUp(size, step)
}

// PoolOf returns the pool a block of the given rounded size belongs to.
func PoolOf(size int64) Pool {
	if size <= SmallSize {
		return SmallPool
	}
	return LargePool
}

// SegmentSize returns the size of the segment the allocator asks the Source
// for when no cached block can serve a block of the given rounded size.
func SegmentSize(size int64) int64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return LargeBuffer
	default:
		return roundUp(size, RoundLarge)
	}
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }
