//go:build unix

package train

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// hammerLock takes and releases the lock at name n times, retrying while
// it is held elsewhere, and while holding it makes marker with O_EXCL and
// removes it before releasing: a marker that already exists means that
// another holder, goroutine or process, holds the lock too. It returns
// how often the lock was found held.
func hammerLock(name, marker string, n int) (busy int, err error) {
	for taken := 0; taken < n; {
		release, err := lockFile(name)
		if errors.Is(err, errLocked) {
			busy++
			runtime.Gosched()
			continue
		}
		if err != nil {
			return busy, err
		}
		m, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return busy, errors.Join(fmt.Errorf("two holders at once (the marker: %w)", err), release())
		}
		runtime.Gosched() // let the others try while this one holds it
		if err := errors.Join(m.Close(), os.Remove(marker), release()); err != nil {
			return busy, err
		}
		taken++
	}
	return busy, nil
}

// TestLockFileExcludes: 8 goroutines take and release one lock 200 times
// each, and never two hold it at once, though each release removes the
// lock file that the others may have open (flock locks an open file
// description, so goroutines that open the path each exclude one
// another as processes do); afterwards no lock file is left. Removing the
// file without the taker's check that it locked the file still at the
// path (lockFile's inode check) lets two in within a few hundred tries.
func TestLockFileExcludes(t *testing.T) {
	dir := t.TempDir()
	name, marker := filepath.Join(dir, ".run.safetensors.lock"), filepath.Join(dir, "holder")
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	var busy atomic.Int64
	errs := make([]error, goroutines)
	for i := range goroutines {
		wg.Go(func() {
			n, err := hammerLock(name, marker, each)
			busy.Add(int64(n))
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("goroutine %d: %v", i, err)
		}
	}
	// Without contention the test would show nothing.
	if busy.Load() == 0 {
		t.Errorf("no goroutine ever found the lock held: the test raced nothing")
	}
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the lock file after every release: %v, want it gone", err)
	}
}

// TestLockFileExcludesProcesses is TestLockFileExcludes over 4 processes
// (this test binary again, as TestLockFileHelper) of 2 goroutines each.
func TestLockFileExcludesProcesses(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, ".run.safetensors.lock")
	const procs = 4
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestLockFileHelper$", "-test.count=1")
		cmds[i].Env = append(os.Environ(), "GOCURRENT_LOCK_HELPER="+name)
	}
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i, c := range cmds {
		wg.Go(func() { outs[i], errs[i] = c.CombinedOutput() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v\n%s", i, err, outs[i])
		}
	}
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the lock file after every release: %v, want it gone", err)
	}
}

// TestLockFileHelper is one process of TestLockFileExcludesProcesses: it
// runs only under GOCURRENT_LOCK_HELPER, the lock's path.
func TestLockFileHelper(t *testing.T) {
	name := os.Getenv("GOCURRENT_LOCK_HELPER")
	if name == "" {
		t.Skip("a helper process of TestLockFileExcludesProcesses")
	}
	const goroutines, each = 2, 150
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for i := range goroutines {
		wg.Go(func() { _, errs[i] = hammerLock(name, filepath.Join(filepath.Dir(name), "holder"), each) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("pid %s goroutine %d: %v", strconv.Itoa(os.Getpid()), i, err)
		}
	}
}
