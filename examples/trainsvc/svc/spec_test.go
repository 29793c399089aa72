package svc_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/examples/trainsvc/svc"
)

// postRaw posts body to /jobs as it is and returns the status code and
// the answer's "error" (empty for a 201).
func (e *env) postRaw(body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), "POST", e.hs.URL+"/jobs", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	js, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	var answer struct{ Error string }
	if err := json.Unmarshal(js, &answer); err != nil {
		e.t.Fatalf("POST /jobs: %d %q is not JSON: %v", resp.StatusCode, js, err)
	}
	return resp.StatusCode, answer.Error
}

// TestSpecBody: POST /jobs takes one JSON object and nothing after it but
// white space. A second object or garbage after the first, an empty body,
// a body over the limit (1 MiB: maxSpecBytes) and a negative max_skips
// (0 means 100; train's negative, no limit, is not the spec's) are 400s
// saying so; before, the data after the object was ignored and a
// negative max_skips let a job skip forever.
func TestSpecBody(t *testing.T) {
	e := start(t, openDevice(t), t.TempDir(), nil)
	spec := healthy(writeCorpus(t, t.TempDir()), "lstm")
	spec.Steps = 2
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	one := string(js)
	withSkips := strings.TrimSuffix(one, "}") + `, "max_skips": -1}`
	for _, c := range []struct {
		name, body string
		want       int
		says       string
	}{
		{"two objects", one + one, http.StatusBadRequest, "data after the job's JSON object"},
		{"two objects on two lines", one + "\n" + one + "\n", http.StatusBadRequest, "data after the job's JSON object"},
		{"garbage after", one + " xyz", http.StatusBadRequest, "data after the job's JSON object"},
		{"a comma after", one + ",", http.StatusBadRequest, "data after the job's JSON object"},
		{"empty", "", http.StatusBadRequest, "an empty request body"},
		{"white space only", " \n\t", http.StatusBadRequest, "an empty request body"},
		{"cut short", one[:len(one)/2], http.StatusBadRequest, "unexpected EOF"},
		{"too large", `{"data": "` + strings.Repeat("a", 2<<20) + `"}`, http.StatusBadRequest, "longer than 1048576 bytes"},
		{"too large after the object", one + strings.Repeat(" ", 2<<20), http.StatusBadRequest, "longer than 1048576 bytes"},
		{"negative max_skips", withSkips, http.StatusBadRequest, "max_skips -1, want >= 0 (0: 100)"},
		{"white space after", one + "\r\n \n", http.StatusCreated, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, msg := e.postRaw(c.body)
			if code != c.want || !strings.Contains(msg, c.says) {
				t.Errorf("got %d %q, want %d saying %q", code, msg, c.want, c.says)
			}
		})
	}
	if jobs := e.srv.Jobs(); len(jobs) != 1 {
		t.Fatalf("%d jobs, want the one accepted", len(jobs))
	}
	if st := e.wait(e.srv.Jobs()[0].ID); st.State != svc.Done {
		t.Errorf("the accepted job: %s (%s), want done", st.State, st.Error)
	}
}

// TestSpecSizes: a spec whose numbers give sizes that overflow, or counts
// past the library's maxima, is a 400 naming them, and no job is made
// (issue 46: batch 2^40 with accum 2^24, 2^32 with 2^32 and 2^62 with 4
// killed the server with a divide by zero, and the job came back
// resumable to kill it again; embed 2^62 panicked; layers 2^40 grew the
// process past 9 GB); a job too large for the device fails at once as out
// of memory, with the planner's figures, before it allocates.
func TestSpecSizes(t *testing.T) {
	e := start(t, openDevice(t), t.TempDir(), nil)
	data := writeCorpus(t, t.TempDir())
	for _, c := range []struct {
		name string
		edit func(*svc.Spec)
		says string
	}{
		{"batch 2^40 accum 2^24", func(s *svc.Spec) { s.Batch, s.Accum = 1<<40, 1<<24 }, "Batch × Accum = 1099511627776 × 16777216 overflows"},
		{"batch 2^32 accum 2^32", func(s *svc.Spec) { s.Batch, s.Accum = 1<<32, 1<<32 }, "Batch × Accum = 4294967296 × 4294967296 overflows"},
		{"batch 2^62 accum 4", func(s *svc.Spec) { s.Batch, s.Accum = 1<<62, 4 }, "4611686018427387904 × 4 overflows"},
		{"seq 2^63-1", func(s *svc.Spec) { s.Seq = 1<<63 - 1 }, "Seq = 9223372036854775807"},
		{"embed 2^62", func(s *svc.Spec) { s.Model.Embed = 1 << 62 }, "embed 4611686018427387904"},
		{"hidden 2^62", func(s *svc.Spec) { s.Model.Hidden = 1 << 62 }, "hidden 4611686018427387904"},
		{"layers 2^40", func(s *svc.Spec) { s.Model.Layers = 1 << 40 }, "layers 1099511627776, more than rnn.MaxLayers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := healthy(data, "lstm")
			c.edit(&spec)
			var answer struct{ Error string }
			if err := e.call("POST", "/jobs", spec, http.StatusBadRequest, &answer); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(answer.Error, c.says) {
				t.Errorf("400 %q, want it to say %q", answer.Error, c.says)
			}
		})
	}
	if jobs := e.srv.Jobs(); len(jobs) != 0 {
		t.Fatalf("%d jobs made of refused specs, want none", len(jobs))
	}
	// Hidden 30,000: 40 GiB of parameters alone, more than this device.
	spec := healthy(data, "lstm")
	spec.Model.Hidden = 30000
	start := time.Now()
	st := e.wait(e.submit(spec).ID)
	if st.State != svc.Failed || st.ErrorKind != "out_of_memory" || !strings.Contains(st.Error, "Planner: ") {
		t.Errorf("hidden 30000: %s (%s: %s), want failed as out_of_memory with the planner's advice", st.State, st.ErrorKind, st.Error)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("hidden 30000 failed after %v, want far less (nothing allocated)", took)
	}
	if st.PeakReservedBytes != 0 {
		t.Errorf("the refused job reserved %d bytes at its peak, want 0", st.PeakReservedBytes)
	}
}

// TestResumeOfAnUncheckedSpec: a job a server that did not check sizes
// saved, left running by a killed process (batch 2^40, accum 2^24), comes
// back interrupted after a restart, and its resume is a 400 naming the
// sizes; the server goes on serving (issue 46: the resume killed it
// again).
func TestResumeOfAnUncheckedSpec(t *testing.T) {
	state := t.TempDir()
	spec := healthy(writeCorpus(t, t.TempDir()), "gru")
	spec.Batch, spec.Accum = 1<<40, 1<<24
	spec.Model.Kind, spec.Optimizer = "charrnn", "adam" // as Submit saves a spec: its defaults filled in
	js, err := json.Marshal(spec)
	if err == nil {
		err = os.Mkdir(filepath.Join(state, "job-1"), 0o777)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(state, "job-1", "spec.json"), js, 0o666)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(state, "job-1", "status.json"), []byte(`{"id": "job-1", "state": "running", "step": 3, "runs": 1}`), 0o666)
	}
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, openDevice(t), state, nil)
	if st := e.get("job-1"); st.State != svc.Interrupted {
		t.Fatalf("job-1 after the restart: %s, want interrupted", st.State)
	}
	var answer struct{ Error string }
	if err := e.call("POST", "/jobs/job-1/resume", nil, http.StatusBadRequest, &answer); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(answer.Error, "Batch × Accum = 1099511627776 × 16777216 overflows") {
		t.Errorf("resume: 400 %q, want it to name batch × accum", answer.Error)
	}
	ok := healthy(spec.Data, "gru")
	ok.Steps = 2
	if st := e.wait(e.submit(ok).ID); st.State != svc.Done {
		t.Errorf("a job after the refused resume: %s (%s), want done", st.State, st.Error)
	}
}

// TestDeleteWhileBuilding: a DELETE while a large job builds its model
// (134M parameters, most of a second of drawing them) ends the job within
// a second, cancelled, its scope's memory given back (issue 46: a job of
// 2^40 layers stayed "stopping" for ever, and SIGTERM did not end it).
func TestDeleteWhileBuilding(t *testing.T) {
	e := start(t, openDevice(t), t.TempDir(), nil)
	spec := healthy(writeCorpus(t, t.TempDir()), "lstm")
	spec.Model.Embed, spec.Model.Hidden, spec.Model.Layers = 2048, 2048, 4
	id := e.submit(spec).ID
	time.Sleep(100 * time.Millisecond)
	deleted := time.Now()
	if err := e.call("DELETE", "/jobs/"+id, nil, http.StatusAccepted, nil); err != nil {
		t.Fatal(err)
	}
	st := e.wait(id)
	if took := time.Since(deleted); took > time.Second {
		t.Errorf("the job ended %v after its DELETE, want within a second", took)
	}
	if st.State != svc.Cancelled {
		t.Errorf("the job: %s (%s), want cancelled", st.State, st.Error)
	}
}
