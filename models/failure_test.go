package models

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device/meta"
)

// TestEveryAllocationFails fails, in turn, every device allocation that
// building a model, its loaders and its trainer and taking its first steps
// makes (on the meta device, which computes nothing, so every k is cheap),
// for the char-RNN, the tagger with character features and the
// classifier: each run fails with the out-of-memory error, nothing panics
// (a typed nil in an interface would), and everything built is freed.
func TestEveryAllocationFails(t *testing.T) {
	ctx := context.Background()
	specs := planCases()
	for _, spec := range []MemorySpec{specs[1], specs[3], specs[4]} {
		t.Run(specName(spec), func(t *testing.T) {
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
			}
		})
	}
}
