package cudaemu

import (
	"errors"
	"os/exec"
	"testing"
)

// ForTest returns the emulator Cached builds, or skips t where it cannot
// be had: no g++ (exec.ErrNotFound) or a CGO_ENABLED=0 build
// (errors.ErrUnsupported). Any other failure fails t.
func ForTest(t testing.TB) *Lib {
	t.Helper()
	lib, err := Cached()
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no CUDA emulator here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return lib
}
