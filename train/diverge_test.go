package train_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// divergedLM is a model every step of which is non-finite: all its
// embeddings are NaN.
func divergedLM(t *testing.T, d device.Device) *lm {
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1})
	for i := range 10 {
		poison(t, m, i)
	}
	return m
}

// TestNonFiniteSavesState: a run that stops at a non-finite step writes
// the state before it to Config.Checkpoint, marked in the trainer metadata,
// and says so in its error; before, it saved nothing.
func TestNonFiniteSavesState(t *testing.T) {
	d := testdevice.Open(t)
	m := divergedLM(t, d)
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	path := filepath.Join(t.TempDir(), "run.safetensors")
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 10, Checkpoint: path})
	_, err := tr.Run(context.Background())
	if !errors.Is(err, train.ErrNonFinite) || !strings.Contains(err.Error(), "saved in "+path) {
		t.Fatalf("Run: %v, want ErrNonFinite saying the state is saved in %s", err, path)
	}
	ck, err := train.ReadCheckpoint(path)
	if err != nil {
		t.Fatalf("no checkpoint after the non-finite step: %v", err)
	}
	var ts struct {
		Step    int64  `json:"step"`
		Stopped string `json:"stopped"`
	}
	check(t, json.Unmarshal([]byte(ck.Metadata()["trainer"]), &ts))
	if ts.Step != 0 || ts.Stopped != "non-finite step 1" {
		t.Errorf("checkpoint at step %d marked %q, want step 0 marked %q", ts.Step, ts.Stopped, "non-finite step 1")
	}
}

// TestMaxSkips: skipping stops a run whose every step is non-finite after
// Config.MaxSkips steps in a row, with the last step's error; before,
// it skipped to the end of the data and reported success. Each skipped
// step is reported to OnStep, flagged, the one that reaches the limit
// included.
func TestMaxSkips(t *testing.T) {
	d := testdevice.Open(t)
	m := divergedLM(t, d)
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8, Epochs: 1})
	var reports []train.Progress
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), SkipNonFinite: true, MaxSkips: 3,
		OnStep: func(p train.Progress) { reports = append(reports, p) }})
	sum, err := tr.Run(context.Background())
	var nf *train.NonFiniteError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "3 steps in a row") {
		t.Errorf("Run: %v, want the last *NonFiniteError after 3 steps in a row", err)
	}
	if sum.Skipped != 3 || sum.Steps != 0 {
		t.Errorf("%d steps and %d skipped, want 0 and 3", sum.Steps, sum.Skipped)
	}
	if len(reports) != 3 {
		t.Fatalf("OnStep called %d times, want 3 (the skipped steps)", len(reports))
	}
	for i, p := range reports {
		n := int64(i + 1)
		if p.NonFinite == nil || p.NonFinite.Step != 1 || p.Step != 0 || p.Skipped != n || p.SkippedInARow != n || p.Position.Batch != n {
			t.Errorf("report %d: NonFinite %v, step %d, skipped %d (%d in a row), position %+v; want step 1's error, step 0, %d skipped in a row, batch %d",
				i, p.NonFinite, p.Step, p.Skipped, p.SkippedInARow, p.Position, n, n)
		}
	}
}

// cancelOnLog cancels a context at the first record it handles: the
// trainer logs every skipped step.
type cancelOnLog struct {
	slog.Handler
	cancel context.CancelFunc
}

func (h cancelOnLog) Enabled(context.Context, slog.Level) bool { return true }

func (h cancelOnLog) Handle(context.Context, slog.Record) error { h.cancel(); return nil }

// TestCancelWhileSkipping: a cancellation is noticed after a skipped step
// as after a taken one; before, skipped steps went past the check.
func TestCancelWhileSkipping(t *testing.T) {
	d := testdevice.Open(t)
	m := divergedLM(t, d)
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8, Epochs: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := slog.New(cancelOnLog{slog.DiscardHandler, cancel})
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), SkipNonFinite: true, MaxSkips: -1, Logger: logger})
	sum, err := tr.Run(ctx)
	if !errors.Is(err, context.Canceled) || sum.Skipped != 1 {
		t.Errorf("Run: %v after %d skipped steps, want context.Canceled after 1", err, sum.Skipped)
	}
}

// countLog counts the records logged.
type countLog struct {
	slog.Handler
	n *int
}

func (h countLog) Enabled(context.Context, slog.Level) bool { return true }

func (h countLog) Handle(context.Context, slog.Record) error { *h.n++; return nil }

// TestSkipLogIsRateLimited: 100 steps skipped in a row log at the 1st,
// 2nd, 4th, ..., 64th: 7 lines, not 100.
func TestSkipLogIsRateLimited(t *testing.T) {
	d := testdevice.Open(t)
	m := divergedLM(t, d)
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	lines := 0
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 1000, SkipNonFinite: true, MaxSkips: 100,
		Logger: slog.New(countLog{slog.DiscardHandler, &lines})})
	sum, err := tr.Run(context.Background())
	if err == nil || sum.Skipped != 100 {
		t.Fatalf("Run: %v after %d skipped steps, want the MaxSkips error after 100", err, sum.Skipped)
	}
	if lines != 7 {
		t.Errorf("%d log lines for 100 skipped steps, want 7 (at 1, 2, 4, ..., 64)", lines)
	}
}
