package alloc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
)

// TestOOMError checks the error's figures and message, and that the
// allocator keeps working after it (PyTorch's test_out_of_memory).
func TestOOMError(t *testing.T) {
	_, c := newSim(t, 64*mib, alloc.Config{})
	p, err := c.AllocCategory(40*mib, 0, alloc.Parameters)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.AllocCategory(40*mib, 2, alloc.Activations)
	if !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("second 40 MiB: %v, want ErrOutOfMemory", err)
	}
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("error %T is not *OutOfMemoryError", err)
	}
	want := alloc.OutOfMemoryError{
		Device: "simulated device", Requested: 40 * mib, AllocSize: 40 * mib, Stream: 2,
		DeviceFree: 24 * mib, DeviceTotal: 64 * mib, Allocated: 40 * mib, Reserved: 40 * mib,
		Category: alloc.Activations,
	}
	want.Categories[alloc.Parameters] = 40 * mib
	got := *oom
	got.Hint, got.SourceErr = "", nil
	if got != want {
		t.Errorf("error figures %+v, want %+v", got, want)
	}
	if oom.SourceErr == nil || !errors.Is(oom.SourceErr, alloc.ErrOutOfMemory) {
		t.Errorf("SourceErr = %v, want the source's refusal", oom.SourceErr)
	}
	msg := err.Error()
	for _, s := range []string{"tried to allocate 40.00 MiB", "total capacity of 64.00 MiB", "24.00 MiB is free",
		"40.00 MiB is allocated by gocurrent", "0 bytes is reserved by gocurrent but unallocated", "reduce the batch size",
		"the request was for activations", "allocated by category: parameters 40.00 MiB"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q does not contain %q", msg, s)
		}
	}
	st := c.Stats()
	if st.OOMs != 1 || st.AllocRetries != 1 {
		t.Errorf("ooms %d, retries %d; want 1, 1", st.OOMs, st.AllocRetries)
	}
	checkInvariants(t, c)
	// The next allocation that fits succeeds.
	q := mustAlloc(t, c, 20*mib, 0)
	mustFree(t, c, p)
	mustFree(t, c, q)
	checkInvariants(t, c)
}

// TestOOMRetryLadder is PyTorch's test_out_of_memory_retry: a request that
// fits only once the cache is flushed succeeds, and counts one retry.
func TestOOMRetryLadder(t *testing.T) {
	sim, c := newSim(t, 100*mib, alloc.Config{})
	p := mustAlloc(t, c, 60*mib, 0)
	mustFree(t, c, p) // 60 MiB cached, 40 MiB free on the device
	q := mustAlloc(t, c, 70*mib, 0)
	st := c.Stats()
	if st.AllocRetries != 1 || st.OOMs != 0 || st.DeviceFrees != 1 {
		t.Errorf("retries %d, ooms %d, device frees %d; want 1, 0, 1", st.AllocRetries, st.OOMs, st.DeviceFrees)
	}
	mustFree(t, c, q)
	// An injected refusal is recovered from the same way.
	sim.FailNext(nil)
	mustAlloc(t, c, 90*mib, 0)
	if got := c.Stats().AllocRetries; got != 2 {
		t.Errorf("retries after an injected refusal = %d, want 2", got)
	}
	checkInvariants(t, c)
}

func TestOOMHints(t *testing.T) {
	t.Run("limit", func(t *testing.T) {
		_, c := newSim(t, gib, alloc.Config{MemoryLimit: 50 * mib})
		mustAlloc(t, c, 30*mib, 0)
		_, err := c.Alloc(30*mib, 0)
		var oom *alloc.OutOfMemoryError
		if !errors.As(err, &oom) {
			t.Fatalf("got %v, want *OutOfMemoryError", err)
		}
		if oom.Limit != 50*mib || !strings.Contains(oom.Hint, "limit") || !strings.Contains(err.Error(), "50.00 MiB allowed") {
			t.Errorf("limit %d, message %q; want the limit named", oom.Limit, err)
		}
		if oom.SourceErr != nil {
			t.Errorf("SourceErr = %v, want nil: the limit refused, not the device", oom.SourceErr)
		}
	})
	t.Run("fraction", func(t *testing.T) {
		_, c := newSim(t, 100*mib, alloc.Config{MemoryFraction: 0.5})
		if got := c.Limit(); got != 50*mib {
			t.Errorf("limit from fraction 0.5 of 100 MiB = %d, want %d", got, 50*mib)
		}
	})
	t.Run("fragmentation", func(t *testing.T) {
		_, c := newSim(t, 64*mib, alloc.Config{})
		// Three 20 MiB segments, each 9 MiB | 9 MiB | 2 MiB free; freeing
		// the first 9 MiB block of each leaves 33 MiB cached in pieces of at
		// most 9 MiB, and the device 4 MiB free.
		var first []alloc.Ptr
		for range 3 {
			first = append(first, mustAlloc(t, c, 9*mib, 0))
			mustAlloc(t, c, 9*mib, 0)
		}
		for _, p := range first {
			mustFree(t, c, p)
		}
		_, err := c.Alloc(12*mib, 0)
		var oom *alloc.OutOfMemoryError
		if !errors.As(err, &oom) {
			t.Fatalf("got %v, want *OutOfMemoryError", err)
		}
		if oom.LargestCached != 9*mib || oom.Reserved-oom.Allocated != 33*mib {
			t.Errorf("largest cached %d, unallocated %d; want 9 MiB, 33 MiB", oom.LargestCached, oom.Reserved-oom.Allocated)
		}
		if want := 1 - 9.0/33; oom.Fragmentation != want || !strings.Contains(oom.Hint, "fragmented") {
			t.Errorf("fragmentation %v, hint %q; want %v and a fragmentation hint", oom.Fragmentation, oom.Hint, want)
		}
		checkInvariants(t, c)
	})
}

// TestHugeRequests: more than 1 EiB is refused at once (PyTorch's guard);
// 1 PiB goes through the ladder and fails with figures (RMM's
// test_various_allocations).
func TestHugeRequests(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	_, err := c.Alloc(alloc.MaxRequest+1, 0)
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) || !strings.Contains(oom.Hint, "1 EiB") {
		t.Errorf("request over 1 EiB: %v, want an out-of-memory error naming the 1 EiB limit", err)
	}
	if allocs, _, _ := sim.Counts(); allocs != 0 {
		t.Errorf("the source was asked %d times for a request over 1 EiB, want 0", allocs)
	}
	_, err = c.Alloc(1<<50, 0)
	if !errors.As(err, &oom) || oom.Requested != 1<<50 || oom.AllocSize != 1<<50 {
		t.Errorf("1 PiB request: %v, want an out-of-memory error for 1 PiB", err)
	}
	if got := c.Stats().OOMs; got != 2 {
		t.Errorf("ooms = %d, want 2", got)
	}
	mustAlloc(t, c, mib, 0)
	checkInvariants(t, c)
}

// TestSourceFaultPassesThrough checks that a device error that is not an
// out-of-memory refusal reaches the caller unchanged and is not an OOM.
func TestSourceFaultPassesThrough(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	fault := errors.New("illegal address")
	sim.FailNext(fault)
	_, err := c.Alloc(mib, 0)
	if !errors.Is(err, fault) || errors.Is(err, alloc.ErrOutOfMemory) {
		t.Errorf("got %v, want the device fault, not an out-of-memory error", err)
	}
	if st := c.Stats(); st.OOMs != 0 || st.AllocRetries != 0 {
		t.Errorf("ooms %d, retries %d after a fault; want 0, 0", st.OOMs, st.AllocRetries)
	}
	mustAlloc(t, c, mib, 0)
	checkInvariants(t, c)
}
