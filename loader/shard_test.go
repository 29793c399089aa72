package loader_test

import (
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/loader"
)

// TestShards checks Config.Shard: the ranks of a data-parallel job with
// batch 6 (Of 2 with Batch 3, Of 3 with Batch 2) read, batch for batch,
// the rows of the undivided loader's batch 6, rank k rows k·Batch.. of
// it, in Streams mode (with accumulation) and in shuffled Windows mode.
func TestShards(t *testing.T) {
	d := openDevice(t)
	s := randomText(3, 2000)
	for _, c := range []struct {
		mode  loader.Mode
		accum int
	}{{loader.Streams, 1}, {loader.Streams, 2}, {loader.Windows, 1}} {
		whole := loader.Config{Mode: c.mode, Batch: 6, Seq: 5, Accum: c.accum, Stride: 3, Seed: 9, Epochs: 2}
		ref := collect(t, d, newLoader(t, d, tokenize(t, s), whole), loader.Position{}, 0)
		for _, of := range []int{2, 3} {
			for rank := range of {
				t.Run(fmt.Sprintf("%v/accum%d/rank%dof%d", c.mode, c.accum, rank, of), func(t *testing.T) {
					cfg := whole
					cfg.Batch, cfg.Shard = 6/of, loader.Shard{Rank: rank, Of: of}
					if cfg.Rows() != 6 {
						t.Fatalf("Rows() = %d, want 6", cfg.Rows())
					}
					l := newLoader(t, d, tokenize(t, s), cfg)
					all := collect(t, d, l, loader.Position{}, 0)
					if len(all) != len(ref) {
						t.Fatalf("%d batches, want %d", len(all), len(ref))
					}
					b := cfg.Batch
					for i, g := range all {
						w := ref[i]
						if g.b.Epoch != w.b.Epoch || g.b.Index != w.b.Index || g.b.Group != w.b.Group || g.b.Reset != w.b.Reset || g.b.Rows != b {
							t.Fatalf("batch %d: %+v, want the place of %+v with %d rows", i, g.b, w.b, b)
						}
						for k := range cfg.Seq {
							for r := range b {
								if g.inputs[k*b+r] != w.inputs[k*6+rank*b+r] || g.targets[k*b+r] != w.targets[k*6+rank*b+r] {
									t.Fatalf("batch %d step %d row %d: got %d→%d, want row %d of the whole batch, %d→%d", i, k, r,
										g.inputs[k*b+r], g.targets[k*b+r], rank*b+r, w.inputs[k*6+rank*b+r], w.targets[k*6+rank*b+r])
								}
							}
						}
					}
				})
			}
		}
	}
	if _, err := loader.New(d, tokenize(t, s), loader.Config{Shard: loader.Shard{Rank: 2, Of: 2}}); err == nil {
		t.Error("New with rank 2 of 2: no error")
	}
}
