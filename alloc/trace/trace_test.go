package trace_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
	"github.com/gocurrent/gocurrent/alloc/trace"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// TestRoundTrip records a workload with the allocator's trace, writes it
// in the text format, reads it back and checks that it describes the same
// allocations and frees.
func TestRoundTrip(t *testing.T) {
	_, c := newCaching(t, gib, alloc.Config{TraceEntries: 100})
	a := mustAlloc(t, c, 1000, 0)
	b := mustAlloc(t, c, 3*mib, 1)
	mustFree(t, c, a)
	d := mustAlloc(t, c, 1000, 0) // reuses a's address: a new id
	mustFree(t, c, b)
	mustFree(t, c, d)
	var buf bytes.Buffer
	if err := trace.Write(&buf, c.Trace()); err != nil {
		t.Fatal(err)
	}
	ops, err := trace.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []trace.Op{
		{ID: 0, Size: 1000}, {ID: 1, Size: 3 * mib, Stream: 1}, {Free: true, ID: 0},
		{ID: 2, Size: 1000}, {Free: true, ID: 1}, {Free: true, ID: 2},
	}
	if !slices.Equal(ops, want) {
		t.Errorf("round trip gave %+v, want %+v", ops, want)
	}
}

// TestWriteSkipsEarlierFrees writes a trace whose ring lost the
// allocation of a block it saw freed: the free is left out, since its id
// was never written.
func TestWriteSkipsEarlierFrees(t *testing.T) {
	entries := []alloc.TraceEntry{
		{Action: alloc.TraceFreeRequested, Ptr: 0x1000, Size: 512, Requested: 100},
		{Action: alloc.TraceFreeCompleted, Ptr: 0x1000, Size: 512, Requested: 100},
		{Action: alloc.TraceSegmentAlloc, Ptr: 0x2000, Size: 2 * mib, Requested: 2 * mib, Stream: 3},
		{Action: alloc.TraceAlloc, Ptr: 0x2000, Size: 1024, Requested: 1000, Stream: 3},
		{Action: alloc.TraceOOM, Size: 4 * gib, Requested: 4 * gib},
		{Action: alloc.TraceFreeRequested, Ptr: 0x2000, Size: 1024, Requested: 1000, Stream: 3},
	}
	var buf bytes.Buffer
	if err := trace.Write(&buf, entries); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), "a 0 1000 3\nf 0\n"; got != want {
		t.Errorf("Write gave %q, want %q", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"free of unknown id", "a 1 10 0\nf 2\n", "not live"},
		{"double alloc", "a 1 10 0\na 1 10 0\n", "allocated while live"},
		{"zero size", "a 1 0 0\n", "not positive"},
		{"bad verb", "x 1\n", "want"},
		{"missing field", "a 1 10\n", "want"},
		{"not a number", "a one 10 0\n", "line 3"}, // after the two lines of header the test adds
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := trace.Parse(strings.NewReader("# header\n\n" + tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tt.text, err, tt.want)
			}
		})
	}
}

// TestReplay replays a hand-made trace whose figures can be worked out:
// two 1000-byte blocks share one 2 MiB small-pool segment (1,024 bytes
// each after rounding), a 3 MiB block takes a 20 MiB large-pool segment,
// an 8 GiB request cannot be served on the 1 GiB device and is skipped
// with its free, and id 0 is reused after its free and left live at the
// end.
func TestReplay(t *testing.T) {
	const text = `# hand-made
a 0 1000 0
a 1 1000 0
a 2 3145728 0
a 3 8589934592 0
f 3
f 0
a 0 1000 0
f 1
f 2
`
	ops, err := trace.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	sim, c := newCaching(t, gib, alloc.Config{})
	res, err := trace.Replay(c, ops)
	if err != nil {
		t.Fatal(err)
	}
	want := trace.ReplayResult{
		Ops:                7, // the failed allocation and its free are skipped
		PeakAllocatedBytes: 2*1024 + 3*mib,
		PeakReservedBytes:  2*mib + 20*mib,
		PeakRequestedBytes: 2*1000 + 3*mib,
		DeviceAllocs:       2,
		AllocRetries:       1, // the 8 GiB request climbs the whole ladder
		OOMs:               1,
		FinalReservedBytes: 2*mib + 20*mib, // cached, not released
	}
	// Fragmentation, 1 - largest cached block / cached bytes: at the peak
	// of reserved memory (after op 2) the cache holds 2 MiB - 2 KiB in the
	// small segment and 17 MiB in the large one. The most is after "f 0"
	// and after "f 1": 17 MiB of 19 MiB - 1 KiB (1 KiB of the small
	// segment is allocated). At the end, id 0's second block (1 KiB) is
	// still live, and the large segment is whole again; Replay frees id 0
	// only after taking its final figures.
	want.Fragmentation = 1 - float64(17*mib)/float64(2*mib-2*kib+17*mib)
	want.MaxFragmentation = 1 - float64(17*mib)/float64(19*mib-kib)
	want.FinalFragmentation = 1 - float64(20*mib)/float64(22*mib-kib)
	want.ReservedOverAllocated = float64(want.PeakReservedBytes) / float64(want.PeakAllocatedBytes)
	if res != want {
		t.Errorf("Replay:\ngot  %+v\nwant %+v", res, want)
	}
	if _, _, live := sim.Counts(); live != 2 {
		t.Errorf("device holds %d segments after the replay, want the 2 cached", live)
	}
	if n := c.Stats().Allocation[alloc.AllPools].Current; n != 0 {
		t.Errorf("%d blocks live after the replay, want 0", n)
	}
}

// TestReplayStopsOnFault checks that an error other than out of memory
// ends the replay and names the op.
func TestReplayStopsOnFault(t *testing.T) {
	sim, c := newCaching(t, gib, alloc.Config{})
	boom := errors.New("device fault")
	sim.FailNext(boom)
	_, err := trace.Replay(c, []trace.Op{{ID: 0, Size: 1000}})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "op 0") {
		t.Errorf("Replay = %v, want the device fault at op 0", err)
	}
}

// FuzzParse checks that Parse never panics, that what it accepts is a
// valid sequence (every free names a live id, no live id is allocated
// again, sizes are positive), and that formatting the ops back gives a
// text that parses to the same ops.
func FuzzParse(f *testing.F) {
	f.Add("a 0 1000 0\nf 0\n")
	f.Add("# header\n\na 1 10 2\na 2 20 0\nf 1\na 1 5 0\nf 2\nf 1\n")
	f.Add("a 1 10\n")
	f.Add("f 1\n")
	f.Add("a -1 18446744073709551615 18446744073709551615\n")
	f.Fuzz(func(t *testing.T, text string) {
		ops, err := trace.Parse(strings.NewReader(text))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "trace: ") {
				t.Errorf("Parse error %q, want the prefix \"trace: \"", err)
			}
			return
		}
		live := make(map[int64]bool)
		var b strings.Builder
		for i, op := range ops {
			if op.Free {
				if !live[op.ID] {
					t.Fatalf("op %d frees id %d, which is not live", i, op.ID)
				}
				delete(live, op.ID)
				fmt.Fprintf(&b, "f %d\n", op.ID)
				continue
			}
			if live[op.ID] || op.Size <= 0 {
				t.Fatalf("op %d allocates %d bytes under id %d (live %v)", i, op.Size, op.ID, live[op.ID])
			}
			live[op.ID] = true
			fmt.Fprintf(&b, "a %d %d %d\n", op.ID, op.Size, op.Stream)
		}
		back, err := trace.Parse(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("Parse of the formatted ops %q: %v", b.String(), err)
		}
		if !slices.Equal(back, ops) {
			t.Fatalf("formatted and parsed again: got %+v, want %+v", back, ops)
		}
	})
}

// The simulated device and the checked calls the replay tests use.
var (
	newCaching = alloctest.NewCaching
	mustAlloc  = alloctest.MustAlloc
	mustFree   = alloctest.MustFree
)
