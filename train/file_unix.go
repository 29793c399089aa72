//go:build unix

package train

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// lockTemp takes an exclusive advisory lock on a temporary file for as
// long as it is open (flock: released by Close, or by the kernel when the
// writer dies), so that removeLeftovers never takes a live writer's file
// for a leftover.
func lockTemp(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// lockFile opens (creating) the file at name and takes an exclusive
// advisory lock on it without waiting: errLocked when another open file
// holds it. The release closes the file, which drops the lock.
func lockFile(name string) (func() error, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return f.Close, nil
}

// leftoverAge is how old a temporary file must be before it can count as
// abandoned: a writer locks its file immediately after creating it, and
// this covers that instant with room to spare.
const leftoverAge = 5 * time.Second

// abandoned reports whether the temporary file at name was left by a
// writer that is gone: old enough, and nobody holds its lock.
func abandoned(name string) bool {
	fi, err := os.Stat(name)
	if err != nil || time.Since(fi.ModTime()) < leftoverAge {
		return false
	}
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
