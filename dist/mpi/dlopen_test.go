//go:build cgo

package mpi

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/dist"
)

// TestDlopenReason: an Open MPI that does not load is reported with the
// loader's reason from 200 goroutines at once (the reason is read in the
// call that failed: dlerror's state is per OS thread, and a later cgo
// call may run on another, as cuda's TestDlopenReason found).
func TestDlopenReason(t *testing.T) {
	const goroutines = 200
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for i := range goroutines {
		wg.Go(func() { _, errs[i] = loadAPI(fmt.Sprintf("libgocurrent-no-such-mpi-%d.so.40", i)) })
	}
	wg.Wait()
	for i, err := range errs {
		name := fmt.Sprintf("libgocurrent-no-such-mpi-%d.so.40", i)
		// glibc's reason is "NAME: cannot open shared object file: ...".
		if !errors.Is(err, dist.ErrUnavailable) || !strings.Contains(err.Error(), "cannot load "+name+": "+name+": ") {
			t.Errorf("goroutine %d: %v, want dist.ErrUnavailable with the loader's reason, which names %s", i, err, name)
		}
	}
}
