package cuda

import "testing"

// TestWorkspace: the cuBLAS workspace a Config asks for, as Open takes it
// and the planner counts it.
func TestWorkspace(t *testing.T) {
	for ws, want := range map[int64]int64{0: 32 << 20, -1: 0, 4 << 20: 4 << 20} {
		if got := (Config{BLASWorkspace: ws}).Workspace(); got != want {
			t.Errorf("BLASWorkspace %d: Workspace() = %d, want %d", ws, got, want)
		}
	}
}
