package cli

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/cuda"
)

// TestPlanTarget checks the device a plan is for: one of -capacity bytes,
// a cuda one with cuBLAS's workspace, held to -memory-limit; the CPU
// opened and read; an unknown -device a usage error.
func TestPlanTarget(t *testing.T) {
	for _, c := range []struct {
		spec            string
		capacity, limit int64
		want            int64
		workspace       int64
	}{
		{"cuda", 80 << 30, 0, 80 << 30, 32 << 20},
		{"cuda:1", 80 << 30, 6 << 30, 6 << 30, 32 << 20},
		{"cpu", 1 << 30, 0, 1 << 30, 0},
		{"cpu", 1 << 30, 2 << 30, 1 << 30, 0},
	} {
		got, err := PlanTarget(c.spec, cuda.Config{}, c.capacity, c.limit)
		if err != nil || got.Capacity != c.want || got.Workspace != c.workspace || got.KernelTemporaries != (c.workspace > 0) || got.Name != c.spec {
			t.Errorf("PlanTarget(%q, %d, %d) = %+v, %v; want capacity %d, workspace %d", c.spec, c.capacity, c.limit, got, err, c.want, c.workspace)
		}
	}
	got, err := PlanTarget("cpu", cuda.Config{}, 0, 16<<20)
	if err != nil || got.Capacity != 16<<20 || got.Name != "cpu" {
		t.Errorf("the CPU held to 16 MiB: %+v, %v", got, err)
	}
	if _, err := PlanTarget("tpu", cuda.Config{}, 0, 0); !errors.Is(err, ErrUsage) {
		t.Errorf("-device tpu: %v, want a usage error", err)
	}
}
