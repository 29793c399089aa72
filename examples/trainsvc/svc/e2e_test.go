package svc_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/examples/trainsvc/svc"
	"github.com/gocurrent/gocurrent/internal/leak"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// TestEndToEnd runs the service over HTTP on the loopback, with real
// files and real training on the test device, for each cell: a healthy
// job alone (the reference), then five jobs at once on the same device,
// each in its scope: the healthy job again, the healthy job cancelled at
// step 5 and resumed, one with bad data (a model vocabulary smaller than
// the data's, so token ids out of its range), one that diverges (SGD at
// a rate of 1e38) with skipping on, and one over its memory limit. The
// healthy jobs must end with the reference's weights bit for bit, each
// broken job must fail with its own error, and nothing may leak.
func TestEndToEnd(t *testing.T) {
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			d := openDevice(t)
			leak.Check(t)
			data := writeCorpus(t, t.TempDir())
			spec := healthy(data, cell)

			alone := start(t, d, t.TempDir(), nil)
			ref := alone.wait(alone.submit(spec).ID)
			if ref.State != svc.Done || ref.Step != spec.Steps || ref.Checkpoint == "" {
				t.Fatalf("the job alone: got state %s, step %d, checkpoint %q (%s), want done at step %d with a checkpoint",
					ref.State, ref.Step, ref.Checkpoint, ref.Error, spec.Steps)
			}
			want := weights(t, d, ref.Checkpoint)
			alone.stop()

			// The jobs at once. The hook cancels one job, over HTTP, after
			// its 5th step: the trainer checks for cancellation between
			// steps, so it stops at exactly 5.
			const cancelAt = 5
			var (
				e        *env
				cancelID atomic.Value
				ready    = make(chan struct{})
				once     sync.Once
				hookErr  = make(chan error, 1)
			)
			var (
				mu    sync.Mutex
				steps = map[string][]int64{} // the steps each job reported, in order
			)
			e = start(t, d, t.TempDir(), func(id string, p train.Progress) {
				<-ready
				mu.Lock()
				steps[id] = append(steps[id], p.Step)
				mu.Unlock()
				if id == cancelID.Load() && p.Step == cancelAt {
					once.Do(func() { hookErr <- e.call("DELETE", "/jobs/"+id, nil, http.StatusAccepted, nil) })
				}
			})
			bad, nan, over := spec, spec, spec
			bad.Model.Vocab = 4
			nan.Optimizer, nan.LR, nan.Clip, nan.SkipNonFinite, nan.MaxSkips = "sgd", 1e38, 0, true, 3
			over.MemoryLimit = 64 << 10
			ids := map[string]string{}
			for _, job := range []struct {
				name string
				spec svc.Spec
			}{{"healthy", spec}, {"cancelled", spec}, {"bad data", bad}, {"diverging", nan}, {"over its limit", over}} {
				ids[job.name] = e.submit(job.spec).ID
			}
			cancelID.Store(ids["cancelled"])
			close(ready)

			st := e.wait(ids["healthy"])
			if st.State != svc.Done || st.Step != spec.Steps {
				t.Errorf("healthy job beside the broken ones: got state %s, step %d (%s), want done at step %d", st.State, st.Step, st.Error, spec.Steps)
			} else {
				sameWeights(t, "healthy job beside the broken ones", weights(t, d, st.Checkpoint), want)
			}

			st = e.wait(ids["cancelled"])
			if err := <-hookErr; err != nil {
				t.Fatalf("cancelling from the progress hook: %v", err)
			}
			if st.State != svc.Cancelled || st.Step != cancelAt || !st.Resumable || st.Checkpoint == "" {
				t.Fatalf("cancelled job: got state %s, step %d, resumable %v, checkpoint %q (%s), want cancelled at step %d, resumable, with a checkpoint",
					st.State, st.Step, st.Resumable, st.Checkpoint, st.Error, cancelAt)
			}
			e.must("POST", "/jobs/"+ids["cancelled"]+"/resume", nil, http.StatusAccepted, &st)
			if st.State != svc.Running {
				t.Errorf("resume: got state %s, want running", st.State)
			}
			st = e.wait(ids["cancelled"])
			if st.State != svc.Done || st.Step != spec.Steps || st.Runs != 2 {
				t.Errorf("resumed job: got state %s, step %d, runs %d (%s), want done at step %d after 2 runs", st.State, st.Step, st.Runs, st.Error, spec.Steps)
			} else {
				sameWeights(t, "cancelled at step 5 and resumed", weights(t, d, st.Checkpoint), want)
			}
			// The resumed run went on from step 6: it did not start over.
			mu.Lock()
			got := steps[ids["cancelled"]]
			mu.Unlock()
			var all []int64
			for i := range spec.Steps {
				all = append(all, i+1)
			}
			if !slices.Equal(got, all) {
				t.Errorf("steps of the cancelled and resumed job: got %v, want 1 to %d, each once", got, spec.Steps)
			}

			sentinels := map[string]error{"bad data": device.ErrIndex, "diverging": train.ErrNonFinite, "over its limit": alloc.ErrOutOfMemory}
			kinds := map[string]string{"bad data": svc.KindIndex, "diverging": svc.KindNonFinite, "over its limit": svc.KindOutOfMemory}
			for name := range sentinels {
				st := e.wait(ids[name])
				if st.State != svc.Failed || st.ErrorKind != kinds[name] || st.Resumable {
					t.Errorf("%s: got state %s, error kind %q, resumable %v (%s), want failed, %q, not resumable", name, st.State, st.ErrorKind, st.Resumable, st.Error, kinds[name])
				}
				goSt, err := e.srv.Job(ids[name])
				if err != nil {
					t.Fatal(err)
				}
				for other, s := range sentinels {
					if got := errors.Is(goSt.Err, s); got != (other == name) {
						t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", name, goSt.Err, s, got, other == name)
					}
				}
			}
			var nf *train.NonFiniteError
			if st := e.get(ids["diverging"]); st.Skipped != nan.MaxSkips {
				t.Errorf("diverging job: got %d steps skipped, want %d (max_skips)", st.Skipped, nan.MaxSkips)
			}
			if st, _ := e.srv.Job(ids["diverging"]); !errors.As(st.Err, &nf) {
				t.Errorf("diverging job: got %v, want a *train.NonFiniteError", st.Err)
			}
			// Refused by the planner before it allocated (models.CheckFits):
			// its plan against the scope's limit, with the advice.
			var planned *models.MemoryError
			if st, _ := e.srv.Job(ids["over its limit"]); !errors.As(st.Err, &planned) || !errors.Is(st.Err, alloc.ErrOutOfMemory) ||
				planned.Advice.Limit != int64(over.MemoryLimit) || !strings.Contains(st.Error, "room for "+alloc.FormatSize(int64(over.MemoryLimit))) ||
				!strings.Contains(st.Error, ids["over its limit"]) || st.PeakReservedBytes != 0 {
				t.Errorf("job over its limit: got %v (peak %d bytes), want the planner's refusal of scope %s against its limit (%s), nothing reserved",
					st.Err, st.PeakReservedBytes, ids["over its limit"], alloc.FormatSize(int64(over.MemoryLimit)))
			}

			var list struct{ Jobs []svc.Status }
			e.must("GET", "/jobs", nil, http.StatusOK, &list)
			if len(list.Jobs) != len(ids) {
				t.Errorf("GET /jobs: got %d jobs, want %d", len(list.Jobs), len(ids))
			}
			checkMetrics(t, e.metrics(), ids, spec)
			checkHTTPErrors(t, e, ids["healthy"])
		})
	}
}

// checkMetrics checks /metrics against what the jobs did.
func checkMetrics(t *testing.T, text string, ids map[string]string, spec svc.Spec) {
	t.Helper()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"gocurrent_job_step", []string{"job", ids["healthy"]}, float64(spec.Steps)},
		{"gocurrent_job_step", []string{"job", ids["cancelled"]}, float64(spec.Steps)},
		{"gocurrent_job_state", []string{"job", ids["healthy"], "state", "done"}, 1},
		{"gocurrent_job_state", []string{"job", ids["healthy"], "state", "running"}, 0},
		{"gocurrent_job_state", []string{"job", ids["bad data"], "state", "failed"}, 1},
		{"gocurrent_job_memory_limit_bytes", []string{"job", ids["over its limit"]}, 64 << 10},
		{"gocurrent_jobs_failed_total", []string{"kind", svc.KindIndex}, 1},
		{"gocurrent_jobs_failed_total", []string{"kind", svc.KindNonFinite}, 1},
		{"gocurrent_jobs_failed_total", []string{"kind", svc.KindOutOfMemory}, 1},
	} {
		if got, ok := metric(text, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("metric %s%v: got %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, name := range []string{"gocurrent_job_loss", "gocurrent_job_tokens_per_second"} {
		if got, ok := metric(text, name, "job", ids["healthy"]); !ok || !(got > 0) {
			t.Errorf("metric %s of the healthy job: got %v (found %v), want > 0", name, got, ok)
		}
	}
	for _, cat := range []string{"parameters", "gradients", "optimizer_state"} {
		if got, ok := metric(text, "gocurrent_job_memory_bytes", "job", ids["healthy"], "category", cat); !ok || !(got > 0) {
			t.Errorf("metric gocurrent_job_memory_bytes of the healthy job's %s: got %v (found %v), want > 0", cat, got, ok)
		}
	}
	if _, ok := metric(text, "gocurrent_job_data_wait_ratio", "job", ids["healthy"]); !ok {
		t.Errorf("metric gocurrent_job_data_wait_ratio of the healthy job: missing")
	}
}

// checkHTTPErrors checks the error statuses of the HTTP contract; done is
// a job that is done.
func checkHTTPErrors(t *testing.T, e *env, done string) {
	t.Helper()
	for _, c := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"POST", "/jobs", map[string]any{"data": "x", "no_such_field": 1}, http.StatusBadRequest},
		{"POST", "/jobs", svc.Spec{}, http.StatusBadRequest},
		{"POST", "/jobs", svc.Spec{Data: "/no/such/file"}, http.StatusBadRequest},
		{"POST", "/jobs", svc.Spec{Data: e.get(done).Spec.Data, Model: svc.ModelSpec{Cell: "rnn"}}, http.StatusBadRequest},
		{"GET", "/jobs/job-999", nil, http.StatusNotFound},
		{"DELETE", "/jobs/" + done, nil, http.StatusConflict},
		{"POST", "/jobs/" + done + "/resume", nil, http.StatusConflict},
	} {
		var answer struct{ Error string }
		if err := e.call(c.method, c.path, c.body, c.want, &answer); err != nil {
			t.Error(err)
		} else if answer.Error == "" {
			t.Errorf("%s %s: got no error message", c.method, c.path)
		}
	}
}
