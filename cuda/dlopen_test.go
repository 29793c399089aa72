//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
)

// TestDlopenReason: a library that does not load is reported with the
// loader's reason, whichever goroutine, thread and moment it fails on.
// 200 goroutines each load a name that exists nowhere, the driver (as
// cuda.Open does) and cuBLAS; every error must say why. Before, the
// reason was read by a second cgo call, which the goroutine could make on
// another OS thread, whose dlerror had nothing to say: 2 of about 27 runs
// of -device cuda on a machine without a GPU printed "no CUDA driver:
// (is the NVIDIA driver installed?)".
func TestDlopenReason(t *testing.T) {
	const goroutines = 200
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for i := range goroutines {
		wg.Go(func() {
			name := fmt.Sprintf("libgocurrent-no-such-library-%d.so.1", i)
			if i%2 == 0 {
				_, errs[i] = dlopen(name)
				return
			}
			_, errs[i] = loadAPI(libraries{driver: name})
		})
	}
	wg.Wait()
	for i, err := range errs {
		name := fmt.Sprintf("libgocurrent-no-such-library-%d.so.1", i)
		switch {
		case err == nil:
			t.Fatalf("goroutine %d: %s loaded", i, name)
		case i%2 == 1 && !errors.Is(err, device.ErrUnavailable):
			t.Errorf("goroutine %d: loadAPI: %v, want device.ErrUnavailable", i, err)
		case !strings.Contains(err.Error(), name+": "):
			// glibc's reason is "NAME: cannot open shared object file: ...".
			t.Errorf("goroutine %d: %q, want the loader's reason, which names %s", i, err, name)
		}
	}
}

// TestDlopenReasonBLAS: a cuBLAS that does not load is reported with the
// loader's reason for each name tried, from 100 goroutines at once, over
// the emulated driver (a driver library that loads here).
func TestDlopenReasonBLAS(t *testing.T) {
	driver := cudaemu.ForTest(t).Path()
	const goroutines = 100
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for i := range goroutines {
		wg.Go(func() {
			a, err := loadAPI(libraries{driver: driver, blas: []string{fmt.Sprintf("libgocurrent-no-such-blas-%d.so.1", i), "libgocurrent-no-such-blas.so.2"}})
			if err != nil {
				errs[i] = fmt.Errorf("loading the emulated driver: %w", err)
				return
			}
			_, errs[i] = a.BLASVersion()
		})
	}
	wg.Wait()
	for i, err := range errs {
		for _, name := range []string{fmt.Sprintf("libgocurrent-no-such-blas-%d.so.1", i), "libgocurrent-no-such-blas.so.2"} {
			if err == nil || !strings.Contains(err.Error(), name+": ") {
				t.Errorf("goroutine %d: %v, want the loader's reason, which names %s", i, err, name)
			}
		}
	}
}
