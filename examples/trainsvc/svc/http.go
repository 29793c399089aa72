package svc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxSpecBytes caps a POST /jobs body.
const maxSpecBytes = 1 << 20

// Handler serves the jobs over HTTP, JSON in and out:
//
//	POST   /jobs              a Spec; 201 and the new job's Status (its id), Location /jobs/{id}
//	GET    /jobs              {"jobs": [Status, ...]}, in submission order
//	GET    /jobs/{id}         the job's Status
//	DELETE /jobs/{id}         cancel: 202 and its Status ("stopping"); it then checkpoints and is "cancelled"
//	POST   /jobs/{id}/resume  202 and its Status ("running"): a cancelled, drained or interrupted job continues
//	GET    /metrics           the same figures for Prometheus
//
// Errors are {"error": "..."} with 400 (a spec that cannot run, bad
// JSON, anything after the spec's object, a body over 1 MiB), 404 (no such job), 409 (a job in the wrong state for the
// request), 503 (draining) or 500.
func (s *Server) Handler() http.Handler { return s.handler }

func newHandler(s *Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /jobs", func(w http.ResponseWriter, r *http.Request) {
		spec, err := decodeSpec(http.MaxBytesReader(w, r.Body, maxSpecBytes))
		if err != nil {
			writeError(w, err)
			return
		}
		st, err := s.Submit(spec)
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("Location", "/jobs/"+st.ID)
		writeJSONResponse(w, http.StatusCreated, st)
	})
	mux.HandleFunc("GET /jobs", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResponse(w, http.StatusOK, struct {
			Jobs []Status `json:"jobs"`
		}{s.Jobs()})
	})
	mux.HandleFunc("GET /jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		respond(w, http.StatusOK)(s.Job(r.PathValue("id")))
	})
	mux.HandleFunc("DELETE /jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		respond(w, http.StatusAccepted)(s.Cancel(r.PathValue("id")))
	})
	mux.HandleFunc("POST /jobs/{id}/resume", func(w http.ResponseWriter, r *http.Request) {
		respond(w, http.StatusAccepted)(s.Resume(r.PathValue("id")))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	return mux
}

// decodeSpec reads a POST /jobs body: one JSON object of Spec's fields
// and nothing after it but white space (a second object or anything else
// is refused, not ignored: the client meant something by it), at most
// maxSpecBytes. Its errors match ErrInvalid.
func decodeSpec(body io.Reader) (Spec, error) {
	var spec Spec
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(&spec)
	if err == nil {
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			return spec, nil
		}
		if !isTooLarge(err) {
			err = errors.New("data after the job's JSON object: want one object")
		}
	}
	switch {
	case isTooLarge(err):
		err = fmt.Errorf("the request body is longer than %d bytes", maxSpecBytes)
	case errors.Is(err, io.EOF):
		err = errors.New("an empty request body: want the job's JSON object")
	}
	return Spec{}, fmt.Errorf("%w: %v", ErrInvalid, err)
}

// isTooLarge says err is http.MaxBytesReader's for a body past its limit.
func isTooLarge(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}

// respond writes a method's status with code, or its error.
func respond(w http.ResponseWriter, code int) func(Status, error) {
	return func(st Status, err error) {
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSONResponse(w, code, st)
	}
}

func writeJSONResponse(w http.ResponseWriter, code int, v any) {
	js, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(js, '\n')) // the client went away: nothing to do
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, ErrDraining):
		code = http.StatusServiceUnavailable
	}
	writeJSONResponse(w, code, struct {
		Error string `json:"error"`
	}{err.Error()})
}
