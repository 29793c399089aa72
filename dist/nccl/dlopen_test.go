//go:build cgo

package nccl

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/dist"
)

// TestDlopenReason: an NCCL that does not load is reported with the
// loader's reason for each name tried, from 200 goroutines at once (the
// reason is read in the call that failed: dlerror's state is per OS
// thread, and a later cgo call may run on another, as cuda's
// TestDlopenReason found).
func TestDlopenReason(t *testing.T) {
	const goroutines = 200
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	names := func(i int) []string {
		return []string{fmt.Sprintf("libgocurrent-no-such-nccl-%d.so.2", i), "libgocurrent-no-such-nccl.so.3"}
	}
	for i := range goroutines {
		wg.Go(func() { _, errs[i] = open(names(i)) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, dist.ErrUnavailable) {
			t.Errorf("goroutine %d: %v, want dist.ErrUnavailable", i, err)
			continue
		}
		for _, name := range names(i) {
			// glibc's reason is "NAME: cannot open shared object file: ...".
			if !strings.Contains(err.Error(), name+": ") {
				t.Errorf("goroutine %d: %v, want the loader's reason, which names %s", i, err, name)
			}
		}
	}
}
