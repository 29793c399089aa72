package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/examples/trainsvc/svc"
	"github.com/gocurrent/gocurrent/internal/leak"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// TestSIGTERMDrains runs the command's server, sends the process a real
// SIGTERM while a job trains, and checks that run returns without error
// once the job has checkpointed ("drained" in its status file); started
// again on the same state directory, the server lists the job and resumes
// it from where it stopped; a second SIGTERM drains it again.
func TestSIGTERMDrains(t *testing.T) {
	before := leak.Count()
	state := t.TempDir()
	data := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(data, []byte(strings.Repeat("the quick brown fox jumps over the lazy dog.\n", 100)), 0o666); err != nil {
		t.Fatal(err)
	}
	// Steps enough that the job is still training when the signal comes.
	spec := svc.Spec{Data: data, Model: svc.ModelSpec{Embed: 8, Hidden: 16, Layers: 1}, Batch: 4, Seq: 8, Steps: 1 << 40}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	var drainedAt int64
	for round := 1; round <= 2; round++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := "http://" + ln.Addr().String()
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, stop, ln, state, testdevice.Spec(t), testdevice.CUDAConfig(t), slog.New(slog.NewTextHandler(t.Output(), nil)))
		}()

		var st svc.Status
		if round == 1 {
			call(t, client, "POST", base+"/jobs", spec, http.StatusCreated, &st)
		} else {
			var list struct{ Jobs []svc.Status }
			call(t, client, "GET", base+"/jobs", nil, http.StatusOK, &list)
			if len(list.Jobs) != 1 || list.Jobs[0].State != svc.Drained || !list.Jobs[0].Resumable {
				t.Fatalf("GET /jobs after the restart: got %+v, want one drained, resumable job", list.Jobs)
			}
			call(t, client, "POST", base+"/jobs/"+list.Jobs[0].ID+"/resume", nil, http.StatusAccepted, &st)
		}
		// Wait until it has trained past where it was.
		for st.Step <= drainedAt {
			time.Sleep(5 * time.Millisecond)
			call(t, client, "GET", base+"/jobs/"+st.ID, nil, http.StatusOK, &st)
			if st.State != svc.Running {
				t.Fatalf("round %d: got state %s (%s), want running", round, st.State, st.Error)
			}
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: run after SIGTERM: got %v, want nil", round, err)
		}
		stop()
		client.CloseIdleConnections()

		var saved svc.Status
		js, err := os.ReadFile(filepath.Join(state, st.ID, "status.json"))
		if err == nil {
			err = json.Unmarshal(js, &saved)
		}
		if err != nil {
			t.Fatal(err)
		}
		if saved.State != svc.Drained || saved.Step <= drainedAt || saved.Checkpoint == "" || saved.Runs != round {
			t.Fatalf("round %d: status.json after SIGTERM: got state %s, step %d, checkpoint %q, runs %d, want drained past step %d with a checkpoint, run %d",
				round, saved.State, saved.Step, saved.Checkpoint, saved.Runs, drainedAt, round)
		}
		drainedAt = saved.Step
	}

	leak.Expect(t, before, "after the service stopped")
}

// call makes a request and decodes the JSON answer into out (if not
// nil); an answer other than want fails the test.
func call(t *testing.T, client *http.Client, method, url string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	js, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: got %d %s, want %d", method, url, resp.StatusCode, js, want)
	}
	if out != nil {
		if err := json.Unmarshal(js, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, js)
		}
	}
}
