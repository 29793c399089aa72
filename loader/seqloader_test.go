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
// opens them.
func taggedDataset(t *testing.T, n int) *Dataset {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	for range n {
		for range 1 + r.IntN(20) {
			fmt.Fprintf(&b, "w%d\tT%d\n", r.IntN(50), r.IntN(5))
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
// on the device as Collate lays it out (tokens, labels, lengths), every
// example once per epoch; from a position it delivers the rest of the same
// sequence (exact resume), and ends cleanly when the consumer stops.
func TestSeqLoader(t *testing.T) {
	dev := testdevice.Open(t)
	d := taggedDataset(t, 200)
	cfg := SeqConfig{Bucket: BucketConfig{Batch: 8, MaxTokens: 96, Pool: 5, Shuffle: true, Seed: 9}, Epochs: 2}
	l, err := NewSeqLoader(dev, d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var all []Position
	var examples [][]int32
	seen := map[int][]int{0: make([]int, d.Len()), 1: make([]int, d.Len())}
	for b, err := range l.Batches(context.Background(), Position{}) {
		if err != nil {
			t.Fatal(err)
		}
		pos := Position{b.Epoch, b.Index}
		want, err := Collate(d, mustBuckets(t, d, cfg.Bucket, b.Epoch)[b.Index])
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
		if want.Seq*want.Rows > 96 && want.Rows > 1 {
			t.Errorf("batch %+v: %d x %d over the token budget of 96", pos, want.Seq, want.Rows)
		}
		for _, i := range want.Examples {
			seen[b.Epoch][i]++
		}
		all = append(all, pos)
		examples = append(examples, want.Examples)
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
