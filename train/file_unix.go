//go:build unix

package train

import (
	"errors"
	"fmt"
	"io/fs"
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

// lockAttempts bounds lockFile's tries: each try after the first means
// that a holder released the lock and removed its file between our open
// and our flock, so the bound is met only under a storm of trainers
// taking and releasing one checkpoint's lock.
const lockAttempts = 100

// lockFile opens (creating) the file at name and takes an exclusive
// advisory lock on it without waiting: errLocked when another open file
// holds it. The release removes the file, then closes it, which drops the
// lock, so no lock file outlives its holder.
//
// Removing a file that others may have opened is safe by the usual
// protocol: only the holder removes it, while it holds the lock, and a
// taker, once it holds the lock on the file it opened, checks that this
// file is still the one at name (the same inode); a taker that opened the
// file before its holder removed it finds the name gone or another file's
// and tries again, so two open files never both hold a lock that counts.
func lockFile(name string) (func() error, error) {
	for range lockAttempts {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close() // unlocked and unwritten: nothing to lose on close
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, errLocked
			}
			return nil, err
		}
		held, err := isFileAt(f, name)
		if err != nil {
			_ = f.Close() // unwritten: nothing to lose on close
			return nil, err
		}
		if !held {
			_ = f.Close() // a removed lock file: nothing to lose on close
			continue
		}
		return func() error {
			// Only the file this lock is on: a name someone replaced by
			// hand is not ours to remove. A removal that fails leaves the
			// lock file as before, which the next taker uses.
			if held, err := isFileAt(f, name); err == nil && held {
				_ = os.Remove(name)
			}
			return f.Close()
		}, nil
	}
	return nil, fmt.Errorf("%s was removed and made again %d times while being locked", name, lockAttempts)
}

// isFileAt says whether name is, now, the file f has open.
func isFileAt(f *os.File, name string) (bool, error) {
	open, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(open, now), nil
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
