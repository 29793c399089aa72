package svc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/examples/trainsvc/svc"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// openDevice opens the test device (GOCURRENT_TEST_DEVICE), closed when
// the test ends.
func openDevice(t *testing.T) device.Device {
	return testdevice.Open(t)
}

// writeCorpus writes a small deterministic text of words to dir and
// returns its path: 26 distinct characters (the words' letters, space,
// full stop, newline).
func writeCorpus(t *testing.T, dir string) string {
	t.Helper()
	words := strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards vex big mice and clever ghosts hum")
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < 6000 {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(8) == 0 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	path := filepath.Join(dir, "corpus.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o666); err != nil {
		t.Fatal(err)
	}
	return path
}

// healthy is a job that trains: a tiny char-RNN, 12 steps.
func healthy(data, cell string) svc.Spec {
	return svc.Spec{Data: data, Model: svc.ModelSpec{Cell: cell, Embed: 8, Hidden: 16, Layers: 2},
		Batch: 4, Seq: 8, Steps: 12, Seed: 7, LR: 1e-2, Clip: 5}
}

// env is a server under test, served over HTTP on the loopback.
type env struct {
	t      *testing.T
	srv    *svc.Server
	hs     *httptest.Server
	client *http.Client
}

// start starts a server of the jobs in state on d.
func start(t *testing.T, d device.Device, state string, onStep func(string, train.Progress)) *env {
	t.Helper()
	srv, err := svc.New(svc.Config{Device: d, StateDir: state, OnStep: onStep})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, hs: httptest.NewServer(srv.Handler()), client: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(e.stop)
	return e
}

// stop drains the server and closes the HTTP server and the client's
// connections; a second call does nothing.
func (e *env) stop() {
	if e.hs == nil {
		return
	}
	if err := e.srv.Close(); err != nil {
		e.t.Errorf("closing the server: %v", err)
	}
	e.hs.Close()
	e.client.CloseIdleConnections()
	e.hs = nil
}

// call makes a request and decodes the JSON answer into out (if not nil);
// an answer other than want is an error.
func (e *env) call(method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.hs.URL+path, rd)
	if err != nil {
		return err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	js, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: got %d %s, want %d", method, path, resp.StatusCode, js, want)
	}
	if out != nil {
		if err := json.Unmarshal(js, out); err != nil {
			return fmt.Errorf("%s %s: %w: %s", method, path, err, js)
		}
	}
	return nil
}

// must is call, failing the test on an error.
func (e *env) must(method, path string, body any, want int, out any) {
	e.t.Helper()
	if err := e.call(method, path, body, want, out); err != nil {
		e.t.Fatal(err)
	}
}

// submit posts a job and returns its status.
func (e *env) submit(spec svc.Spec) svc.Status {
	e.t.Helper()
	var st svc.Status
	e.must("POST", "/jobs", spec, http.StatusCreated, &st)
	if st.ID == "" || st.State != svc.Running {
		e.t.Fatalf("POST /jobs: got id %q state %q, want an id and %q", st.ID, st.State, svc.Running)
	}
	return st
}

// get returns a job's status over HTTP.
func (e *env) get(id string) svc.Status {
	e.t.Helper()
	var st svc.Status
	e.must("GET", "/jobs/"+id, nil, http.StatusOK, &st)
	return st
}

// wait polls GET /jobs/{id} until the job's run has ended.
func (e *env) wait(id string) svc.Status {
	e.t.Helper()
	for {
		st := e.get(id)
		if st.State != svc.Running && st.State != svc.Stopping {
			return st
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metrics returns GET /metrics.
func (e *env) metrics() string {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), "GET", e.hs.URL+"/metrics", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET /metrics: got %d, %v, want 200", resp.StatusCode, err)
	}
	return string(text)
}

// metric finds the sample of name with the given labels ("job", "job-1",
// ...) in a Prometheus text exposition.
func metric(text, name string, labels ...string) (float64, bool) {
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		have := map[string]bool{}
		for _, kv := range strings.Split(set, ",") {
			have[kv] = true
		}
		all := true
		for i := 0; i+1 < len(labels); i += 2 {
			all = all && have[labels[i]+"="+strconv.Quote(labels[i+1])]
		}
		if all {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// weights reads a checkpoint's model tensors, by name, as bytes.
func weights(t *testing.T, d device.Device, path string) map[string][]byte {
	t.Helper()
	m, _, err := models.LoadCharRNN(context.Background(), d, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out := map[string][]byte{}
	for _, g := range m.Groups() {
		for p := range g.Params.All() {
			b := make([]byte, p.Value.Len())
			if err := d.Download(b, p.Value); err != nil {
				t.Fatal(err)
			}
			out[g.Name+"."+p.Name] = b
		}
	}
	return out
}

// sameWeights fails the test unless got's tensors are want's, bit for bit.
func sameWeights(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d tensors, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Errorf("%s: tensor %s differs from the run alone's", what, name)
		}
	}
}
