package alloc_test

import (
	"os"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/trace"
)

// The char-RNN trace is a real allocation trace: PyTorch 1.13 (Debian's
// python3-torch, CPU) training Embedding(65,64) -> LSTM(64,256,2) ->
// Linear(256,65), batch 32, six windows of varying length, recorded with
// the profiler by testdata/record_trace.py. Its header gives the figures
// the test checks. It is the allocator's workload fixture, read with
// package alloc/trace: this test and BenchmarkReplay measure the caching
// policy on it and check the allocator's invariants after each replay, so
// they and the file stay with the allocator; alloc/trace tests the format.
const (
	charRNNTrace         = "testdata/charrnn_lstm.trace"
	charRNNTraceOps      = 35914    // "Totals: 35914 ops"
	charRNNTracePeakLive = 63738424 // "peak live 63738424 bytes"
)

func loadTrace(t testing.TB, path string) []trace.Op {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops, err := trace.Parse(f)
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
	div4 := alloc.Config{}
	for i := range div4.RoundupPower2Divisions {
		div4.RoundupPower2Divisions[i] = 4
	}
	policies := []struct {
		name string
		cfg  alloc.Config
	}{
		{"default", alloc.Config{}},
		{"roundup_power2_divisions:4", div4},
		{"max_split_size_mb:64", alloc.Config{MaxSplitSize: 64 * mib}},
		// At the minimum of 20 MiB every whole 20 MiB segment counts as
		// oversize, so requests under 20 MiB can never reuse one once it is
		// wholly free: reserved memory grows several times over.
		{"max_split_size_mb:20", alloc.Config{MaxSplitSize: 20 * mib}},
	}
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			sim, c := newSim(t, 4*gib, pol.cfg)
			res, err := trace.Replay(c, ops)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("peak requested %s, allocated %s, reserved %s (reserved/allocated %.3f); fragmentation at peak %.3f, max %.3f; %d device allocs",
				alloc.FormatSize(res.PeakRequestedBytes), alloc.FormatSize(res.PeakAllocatedBytes), alloc.FormatSize(res.PeakReservedBytes),
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
			if st.Allocation[alloc.AllPools].Current != 0 {
				t.Errorf("%d blocks live after the replay, want 0", st.Allocation[alloc.AllPools].Current)
			}
			if _, _, n := sim.Counts(); int64(n) != st.Segment[alloc.AllPools].Current {
				t.Errorf("device holds %d segments, allocator counts %d", n, st.Segment[alloc.AllPools].Current)
			}
			checkInvariants(t, c)
		})
	}
}
