package loader

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// lognormalLengths draws n lengths as the research note's synthetic
// long-tailed distribution: lognormal(μ = 3, σ = 0.7), clipped to 1..512.
func lognormalLengths(n int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 0))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(min(max(math.Round(math.Exp(3+0.7*r.NormFloat64())), 1), 512))
	}
	return out
}

// Every epoch's batches hold every example exactly once, at most Batch
// each, longest first; the same epoch gives the same batches (what exact
// resume needs), another epoch others; and sorting within pools cuts the
// padding of random batches (72% in the research note's measurement of
// this distribution at batch 32; 11% with pools of 50 batches).
func TestBuckets(t *testing.T) {
	lengths := lognormalLengths(20_000, 1)
	cfg := BucketConfig{Batch: 32, Shuffle: true, Seed: 7}
	epoch0, err := Buckets(lengths, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]int, len(lengths))
	for _, b := range epoch0 {
		if len(b) == 0 || len(b) > 32 {
			t.Fatalf("a batch of %d examples", len(b))
		}
		for k, i := range b {
			seen[i]++
			if k > 0 && lengths[i] > lengths[b[k-1]] {
				t.Fatalf("batch %v is not longest first", b)
			}
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("example %d is in %d batches, want 1", i, n)
		}
	}
	again, _ := Buckets(lengths, cfg, 0)
	if !reflect.DeepEqual(again, epoch0) {
		t.Error("epoch 0's batches differ between two calls")
	}
	epoch1, _ := Buckets(lengths, cfg, 1)
	if reflect.DeepEqual(epoch1, epoch0) {
		t.Error("epochs 0 and 1 have the same batches")
	}
	random, _ := Buckets(lengths, BucketConfig{Batch: 32, Pool: 1, Shuffle: true, Seed: 7}, 0)
	pr, pp := Padding(lengths, random), Padding(lengths, epoch0)
	t.Logf("padding: %.3f random, %.3f in pools of 50 batches", pr, pp)
	if !(pr > 0.6 && pp < 0.15) {
		t.Errorf("padding %.3f random, %.3f pooled; want > 0.6 and < 0.15 (the research note measured 0.72 and 0.11)", pr, pp)
	}
}

// A token budget bounds every batch's padded size, except a batch of one
// example longer than the budget; without Shuffle the batches follow the
// file's order.
func TestBucketsTokenBudget(t *testing.T) {
	lengths := []int32{5, 40, 3, 3, 12, 100, 7, 8}
	got, err := Buckets(lengths, BucketConfig{Batch: 3, MaxTokens: 30, Pool: 100}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted longest first: 100, 40, 12, 8, 7, 5, 3, 3. 100 and 40 exceed
	// 30 alone; 12+12 fits, a third 12 not; 8·3 = 24 fits.
	want := [][]int32{{5}, {1}, {4, 7}, {6, 0, 2}, {3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("batches %v, want %v", got, want)
	}
	for _, bad := range []BucketConfig{{Batch: 0}, {Batch: 2, MaxTokens: -1}, {Batch: 2, Pool: -3}} {
		if _, err := Buckets(lengths, bad, 0); err == nil {
			t.Errorf("Buckets with %+v: no error", bad)
		}
	}
	if p := Padding([]int32{2, 4}, [][]int32{{1, 0}}); p != 0.25 {
		t.Errorf("Padding of lengths 4 and 2 in one batch = %v, want 0.25", p)
	}
	if !slices.Equal(got[0], []int32{5}) {
		t.Error("the longest example is not first without Shuffle")
	}
}

// Collate lays a batch out time-major, padded with PadID, tags IgnoreLabel
// past each row's length, in the dataset's vocabularies; labelled texts
// become character ids with one label per row.
func TestCollate(t *testing.T) {
	dir := t.TempDir()
	tsv := filepath.Join(dir, "tags.tsv")
	os.WriteFile(tsv, []byte("the\tDET\ncat\tNOUN\nsat\tVERB\n\nzebra\tNOUN\n"), 0o644)
	d, err := OpenDataset(context.Background(), tsv, DatasetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	hb, err := Collate(d, []int32{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	w := d.Words.ID
	noun, _ := d.Labels.ID("NOUN")
	det, _ := d.Labels.ID("DET")
	verb, _ := d.Labels.ID("VERB")
	want := HostBatch{Seq: 3, Rows: 2, Examples: []int32{1, 0}, Lengths: []int32{1, 3}, Real: 4,
		// Steps 0, 1, 2 of rows (zebra) and (the cat sat).
		Tokens: []int32{w("zebra"), w("the"), PadID, w("cat"), PadID, w("sat")},
		Labels: []int32{noun, det, IgnoreLabel, noun, IgnoreLabel, verb}}
	if !reflect.DeepEqual(hb, want) {
		t.Errorf("Collate = %+v\nwant %+v", hb, want)
	}

	// The words' characters: the four words in time-major order (zebra,
	// the, cat, sat), cut to four characters, in a given character
	// vocabulary without "z" (unknown).
	cv, err := NewWords([]string{"<pad>", "<unk>", "e", "b", "r", "a", "t", "h", "c", "s"})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := OpenDataset(context.Background(), tsv, DatasetConfig{Chars: cv})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	hb, err = CollateConfig{Chars: true, MaxWordChars: 4}.Collate(dc, []int32{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	if dc.LongestWord() != 5 {
		t.Errorf("longest word %d, want 5 (zebra)", dc.LongestWord())
	}
	c := cv.ID
	want.WordLen = 4
	want.Chars = []int32{
		UnknownID, c("t"), c("c"), c("s"),
		c("e"), c("h"), c("a"), c("a"),
		c("b"), c("e"), c("t"), c("t"),
		c("r"), PadID, PadID, PadID}
	want.CharLengths = []int32{4, 3, 3, 3}
	// Positions 0, 1, 3, 5 are words 0-3; 2 and 4 padding.
	want.WordIndex = []int32{0, 1, 4, 2, 5, 3}
	want.WordPositions = []int32{0, 1, 3, 5, 2, 4}
	if !reflect.DeepEqual(hb, want) {
		t.Errorf("with characters: Collate = %+v\nwant %+v", hb, want)
	}
	if _, err := (CollateConfig{MaxWordChars: -1}).Collate(dc, []int32{0}); err == nil {
		t.Error("MaxWordChars -1: no error")
	}

	jsonl := filepath.Join(dir, "texts.jsonl")
	os.WriteFile(jsonl, []byte(`{"text": "ab", "label": "x"}`+"\n"+`{"text": "b", "label": "y"}`+"\n"), 0o644)
	d2, err := OpenDataset(context.Background(), jsonl, DatasetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	hb, err = Collate(d2, []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	c = d2.Chars.ID
	if !reflect.DeepEqual(hb.Tokens, []int32{c("a"), c("b"), c("b"), PadID}) || !reflect.DeepEqual(hb.Labels, []int32{0, 1}) || hb.Real != 3 {
		t.Errorf("texts: %+v", hb)
	}
	// A text has no words to take characters of.
	if _, err := (CollateConfig{Chars: true}).Collate(d2, []int32{0, 1}); err == nil {
		t.Error("characters of a text's words: no error")
	}
	if d2.LongestWord() != 0 {
		t.Errorf("longest word of texts %d, want 0", d2.LongestWord())
	}
}

// With Accum, each step's batches are a batch of Batch·Accum split, so
// accumulating 4 batches of 8 trains on the examples batches of 32 would,
// step for step, shuffled or not; with a token budget the runs still
// partition the epoch and each is at most Accum batches.
func TestBucketRuns(t *testing.T) {
	lengths := lognormalLengths(1_000, 3)
	for _, shuffle := range []bool{false, true} {
		big, err := Buckets(lengths, BucketConfig{Batch: 32, Pool: 5, Shuffle: shuffle, Seed: 2}, 1)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := bucketRuns(lengths, BucketConfig{Batch: 8, Accum: 4, Pool: 5, Shuffle: shuffle, Seed: 2}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != len(big) {
			t.Fatalf("shuffle %v: %d steps of 8×4, %d batches of 32", shuffle, len(runs), len(big))
		}
		for i, run := range runs {
			if got := slices.Concat(run...); !slices.Equal(got, big[i]) {
				t.Fatalf("shuffle %v: step %d holds %v, the batch of 32 %v", shuffle, i, got, big[i])
			}
		}
	}
	runs, err := bucketRuns(lengths, BucketConfig{Batch: 16, Accum: 3, MaxTokens: 300, Shuffle: true, Seed: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, run := range runs {
		if len(run) == 0 || len(run) > 3 {
			t.Fatalf("a step of %d batches, want 1..3", len(run))
		}
		for _, b := range run {
			seen += len(b)
		}
	}
	if seen != len(lengths) {
		t.Errorf("the steps hold %d examples, want %d", seen, len(lengths))
	}
}
