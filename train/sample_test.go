package train_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
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
		for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193} {
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
// host took 2 syncs per token. A whole call waits N/64 times, rounded down
// (the last chunk is read with the tokens after it, and the prime's copies
// are not waited for), and once below 64 tokens. (Copies are not asserted:
// the model's forward makes device-to-device copies of its own besides the
// chunks' read-backs.)
func TestSampleSyncsPerToken(t *testing.T) {
	d := testdevice.Open(t)
	counter, ok := d.(device.Counter)
	if !ok {
		t.Skipf("%s counts nothing (device.Counter)", d.Name())
	}
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	counts := func(n int, prime ...int32) device.Counts {
		before := counter.Counts()
		sampleIDs(t, d, m, train.SampleConfig{N: n, Temperature: 1, Prime: append([]int32{1, 2}, prime...), Seed: 1})
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
	// Whole calls: one wait per read, the last chunk's taking the tokens
	// after it; a prime of four windows (1,024 tokens) is copied without
	// waiting.
	for _, c := range []struct {
		n, prime int
		want     int64
	}{{1, 0, 1}, {63, 0, 1}, {64, 0, 1}, {127, 0, 1}, {128, 0, 2}, {200, 0, 3}, {base + more, 0, (base + more) / 64}, {100, 1022, 1}} {
		if got := counts(c.n, make([]int32, c.prime)...); got.Syncs != c.want {
			t.Errorf("a sample of %d tokens after a %d-token prime took %d syncs, want %d", c.n, c.prime+2, got.Syncs, c.want)
		}
	}
}

// TestSamplePrimeWindows: a prime of 1,300 tokens (six windows of 256, two
// of the staging's four slots taken again) leaves the state as uploading
// each window and waiting for it did: the sample after it draws the tokens
// that a loop of the same draws (device.Sample, token i with counter i),
// each read back before the next forward, draws after those forwards. The
// prime is random tokens, and the draws depend on them (a prime that
// differs in one token of its fifth window leads elsewhere), so a window
// fed twice or a slot overwritten before its copy shows. (Only the
// prime's last tokens matter to this small model's state, whose memory
// fades over some dozens, so that token is 50 from the end.)
func TestSamplePrimeWindows(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dtype: device.Float32, seed: 4})
	// Weights 8 times their initial size: logits that vary with the
	// state, where the initial ones are nearly uniform whatever it is.
	for _, g := range m.Groups() {
		for p := range g.Params.All() {
			v, err := g.Params.Value(p.Name)
			check(t, err)
			for i, x := range v.Data().([]float32) {
				v.Data().([]float32)[i] = 8 * x
			}
			check(t, g.Params.SetValue(p.Name, v))
		}
	}
	rng := rand.New(rand.NewPCG(11, 12))
	prime := make([]int32, 1300)
	for i := range prime {
		prime[i] = int32(rng.IntN(10))
	}
	c := train.SampleConfig{N: 40, Temperature: 1, Prime: prime, Seed: 3}
	got := sampleIDs(t, d, m, c)
	if want := sampleStepwise(t, d, m, c); !slices.Equal(got, want) {
		t.Errorf("after a 1,300-token prime: %v, want %v (windows uploaded one at a time)", got, want)
	}
	c.Prime = slices.Clone(prime)
	c.Prime[1250] = (c.Prime[1250] + 1) % 10
	if slices.Equal(sampleIDs(t, d, m, c), got) {
		t.Errorf("a prime differing at token 1,250 drew the same %d tokens %v", c.N, got)
	}
}

// sampleStepwise draws c.N tokens as Sample does, one step at a time and
// waiting at each: the prime fed in windows of 256 tokens, each uploaded
// (Upload waits), then each token drawn by the device's kernel and read
// back before the next forward.
func sampleStepwise(t *testing.T, d device.Device, m train.Model, c train.SampleConfig) []int32 {
	t.Helper()
	st, err := m.NewState(1)
	check(t, err)
	defer func() { check(t, st.Free()) }()
	ids, err := d.Alloc(256*4, device.Batches)
	check(t, err)
	defer func() { check(t, d.Free(ids)) }()
	tok, err := d.Alloc(4, device.Batches)
	check(t, err)
	defer func() { check(t, d.Free(tok)) }()
	row := int64(m.Classes()) * 4
	var logits device.Buffer
	forward := func(win []int32) {
		check(t, device.UploadSlice(d, ids.Slice(0, int64(len(win))*4), win))
		out, err := m.Forward(rnn.NoGrad, ids, len(win), 1, st)
		check(t, err)
		logits = out.Slice(int64(len(win)-1)*row, row)
	}
	for w := 0; w < len(c.Prime); w += 256 {
		forward(c.Prime[w:min(w+256, len(c.Prime))])
	}
	out := make([]int32, c.N)
	for i := range out {
		check(t, d.Kernels().Sample(device.Sample{DType: device.Float32, N: 1, Classes: m.Classes(), Logits: logits,
			Temperature: c.Temperature, TopK: c.TopK, Seed: c.Seed, Counter: uint64(i), IDs: ids.Slice(0, 4), Tokens: tok}))
		check(t, device.DownloadSlice(d, out[i:i+1], tok))
		forward(out[i : i+1])
	}
	return out
}

// TestSampleStops: a cancelled context stops the sample within the token,
// and what was emitted before is the uncancelled sample's first tokens:
// in the first chunk, at and after its end, and (290 of 300) within the
// last read, which holds the 108 tokens from 192.
func TestSampleStops(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 2})
	c := train.SampleConfig{N: 300, Temperature: 1, Prime: []int32{3}, Seed: 9}
	all := sampleIDs(t, d, m, c)
	for _, stopAt := range []int{1, 64, 70, 200, 290} {
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

// TestSampleAllocationFails: a sample whose k-th allocation fails, for
// every k of the sample (the state, the ids and ring, the layers' outputs),
// returns the out-of-memory error, leaves no staging allocated (the
// prime's and the read-backs'), and, once the model is closed (its layers
// keep their outputs for the next call), no device memory. On meta, a
// device that keeps the books and runs nothing, whose FailAlloc fails its
// Alloc calls (not its Staging's).
func TestSampleAllocationFails(t *testing.T) {
	cfg := train.SampleConfig{N: 100, Temperature: 1, Prime: make([]int32, 600), Seed: 1}
	run := func(k int) (n int, err error) {
		d, err := meta.Open(meta.Config{})
		check(t, err)
		defer func() { check(t, d.Close()) }()
		m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dtype: device.Float32, seed: 1})
		d.FailAlloc(k)
		err = train.Sample(context.Background(), d, m, cfg, func(int32) error { return nil })
		n = d.Allocs()
		if left := d.StagingMemory().Stats().AllocatedBytes[alloc.AllPools].Current; left != 0 {
			t.Errorf("allocation %d failed: %d bytes of staging left allocated", k, left)
		}
		check(t, m.close())
		if left := d.MemStats().AllocatedBytes[alloc.AllPools].Current; left != 0 {
			t.Errorf("allocation %d failed: %d bytes left allocated once the model closed", k, left)
		}
		return n, err
	}
	n, err := run(0)
	check(t, err)
	if n < 3 {
		t.Fatalf("the sample made %d allocations", n)
	}
	for k := 1; k <= n; k++ {
		if _, err := run(k); !errors.Is(err, alloc.ErrOutOfMemory) {
			t.Errorf("allocation %d of %d failed: %v, want the out-of-memory error", k, n, err)
		}
	}
}
