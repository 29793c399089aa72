package loader_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/loader"
)

// TestConfigSizes: batch, accumulation, window and ring sizes whose
// products overflow are errors naming the fields and their values, never
// a divide by zero (issue 46: Batch 2^40 with Accum 2^24, 2^32 with 2^32
// and 2^62 with 4 wrapped to 0 streams and panicked in newPlan), and a
// ring or a crew of absurd size is refused before anything is allocated.
func TestConfigSizes(t *testing.T) {
	d := openDevice(t)
	text := tokenize(t, strings.Repeat("hello world, this is a text. ", 40))
	for _, c := range []struct {
		name  string
		cfg   loader.Config
		words []string
	}{
		{"batch 2^40 accum 2^24", loader.Config{Batch: 1 << 40, Accum: 1 << 24}, []string{"Batch × Accum = 1099511627776 × 16777216 overflows"}},
		{"batch 2^32 accum 2^32", loader.Config{Batch: 1 << 32, Accum: 1 << 32}, []string{"Batch × Accum = 4294967296 × 4294967296 overflows"}},
		{"batch 2^62 accum 4", loader.Config{Batch: 1 << 62, Accum: 4}, []string{"4611686018427387904 × 4 overflows"}},
		{"seq MaxInt", loader.Config{Seq: math.MaxInt}, []string{"Seq = 9223372036854775807", "overflows"}},
		{"batch × seq", loader.Config{Batch: 1 << 40, Seq: 1 << 30}, []string{"1099511627776", "overflow"}},
		{"streams × window", loader.Config{Batch: 1 << 31, Accum: 1 << 16, Seq: 1 << 20}, []string{"Batch × Accum × (Seq + 1)", "overflows"}},
		{"shard", loader.Config{Batch: 1 << 62, Shard: loader.Shard{Of: 4}}, []string{"Batch × Shard.Of = 4611686018427387904 × 4 overflows"}},
		{"prefetch", loader.Config{Prefetch: 1 << 40}, []string{"Prefetch = 1099511627776, want at most 1024"}},
		{"workers", loader.Config{Workers: 1 << 40}, []string{"Workers = 1099511627776, want at most 1024"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := loader.New(d, text, c.cfg)
			if err == nil {
				l.Close()
				t.Fatal("New succeeded, want an error")
			}
			for _, w := range c.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// A batch that is merely larger than the text is the text's error.
	_, err := loader.New(d, text, loader.Config{Batch: 1 << 20})
	if !errors.Is(err, loader.ErrTooShort) {
		t.Errorf("batch 2^20 of a short text: got %v, want ErrTooShort", err)
	}
}

// TestBucketSizes: a bucketing pool whose size overflows is an error.
func TestBucketSizes(t *testing.T) {
	_, err := loader.Buckets([]int32{3, 1, 2}, loader.BucketConfig{Batch: 1 << 40, Pool: 1 << 30}, 0)
	if err == nil || !strings.Contains(err.Error(), "Pool × Batch × Accum = 1073741824 × 1099511627776 × 1 overflows") {
		t.Errorf("got %v, want the pool's overflow named", err)
	}
}

// TestSeqLoaderSizes: a sequence loader whose batch of the longest
// sequence overflows, or whose ring is absurd, is refused by name.
func TestSeqLoaderSizes(t *testing.T) {
	d := openDevice(t)
	const tsv = "the\tDET\ncat\tNOUN\nsat\tVERB\n\na\tDET\ndog\tNOUN\n\n"
	data, err := loader.NewDataset(context.Background(), strings.NewReader(tsv), int64(len(tsv)), "test.tsv", loader.DatasetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	for _, c := range []struct {
		name string
		cfg  loader.SeqConfig
		word string
	}{
		{"batch 2^62", loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 1 << 62, Pool: 1}}, "Batch × Accum = 4611686018427387904 × 1 examples a step, more than 1048576"},
		{"pool", loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 1 << 40, Pool: 1 << 40}}, "Pool × Batch × Accum"},
		{"prefetch", loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 2}, Prefetch: 1 << 40}, "Prefetch = 1099511627776, want at most 1024"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := loader.NewSeqLoader(d, data, c.cfg)
			if err == nil {
				l.Close()
				t.Fatal("NewSeqLoader succeeded, want an error")
			}
			if !strings.Contains(err.Error(), c.word) {
				t.Errorf("error %q does not say %q", err, c.word)
			}
		})
	}
}

// TestCycle: a cycled text reads as its definition says, at any offset
// and through slices, in constant memory however long (2^50 tokens here).
func TestCycle(t *testing.T) {
	v, err := loader.NewVocab([]string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	text, err := loader.Cycle(v, 1<<50)
	if err != nil {
		t.Fatal(err)
	}
	if text.Len() != 1<<50 || text.Vocab() != v {
		t.Fatalf("Len %d, Vocab %v; want 2^50 and the vocabulary given", text.Len(), text.Vocab())
	}
	dst := make([]int32, 5)
	for _, start := range []int64{0, 1, 1<<50 - 5} {
		if err := text.Read(start, dst); err != nil {
			t.Fatal(err)
		}
		for i, id := range dst {
			if want := int32((start + int64(i)) % 3); id != want {
				t.Errorf("token %d = %d, want %d", start+int64(i), id, want)
			}
		}
	}
	sl := text.Slice(7, 20)
	if err := sl.Read(0, dst); err != nil || dst[0] != 1 {
		t.Errorf("the slice from 7 starts with %d (%v), want id 7 mod 3 = 1", dst[0], err)
	}
	if err := text.Read(1<<50-2, dst); err == nil {
		t.Error("a read past the end succeeded")
	}
	if _, err := loader.Cycle(v, 0); !errors.Is(err, loader.ErrEmpty) {
		t.Errorf("Cycle of 0 tokens: %v, want ErrEmpty", err)
	}
}
