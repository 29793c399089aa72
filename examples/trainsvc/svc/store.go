package svc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gocurrent/gocurrent/train"
)

// The files of a job's directory, StateDir/<id>/.
const (
	specFile       = "spec.json"
	statusFile     = "status.json"
	checkpointFile = "checkpoint.safetensors"
)

// idPrefix starts every job id: "job-1", "job-2", ...
const idPrefix = "job-"

// jobNumber is the number of a job id, or false for a name that is not one.
func jobNumber(id string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(id, idPrefix))
	if !strings.HasPrefix(id, idPrefix) || err != nil || n <= 0 || id != idPrefix+strconv.Itoa(n) {
		return 0, false
	}
	return n, true
}

// writeJSON writes v as indented JSON to path, atomically (train.WriteFile),
// so a crash leaves the old file or the new one.
func writeJSON(path string, v any) error {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return train.WriteFile(path, func(w io.Writer) error {
		_, err := w.Write(append(js, '\n'))
		return err
	})
}

// readJSON reads path's JSON into v.
func readJSON(path string, v any) error {
	js, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(js, v); err != nil {
		return fmt.Errorf("trainsvc: %s: %w", path, err)
	}
	return nil
}

// exists reports whether path names a file.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// loadJobs reads the jobs a state directory holds, in id order, and the
// number the next job takes. A job its status file says was live was
// running when the process that ran it ended without draining: it is
// Interrupted. A directory that is not a job's, or a job whose files
// cannot be read, is an error: the service refuses to start rather than
// lose track of a job.
func loadJobs(dir string) (jobs []*job, next int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("trainsvc: state directory: %w", err)
	}
	next = 1
	for _, e := range entries {
		n, ok := jobNumber(e.Name())
		if !ok || !e.IsDir() {
			continue // not ours: a README, a lock file
		}
		j := &job{id: e.Name(), dir: filepath.Join(dir, e.Name()), done: closedChan()}
		if err := readJSON(filepath.Join(j.dir, specFile), &j.spec); err != nil {
			return nil, 0, fmt.Errorf("trainsvc: job %s: %w", j.id, err)
		}
		err := readJSON(filepath.Join(j.dir, statusFile), &j.st)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Submit writes the spec first: the process ended between the two.
			j.st = Status{State: Interrupted}
		case err != nil:
			return nil, 0, fmt.Errorf("trainsvc: job %s: %w", j.id, err)
		}
		j.st.ID, j.st.Spec = j.id, j.spec
		if j.st.State.live() || j.st.State == "" {
			j.st.State = Interrupted
		}
		j.st.Checkpoint = ""
		if p := filepath.Join(j.dir, checkpointFile); exists(p) {
			j.st.Checkpoint = p
		}
		j.st.Resumable = j.st.State.resumable()
		jobs = append(jobs, j)
		next = max(next, n+1)
	}
	sortJobs(jobs)
	return jobs, next, nil
}
