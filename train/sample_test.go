package train_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/train"
)

// sampleIDs runs train.Sample and returns what it emitted.
func sampleIDs(t *testing.T, d device.Device, m train.Model, c train.SampleConfig) []int32 {
	t.Helper()
	var ids []int32
	check(t, train.Sample(context.Background(), d, m, c, func(id int32) error {
		ids = append(ids, id)
		return nil
	}))
	if len(ids) != c.N {
		t.Fatalf("%d tokens emitted, want %d", len(ids), c.N)
	}
	return ids
}

// TestSampleChunks: tokens are drawn on the device and read back 64 at a
// time; every length, at and around the chunk's edges, emits the same
// tokens as a longer sample's first ones (token i is drawn with counter i,
// whatever the chunks), each once, in order, and within the vocabulary.
func TestSampleChunks(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dtype: device.Float32, seed: 3})
	for _, c := range []train.SampleConfig{
		{Temperature: 1, Prime: []int32{1, 2, 3}, Seed: 5},
		{Temperature: 0.7, TopK: 4, Prime: []int32{4}, Seed: 6},
	} {
		c.N = 200
		all := sampleIDs(t, d, m, c)
		for _, id := range all {
			if id < 0 || id >= 10 {
				t.Fatalf("token %d outside the vocabulary of 10", id)
			}
		}
		for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 129} {
			c.N = n
			if got := sampleIDs(t, d, m, c); !slices.Equal(got, all[:n]) {
				t.Errorf("%+v: %v, want the first %d of %v", c, got, n, all)
			}
		}
	}
}

// TestSampleSyncsPerToken: the host waits for the device at most once per
// 64 drawn tokens, counted by the device (device.Counter), not timed: the
// counts of 1,024 more tokens (16 chunks) are at most 16 syncs, and every
// token is at least one launch (its draw, device.Sample). Drawing on the
// host took 2 syncs per token. (Copies are not asserted: the model's
// forward makes device-to-device copies of its own besides the chunks'
// read-backs.)
func TestSampleSyncsPerToken(t *testing.T) {
	d := testdevice.Open(t)
	counter, ok := d.(device.Counter)
	if !ok {
		t.Skipf("%s counts nothing (device.Counter)", d.Name())
	}
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	counts := func(n int) device.Counts {
		before := counter.Counts()
		sampleIDs(t, d, m, train.SampleConfig{N: n, Temperature: 1, Prime: []int32{1, 2}, Seed: 1})
		return counter.Counts().Sub(before)
	}
	const base, more = 64, 16 * 64
	short, long := counts(base), counts(base+more)
	diff := long.Sub(short)
	t.Logf("per token at steady state: %.4f syncs, %.2f launches, %.2f GEMMs, %.4f copies",
		float64(diff.Syncs)/more, float64(diff.Launches)/more, float64(diff.GEMMs)/more, float64(diff.Copies)/more)
	if diff.Syncs > more/64 {
		t.Errorf("%d more tokens took %d more syncs, want at most %d (one per 64 tokens)", more, diff.Syncs, more/64)
	}
	if diff.Launches < more {
		t.Errorf("%d more tokens took %d more launches, want at least one each (the draw)", more, diff.Launches)
	}
	// The whole call: the prime's upload and one wait per chunk.
	if want := int64(1 + (base+more+63)/64); long.Syncs > want {
		t.Errorf("a sample of %d tokens after a 2-token prime took %d syncs, want at most %d", base+more, long.Syncs, want)
	}
}

// TestSampleStops: a cancelled context stops the sample within the token,
// and what was emitted before is the uncancelled sample's first tokens.
func TestSampleStops(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 2})
	c := train.SampleConfig{N: 300, Temperature: 1, Prime: []int32{3}, Seed: 9}
	all := sampleIDs(t, d, m, c)
	for _, stopAt := range []int{1, 64, 70, 200} {
		ctx, cancel := context.WithCancel(context.Background())
		var got []int32
		err := train.Sample(ctx, d, m, c, func(id int32) error {
			got = append(got, id)
			if len(got) == stopAt {
				cancel()
			}
			return nil
		})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled at token %d: %v, want context.Canceled", stopAt, err)
		}
		if !slices.Equal(got, all[:stopAt]) {
			t.Errorf("cancelled at token %d: emitted %v, want %v", stopAt, got, all[:stopAt])
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	err := train.Sample(ctx, d, m, c, func(int32) error { n++; return nil })
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("a cancelled context: %d tokens and %v, want none and context.Canceled", n, err)
	}
}

// TestSampleSameOnCPUAndCUDA: the CPU device and the CUDA device (the test
// device when it is one, a GPU in the GPU kit; otherwise over the
// emulator) draw the same tokens for the same model and seed. The kernel
// draws the same class from the same logits to the bit (the devices'
// conformance); the logits themselves differ in their last bits between
// the devices (their GEMMs and activations round differently), which
// changes a token only when a draw falls within that difference of a
// class boundary: about 1e-6 per token, so 3 x 300 tokens agree.
func TestSampleSameOnCPUAndCUDA(t *testing.T) {
	gpu := testdevice.Open(t)
	if !strings.HasPrefix(gpu.Name(), "cuda") {
		lib := cudaemu.ForTest(t)
		emu, err := cuda.Open(cuda.Config{DriverLibrary: lib.Path(), BLASLibrary: lib.Path()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { check(t, emu.Close()) })
		gpu = emu
	}
	host, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { check(t, host.Close()) })
	lc := lmConfig{vocab: 65, embed: 16, hidden: 32, layers: 2, dtype: device.Float32, seed: 4}
	mc, mg := newLM(t, host, lc), newLM(t, gpu, lc)
	for _, c := range []train.SampleConfig{
		{N: 300, Temperature: 1, Prime: []int32{1, 2, 3}, Seed: 11},
		{N: 300, Temperature: 0.8, TopK: 10, Prime: []int32{7}, Seed: 12},
		{N: 300, Temperature: 1.5, Prime: []int32{0}, Seed: 13},
	} {
		t.Run(fmt.Sprintf("T=%v/TopK=%d", c.Temperature, c.TopK), func(t *testing.T) {
			a, b := sampleIDs(t, host, mc, c), sampleIDs(t, gpu, mg, c)
			if i := firstDiff(a, b); i >= 0 {
				t.Errorf("token %d: the CPU drew %d, the CUDA device %d (CPU %v, CUDA %v)", i, a[i], b[i], a, b)
			}
		})
	}
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
