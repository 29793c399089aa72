package loader

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device/cpu"
)

// TestSeqShards checks SeqConfig.Shard: for every batch, the ranks'
// shares, in rank order, are the batch's examples, each of ⌊k/n⌋ or
// ⌈k/n⌉ (empty past the examples of a batch smaller than the job), and
// every rank sees the whole batch's labels and real tokens.
func TestSeqShards(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	d := taggedDataset(t, 23)
	bc := BucketConfig{Batch: 5, Pool: 2, Shuffle: true, Seed: 3}
	whole := mustBuckets(t, d, bc, 0)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			shares := make([][][]int32, n) // per rank, per batch
			for r := range n {
				l, err := NewSeqLoader(dev, d, SeqConfig{Bucket: bc, Epochs: 1, Shard: Shard{Rank: r, Of: n}})
				if err != nil {
					t.Fatal(err)
				}
				i := 0
				for b, err := range l.Batches(context.Background(), Position{}) {
					if err != nil {
						t.Fatal(err)
					}
					wb, err := Collate(d, whole[i])
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(b.WholeLabels, wb.Labels) || b.WholeReal != wb.Real {
						t.Fatalf("rank %d batch %d: whole labels %v (real %d), want %v (%d)", r, i, b.WholeLabels, b.WholeReal, wb.Labels, wb.Real)
					}
					shares[r] = append(shares[r], b.Host.Examples)
					i++
				}
				l.Close()
				if i != len(whole) {
					t.Fatalf("rank %d: %d batches, want %d", r, i, len(whole))
				}
			}
			empty := 0
			for i, w := range whole {
				var got []int32
				for r := range n {
					s := shares[r][i]
					if lo, hi := len(w)/n, (len(w)+n-1)/n; len(s) < lo || len(s) > hi {
						t.Errorf("batch %d of %d: rank %d has %d, want %d to %d", i, len(w), r, len(s), lo, hi)
					}
					if len(s) == 0 {
						empty++
					}
					got = append(got, s...)
				}
				if !slices.Equal(got, w) {
					t.Errorf("batch %d: the shares make %v, want %v", i, got, w)
				}
			}
			if n == 4 && empty == 0 {
				t.Error("no empty share with 4 ranks: the test no longer covers one (23 = 4·5 + 3)")
			}
		})
	}
}
