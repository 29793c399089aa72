package train_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// TestRecord checks that a checkpoint records the run's settings (the
// optimizer with its rate, the schedule with a cosine decay's end
// resolved, clipping, the step target, the loader's cut and position),
// and that a resumed run given a later Steps keeps the saved run's
// cosine decay instead of stretching it: before the schedule was
// recorded, the rate after the resume followed a decay to the new Steps.
func TestRecord(t *testing.T) {
	d := testdevice.Open(t)
	txt := text(t, 3000, 10, 2)
	cfg := lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 4}
	path := filepath.Join(t.TempDir(), "run.safetensors")
	lc := loader.Config{Batch: 3, Accum: 2, Seq: 8, Seed: 7}
	sched := train.Schedule{Decay: "cosine", Warmup: 1, MinLR: 0.001}
	opt := adam(t, 0.01)

	tr := newTrainer(t, d, newLM(t, d, cfg), newLoader(t, d, txt, lc),
		train.Config{Optimizer: opt, Schedule: sched, Steps: 6, ClipNorm: 0.5, Checkpoint: path})
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ck, err := train.ReadCheckpoint(path)
	check(t, err)
	rec, err := ck.Record()
	check(t, err)
	wantSched := sched
	wantSched.Total = 6
	switch {
	case !rec.HasSettings:
		t.Fatal("Record: HasSettings false for a checkpoint this trainer wrote")
	case rec.Step != 6 || rec.Skipped != 0 || rec.Position != tr.Position():
		t.Errorf("Record: step %d, skipped %d, position %+v; want 6, 0, %+v", rec.Step, rec.Skipped, rec.Position, tr.Position())
	case rec.Optimizer != opt:
		t.Errorf("Record: optimizer %+v, want %+v", rec.Optimizer, opt)
	case rec.Schedule != wantSched:
		t.Errorf("Record: schedule %+v, want %+v", rec.Schedule, wantSched)
	case rec.ClipNorm != 0.5 || rec.ClipValue != 0 || rec.Steps != 6 || rec.Epochs != 0:
		t.Errorf("Record: clip %v/%v, steps %d, epochs %d; want 0.5/0, 6, 0", rec.ClipNorm, rec.ClipValue, rec.Steps, rec.Epochs)
	case rec.Data != (train.DataRecord{Mode: "streams", Batch: 3, Seq: 8, Accum: 2, Stride: 8, Seed: 7, PerEpoch: rec.Data.PerEpoch}) || rec.Data.PerEpoch <= 0:
		t.Errorf("Record: data %+v, want streams of 3x8 (stride 8, the loader's default: Seq), accum 2, seed 7", rec.Data)
	case rec.Stopped != "":
		t.Errorf("Record: stopped %q after a run that finished", rec.Stopped)
	}

	// Resume to step 10 with the same schedule, its Total left 0: steps 7
	// to 10 are past the saved decay's end, at MinLR.
	var rates []float64
	tr2 := newTrainer(t, d, newLM(t, d, cfg), newLoader(t, d, txt, lc),
		train.Config{Optimizer: opt, Schedule: sched, Steps: 10, ClipNorm: 0.5,
			OnStep: func(p train.Progress) { rates = append(rates, p.LR) }})
	check(t, tr2.Resume(ck))
	if _, err := tr2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rates) != 4 {
		t.Fatalf("resumed run reported %d steps, want 4", len(rates))
	}
	for i, r := range rates {
		if want := wantSched.Rate(opt.LR, int64(6+i), 6); r != want || r != sched.MinLR {
			t.Errorf("resumed step %d: rate %v, want the saved decay's %v (= MinLR %v)", 7+i, r, want, sched.MinLR)
		}
	}
}

// TestRecordOlder checks what Record says of checkpoints that record
// less: one from before the settings were recorded (the trainer state
// alone) has HasSettings false, and a weights-only one has no record.
func TestRecordOlder(t *testing.T) {
	d := testdevice.Open(t)
	m := newLM(t, d, lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 4})
	dir := t.TempDir()
	old := filepath.Join(dir, "old.safetensors")
	// The "trainer" metadata as the trainer wrote it before "settings".
	state := `{"version":1,"step":3,"skipped":0,"epoch":0,"batch":6,"optimizer":{"algorithm":"sgd","lr":0.1},` +
		`"loader":{"mode":"streams","batch":3,"seq":8,"accum":2,"stride":0,"seed":0,"per_epoch":100},"carried":2}`
	check(t, train.SaveWeights(old, d, m.Groups(), map[string]string{"trainer": state}))
	ck, err := train.ReadCheckpoint(old)
	check(t, err)
	rec, err := ck.Record()
	check(t, err)
	if rec.HasSettings || rec.Step != 3 || rec.Optimizer.LR != 0.1 || rec.Data.Accum != 2 {
		t.Errorf("Record of an older checkpoint: %+v; want HasSettings false, step 3, lr 0.1, accum 2", rec)
	}

	weights := filepath.Join(dir, "weights.safetensors")
	check(t, train.SaveWeights(weights, d, m.Groups(), nil))
	ck, err = train.ReadCheckpoint(weights)
	check(t, err)
	if _, err := ck.Record(); !errors.Is(err, train.ErrMismatch) {
		t.Errorf("Record of a weights-only checkpoint: %v, want an error wrapping ErrMismatch", err)
	}
}
