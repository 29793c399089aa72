package svc_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

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
