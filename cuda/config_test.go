package cuda

import (
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
)

// TestWorkspace: the cuBLAS workspace a Config asks for, as Open takes it
// and the planner counts it.
func TestWorkspace(t *testing.T) {
	for ws, want := range map[int64]int64{0: 32 << 20, -1: 0, 4 << 20: 4 << 20} {
		if got := (Config{BLASWorkspace: ws}).Workspace(); got != want {
			t.Errorf("BLASWorkspace %d: Workspace() = %d, want %d", ws, got, want)
		}
	}
}

// TestWorkspaceUnder: under a memory limit the workspace is at most a
// sixteenth of it (24 MiB: 1.5 MiB, where 32 MiB would not even fit), and
// none when that is below cuBLAS's 16 KiB; without a limit, Workspace.
func TestWorkspaceUnder(t *testing.T) {
	for _, c := range []struct {
		ws, limit, want int64
	}{
		{0, 0, 32 << 20},
		{0, 24 << 20, 24 << 20 / 16},
		{0, 1 << 30, 32 << 20},
		{4 << 20, 32 << 20, 2 << 20},
		{0, 128 << 10, 0},
		{-1, 24 << 20, 0},
	} {
		if got := (Config{BLASWorkspace: c.ws}).WorkspaceUnder(c.limit); got != c.want {
			t.Errorf("BLASWorkspace %d under %d: %d, want %d", c.ws, c.limit, got, c.want)
		}
	}
}

// TestOpenUnderLimit: a device opened under a 24 MiB memory limit takes
// 1.5 MiB of cuBLAS workspace, and opens; before, it asked for 32 MiB and
// Open failed out of memory.
func TestOpenUnderLimit(t *testing.T) {
	d := openFake(t, newFakeAPI(), Config{Memory: alloc.Config{MemoryLimit: 24 << 20}})
	if got := d.BLASWorkspace(); got != 24<<20/16 {
		t.Errorf("BLASWorkspace() = %d, want %d", got, 24<<20/16)
	}
}
