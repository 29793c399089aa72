package svc_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/examples/trainsvc/svc"
	"github.com/gocurrent/gocurrent/internal/leak"
	"github.com/gocurrent/gocurrent/train"
)

// TestDrainRestartResume drains a server while a job runs (what SIGTERM
// does to the command), starts another on the same state directory, and
// resumes the job there: it must end with the weights of the job run
// alone, uninterrupted. A job whose process died while it ran (its status
// file says running, no checkpoint) comes back interrupted and resumes
// from the start to the same weights.
func TestDrainRestartResume(t *testing.T) {
	d := openDevice(t)
	leak.Check(t)
	spec := healthy(writeCorpus(t, t.TempDir()), "gru")
	alone := start(t, d, t.TempDir(), nil)
	ref := alone.wait(alone.submit(spec).ID)
	if ref.State != svc.Done {
		t.Fatalf("the job alone: got state %s (%s), want done", ref.State, ref.Error)
	}
	want := weights(t, d, ref.Checkpoint)
	alone.stop()

	// Drain once the job has taken step 4: the hook holds the job there
	// until Drain has marked it stopping, so it stops at exactly 4.
	const drainAt = 4
	state := t.TempDir()
	var e *env
	ready, reached := make(chan struct{}), make(chan struct{})
	e = start(t, d, state, func(id string, p train.Progress) {
		<-ready
		if p.Step != drainAt {
			return
		}
		close(reached)
		for {
			if st, err := e.srv.Job(id); err != nil || st.State != svc.Running {
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	id := e.submit(spec).ID
	close(ready)
	<-reached
	if err := e.srv.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := e.get(id)
	if st.State != svc.Drained || st.Step != drainAt || !st.Resumable || st.Checkpoint == "" {
		t.Fatalf("drained job: got state %s, step %d, resumable %v, checkpoint %q (%s), want drained at step %d, resumable, with a checkpoint",
			st.State, st.Step, st.Resumable, st.Checkpoint, st.Error, drainAt)
	}
	e.must("POST", "/jobs", spec, http.StatusServiceUnavailable, nil)
	e.must("POST", "/jobs/"+id+"/resume", nil, http.StatusServiceUnavailable, nil)
	e.stop()

	// A job as a killed process leaves it: spec and status saved, running.
	crashed := "job-7"
	if err := os.Mkdir(filepath.Join(state, crashed), 0o777); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join(state, id, "spec.json"))
	if err == nil {
		err = os.WriteFile(filepath.Join(state, crashed, "spec.json"), js, 0o666)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(state, crashed, "status.json"), []byte(`{"id": "job-7", "state": "running", "step": 3, "runs": 1}`), 0o666)
	}
	if err != nil {
		t.Fatal(err)
	}

	e = start(t, d, state, nil)
	var list struct{ Jobs []svc.Status }
	e.must("GET", "/jobs", nil, http.StatusOK, &list)
	if len(list.Jobs) != 2 || list.Jobs[0].ID != id || list.Jobs[1].ID != crashed {
		t.Fatalf("GET /jobs after the restart: got %+v, want %s and %s", list.Jobs, id, crashed)
	}
	for i, want := range []struct {
		state      svc.State
		checkpoint bool
	}{{svc.Drained, true}, {svc.Interrupted, false}} {
		st := list.Jobs[i]
		if st.State != want.state || !st.Resumable || (st.Checkpoint != "") != want.checkpoint {
			t.Errorf("%s after the restart: got state %s, resumable %v, checkpoint %q, want %s, resumable, checkpoint %v",
				st.ID, st.State, st.Resumable, st.Checkpoint, want.state, want.checkpoint)
		}
	}
	if next := e.submit(spec).ID; next != "job-8" {
		t.Errorf("a job submitted after the restart: got id %s, want job-8, after the highest there", next)
	}
	for _, job := range []string{id, crashed} {
		e.must("POST", "/jobs/"+job+"/resume", nil, http.StatusAccepted, nil)
		st := e.wait(job)
		if st.State != svc.Done || st.Step != spec.Steps {
			t.Errorf("%s resumed after the restart: got state %s, step %d (%s), want done at step %d", job, st.State, st.Step, st.Error, spec.Steps)
			continue
		}
		sameWeights(t, job+" resumed after the restart", weights(t, d, st.Checkpoint), want)
	}
	e.wait("job-8")
}
