package alloc

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrOutOfMemory is matched (errors.Is) by every out-of-memory error:
	// the allocators' *OutOfMemoryError and a Source's own refusal.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrInvalidPointer is returned for a pointer the allocator did not hand
	// out or that was already freed. Nothing is changed; the count is kept
	// in Stats.InvalidFrees.
	ErrInvalidPointer = errors.New("alloc: pointer not allocated by this allocator or already freed")
	// ErrNoEvents is returned by RecordStream when the Source cannot record
	// events (it does not implement Events).
	ErrNoEvents = errors.New("alloc: source does not record stream events")
	// ErrNotHostAccessible is returned when host access is asked of memory
	// the host cannot touch (a Source without the HostAccessible capability).
	ErrNotHostAccessible = errors.New("alloc: source memory is not host accessible")
	// ErrClosed is matched by the error of every call on something closed:
	// an allocator here, and, through the same value re-exported as
	// device.ErrClosed and loader.ErrClosed, a device, a stream or a
	// loader. One sentinel, so a caller holding a loader over a device
	// over an allocator matches a use after Close with one errors.Is.
	ErrClosed = errors.New("closed")
	// errClosed is what a closed allocator returns.
	errClosed = fmt.Errorf("alloc: the allocator is %w", ErrClosed)
)

// OutOfMemoryError is the error of an allocation that could not be served
// after the whole recovery ladder ran (see the package documentation). It
// carries the figures needed to tell a real shortage from fragmentation or
// a limit. errors.Is(err, ErrOutOfMemory) holds for it.
type OutOfMemoryError struct {
	Device    string // the device the allocator serves, e.g. "sim", "host"
	Requested int64  // bytes the caller asked for
	AllocSize int64  // bytes the allocator tried to get: the segment size, or the block size if none was needed
	Stream    Stream // the stream the request was made on
	// Category is what the request was for; Categories the bytes each
	// category held when it failed (the scope's, for a request in a
	// scope).
	Category   Category
	Categories [NumCategories]int64

	DeviceFree  int64 // the device's free memory at the time, from the Source
	DeviceTotal int64 // the device's total memory, from the Source

	Allocated     int64 // bytes in blocks handed to callers (rounded sizes)
	Reserved      int64 // bytes in segments this allocator holds from the Source
	LargestCached int64 // the largest free cached block, in bytes
	Limit         int64 // the memory limit in bytes, 0 if none is set
	Fragmentation float64
	Hint          string // what to try, chosen from the figures
	SourceErr     error  // the Source's own refusal, if it gave one

	// Scope names the allocation scope the request was made in (a job
	// sharing the device), "" for the device's own. ScopeLimit is its
	// limit (0: none), ScopeAllocated and ScopeReserved what it held;
	// ScopeRefused is set when its limit, not the device, refused.
	Scope                         string
	ScopeLimit                    int64
	ScopeAllocated, ScopeReserved int64
	ScopeRefused                  bool
}

func (e *OutOfMemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "alloc: out of memory on %s: tried to allocate %s", e.Device, FormatSize(e.AllocSize))
	if e.AllocSize != e.Requested {
		fmt.Fprintf(&b, " (request of %s)", FormatSize(e.Requested))
	}
	fmt.Fprintf(&b, " on stream %d; the device has a total capacity of %s of which %s is free",
		e.Stream, FormatSize(e.DeviceTotal), FormatSize(e.DeviceFree))
	if e.Limit > 0 {
		fmt.Fprintf(&b, "; %s allowed by the memory limit", FormatSize(e.Limit))
	}
	if e.Scope != "" {
		fmt.Fprintf(&b, "; %s holds %s allocated and %s reserved", e.Scope, FormatSize(e.ScopeAllocated), FormatSize(e.ScopeReserved))
		if e.ScopeLimit > 0 {
			fmt.Fprintf(&b, " of its limit of %s", FormatSize(e.ScopeLimit))
		}
	}
	fmt.Fprintf(&b, "; %s is allocated by gocurrent and %s is reserved by gocurrent but unallocated (largest cached block %s, fragmentation %.2f)",
		FormatSize(e.Allocated), FormatSize(e.Reserved-e.Allocated), FormatSize(e.LargestCached), e.Fragmentation)
	if e.Category != Other {
		fmt.Fprintf(&b, "; the request was for %s", e.Category)
	}
	if held := e.held(); held != "" && e.Scope != "" {
		fmt.Fprintf(&b, "; %s's allocations by category: %s", e.Scope, held)
	} else if held != "" {
		b.WriteString("; allocated by category: ")
		b.WriteString(held)
	}
	if e.Hint != "" {
		b.WriteString(". ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// held lists the categories that held memory, largest first.
func (e *OutOfMemoryError) held() string { return FormatCategories(e.Categories) }

// Is reports whether target is ErrOutOfMemory.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// Unwrap returns the Source's refusal, if any.
func (e *OutOfMemoryError) Unwrap() error { return e.SourceErr }

// hint picks the advice that fits the figures: a limit that binds, cached
// memory lost to fragmentation, or a plain shortage.
func (e *OutOfMemoryError) hint() string {
	unallocated := e.Reserved - e.Allocated
	switch {
	case e.ScopeRefused:
		return fmt.Sprintf("The limit of %s is what binds: raise its limit, or need less memory (a smaller batch, gradient accumulation, recomputation through time).", e.Scope)
	case e.Limit > 0 && e.Reserved+e.AllocSize > e.Limit && e.DeviceFree >= e.AllocSize:
		return "The memory limit is what binds: raise Config.MemoryLimit or Config.MemoryFraction (per_process_memory_fraction), or need less memory."
	case unallocated >= e.AllocSize:
		return "Reserved but unallocated memory is at least the request, so the cache is fragmented: keep allocation sizes steady (pad variable sequence lengths, set roundup_power2_divisions), or set max_split_size_mb so large cached blocks are not split."
	default:
		return "Need less memory: reduce the batch size or the sequence length, accumulate gradients over smaller micro-batches, detach hidden state between windows, and use no-grad mode for evaluation."
	}
}

// FormatSize prints a byte count the way PyTorch's out-of-memory message
// does: bytes up to 1 KiB, then KiB, MiB or GiB with two decimals.
func FormatSize(n int64) string {
	const kib, mib, gib = 1 << 10, 1 << 20, 1 << 30
	switch {
	case n <= kib:
		return fmt.Sprintf("%d bytes", n)
	case n <= mib:
		return fmt.Sprintf("%.2f KiB", float64(n)/kib)
	case n <= gib:
		return fmt.Sprintf("%.2f MiB", float64(n)/mib)
	default:
		return fmt.Sprintf("%.2f GiB", float64(n)/gib)
	}
}
