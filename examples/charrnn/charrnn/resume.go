package charrnn

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// trainKey is the checkpoint metadata train adds to the model's and the
// trainer's: JSON {"val_frac"}, the command-line settings of the run that
// neither records.
const trainKey = "charrnn.train"

// trainRecord is the JSON of trainKey.
type trainRecord struct {
	ValFrac float64 `json:"val_frac"`
}

// fromCheckpoint reads the checkpoint of -init or -resume, if there is
// one, and takes from it what it records, replacing the flags' defaults:
// with -init the model's shape (-cell, -embed, -hidden, -layers,
// -dropout); with -resume also the run's settings (-batch, -seq, -accum,
// -seed, -optimizer with all its hyperparameters, -lr, -clip, -schedule,
// -warmup, -val-frac) and, unless -steps or -epochs is given, where the
// run was to end. A flag the command line gave that contradicts the
// checkpoint is a usage error naming both values; -steps and -epochs may
// change (though not past the end of a cosine schedule), and so may the
// flags of outputs, validation, logging, sampling and the device. The
// record is nil without -resume.
func (f *TrainFlags) fromCheckpoint() (*train.Checkpoint, *train.Record, error) {
	from, how := f.Init, "-init takes the model's shape from it"
	if f.Resume != "" {
		from, how = f.Resume, "-resume continues the run it saved as it was"
	}
	if from == "" {
		return nil, nil, nil
	}
	ck, err := train.ReadCheckpoint(from)
	if err != nil {
		return nil, nil, err
	}
	if f.Resume != "" && !ck.Resumable() {
		return nil, nil, fmt.Errorf("%w: -resume %s: the file holds weights only; start from them with -init", ErrUsage, from)
	}
	cfg, _, err := models.DescribeCharRNN(ck)
	if err != nil {
		return nil, nil, err
	}
	b := binder{f: f, from: from, how: how}
	b.str("cell", &f.Model.Cell, cfg.Cell)
	b.int("embed", &f.Model.Embed, cfg.Embed)
	b.int("hidden", &f.Model.Hidden, cfg.Hidden)
	b.int("layers", &f.Model.Layers, cfg.Layers)
	b.float("dropout", &f.Model.Dropout, cfg.Dropout)
	if f.Resume == "" || b.err != nil {
		return ck, nil, b.err
	}
	rec, err := ck.Record()
	if err != nil {
		return nil, nil, err
	}
	b.int("batch", &f.Batch, rec.Data.Batch)
	b.int("seq", &f.Seq, rec.Data.Seq)
	b.int("accum", &f.Accum, rec.Data.Accum)
	b.uint("seed", &f.Seed, rec.Data.Seed)
	b.str("optimizer", &f.Optimizer, string(rec.Optimizer.Algorithm))
	b.float("lr", &f.LR, rec.Optimizer.LR)
	if js, ok := ck.Metadata()[trainKey]; ok {
		var tr trainRecord
		if err := json.Unmarshal([]byte(js), &tr); err != nil {
			return nil, nil, fmt.Errorf("%s: %w: %s metadata: %v", from, train.ErrCorrupt, trainKey, err)
		}
		b.float("val-frac", &f.ValFrac, tr.ValFrac)
	}
	if rec.HasSettings {
		b.float("clip", &f.Clip, rec.ClipNorm)
		switch rec.Schedule.Decay {
		case "", "constant":
			b.str("schedule", &f.Schedule, "constant")
		case "cosine":
			b.str("schedule", &f.Schedule, "cosine")
		default:
			return nil, nil, fmt.Errorf("%w: -resume %s: its run has a %q learning-rate decay, which this command does not run; continue it with the train package",
				ErrUsage, from, rec.Schedule.Decay)
		}
		b.int64("warmup", &f.Warmup, rec.Schedule.Warmup)
		if !f.Explicit["steps"] && !f.Explicit["epochs"] {
			f.Steps, f.Epochs = rec.Steps, rec.Epochs
		}
		if end := rec.Schedule.Total; b.err == nil && rec.Schedule.Decay == "cosine" && f.Steps > end {
			b.err = fmt.Errorf("%w: -steps %d runs past the end of the cosine schedule of %s at step %d, where the learning rate stays at %g; "+
				"resume to at most -steps %d, or start a new schedule from its weights with -init", ErrUsage, f.Steps, from, end, rec.Schedule.MinLR, end)
		}
	}
	return ck, &rec, b.err
}

// binder sets flags to a checkpoint's values, or finds the first flag
// the command line gave with another value.
type binder struct {
	f         *TrainFlags
	from, how string
	err       error
}

// bind sets the flag name to want (formatted as the flag package formats
// it) with set, unless it has that value already; a value the command
// line gave is an error instead.
func (b *binder) bind(name, have, want string, set func()) {
	if b.err != nil || have == want {
		return
	}
	if b.f.Explicit[name] {
		b.err = fmt.Errorf("%w: -%s %s contradicts %s, which records -%s %s: %s; drop -%s", ErrUsage, name, have, b.from, name, want, b.how, name)
		return
	}
	set()
}

func (b *binder) str(name string, p *string, v string) {
	b.bind(name, *p, v, func() { *p = v })
}

func (b *binder) int(name string, p *int, v int) {
	b.bind(name, strconv.Itoa(*p), strconv.Itoa(v), func() { *p = v })
}

func (b *binder) int64(name string, p *int64, v int64) {
	b.bind(name, strconv.FormatInt(*p, 10), strconv.FormatInt(v, 10), func() { *p = v })
}

func (b *binder) uint(name string, p *uint64, v uint64) {
	b.bind(name, strconv.FormatUint(*p, 10), strconv.FormatUint(v, 10), func() { *p = v })
}

func (b *binder) float(name string, p *float64, v float64) {
	b.bind(name, strconv.FormatFloat(*p, 'g', -1, 64), strconv.FormatFloat(v, 'g', -1, 64), func() { *p = v })
}
