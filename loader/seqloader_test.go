package loader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// taggedDataset writes n tagged sentences of lengths 1 to 20 (TSV) and
// opens them. The words are "w" and a number below 50, and now and then a
// letter, one to 11 times.
func taggedDataset(t *testing.T, n int) *Dataset {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	for range n {
		for range 1 + r.IntN(20) {
			w := fmt.Sprint("w", r.IntN(50))
			if r.IntN(4) == 0 {
				w = strings.Repeat(string(rune('a'+r.IntN(26))), 1+r.IntN(11))
			}
			fmt.Fprintf(&b, "%s\tT%d\n", w, r.IntN(5))
		}
		b.WriteString("\n")
	}
	path := filepath.Join(t.TempDir(), "tags.tsv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDataset(context.Background(), path, DatasetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// downloadInt32 reads n Int32 values of b.
func downloadInt32(t *testing.T, dev device.Device, b device.Buffer, n int) []int32 {
	t.Helper()
	v := make([]int32, n)
	if err := device.DownloadSlice(dev, v, b); err != nil {
		t.Fatal(err)
	}
	return v
}

// A SeqLoader delivers, epoch after epoch, the batches Buckets makes, each
// on the device as Collate lays it out (tokens, labels, lengths, and the
// words' characters when asked for, whole or cut to MaxWordChars), every
// example once per epoch; from a position it delivers the rest of the same
// sequence (exact resume), and ends cleanly when the consumer stops.
func TestSeqLoader(t *testing.T) {
	dev := testdevice.Open(t)
	d := taggedDataset(t, 200)
	if d.LongestWord() != 11 {
		t.Fatalf("longest word of %d characters, want 11", d.LongestWord())
	}
	for _, cc := range []CollateConfig{{}, {Chars: true}, {Chars: true, MaxWordChars: 4}} {
		t.Run(fmt.Sprintf("%+v", cc), func(t *testing.T) { testSeqLoader(t, dev, d, cc) })
	}
}

func testSeqLoader(t *testing.T, dev device.Device, d *Dataset, cc CollateConfig) {
	cfg := SeqConfig{Bucket: BucketConfig{Batch: 8, MaxTokens: 96, Pool: 5, Shuffle: true, Seed: 9}, Epochs: 2, CollateConfig: cc}
	l, err := NewSeqLoader(dev, d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var all []Position
	var examples [][]int32
	var hosts []HostBatch
	seen := map[int][]int{0: make([]int, d.Len()), 1: make([]int, d.Len())}
	for b, err := range l.Batches(context.Background(), Position{}) {
		if err != nil {
			t.Fatal(err)
		}
		pos := Position{b.Epoch, b.Index}
		want, err := cc.Collate(d, mustBuckets(t, d, cfg.Bucket, b.Epoch)[b.Index])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(b.Host, want) {
			t.Fatalf("batch %+v: host %+v, want %+v", pos, b.Host, want)
		}
		n := want.Seq * want.Rows
		if got := downloadInt32(t, dev, b.Tokens, n); !reflect.DeepEqual(got, want.Tokens) {
			t.Fatalf("batch %+v: device tokens %v, want %v", pos, got, want.Tokens)
		}
		if got := downloadInt32(t, dev, b.Labels, n); !reflect.DeepEqual(got, want.Labels) {
			t.Fatalf("batch %+v: device labels differ", pos)
		}
		if got := downloadInt32(t, dev, b.Lengths, want.Rows); !reflect.DeepEqual(got, want.Lengths) {
			t.Fatalf("batch %+v: device lengths differ", pos)
		}
		if cc.Chars {
			if want.WordLen == 0 || cc.MaxWordChars > 0 && want.WordLen > cc.MaxWordChars {
				t.Fatalf("batch %+v: words of up to %d characters (MaxWordChars %d)", pos, want.WordLen, cc.MaxWordChars)
			}
			for _, part := range []struct {
				name string
				buf  device.Buffer
				want []int32
			}{{"chars", b.Chars, want.Chars}, {"char lengths", b.CharLengths, want.CharLengths},
				{"word index", b.WordIndex, want.WordIndex}, {"word positions", b.WordPositions, want.WordPositions}} {
				if got := downloadInt32(t, dev, part.buf, len(part.want)); !reflect.DeepEqual(got, part.want) {
					t.Fatalf("batch %+v: device %s %v, want %v", pos, part.name, got, part.want)
				}
			}
		} else if !b.Chars.IsZero() || want.WordLen != 0 || want.Chars != nil {
			t.Fatalf("batch %+v: characters not asked for, but delivered", pos)
		}
		if want.Seq*want.Rows > 96 && want.Rows > 1 {
			t.Errorf("batch %+v: %d x %d over the token budget of 96", pos, want.Seq, want.Rows)
		}
		for _, i := range want.Examples {
			seen[b.Epoch][i]++
		}
		all = append(all, pos)
		examples = append(examples, want.Examples)
		hosts = append(hosts, want)
	}
	if int64(len(all)) != l.PerEpoch(0)+l.PerEpoch(1) {
		t.Fatalf("%d batches, want %d + %d", len(all), l.PerEpoch(0), l.PerEpoch(1))
	}
	for e, counts := range seen {
		for i, c := range counts {
			if c != 1 {
				t.Fatalf("epoch %d: example %d delivered %d times", e, i, c)
			}
		}
	}
	if p := l.Padding(0); !(p >= 0 && p < 0.3) {
		t.Errorf("padding %.3f with pools of 5 batches, want under 0.3", p)
	}

	// Resume from a position in the second epoch: the rest, the same.
	from := Position{Epoch: 1, Batch: 3}
	k := int(l.PerEpoch(0)) + 3
	i := k
	for b, err := range l.Batches(context.Background(), from) {
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(b.Host.Examples, examples[i]) {
			t.Fatalf("resumed batch %d: examples %v, want %v", i, b.Host.Examples, examples[i])
		}
		if cc.Chars {
			if got := downloadInt32(t, dev, b.Chars, len(b.Host.Chars)); !reflect.DeepEqual(got, hosts[i].Chars) {
				t.Fatalf("resumed batch %d: characters %v, want %v", i, got, hosts[i].Chars)
			}
		}
		i++
	}
	if i != len(all) {
		t.Errorf("resumed from %+v: %d batches, want %d", from, i-k, len(all)-k)
	}

	// The consumer stops after one batch: no error, and the loader runs
	// again.
	n := 0
	for _, err := range l.Batches(context.Background(), Position{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	// A cancelled context ends the iteration with its error.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var last error
	for _, err := range l.Batches(ctx, Position{}) {
		if err != nil {
			last = err
			break
		}
		cancel()
	}
	if !errors.Is(last, context.Canceled) {
		t.Errorf("after cancel: %v, want context.Canceled", last)
	}
	if _, err := NewSeqLoader(dev, d, SeqConfig{}); err == nil {
		t.Error("NewSeqLoader without a batch size: no error")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, err := range l.Batches(context.Background(), Position{}) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Batches after Close: %v, want ErrClosed", err)
		}
	}
}

func mustBuckets(t *testing.T, d *Dataset, c BucketConfig, epoch int) [][]int32 {
	t.Helper()
	bs, err := Buckets(d.lengths, c, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// Characters are asked for a dataset of words, with MaxWordChars ≥ 0.
func TestSeqLoaderCharsConfig(t *testing.T) {
	dev := testdevice.Open(t)
	path := filepath.Join(t.TempDir(), "texts.jsonl")
	if err := os.WriteFile(path, []byte(`{"text": "ab", "label": "x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	texts, err := OpenDataset(context.Background(), path, DatasetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer texts.Close()
	for _, c := range []struct {
		name string
		data *Dataset
		cc   CollateConfig
	}{
		{"texts", texts, CollateConfig{Chars: true}},
		{"MaxWordChars -1", taggedDataset(t, 3), CollateConfig{Chars: true, MaxWordChars: -1}},
	} {
		if l, err := NewSeqLoader(dev, c.data, SeqConfig{Bucket: BucketConfig{Batch: 2}, CollateConfig: c.cc}); err == nil {
			l.Close()
			t.Errorf("%s: no error", c.name)
		}
	}
}

// TestLargest checks that every batch of several shuffled epochs, with
// and without a token budget, is dominated by one warm-up batch, in steps,
// rows and tokens at once (so whatever mix of them a buffer grows with,
// the warm-up has met it), and that Load puts the warm-up batches on the
// device as Collate lays them out, the characters padded to the longest
// word.
func TestLargest(t *testing.T) {
	data := taggedDataset(t, 300)
	dev := testdevice.Open(t)
	for _, budget := range []int{0, 60} {
		cfg := SeqConfig{Bucket: BucketConfig{Batch: 8, MaxTokens: budget, Pool: 3, Shuffle: true, Seed: 5}, CollateConfig: CollateConfig{Chars: true}}
		l, err := NewSeqLoader(dev, data, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var warm []HostBatch
		for _, ex := range l.Largest() {
			b, release, err := l.Load(context.Background(), ex)
			if err != nil {
				t.Fatal(err)
			}
			hb := b.Host
			warm = append(warm, hb)
			if hb.WordLen != 11 {
				t.Errorf("budget %d: warm-up word length %d, want the longest word's 11", budget, hb.WordLen)
			}
			if got := downloadInt32(t, dev, b.Chars, len(hb.Chars)); !reflect.DeepEqual(got, hb.Chars) {
				t.Errorf("budget %d: the device's characters differ from the host's", budget)
			}
			if err := release(); err != nil {
				t.Fatal(err)
			}
		}
		if budget == 0 && len(warm) != 1 {
			t.Errorf("no budget: %d warm-up batches, want 1 (the longest, a full batch)", len(warm))
		}
		for epoch := range 4 {
			for _, batch := range l.batches(epoch).batches {
				hb, err := cfg.Collate(data, batch)
				if err != nil {
					t.Fatal(err)
				}
				dominated := false
				for _, w := range warm {
					dominated = dominated || (hb.Seq <= w.Seq && hb.Rows <= w.Rows && hb.Real <= w.Real)
				}
				if !dominated {
					t.Errorf("budget %d, epoch %d: a batch of %d steps, %d rows, %d tokens exceeds every warm-up batch", budget, epoch, hb.Seq, hb.Rows, hb.Real)
				}
			}
		}
		// Load refuses while Batches runs.
		for range l.Batches(context.Background(), Position{}) {
			if _, _, err := l.Load(context.Background(), l.Largest()[0]); err == nil {
				t.Error("Load during Batches succeeded")
			}
			break
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.Load(context.Background(), l.Largest()[0]); !errors.Is(err, ErrClosed) {
			t.Errorf("Load after Close: %v, want ErrClosed", err)
		}
	}
}
