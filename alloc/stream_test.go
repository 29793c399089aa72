package alloc_test

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

// TestStreamReuse checks that a freed block is reused at once on its own
// stream and never handed to another stream.
func TestStreamReuse(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	a := mustAlloc(t, c, 64*kib, 1)
	mustFree(t, c, a)
	if got := mustAlloc(t, c, 64*kib, 1); got != a {
		t.Errorf("same-stream request got %v, want the just-freed %v", got, a)
	}
	b := mustAlloc(t, c, 3*mib, 1)
	mustFree(t, c, b)
	got := mustAlloc(t, c, 3*mib, 2)
	if got == b {
		t.Errorf("stream 2 got stream 1's cached block %v", b)
	}
	if allocs, _, _ := sim.Counts(); allocs != 3 {
		t.Errorf("source allocations = %d, want 3 (small 1, large 1, large 2)", allocs)
	}
	for _, s := range c.Snapshot().Segments {
		for _, blk := range s.Blocks {
			if blk.Address == got && s.Stream != 2 {
				t.Errorf("stream 2's block lies in a segment of stream %d", s.Stream)
			}
		}
	}
	checkInvariants(t, c)
}

// TestRecordStream is PyTorch's test_record_stream on the simulated
// device: a block used on a side stream is not reused until that stream's
// event, recorded at Free, has completed.
func TestRecordStream(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	const side = alloc.Stream(5)
	p := mustAlloc(t, c, 40*kib, 0)
	if err := c.RecordStream(p, side); err != nil {
		t.Fatal(err)
	}
	if err := c.RecordStream(p, side); err != nil { // twice: still one use
		t.Fatal(err)
	}
	if err := c.RecordStream(p, 0); err != nil { // its own stream: ignored
		t.Fatal(err)
	}
	mustFree(t, c, p)
	if n := sim.Pending(side); n != 1 {
		t.Fatalf("events pending on the side stream = %d, want 1", n)
	}
	if n := sim.Pending(0); n != 0 {
		t.Errorf("events recorded on the allocation stream = %d, want 0", n)
	}
	st := c.Stats()
	if st.Active[alloc.AllPools].Current != 1 || st.Allocation[alloc.AllPools].Current != 0 {
		t.Errorf("pending block: active %d, allocation %d; want 1, 0", st.Active[alloc.AllPools].Current, st.Allocation[alloc.AllPools].Current)
	}
	checkInvariants(t, c)
	q := mustAlloc(t, c, 40*kib, 0)
	if q == p {
		t.Fatalf("allocation re-used too soon: got %v while the side stream still uses it", p)
	}
	mustFree(t, c, q)
	sim.Complete(side)
	if got := mustAlloc(t, c, 40*kib, 0); got != p {
		t.Errorf("after the side stream completed: got %v, want %v", got, p)
	}
	checkInvariants(t, c)
}

// TestEventQueuesPerStream checks that a busy stream does not hold up
// blocks whose own streams are done (PyTorch's per-stream event deques).
func TestEventQueuesPerStream(t *testing.T) {
	sim, c := newSim(t, gib, alloc.Config{})
	a := mustAlloc(t, c, 8*kib, 0)
	b := mustAlloc(t, c, 8*kib, 0)
	spacer := mustAlloc(t, c, 8*kib, 0) // keeps a and b from merging when freed
	if err := c.RecordStream(a, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.RecordStream(b, 2); err != nil {
		t.Fatal(err)
	}
	mustFree(t, c, a) // stream 1 stays busy
	mustFree(t, c, b)
	sim.Complete(2)
	if got := mustAlloc(t, c, 8*kib, 0); got != b {
		t.Errorf("got %v, want b %v: stream 2 is done even though stream 1 is not", got, b)
	}
	_ = spacer
	checkInvariants(t, c)
}

// TestPendingBlocksReclaimedOnOOM is PyTorch's
// test_caching_allocator_record_stream_oom: 100 rounds of a large buffer
// used on a side stream and dropped must never run out of memory, because
// the out-of-memory ladder waits for pending events.
func TestPendingBlocksReclaimedOnOOM(t *testing.T) {
	sim, c := newSim(t, 200*mib, alloc.Config{})
	for i := range 100 {
		p, err := c.Alloc(160*mib, 0)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := c.RecordStream(p, 1); err != nil {
			t.Fatal(err)
		}
		mustFree(t, c, p)
		checkInvariants(t, c)
	}
	st := c.Stats()
	if st.OOMs != 0 || st.AllocRetries == 0 || st.SyncAllStreams == 0 || sim.Waits() == 0 {
		t.Errorf("ooms %d, retries %d, syncs %d, waits %d; want 0 OOMs and the flush used", st.OOMs, st.AllocRetries, st.SyncAllStreams, sim.Waits())
	}
}

// failingEvents is a simulated device whose event recording fails.
type failingEvents struct{ *alloctest.Simulated }

func (f failingEvents) Record(alloc.Stream) (alloc.Event, error) {
	return nil, errors.New("event pool exhausted")
}

// TestRecordFailureQuarantines checks that a block whose event could not be
// recorded is never reused (nothing would tell when the stream is done).
func TestRecordFailureQuarantines(t *testing.T) {
	c, err := alloc.NewCaching(failingEvents{alloctest.NewSimulated(gib)}, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustAlloc(t, c, 4*kib, 0)
	spacer := mustAlloc(t, c, 4*kib, 0)
	if err := c.RecordStream(p, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Free(p); err == nil {
		t.Fatal("Free succeeded although the event could not be recorded")
	}
	for range 3 {
		if got := mustAlloc(t, c, 4*kib, 0); got == p {
			t.Fatalf("the quarantined block %v was handed out again", p)
		}
	}
	_ = spacer
	checkInvariants(t, c)
}

func TestRecordStreamNeedsEvents(t *testing.T) {
	c, err := alloc.NewCaching(alloc.NewHost(0), alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustAlloc(t, c, 100, 0)
	if err := c.RecordStream(p, 1); !errors.Is(err, alloc.ErrNoEvents) {
		t.Errorf("RecordStream on the host source = %v, want ErrNoEvents", err)
	}
	if err := c.RecordStream(p, 0); err != nil {
		t.Errorf("RecordStream on the block's own stream = %v, want nil", err)
	}
	mustFree(t, c, p)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
