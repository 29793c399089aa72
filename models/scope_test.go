package models

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// scopeJob is one char-RNN training job of TestScopesIsolateJobs.
type scopeJob struct {
	name        string
	limit       int64   // the scope's memory limit
	lr          float64 // Adam's rate
	modelVocab  int     // characters the model knows; fewer than the data's gives ids out of range
	skipNonFin  bool
	maxSkips    int64
	wantErr     error // what Run must fail with; nil for a healthy job
	weights     []float32
	err         error
	scopeReport string
}

// run trains the job for 6 steps on d inside a scope of its own and keeps
// its final weights or its error.
func (j *scopeJob) run(ctx context.Context, d device.Device) (err error) {
	s, err := device.NewScope(d, device.ScopeConfig{Name: j.name, Limit: j.limit})
	if err != nil {
		return err
	}
	defer func() {
		// A failed job's scope reports its error again on Close if it was
		// never reported; that is the job's own, not a second failure.
		if cerr := s.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	chars := make([]string, 20)
	for i := range chars {
		chars[i] = string(rune('a' + i))
	}
	dataVocab, err := loader.NewVocab(chars)
	if err != nil {
		return err
	}
	modelVocab := dataVocab
	if j.modelVocab > 0 {
		if modelVocab, err = loader.NewVocab(chars[:j.modelVocab]); err != nil {
			return err
		}
	}
	m, err := NewCharRNN(context.Background(), s, CharRNNConfig{Cell: "lstm", Embed: 8, Hidden: 16, Layers: 2}, modelVocab, 7)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.Close()) }()
	var raw strings.Builder
	for i := range 4000 {
		raw.WriteString(chars[(i*7+i/13)%len(chars)])
	}
	text, err := loader.Tokenize(ctx, loader.NewCorpus(strings.NewReader(raw.String()), int64(raw.Len()), j.name), loader.TokenizeConfig{Vocab: dataVocab})
	if err != nil {
		return err
	}
	data, err := loader.New(s, text, loader.Config{Mode: loader.Streams, Batch: 4, Seq: 16})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, data.Close()) }()
	opt, err := train.NewOptimizer(train.Adam, j.lr)
	if err != nil {
		return err
	}
	tr, err := train.New(s, m, data, train.Config{Optimizer: opt, Steps: 6, ClipNorm: 5, SkipNonFinite: j.skipNonFin, MaxSkips: j.maxSkips})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tr.Close()) }()
	if _, err := tr.Run(ctx); err != nil {
		return err
	}
	for _, g := range m.Groups() {
		v, _ := g.Params.Flat()
		w := make([]float32, g.Params.Len())
		if err := device.DownloadSlice(s, w, v); err != nil {
			return err
		}
		j.weights = append(j.weights, w...)
	}
	if r, ok := device.MemoryReport(s); ok {
		j.scopeReport = r.Device
	}
	return nil
}

// TestScopesIsolateJobs trains four char-RNN jobs at once on one device
// (the test device: the CPU, or CUDA under GOCURRENT_TEST_DEVICE), each in a scope of its own: a healthy one, one whose data has
// ids its model does not know, one that diverges with skipping on, and one
// over its memory limit. The healthy job ends with the weights it has when
// it runs alone; each broken job fails with its own error; when all are
// done the device holds nothing.
func TestScopesIsolateJobs(t *testing.T) {
	ctx := context.Background()
	healthy := func() *scopeJob { return &scopeJob{name: "healthy", lr: 1e-2} }
	alone := healthy()
	d := testdevice.Open(t)
	// What the device holds of its own (on CUDA, the cuBLAS workspace);
	// the jobs leave it as they found it.
	base := d.MemStats().AllocatedBytes[alloc.AllPools].Current
	if err := alone.run(ctx, d); err != nil {
		t.Fatalf("the healthy job alone: %v", err)
	}

	jobs := []*scopeJob{
		healthy(),
		{name: "bad-ids", lr: 1e-2, modelVocab: 12, wantErr: device.ErrIndex},
		// A rate of 1e38 takes a weight to float32's largest in one
		// step, and the next forward past it: non-finite on every device
		// (1e30 gives finite losses of 1e31 on some).
		{name: "diverging", lr: 1e38, skipNonFin: true, maxSkips: 3, wantErr: &train.NonFiniteError{}},
		{name: "over-limit", lr: 1e-2, limit: 64 << 10, wantErr: alloc.ErrOutOfMemory},
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.err = j.run(ctx, d)
		}()
	}
	wg.Wait()
	for _, j := range jobs {
		switch want := j.wantErr.(type) {
		case nil:
			if j.err != nil {
				t.Errorf("%s: %v, want no error", j.name, j.err)
			}
		case *train.NonFiniteError:
			if !errors.As(j.err, &want) {
				t.Errorf("%s: %v, want a *train.NonFiniteError", j.name, j.err)
			}
		default:
			if !errors.Is(j.err, want) {
				t.Errorf("%s: %v, want an error matching %v", j.name, j.err, want)
			}
		}
		if j.err != nil && !strings.Contains(j.err.Error(), j.name) && !errors.As(j.err, new(*train.NonFiniteError)) {
			t.Errorf("%s: the error does not name its scope: %v", j.name, j.err)
		}
	}
	if got, want := jobs[0].weights, alone.weights; len(got) != len(want) || len(got) == 0 {
		t.Fatalf("the healthy job has %d weights, alone %d", len(got), len(want))
	} else {
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("weight %d: %v beside the broken jobs, %v alone: a neighbour changed the healthy job", i, got[i], want[i])
			}
		}
	}
	if !strings.Contains(jobs[0].scopeReport, "healthy") {
		t.Errorf("the healthy job's memory report is %q, want its scope's", jobs[0].scopeReport)
	}
	st := d.MemStats()
	if n := st.AllocatedBytes[alloc.AllPools].Current; n != base {
		t.Errorf("the device holds %d bytes after every job closed its scope, %d before them (%v)", n, base, st.CategoryBytes)
	}
	if r, _ := device.MemoryReport(d); len(r.Scopes) != 0 {
		t.Errorf("the device still lists scopes %v", r.Scopes)
	}
}
