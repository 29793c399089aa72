package models

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/internal/leak"
)

// TestEveryAllocationFails fails, in turn, every device allocation that
// building a model, its loaders and its trainer and taking its first steps
// (a validation, a warm-up, accumulation) makes (on the meta device, which
// computes nothing, so every k is cheap), for every planned case: the
// char-RNN, the tagger and the classifier, LSTM and GRU, with and without
// character features, dropout, recomputation, each optimizer: each run
// fails with the out-of-memory error, nothing panics (a typed nil in an
// interface would), everything built is freed and no goroutine is left.
func TestEveryAllocationFails(t *testing.T) {
	ctx := context.Background()
	for _, spec := range planCases() {
		t.Run(specName(spec), func(t *testing.T) {
			base := leak.Count()
			d, err := meta.Open(meta.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := runSpec(ctx, d, spec, nil); err != nil {
				t.Fatal(err)
			}
			n := d.Allocs()
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if n < 10 {
				t.Fatalf("the run made %d allocations", n)
			}
			t.Logf("failing each of the run's %d allocations in turn", n)
			for k := 1; k <= n; k++ {
				d, err := meta.Open(meta.Config{})
				if err != nil {
					t.Fatal(err)
				}
				d.FailAlloc(k)
				err = func() (err error) {
					defer func() {
						if r := recover(); r != nil {
							err = fmt.Errorf("panic: %v", r)
						}
					}()
					_, err = runSpec(ctx, d, spec, nil)
					return err
				}()
				if !errors.Is(err, alloc.ErrOutOfMemory) {
					t.Errorf("allocation %d of %d failed: the run returned %v, want the out-of-memory error", k, n, err)
				}
				st := d.MemStats()
				if left := st.AllocatedBytes[alloc.AllPools].Current; left != 0 {
					t.Errorf("allocation %d of %d failed: %d bytes left allocated (%v)", k, n, left, st.CategoryBytes)
				}
				if left := d.StagingMemory().Stats().AllocatedBytes[alloc.AllPools].Current; left != 0 {
					t.Errorf("allocation %d of %d failed: %d bytes of staging left allocated", k, n, left)
				}
				if err := d.Close(); err != nil {
					t.Fatal(err)
				}
				leak.Expect(t, base, fmt.Sprintf("allocation %d of %d failed", k, n))
			}
		})
	}
}
