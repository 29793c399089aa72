package svc

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// run is a job's goroutine: one run of the job, from building it to
// recording how it ended.
func (s *Server) run(ctx context.Context, j *job, resume bool) {
	defer s.running.Done()
	err := s.trainRecovered(ctx, j, resume)
	if err != nil {
		err = fmt.Errorf("job %s: %w", j.id, err)
	}
	switch st := j.finish(ctx, err); st {
	case Failed:
		j.mu.Lock()
		kind, msg := j.st.ErrorKind, j.st.Error
		j.mu.Unlock()
		s.failed.WithLabelValues(kind).Inc()
		s.logf("trainsvc: job %s failed (%s): %s", j.id, kind, msg)
	default:
		s.logf("trainsvc: job %s %s", j.id, st)
	}
}

// trainRecovered is train, with a panic in it the job's failure, not the
// server's end: the other jobs and their checkpoints go on. The stack
// goes to the log.
func (s *Server) trainRecovered(ctx context.Context, j *job, resume bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.logf("trainsvc: job %s panicked: %v\n%s", j.id, r, debug.Stack())
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return s.train(ctx, j, resume)
}

// train builds the job in a scope of its own on the server's device (the
// text, the model, the loader, the trainer), resumes it from its
// checkpoint if asked and it has one, and trains it to its steps or until
// ctx is cancelled (the trainer then writes the checkpoint). Everything
// is closed when it returns, the scope last, which gives back whatever
// the job still held.
func (s *Server) train(ctx context.Context, j *job, resume bool) (err error) {
	spec := j.spec
	sc, err := device.NewScope(s.cfg.Device, device.ScopeConfig{Name: j.id, Limit: int64(spec.MemoryLimit)})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sc.Close()) }()
	corpus, err := loader.Open(spec.Data)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, corpus.Close()) }()
	// A data directory's files that are not text (binary, checkpoints:
	// the service's own, if its state lies under the data) are left out
	// by the loader; the log says which.
	if msg := cli.SkippedMessage(spec.Data, corpus.Skipped()); msg != "" {
		s.logf("trainsvc: job %s: %s", j.id, msg)
	}
	text, err := loader.Tokenize(ctx, corpus, loader.TokenizeConfig{})
	if err != nil {
		return err
	}
	vocab, err := modelVocab(text.Vocab(), spec.Model.Vocab)
	if err != nil {
		return err
	}
	// A job that cannot fit its scope is refused before it allocates,
	// with the planner's figures (models.CheckFits).
	cfg := spec.Model.charRNN()
	plan := models.MemorySpec{CharRNN: &cfg, Vocab: vocab.Len(), Batch: spec.Batch, Seq: spec.Seq, Accum: spec.Accum,
		Optimizer: train.Algorithm(spec.Optimizer)}
	if err := models.CheckFits(ctx, devices.MetaConfig(sc), plan); err != nil {
		return err
	}
	m, err := models.NewCharRNN(ctx, sc, spec.Model.charRNN(), vocab, spec.Seed)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.Close()) }()
	data, err := loader.New(sc, text, loader.Config{Batch: spec.Batch, Seq: spec.Seq, Accum: spec.Accum, Seed: spec.Seed})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, data.Close()) }()
	opt, err := train.NewOptimizer(train.Algorithm(spec.Optimizer), spec.LR)
	if err != nil {
		return err
	}
	path := filepath.Join(j.dir, checkpointFile)
	tr, err := train.New(sc, m, data, train.Config{
		Optimizer: opt, Steps: spec.Steps, ClipNorm: spec.Clip,
		SkipNonFinite: spec.SkipNonFinite, MaxSkips: spec.MaxSkips,
		Checkpoint: path, CheckpointEvery: spec.CheckpointEvery, Metadata: m.Metadata(),
		OnStep: func(p train.Progress) { s.progress(j, p) },
		Logger: s.cfg.Logger,
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tr.Close()) }()
	if resume && exists(path) {
		ck, err := train.ReadCheckpoint(path)
		if err != nil {
			return err
		}
		if err := tr.Resume(ck); err != nil {
			return err
		}
	}
	j.mu.Lock()
	j.st.Step, j.st.Skipped = tr.Step(), tr.Skipped()
	j.mu.Unlock()
	_, err = tr.Run(ctx)
	j.mu.Lock()
	j.st.Step, j.st.Skipped = tr.Step(), tr.Skipped() // a failed step's skips included
	j.mu.Unlock()
	return err
}

// modelVocab is the model's vocabulary: the first n characters of the
// data's, or all of them for n = 0.
func modelVocab(data *loader.Vocab, n int) (*loader.Vocab, error) {
	switch {
	case n == 0 || n == data.Len():
		return data, nil
	case n > data.Len():
		return nil, fmt.Errorf("%w: model.vocab %d: the data has only %d characters", ErrInvalid, n, data.Len())
	}
	return loader.NewVocab(data.Strings()[:n])
}

// progress is the trainer's OnStep: it records the step's figures in the
// job's status, then calls Config.OnStep.
func (s *Server) progress(j *job, p train.Progress) {
	j.mu.Lock()
	j.st.Step, j.st.Steps, j.st.Skipped = p.Step, p.Steps, p.Skipped
	j.st.Loss = Float(p.Loss)
	j.st.TokensPerSecond, j.st.DataWait = p.TokensPerSecond, p.DataWait
	j.st.Memory = cli.CategoryCurrents(p.Memory)
	j.st.AllocatedBytes = p.Memory.AllocatedBytes[alloc.AllPools].Current
	j.st.ReservedBytes = p.Memory.ReservedBytes[alloc.AllPools].Current
	j.st.PeakReservedBytes = p.Memory.ReservedBytes[alloc.AllPools].Peak
	j.mu.Unlock()
	if s.cfg.OnStep != nil {
		s.cfg.OnStep(j.id, p)
	}
}
