package train

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotRegular is matched by the error of writing over something that is
// not a regular file (a directory, a device such as /dev/null, a pipe, a
// socket): WriteFile replaces regular files only.
var ErrNotRegular = errors.New("not a regular file")

// ErrCheckpointInUse is matched by the error of New when another trainer,
// in this process or another, holds Config.Checkpoint: two runs writing one
// file would each overwrite the other's work.
var ErrCheckpointInUse = errors.New("train: checkpoint in use by another trainer")

// lockCheckpoint takes the advisory lock of the checkpoint at path (on
// ".NAME.lock" beside the file the path resolves to, so two paths to one
// file share it) and returns its release, which removes the lock file
// (lockFile says why that is safe).
func lockCheckpoint(path string) (func() error, error) {
	dest, _, err := destination(path)
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w", path, err)
	}
	dir, base := filepath.Split(dest)
	if dir == "" {
		dir = "."
	}
	lock := filepath.Join(dir, "."+base+".lock")
	release, err := lockFile(lock)
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("%w: %s (its lock %s is held; another run writes there)", ErrCheckpointInUse, path, lock)
	}
	if err != nil {
		return nil, fmt.Errorf("train: locking checkpoint %s: %w", path, err)
	}
	return release, nil
}

// errLocked is lockFile's error when another holder has the lock.
var errLocked = errors.New("locked")

// tempMarker sits between the destination's name and a random suffix in
// the name of WriteFile's temporary files: ".NAME.tmp-gocurrent-RANDOM".
// Only names of this form are ever removed as left over.
const tempMarker = ".tmp-gocurrent-"

// WriteFile writes the file at path the way checkpoints are written, so
// that no failure or crash loses what the path held:
//
//   - write fills a temporary file in the same directory, which is synced
//     and renamed over the destination, and the directory is synced: a
//     crash leaves the old file or the new one, never a torn one; a failed
//     write leaves the old file and no temporary file;
//   - only a regular file is replaced: a directory, a device (/dev/null), a
//     pipe or a socket at path is an error matching ErrNotRegular, and is
//     left alone;
//   - a symbolic link is written through: its target gets the new
//     contents and the link stays a link (a dangling link's target is
//     created);
//   - a new file gets the usual mode, 0666 under the process's umask
//     (0644 with the common umask 022); a replaced file keeps its mode;
//   - temporary files a killed writer left next to the destination
//     (named ".NAME.tmp-gocurrent-*") are removed, where the platform can
//     tell a dead writer's from a live one's (an advisory lock on Unix).
func WriteFile(path string, write func(io.Writer) error) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("train: writing %s: %w", path, err)
		}
	}()
	dest, mode, err := destination(path)
	if err != nil {
		return err
	}
	dir, base := filepath.Split(dest)
	if dir == "" {
		dir = "."
	}
	removeLeftovers(dir, base)
	tmp, err := createTemp(dir, base, mode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// The temporary file is being discarded: an error closing it
			// (or closing it twice) loses nothing. One removing it leaves
			// it behind, which the caller should hear of.
			_ = tmp.Close()
			if rerr := os.Remove(tmp.Name()); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	// The rename happens with the lock still held (Close releases it), so
	// no other writer takes this file for a dead writer's leftover.
	if err = os.Rename(tmp.Name(), dest); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		// Not every file system can sync a directory; the rename itself
		// has happened either way, and the directory was only read.
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// destination resolves path to the file to replace (through symbolic
// links) and the mode a replacement keeps: the existing file's, or 0 for a
// new file (the umask then applies). Anything but a regular file at the
// resolved path is an error.
func destination(path string) (string, fs.FileMode, error) {
	dest := path
	for range 40 { // as many links as Linux follows
		fi, err := os.Lstat(dest)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return dest, 0, nil
		case err != nil:
			return "", 0, err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(dest)
			if err != nil {
				return "", 0, err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(dest), target)
			}
			dest = target
		case !fi.Mode().IsRegular():
			what := "a " + fileKind(fi.Mode())
			if dest != path {
				what += " (" + dest + ")"
			}
			return "", 0, fmt.Errorf("%w: it is %s, which would be replaced", ErrNotRegular, what)
		default:
			return dest, fi.Mode().Perm(), nil
		}
	}
	return "", 0, fmt.Errorf("too many levels of symbolic links")
}

// fileKind names what a mode describes, for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// createTemp creates ".BASE.tmp-gocurrent-RANDOM" in dir with mode (0666
// under the umask when mode is 0), locked against removeLeftovers for as
// long as it is open. os.CreateTemp would make it 0600.
func createTemp(dir, base string, mode fs.FileMode) (*os.File, error) {
	perm := fs.FileMode(0o666)
	if mode != 0 {
		perm = mode
	}
	for range 10 {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, err
		}
		name := filepath.Join(dir, "."+base+tempMarker+hex.EncodeToString(r[:]))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if mode != 0 {
			// The umask applied at creation; a replaced file keeps its
			// mode exactly.
			if err := f.Chmod(mode); err != nil {
				_ = f.Close()
				_ = os.Remove(name)
				return nil, err
			}
		}
		if err := lockTemp(f); err != nil {
			_ = f.Close()
			_ = os.Remove(name)
			return nil, err
		}
		return f, nil
	}
	return nil, errors.New("no free temporary file name")
}

// removeLeftovers removes the temporary files of writers of dir/base that
// died before renaming theirs: ours by name, and not locked by a live
// writer. It is best effort: a leftover it cannot remove stays.
func removeLeftovers(dir, base string) {
	matches, err := filepath.Glob(filepath.Join(dir, "."+globEscape(base)+tempMarker+"*"))
	if err != nil {
		return
	}
	for _, m := range matches {
		if fi, err := os.Lstat(m); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if abandoned(m) {
			_ = os.Remove(m)
		}
	}
}

// globEscape quotes the characters filepath.Match treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
