//go:build cgo

package cudaemu

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGraphs runs testdata/graph.cc, a C++ program that loads the
// emulator with dlopen as package cuda does and calls its driver and
// cuBLAS entry points directly: stream capture (kernels, copies, memsets
// and GEMMs recorded, not run), graphs replayed at each launch with the
// parameter values of capture, the calls a capture refuses in each mode
// (and from which thread), the invalidation they cause, the legacy
// stream, replays over freed memory, and captures across streams (fork,
// join, unjoined, unmatched, merged, a missing dependency that a replay
// shows). Each scenario prints "pass NAME"
// when all its checks held; a failed check prints a FAIL line.
func TestGraphs(t *testing.T) {
	lib := ForTest(t)
	gxx, err := compiler()
	if err != nil {
		t.Skip(err)
	}
	dir, err := selfDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "graph")
	build := exec.Command(gxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-pthread", "-o", bin,
		filepath.Join(dir, "testdata", "graph.cc"), "-ldl")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, msg)
	}
	out, err := exec.Command(bin, lib.Path()).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		}
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	// Every scenario ran to the end: a program that stopped early, or
	// lost one, does not pass.
	for _, name := range []string{"capture_replay", "synchronisation", "modes", "errors", "gemm", "freed", "fork_join", "teardown"} {
		if !strings.Contains(string(out), "pass "+name+"\n") {
			t.Errorf("scenario %s did not pass:\n%s", name, out)
		}
	}
}
