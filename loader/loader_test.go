package loader_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/leak"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// openDevice opens the device the tests run on (GOCURRENT_TEST_DEVICE,
// the CPU by default) and closes it when the test ends.
func openDevice(t testing.TB) device.Device {
	t.Helper()
	return testdevice.Open(t)
}

// randomText is n characters from an alphabet with multi-byte runes.
func randomText(seed uint64, n int) string {
	alphabet := []rune("abcdefghij KLMN\néü→日本")
	r := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	for range n {
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// tokens is the reference tokenization: ids of the distinct characters
// sorted by code point.
func tokens(s string) []int32 {
	runes := []rune(s)
	distinct := slices.Clone(runes)
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	ids := make([]int32, len(runes))
	for i, r := range runes {
		ids[i] = int32(sort.Search(len(distinct), func(j int) bool { return distinct[j] >= r }))
	}
	return ids
}

func tokenize(t testing.TB, s string) *loader.Text {
	t.Helper()
	text, err := loader.Tokenize(context.Background(), loader.NewCorpus(strings.NewReader(s), int64(len(s)), "test"), loader.TokenizeConfig{})
	must(t, err)
	return text
}

func newLoader(t testing.TB, d device.Device, text *loader.Text, cfg loader.Config) *loader.Loader {
	t.Helper()
	l, err := loader.New(d, text, cfg)
	must(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// got is one delivered batch, copied to the host.
type got struct {
	b               loader.Batch
	inputs, targets []int32
}

// collect runs an iteration from pos, downloading every batch in the loop
// body, and stops after limit batches (0: no limit).
func collect(t testing.TB, d device.Device, l *loader.Loader, pos loader.Position, limit int) []got {
	t.Helper()
	var out []got
	for b, err := range l.Batches(context.Background(), pos) {
		must(t, err)
		g := got{b: b, inputs: make([]int32, b.Seq*b.Rows), targets: make([]int32, b.Seq*b.Rows)}
		must(t, device.DownloadSlice(d, g.inputs, b.Inputs))
		must(t, device.DownloadSlice(d, g.targets, b.Targets))
		out = append(out, g)
		if len(out) == limit {
			break
		}
	}
	return out
}

// TestStreamBatches checks Streams mode against the batching contract,
// computed here from the reference tokens: batch·accum contiguous streams
// of floor(N/(batch·accum)) tokens, windows of seq inputs advancing by seq,
// targets shifted by one, micro-batch j holding streams j·batch..,
// the tail dropped, Reset at the first window of each epoch.
func TestStreamBatches(t *testing.T) {
	d := openDevice(t)
	s := randomText(1, 1000)
	ref := tokens(s)
	for _, c := range []struct{ batch, seq, accum int }{{3, 5, 2}, {1, 1, 1}, {4, 7, 1}, {2, 3, 5}} {
		t.Run(fmt.Sprintf("batch%d/seq%d/accum%d", c.batch, c.seq, c.accum), func(t *testing.T) {
			l := newLoader(t, d, tokenize(t, s), loader.Config{Batch: c.batch, Seq: c.seq, Accum: c.accum, Epochs: 2, Prefetch: 3, Workers: 3})
			streams := c.batch * c.accum
			L := len(ref) / streams
			windows := (L - 1) / c.seq
			all := collect(t, d, l, loader.Position{}, 0)
			if want := 2 * windows * c.accum; len(all) != want || l.PerEpoch() != int64(windows*c.accum) {
				t.Fatalf("%d batches (%d per epoch), want %d (%d)", len(all), l.PerEpoch(), want, windows*c.accum)
			}
			for i, g := range all {
				epoch, idx := i/(windows*c.accum), i%(windows*c.accum)
				w, j := idx/c.accum, idx%c.accum
				b := g.b
				if b.Epoch != epoch || b.Index != int64(idx) || b.Step != int64(w) || b.Group != j || b.Reset != (w == 0) {
					t.Fatalf("batch %d: epoch %d index %d step %d group %d reset %v, want %d %d %d %d %v",
						i, b.Epoch, b.Index, b.Step, b.Group, b.Reset, epoch, idx, w, j, w == 0)
				}
				for r := range c.batch {
					start := (j*c.batch+r)*L + w*c.seq
					for k := range c.seq {
						if g.inputs[k*c.batch+r] != ref[start+k] || g.targets[k*c.batch+r] != ref[start+k+1] {
							t.Fatalf("batch %d row %d step %d: input %d target %d, want %d %d",
								i, r, k, g.inputs[k*c.batch+r], g.targets[k*c.batch+r], ref[start+k], ref[start+k+1])
						}
					}
				}
			}
		})
	}
}

// TestAccumulationGroups: with -batch 2 -accum 3 the three micro-batches
// of a step hold, in order, the rows of the one batch of -batch 6 -accum 1
// (the contract that makes both compute the same update).
func TestAccumulationGroups(t *testing.T) {
	d := openDevice(t)
	s := randomText(2, 700)
	split := collect(t, d, newLoader(t, d, tokenize(t, s), loader.Config{Batch: 2, Seq: 4, Accum: 3, Epochs: 1}), loader.Position{}, 0)
	whole := collect(t, d, newLoader(t, d, tokenize(t, s), loader.Config{Batch: 6, Seq: 4, Epochs: 1}), loader.Position{}, 0)
	if len(split) != 3*len(whole) {
		t.Fatalf("%d micro-batches, want 3 × %d", len(split), len(whole))
	}
	for w, g := range whole {
		for j := range 3 {
			m := split[3*w+j]
			for k := range 4 {
				for r := range 2 {
					if m.inputs[k*2+r] != g.inputs[k*6+j*2+r] || m.targets[k*2+r] != g.targets[k*6+j*2+r] {
						t.Fatalf("step %d group %d row %d differs from row %d of the whole batch", w, j, r, j*2+r)
					}
				}
			}
		}
	}
}

// TestResume: an iteration started from a batch's Next position delivers
// exactly the rest of an uninterrupted run, across epoch boundaries, in
// both modes; a split's validation part is the end of the text.
func TestResume(t *testing.T) {
	d := openDevice(t)
	s := randomText(3, 900)
	train, val, err := tokenize(t, s).Split(0.1)
	must(t, err)
	ref := tokens(s)
	if want := int64(len(ref) / 10); val.Len() != want || train.Len() != int64(len(ref))-want {
		t.Fatalf("split 0.1 of %d tokens: %d + %d, want %d + %d", len(ref), train.Len(), val.Len(), int64(len(ref))-want, want)
	}
	tail := make([]int32, val.Len())
	must(t, val.Read(0, tail))
	if !slices.Equal(tail, ref[len(ref)-len(tail):]) {
		t.Errorf("validation text is not the end of the corpus")
	}
	for _, cfg := range []loader.Config{
		{Batch: 2, Seq: 5, Accum: 2, Epochs: 3},
		{Mode: loader.Windows, Batch: 3, Seq: 4, Stride: 3, Seed: 5, Epochs: 3},
	} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			full := collect(t, d, newLoader(t, d, train, cfg), loader.Position{}, 0)
			for _, cut := range []int{1, len(full) / 3, len(full)/2 + 1, len(full) - 1} {
				l := newLoader(t, d, train, cfg)
				rest := collect(t, d, l, full[cut-1].b.Next, 0)
				if len(rest) != len(full)-cut {
					t.Fatalf("resumed after batch %d: %d batches, want %d", cut, len(rest), len(full)-cut)
				}
				for i, g := range rest {
					w := full[cut+i]
					if g.b.Epoch != w.b.Epoch || g.b.Index != w.b.Index || !slices.Equal(g.inputs, w.inputs) || !slices.Equal(g.targets, w.targets) {
						t.Fatalf("resumed after batch %d: batch %d differs from the uninterrupted run", cut, i)
					}
				}
			}
		})
	}
}

// TestWindowsShuffle: each epoch of Windows mode delivers every window
// exactly once (the starts are a multiple of the batch here, so none is
// dropped), in an order drawn from the seed and the epoch.
func TestWindowsShuffle(t *testing.T) {
	d := openDevice(t)
	const seq, stride, batch = 4, 3, 4
	// 99 windows would not divide; N = 3·(96-1)+4+1 gives 96 starts.
	s := randomText(4, stride*(96-1)+seq+1)
	ref := tokens(s)
	text := tokenize(t, s)
	run := func(seed uint64) []got {
		return collect(t, d, newLoader(t, d, text, loader.Config{Mode: loader.Windows, Batch: batch, Seq: seq, Stride: stride, Seed: seed, Epochs: 2}), loader.Position{}, 0)
	}
	// rows lists, per epoch, the start of each delivered row, found by
	// matching its tokens against every window (ties are impossible to
	// tell apart and are compared as equal contents).
	key := func(v []int32) string { return fmt.Sprint(v) }
	want := map[string]int{}
	for k := range 96 {
		w := ref[k*stride : k*stride+seq+1]
		want[key(w)]++
	}
	orderOf := func(all []got) [2][]string {
		var order [2][]string
		for _, g := range all {
			for r := range batch {
				w := make([]int32, seq+1)
				for k := range seq {
					w[k] = g.inputs[k*batch+r]
				}
				w[seq] = g.targets[(seq-1)*batch+r]
				order[g.b.Epoch] = append(order[g.b.Epoch], key(w))
			}
		}
		return order
	}
	a := orderOf(run(7))
	for e, rows := range a {
		have := map[string]int{}
		for _, k := range rows {
			have[k]++
		}
		if len(rows) != 96 || fmt.Sprint(have) != fmt.Sprint(want) {
			t.Errorf("epoch %d: %d rows, not a permutation of the 96 windows", e, len(rows))
		}
	}
	if slices.Equal(a[0], a[1]) {
		t.Errorf("epochs 0 and 1 came in the same order")
	}
	if b := orderOf(run(7)); !slices.Equal(a[0], b[0]) || !slices.Equal(a[1], b[1]) {
		t.Errorf("the same seed gave a different order")
	}
	if c := orderOf(run(8)); slices.Equal(a[0], c[0]) {
		t.Errorf("seeds 7 and 8 gave the same order")
	}
}

// TestComputeStreamOrdering queues, in every loop body, a device-to-device
// copy of the batch on the compute stream and never waits for it. The
// results are right only if the compute stream waits for the loader's copy
// and the loader waits for the compute stream before reusing the memory.
func TestComputeStreamOrdering(t *testing.T) {
	d := openDevice(t)
	s := randomText(5, 5000)
	l := newLoader(t, d, tokenize(t, s), loader.Config{Batch: 4, Seq: 16, Epochs: 1, Prefetch: 1})
	want := collect(t, d, l, loader.Position{}, 0)
	n := len(want)
	half := int64(16*4) * 4
	out, err := d.Alloc(int64(n)*2*half, device.Workspace)
	must(t, err)
	k := d.Kernels()
	i := 0
	for b, err := range l.Batches(context.Background(), loader.Position{}) {
		must(t, err)
		must(t, k.Copy(device.Copy{Dst: out.Slice(int64(2*i)*half, half), Src: b.Inputs}))
		must(t, k.Copy(device.Copy{Dst: out.Slice(int64(2*i+1)*half, half), Src: b.Targets}))
		i++
	}
	all := make([]int32, n*2*16*4)
	must(t, device.DownloadSlice(d, all, out))
	for i, w := range want {
		g := all[i*2*64 : (i+1)*2*64]
		if !slices.Equal(g[:64], w.inputs) || !slices.Equal(g[64:], w.targets) {
			t.Fatalf("batch %d as the compute stream saw it differs from the batch", i)
		}
	}
}

func TestStats(t *testing.T) {
	d := openDevice(t)
	l := newLoader(t, d, tokenize(t, randomText(6, 2000)), loader.Config{Batch: 4, Seq: 8, Prefetch: 2, Epochs: 1})
	all := collect(t, d, l, loader.Position{}, 0)
	st := l.Stats()
	slot := int64(2 * 8 * 4 * 4)
	if st.Batches != int64(len(all)) || st.Tokens != int64(len(all)*32) || st.StagingBytes != 3*slot || st.DeviceBytes != 3*slot {
		t.Errorf("stats %+v, want %d batches, %d tokens, %d staging and device bytes", st, len(all), len(all)*32, 3*slot)
	}
	if st.BytesRead < int64(len(all)*32) || st.Wait <= 0 {
		t.Errorf("stats %+v: bytes read below the tokens delivered, or no wait measured", st)
	}
}

func TestErrors(t *testing.T) {
	d := openDevice(t)
	short := tokenize(t, "abcdefghij") // 10 tokens
	for _, c := range []struct {
		name string
		cfg  loader.Config
		is   error
		want string
	}{
		{"streams", loader.Config{Batch: 2, Seq: 5}, loader.ErrTooShort, "10 tokens cut into 2 streams"},
		{"accum", loader.Config{Batch: 1, Seq: 2, Accum: 4}, loader.ErrTooShort, "leave 2 per stream"},
		{"windows", loader.Config{Mode: loader.Windows, Batch: 3, Seq: 4}, loader.ErrTooShort, "give 2 windows"},
		{"batch", loader.Config{Batch: -1}, nil, "Batch = -1"},
		{"accum in windows", loader.Config{Mode: loader.Windows, Accum: 2, Seq: 2, Batch: 1}, nil, "Streams mode only"},
	} {
		_, err := loader.New(d, short, c.cfg)
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	l := newLoader(t, d, short, loader.Config{Batch: 1, Seq: 3, Epochs: 1})
	for _, err := range l.Batches(context.Background(), loader.Position{Batch: 3}) {
		if err == nil || !strings.Contains(err.Error(), "outside an epoch of 3 batches") {
			t.Errorf("position past the epoch: %v", err)
		}
	}
}

// TestCancelAndClose: cancelling the context ends the iteration with the
// context's error, Close ends it with ErrClosed, breaking out ends it
// quietly; none leaves a goroutine behind.
func TestCancelAndClose(t *testing.T) {
	d := openDevice(t)
	text := tokenize(t, randomText(7, 3000))
	l := newLoader(t, d, text, loader.Config{Batch: 2, Seq: 4, Workers: 3})
	before := leak.Count() // the device's and the loader's copy stream included
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var last error
	n := 0
	for _, err := range l.Batches(ctx, loader.Position{}) {
		if last = err; err != nil {
			break
		}
		if n++; n == 5 {
			cancel()
		}
	}
	if !errors.Is(last, context.Canceled) {
		t.Errorf("after cancel: %v, want context.Canceled", last)
	}
	leak.Expect(t, before, "after the iteration")

	n = 0
	for _, err := range l.Batches(context.Background(), loader.Position{}) {
		must(t, err)
		if n++; n == 3 {
			break
		}
	}
	leak.Expect(t, before, "after the iteration")

	last, n = nil, 0
	for _, err := range l.Batches(context.Background(), loader.Position{}) {
		if last = err; err != nil {
			break
		}
		if n++; n == 2 {
			must(t, l.Close())
		}
	}
	if !errors.Is(last, loader.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", last)
	}
	leak.Expect(t, before, "after the iteration")
	for _, err := range l.Batches(context.Background(), loader.Position{}) {
		if !errors.Is(err, loader.ErrClosed) {
			t.Errorf("Batches after Close: %v, want ErrClosed", err)
		}
	}
}

// FuzzBatches cuts arbitrary text into batches of arbitrary shapes: either
// New refuses it (too short, bad shape), or the first epoch of both modes
// matches the reference cut computed here.
func FuzzBatches(f *testing.F) {
	f.Add([]byte("hello, world; hello again"), uint8(2), uint8(3), uint8(1), uint8(0))
	f.Add([]byte("日本語のテキスト→ and ascii"), uint8(1), uint8(1), uint8(3), uint8(2))
	f.Add([]byte("ab"), uint8(1), uint8(1), uint8(1), uint8(1))
	d := openDevice(f)
	f.Fuzz(func(t *testing.T, data []byte, batch, seq, accum, stride uint8) {
		text, err := loader.Tokenize(context.Background(), loader.NewCorpus(strings.NewReader(string(data)), int64(len(data)), "fuzz"), loader.TokenizeConfig{})
		if err != nil {
			return // tokenizer errors are FuzzTokenize's subject
		}
		ref := tokens(string(data))
		B, T, A, S := int(batch%8)+1, int(seq%16)+1, int(accum%4)+1, int(stride%8)+1
		if l, err := loader.New(d, text, loader.Config{Batch: B, Seq: T, Accum: A, Epochs: 1, Workers: 2}); err != nil {
			if L := len(ref) / (B * A); L >= T+1 || !errors.Is(err, loader.ErrTooShort) {
				t.Fatalf("streams %d×%d×%d over %d tokens: %v", B, T, A, len(ref), err)
			}
		} else {
			L := len(ref) / (B * A)
			all := collect(t, d, l, loader.Position{}, 0)
			if len(all) != (L-1)/T*A {
				t.Fatalf("%d batches, want %d", len(all), (L-1)/T*A)
			}
			for i, g := range all {
				w, j := i/A, i%A
				for r := range B {
					for k := range T {
						at := (j*B+r)*L + w*T + k
						if g.inputs[k*B+r] != ref[at] || g.targets[k*B+r] != ref[at+1] {
							t.Fatalf("streams: batch %d row %d step %d differs from the reference", i, r, k)
						}
					}
				}
			}
			l.Close()
		}
		l, err := loader.New(d, text, loader.Config{Mode: loader.Windows, Batch: B, Seq: T, Stride: S, Epochs: 1, Seed: 1})
		starts := 0
		if len(ref) >= T+1 {
			starts = (len(ref)-T-1)/S + 1
		}
		if err != nil {
			if starts >= B || !errors.Is(err, loader.ErrTooShort) {
				t.Fatalf("windows %d×%d stride %d over %d tokens: %v", B, T, S, len(ref), err)
			}
			return
		}
		defer l.Close()
		all := collect(t, d, l, loader.Position{}, 0)
		if len(all) != starts/B {
			t.Fatalf("%d window batches, want %d", len(all), starts/B)
		}
		for i, g := range all {
			for r := range B {
				// Every row is some window: its tokens appear at a start
				// that is a multiple of the stride.
				found := false
				for k := 0; k < starts && !found; k++ {
					found = true
					for s := range T {
						if g.inputs[s*B+r] != ref[k*S+s] || g.targets[s*B+r] != ref[k*S+s+1] {
							found = false
							break
						}
					}
				}
				if !found {
					t.Fatalf("windows: batch %d row %d is no window of the text", i, r)
				}
			}
		}
	})
}

// TestCancelIsReported cancels many iterations from their loop body: each
// ends with context.Canceled, never quietly as if its epochs were done.
// The dispatcher stops on the cancellation too and closes the order of
// batches, so the consumer sees both at once; it once took the closed
// order for the end of the data about half the time, and a trainer then
// returned nil from a cancelled Run.
func TestCancelIsReported(t *testing.T) {
	d := openDevice(t)
	l := newLoader(t, d, tokenize(t, randomText(7, 3000)), loader.Config{Batch: 2, Seq: 4, Workers: 2})
	for trial := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		var last error
		for _, err := range l.Batches(ctx, loader.Position{}) {
			if last = err; err != nil {
				break
			}
			cancel()
			time.Sleep(100 * time.Microsecond) // lets the dispatcher stop and close the order
		}
		cancel()
		if !errors.Is(last, context.Canceled) {
			t.Fatalf("trial %d: the iteration cancelled in its loop body ended with %v, want context.Canceled", trial, last)
		}
	}
}
