package svc_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/examples/trainsvc/svc"
)

// lockedBuffer is a log's destination that the jobs' goroutines write
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDataDirectory: a job's data directory may hold files that are not
// text (a binary file, a checkpoint): the loader leaves them out, the job
// trains on the text, and the log names what was left out. Before, the
// first such file failed the job with "invalid UTF-8".
func TestDataDirectory(t *testing.T) {
	data := t.TempDir()
	writeCorpus(t, data)
	if err := os.WriteFile(filepath.Join(data, "blob.bin"), []byte("\x7fELF\x02\x01\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log lockedBuffer
	srv, err := svc.New(svc.Config{Device: openDevice(t), StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, hs: httptest.NewServer(srv.Handler()), client: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(e.stop)
	spec := healthy(data, "gru")
	spec.Steps = 2
	st := e.wait(e.submit(spec).ID)
	if st.State != svc.Done {
		t.Fatalf("the job on a directory with a binary file: %s (%s), want done", st.State, st.Error)
	}
	e.stop()
	want := "trainsvc: job " + st.ID + ": skipped 1 file of " + data + " that is not text: 1 binary (blob.bin)"
	if !strings.Contains(log.String(), want) {
		t.Errorf("the log:\n%s\nwant a line saying %q", log.String(), want)
	}
}
