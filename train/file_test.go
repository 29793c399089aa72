//go:build unix

package train

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func writeText(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

// TestWriteFileRefusesNonRegular: a directory, a named pipe (standing in
// for /dev/null, which only root can make) or a link to one is an error
// matching ErrNotRegular, and stays what it was.
func TestWriteFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("fifo", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		kind fs.FileMode
	}{{sub, fs.ModeDir}, {fifo, fs.ModeNamedPipe}, {link, fs.ModeSymlink}} {
		err := WriteFile(c.path, writeText("x"))
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("WriteFile(%s): got %v, want ErrNotRegular", c.path, err)
		}
		if fi, err := os.Lstat(c.path); err != nil || fi.Mode().Type() != c.kind {
			t.Errorf("%s after the refused write: %v, %v; want it unchanged (%v)", c.path, fi.Mode(), err, c.kind)
		}
	}
	if fi, _ := os.Lstat(fifo); fi.Mode().Type() != fs.ModeNamedPipe {
		t.Errorf("the pipe behind the link became %v", fi.Mode())
	}
}

// TestWriteFileThroughSymlink: the link's target gets the contents, the
// link stays a link; a dangling link's target is created.
func TestWriteFileThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, writeText("new")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != fs.ModeSymlink {
		t.Errorf("the link after the write: %v, %v; want a symbolic link", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Errorf("the target holds %q, want %q", b, "new")
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink("created", dangling); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(dangling, writeText("made")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "created")); string(b) != "made" {
		t.Errorf("a dangling link's target holds %q, want %q", b, "made")
	}
	if fi, _ := os.Lstat(dangling); fi.Mode().Type() != fs.ModeSymlink {
		t.Errorf("the dangling link became %v", fi.Mode())
	}
}

// TestWriteFileMode: a new file is 0666 under the umask (022 here: 0644),
// not os.CreateTemp's 0600; a replaced file keeps its mode.
func TestWriteFileMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "new")
	if err := WriteFile(path, writeText("x")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("a new file's mode: %v, want 0644", fi.Mode().Perm())
	}
	kept := filepath.Join(dir, "kept")
	if err := os.WriteFile(kept, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(kept, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(kept, writeText("y")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(kept); fi.Mode().Perm() != 0o640 {
		t.Errorf("a replaced file's mode: %v, want its old 0640", fi.Mode().Perm())
	}
}

// TestWriteFileRemovesLeftovers: the next write removes the temporary
// files of a writer that died (old, unlocked, named as ours), and leaves a
// live writer's (locked), a fresh one's and anything not ours.
func TestWriteFileRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ck.safetensors")
	make := func(name string, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
		then := time.Now().Add(-age)
		if err := os.Chtimes(p, then, then); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := make(".ck.safetensors"+tempMarker+"dead", time.Hour)
	fresh := make(".ck.safetensors"+tempMarker+"fresh", 0)
	live := make(".ck.safetensors"+tempMarker+"live", time.Hour)
	other := make(".ck.safetensors.tmp-someone-else", time.Hour)
	otherFile := make(".other"+tempMarker+"dead", time.Hour)
	f, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := lockTemp(f); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, writeText("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a dead writer's temporary file is still there (%v)", err)
	}
	for _, p := range []string{fresh, live, other, otherFile} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed (%v); only a dead writer's file of this path may be", filepath.Base(p), err)
		}
	}
}
