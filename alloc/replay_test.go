package alloc

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

// The char-RNN trace is a real allocation trace: PyTorch 1.13 (Debian's
// python3-torch, CPU) training Embedding(65,64) -> LSTM(64,256,2) ->
// Linear(256,65), batch 32, six windows of varying length, recorded with
// the profiler by testdata/record_trace.py. Its header gives the figures
// the test checks.
const (
	charRNNTrace         = "testdata/charrnn_lstm.trace"
	charRNNTraceOps      = 35914    // "Totals: 35914 ops"
	charRNNTracePeakLive = 63738424 // "peak live 63738424 bytes"
)

func loadTrace(t testing.TB, path string) []Op {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops, err := ParseTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// TestReplayCharRNN replays the recorded trace under several policies and
// reports peak reserved memory and fragmentation for each.
func TestReplayCharRNN(t *testing.T) {
	ops := loadTrace(t, charRNNTrace)
	if len(ops) != charRNNTraceOps {
		t.Fatalf("parsed %d ops, want %d", len(ops), charRNNTraceOps)
	}
	div4 := Config{}
	for i := range div4.RoundupPower2Divisions {
		div4.RoundupPower2Divisions[i] = 4
	}
	policies := []struct {
		name string
		cfg  Config
	}{
		{"default", Config{}},
		{"roundup_power2_divisions:4", div4},
		{"max_split_size_mb:64", Config{MaxSplitSize: 64 * mib}},
		// At the minimum of 20 MiB every whole 20 MiB segment counts as
		// oversize, so requests under 20 MiB can never reuse one once it is
		// wholly free: reserved memory grows several times over.
		{"max_split_size_mb:20", Config{MaxSplitSize: 20 * mib}},
	}
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			sim, c := newSim(t, 4*gib, pol.cfg)
			res, err := Replay(c, ops)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("peak requested %s, allocated %s, reserved %s (reserved/allocated %.3f); fragmentation at peak %.3f, max %.3f; %d device allocs",
				FormatSize(res.PeakRequestedBytes), FormatSize(res.PeakAllocatedBytes), FormatSize(res.PeakReservedBytes),
				res.ReservedOverAllocated, res.Fragmentation, res.MaxFragmentation, res.DeviceAllocs)
			if res.Ops != charRNNTraceOps || res.OOMs != 0 {
				t.Errorf("replayed %d ops with %d OOMs, want %d and 0", res.Ops, res.OOMs, charRNNTraceOps)
			}
			if res.PeakRequestedBytes != charRNNTracePeakLive {
				t.Errorf("peak requested %d, want the trace's peak live %d", res.PeakRequestedBytes, charRNNTracePeakLive)
			}
			if !(res.PeakRequestedBytes <= res.PeakAllocatedBytes && res.PeakAllocatedBytes <= res.PeakReservedBytes) {
				t.Errorf("peaks requested %d, allocated %d, reserved %d; want ascending", res.PeakRequestedBytes, res.PeakAllocatedBytes, res.PeakReservedBytes)
			}
			// The workload repeats every window, so caching must hold on to
			// memory rather than go back to the device per allocation: far
			// fewer device allocations than the trace's 17,957.
			if res.DeviceAllocs > 200 {
				t.Errorf("%d device allocations, want the cache to serve nearly all of 17957", res.DeviceAllocs)
			}
			if res.Fragmentation < 0 || res.Fragmentation >= 1 || res.MaxFragmentation < res.Fragmentation {
				t.Errorf("fragmentation at peak %v, max %v; want 0 <= at peak <= max < 1", res.Fragmentation, res.MaxFragmentation)
			}
			st := c.Stats()
			if st.Allocation[AllPools].Current != 0 {
				t.Errorf("%d blocks live after the replay, want 0", st.Allocation[AllPools].Current)
			}
			if _, _, n := sim.Counts(); int64(n) != st.Segment[AllPools].Current {
				t.Errorf("device holds %d segments, allocator counts %d", n, st.Segment[AllPools].Current)
			}
			checkInvariants(t, c)
		})
	}
}

// TestTraceRoundTrip records a workload with the allocator's trace, writes
// it in the text format, reads it back and checks that it describes the
// same allocations and frees.
func TestTraceRoundTrip(t *testing.T) {
	_, c := newSim(t, gib, Config{TraceEntries: 100})
	a := mustAlloc(t, c, 1000, 0)
	b := mustAlloc(t, c, 3*mib, 1)
	mustFree(t, c, a)
	d := mustAlloc(t, c, 1000, 0) // reuses a's address: a new id
	mustFree(t, c, b)
	mustFree(t, c, d)
	var buf bytes.Buffer
	if err := WriteTrace(&buf, c.Trace()); err != nil {
		t.Fatal(err)
	}
	ops, err := ParseTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []Op{
		{ID: 0, Size: 1000}, {ID: 1, Size: 3 * mib, Stream: 1}, {Free: true, ID: 0},
		{ID: 2, Size: 1000}, {Free: true, ID: 1}, {Free: true, ID: 2},
	}
	if !slices.Equal(ops, want) {
		t.Errorf("round trip gave %+v, want %+v", ops, want)
	}
}

func TestParseTraceErrors(t *testing.T) {
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
			_, err := ParseTrace(strings.NewReader("# header\n\n" + tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseTrace(%q) = %v, want an error containing %q", tt.text, err, tt.want)
			}
		})
	}
}
