package train

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
)

// A checkpoint is one safetensors file (see docs/ARCHITECTURE.md, "Public
// contracts"). A model's tensors are named Group.Name + "." + parameter
// name with PyTorch's shapes, in the parameters' type (F32 for float32
// models); the trainer's tensors carry the "optim." prefix: optimizer slot
// s of group g as "optim.g.s", value v of the state carried by micro-batch
// group j as "optim.carry.j.v"; the trainer's counters and the loader's
// configuration are the JSON of the "trainer" metadata key.

// ErrMismatch is wrapped by the error of a checkpoint that is well formed
// but does not fit the model or the trainer it is loaded into.
var ErrMismatch = errors.New("train: checkpoint does not fit")

// optimPrefix starts the name of every tensor that is not a model's.
const optimPrefix = "optim."

// Checkpoint is a checkpoint file read into memory.
type Checkpoint struct {
	path string
	file *tensorFile
}

// ReadCheckpoint reads and validates the safetensors file at path. A file
// that is not one (truncated, corrupt) gives an error wrapping ErrCorrupt,
// and so does one whose bytes do not match the checksums it records (the
// files this package writes record them; see docs/ARCHITECTURE.md): the
// error names the tensor, or the metadata, that is damaged. A file without
// checksums (PyTorch's) is checked for its structure alone.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("train: reading checkpoint: %w", err)
	}
	return readCheckpoint(path, b)
}

// readCheckpoint is ReadCheckpoint of the file's bytes b.
func readCheckpoint(path string, b []byte) (*Checkpoint, error) {
	f, err := decodeTensors(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Checkpoint{path: path, file: f}, nil
}

// Path is the file the checkpoint was read from.
func (c *Checkpoint) Path() string { return c.path }

// Metadata returns a copy of the file's __metadata__, without the
// checksums, which ReadCheckpoint verified: what its writer passed.
func (c *Checkpoint) Metadata() map[string]string { return maps.Clone(c.file.meta) }

// Shape is the shape of the tensor called name, and false when the file
// holds none: what a loader checks a configuration read from the
// metadata against before it builds a model of that size.
func (c *Checkpoint) Shape(name string) ([]int, bool) {
	t, ok := c.file.tensors[name]
	return slices.Clone(t.shape), ok
}

// Resumable reports whether the file holds a trainer's state (Save wrote
// it) and not only weights.
func (c *Checkpoint) Resumable() bool {
	_, ok := c.file.meta[trainerKey]
	return ok
}

// LoadWeights sets the parameters of groups from the checkpoint. Every
// parameter must be there with its shape, as F32 or F64, and the file may
// hold no other model tensor (a checkpoint of a bigger model does not
// load into a smaller one). Nothing is changed unless everything fits.
func (c *Checkpoint) LoadWeights(d device.Device, groups []Group) error {
	type load struct {
		dst device.Buffer
		dt  device.DType
		src tensorData
	}
	var loads []load
	seen := map[string]bool{}
	for _, g := range groups {
		for p := range g.Params.All() {
			name := g.Name + "." + p.Name
			seen[name] = true
			t, ok := c.file.tensors[name]
			if !ok {
				return c.mismatch("no tensor %q", name)
			}
			if !slices.Equal(t.shape, p.Shape) {
				return c.mismatch("tensor %q has shape %v, the model's is %v", name, t.shape, p.Shape)
			}
			if t.dtype != "F32" && t.dtype != "F64" {
				return c.mismatch("tensor %q is %s; want F32 or F64", name, t.dtype)
			}
			if err := c.checkFinite(name, t); err != nil {
				return err
			}
			loads = append(loads, load{p.Value, g.Params.DType(), t})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.file.tensors)) {
		if !seen[name] && !strings.HasPrefix(name, optimPrefix) {
			return c.mismatch("tensor %q is not a parameter of the model", name)
		}
	}
	for _, l := range loads {
		if err := d.Upload(l.dst, convert(l.src, l.dt)); err != nil {
			return fmt.Errorf("train: loading %s: %w", c.path, err)
		}
	}
	return nil
}

// ErrNonFiniteWeights is matched by the error of loading a checkpoint
// whose tensors hold NaN or infinity: the run that wrote it diverged, and
// a model loaded from it would only produce NaN.
var ErrNonFiniteWeights = errors.New("train: non-finite values in a checkpoint")

// checkFinite reports a float tensor holding NaN or infinity, with how
// many of its values are and the first one's index.
func (c *Checkpoint) checkFinite(name string, t tensorData) error {
	var n, first, size int
	switch t.dtype {
	case "F32":
		size = 4
	case "F64":
		size = 8
	default:
		return nil
	}
	first = -1
	for i := 0; i+size <= len(t.data); i += size {
		var v float64
		if size == 4 {
			v = float64(math.Float32frombits(binary.LittleEndian.Uint32(t.data[i:])))
		} else {
			v = math.Float64frombits(binary.LittleEndian.Uint64(t.data[i:]))
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if first < 0 {
				first = i / size
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w: tensor %q holds %d NaN or infinite values of %d (the first at index %d); the run that wrote it diverged",
		c.path, ErrNonFiniteWeights, name, n, len(t.data)/size, first)
}

func (c *Checkpoint) mismatch(format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", c.path, ErrMismatch, fmt.Sprintf(format, args...))
}

// convert returns t's elements as little-endian bytes of dt.
func convert(t tensorData, dt device.DType) []byte {
	if (t.dtype == "F32" && dt == device.Float32) || (t.dtype == "F64" && dt == device.Float64) {
		return t.data
	}
	out := make([]byte, 0, len(t.data)/int(dtypeSize[t.dtype])*int(dt.Size()))
	if t.dtype == "F32" {
		for i := 0; i < len(t.data); i += 4 {
			v := float64(math.Float32frombits(binary.LittleEndian.Uint32(t.data[i:])))
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
		return out
	}
	for i := 0; i < len(t.data); i += 8 {
		v := float32(math.Float64frombits(binary.LittleEndian.Uint64(t.data[i:])))
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}

// safeDType is the safetensors name of a float type.
func safeDType(dt device.DType) string {
	if dt == device.Float64 {
		return "F64"
	}
	return "F32"
}

// downloadBytes reads a device buffer's bytes.
func downloadBytes(d device.Device, b device.Buffer) ([]byte, error) {
	out := make([]byte, b.Len())
	return out, d.Download(out, b)
}

// addWeights adds the parameters of groups to f.
func addWeights(d device.Device, f *tensorFile, groups []Group) error {
	for _, g := range groups {
		for p := range g.Params.All() {
			b, err := downloadBytes(d, p.Value)
			if err != nil {
				return fmt.Errorf("train: reading %s.%s: %w", g.Name, p.Name, err)
			}
			f.tensors[g.Name+"."+p.Name] = tensorData{dtype: safeDType(g.Params.DType()), shape: slices.Clone(p.Shape), data: b}
		}
	}
	return nil
}

// SaveWeights writes the parameters of groups, with meta as the file's
// metadata, to path atomically: a crash leaves the old file or the new one.
// The file also records the checksums of its tensors and metadata, under
// keys starting with "crc32c.", which meta may therefore not hold.
func SaveWeights(path string, d device.Device, groups []Group, meta map[string]string) error {
	f := &tensorFile{meta: maps.Clone(meta), tensors: map[string]tensorData{}}
	if err := addWeights(d, f, groups); err != nil {
		return err
	}
	return WriteFile(path, f.encode)
}

// trainerKey is the metadata key of the trainer's state.
const trainerKey = "trainer"

// trainerState is the JSON of the "trainer" metadata key.
type trainerState struct {
	Version   int        `json:"version"`
	Step      int64      `json:"step"`
	Skipped   int64      `json:"skipped"`
	Epoch     int        `json:"epoch"`
	Batch     int64      `json:"batch"`
	Random    []uint64   `json:"random,omitempty"`
	Optimizer Optimizer  `json:"optimizer"`
	Loader    DataRecord `json:"loader"`
	Carried   int        `json:"carried"`
	// Settings are the run's schedule, clipping and stopping point;
	// absent from the checkpoints written before they were recorded.
	Settings *settingsRecord `json:"settings,omitempty"`
	// Stopped says why the run ended where a checkpoint was written on
	// its way out of a failure: "non-finite step N" for the state before
	// step N, whose loss or gradient was NaN or infinite. Empty otherwise.
	Stopped string `json:"stopped,omitempty"`
}

// settingsRecord is the "settings" of the trainer state.
type settingsRecord struct {
	Schedule  Schedule `json:"schedule"`
	ClipNorm  float64  `json:"clip_norm"`
	ClipValue float64  `json:"clip_value"`
	Steps     int64    `json:"steps"`
	Epochs    int      `json:"epochs"`
}

// DataRecord is how a run's loader cut the data: what must not change
// between a run and its resumption for the data to continue where it
// stopped.
type DataRecord struct {
	Mode     string `json:"mode"` // loader.Mode's String, or "sequences"
	Batch    int    `json:"batch"`
	Seq      int    `json:"seq"`
	Accum    int    `json:"accum"`
	Stride   int    `json:"stride"`
	Seed     uint64 `json:"seed"`
	PerEpoch int64  `json:"per_epoch"`
	// For a labelled dataset (Mode "sequences"): the bucketing's token
	// budget, pool and shuffling, and the number of examples.
	MaxTokens int  `json:"max_tokens,omitempty"`
	Pool      int  `json:"pool,omitempty"`
	Shuffle   bool `json:"shuffle,omitempty"`
	Examples  int  `json:"examples,omitempty"`
}

func signature(l *loader.Loader) DataRecord {
	c := l.Config()
	return DataRecord{Mode: c.Mode.String(), Batch: c.Rows(), Seq: c.Seq, Accum: c.Accum, Stride: c.Stride, Seed: c.Seed, PerEpoch: l.PerEpoch()}
}

// Record is what a checkpoint that Trainer.Save wrote records of the run,
// besides the tensors: where it stopped, its optimizer, how its loader
// cut the data and, in checkpoints that record them (HasSettings), the
// settings a caller needs to continue it as it was configured.
type Record struct {
	// Step and Skipped are the steps taken and skipped; Position is where
	// in the data the next step starts.
	Step, Skipped int64
	Position      loader.Position
	// Optimizer is the update with every hyperparameter, the learning
	// rate included.
	Optimizer Optimizer
	// Data is how the loader cut the data.
	Data DataRecord
	// HasSettings says the checkpoint records the fields below (the
	// checkpoints of earlier versions do not).
	HasSettings bool
	// Schedule is the learning-rate schedule, a cosine decay's Total
	// resolved to the step it ends at.
	Schedule Schedule
	// ClipNorm and ClipValue are Config's.
	ClipNorm, ClipValue float64
	// Steps is the step the run was to reach (0: until the loader's
	// Epochs, the epochs it was to run, end).
	Steps  int64
	Epochs int
	// Stopped is "non-finite step N" for the checkpoint of a run that
	// stopped at a non-finite step N (the state before it), and empty
	// otherwise.
	Stopped string
}

// Record returns what the checkpoint records of the run that saved it.
// A weights-only checkpoint has no record: an error wrapping ErrMismatch.
func (c *Checkpoint) Record() (Record, error) {
	ts, err := c.trainerState()
	if err != nil {
		return Record{}, err
	}
	r := Record{Step: ts.Step, Skipped: ts.Skipped, Position: loader.Position{Epoch: ts.Epoch, Batch: ts.Batch},
		Optimizer: ts.Optimizer, Data: ts.Loader, Stopped: ts.Stopped}
	if s := ts.Settings; s != nil {
		r.HasSettings = true
		r.Schedule, r.ClipNorm, r.ClipValue, r.Steps, r.Epochs = s.Schedule, s.ClipNorm, s.ClipValue, s.Steps, s.Epochs
	}
	return r, nil
}

// trainerState decodes and checks the "trainer" metadata.
func (c *Checkpoint) trainerState() (trainerState, error) {
	var ts trainerState
	js, ok := c.file.meta[trainerKey]
	if !ok {
		return ts, c.mismatch("no trainer state (a weights-only checkpoint: load it with LoadWeights)")
	}
	if err := json.Unmarshal([]byte(js), &ts); err != nil {
		return ts, fmt.Errorf("%s: %w: trainer state: %v", c.path, ErrCorrupt, err)
	}
	switch {
	case ts.Version != 1:
		return ts, c.mismatch("trainer state version %d, this trainer reads 1", ts.Version)
	case ts.Step < 0 || ts.Skipped < 0 || ts.Epoch < 0 || ts.Batch < 0:
		return ts, fmt.Errorf("%s: %w: negative counters in the trainer state", c.path, ErrCorrupt)
	}
	// The loader's record is held to the loaders' own checks: a caller
	// takes its batch, seq and accum as defaults for the loader it
	// builds (issue 46: a record of batch 2^40 × accum 2^24 divided by
	// zero there).
	d := ts.Loader
	var err error
	switch d.Mode {
	case "sequences":
		err = loader.BucketConfig{Batch: max(d.Batch, 1), Accum: d.Accum, MaxTokens: d.MaxTokens, Pool: d.Pool}.Validate()
	case "":
	default:
		err = loader.Config{Batch: max(d.Batch, 1), Seq: d.Seq, Accum: d.Accum, Stride: d.Stride}.Validate()
	}
	if err == nil && (d.Batch < 0 || d.PerEpoch < 0 || d.Examples < 0) {
		err = fmt.Errorf("batch %d, per_epoch %d, examples %d: none may be negative", d.Batch, d.PerEpoch, d.Examples)
	}
	if err != nil {
		return ts, c.mismatch("the trainer state's loader: %v", err)
	}
	return ts, nil
}

// Save writes a checkpoint of everything a run needs to continue exactly:
// the weights, the optimizer state, the carried state, the step count, the
// position in the data and the model's random state, plus
// Config.Metadata. The file is written atomically. Called from OnStep
// while Config.Pipeline steps are queued after the reported one, it is an
// error: the device's state is then ahead of the step (Config.
// CheckpointEvery saves at the step, reading back at once). In a
// data-parallel run (Config.Comm) Save is a collective: every rank must
// call it at the same step, for they all send their carried state to rank
// 0, which alone writes the file; a rank that does not leaves the others
// waiting until the watchdog stops them.
func (t *Trainer) Save(path string) error {
	if err := t.g.enter("Save", true); err != nil {
		return err
	}
	defer t.g.leave()
	return t.save(path, "")
}

// errSaveQueued is the error of a Save while steps are queued.
var errSaveQueued = errors.New("train: Save from OnStep while later steps are queued on the device (Config.Pipeline); use Config.CheckpointEvery")

// save is Save with the trainer metadata's "stopped" mark (empty: none).
func (t *Trainer) save(path, stopped string) error {
	if t.ahead > 0 {
		return errSaveQueued
	}
	// Every rank takes part in gathering the carried state; rank 0 writes.
	carried, err := t.gatherCarried()
	if err != nil {
		return fmt.Errorf("train: saving: %w", err)
	}
	if !t.leader() {
		return nil
	}
	f := &tensorFile{meta: maps.Clone(t.cfg.Metadata), tensors: map[string]tensorData{}}
	if f.meta == nil {
		f.meta = map[string]string{}
	}
	if err := addWeights(t.dev, f, t.groups); err != nil {
		return err
	}
	dt := safeDType(t.groups[0].Params.DType())
	for i, g := range t.groups {
		for s, name := range t.opt.names {
			b, err := downloadBytes(t.dev, t.opt.state[i][s].Slice(0, int64(g.Params.Len())*g.Params.DType().Size()))
			if err != nil {
				return fmt.Errorf("train: saving: %w", err)
			}
			f.tensors[optimPrefix+g.Name+"."+name] = tensorData{dtype: dt, shape: []int{g.Params.Len()}, data: b}
		}
	}
	for j, st := range t.states {
		for k, c := range st.Carried() {
			f.tensors[fmt.Sprintf("%scarry.%d.%s", optimPrefix, j, c.Name)] = tensorData{dtype: safeDType(c.DType), shape: []int{c.Len * t.ranks()}, data: carried[j][k]}
		}
	}
	ts := trainerState{Version: 1, Step: t.step, Skipped: t.skipped, Epoch: t.pos.Epoch, Batch: t.pos.Batch,
		Optimizer: t.cfg.Optimizer, Loader: t.src.record(), Carried: len(t.states), Stopped: stopped,
		Settings: &settingsRecord{Schedule: t.cfg.Schedule.resolved(t.cfg.Steps), ClipNorm: t.cfg.ClipNorm, ClipValue: t.cfg.ClipValue,
			Steps: t.cfg.Steps, Epochs: t.src.epochs()}}
	if r := t.src.random(); r != nil {
		ts.Random = r.RandomState()
	}
	js, err := json.Marshal(ts)
	if err != nil {
		return fmt.Errorf("train: saving: %w", err)
	}
	f.meta[trainerKey] = string(js)
	err = WriteFile(path, f.encode)
	if err == nil && path == t.cfg.Checkpoint {
		t.saved = t.step
	}
	if err == nil && t.cfg.Logger != nil {
		t.cfg.Logger.Info("train: checkpoint written", "path", path, "step", t.step)
	}
	return err
}

// SaveError is the error of a checkpoint the trainer failed to write to
// Config.Checkpoint (a full disk, a directory gone), on a schedule or as
// the run ended, was cancelled or met a non-finite step: which step's
// state was lost, and which of the run's checkpoints is on disk instead,
// so that a caller can tell a run stopped with its work saved from one
// that lost it (a command's exit status: 128 + the signal only for the
// first).
type SaveError struct {
	// Path is Config.Checkpoint; Step the step whose state it was to
	// hold.
	Path string
	Step int64
	// Saved is the step of the checkpoint at Path that this run wrote
	// last, or that it resumed from; -1 when there is none.
	Saved int64
	Err   error
}

func (e *SaveError) Error() string {
	last := "no checkpoint of this run is on disk"
	if e.Saved >= 0 {
		last = fmt.Sprintf("the checkpoint on disk is step %d's", e.Saved)
	}
	return fmt.Sprintf("train: the checkpoint of step %d was not saved to %s: %v; %s", e.Step, e.Path, e.Err, last)
}

func (e *SaveError) Unwrap() error { return e.Err }

// saveError wraps the error of a save to Config.Checkpoint at the current
// step.
func (t *Trainer) saveError(err error) error {
	if err == nil {
		return nil
	}
	return &SaveError{Path: t.cfg.Checkpoint, Step: t.step, Saved: t.saved, Err: err}
}

// samePath reports whether paths a and b name one existing file.
func samePath(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// Resume restores what Save wrote: the weights, the optimizer state, the
// carried state, the step count, the position and the model's random
// state, so the next Run continues as if the saved run had never stopped.
// The loader must cut the data as the saved run's did and the optimizer
// must be the same algorithm; any difference is an error wrapping
// ErrMismatch, and nothing is changed unless everything fits.
//
// The hyperparameters (learning rate, schedule, clipping, Steps) are the
// trainer's Config, which may differ from the saved run's; Record says
// what those were, for a caller that continues the run unchanged. One is
// kept so that a longer run does not reshape it: a cosine decay whose
// Total is 0 keeps ending where the saved run's did (its Steps then),
// not at this trainer's Steps; set Total to end it elsewhere.
func (t *Trainer) Resume(c *Checkpoint) error {
	if err := t.g.enter("Resume", false); err != nil {
		return err
	}
	defer t.g.leave()
	ts, err := c.trainerState()
	if err != nil {
		return err
	}
	switch {
	case ts.Loader != t.src.record():
		return c.mismatch("the data was cut as %+v, this loader cuts it as %+v", ts.Loader, t.src.record())
	case ts.Optimizer.Algorithm != t.cfg.Optimizer.Algorithm || !slices.Equal(ts.Optimizer.slots(), t.opt.names):
		return c.mismatch("optimizer %s with state %v, this trainer's is %s with %v",
			ts.Optimizer.Algorithm, ts.Optimizer.slots(), t.cfg.Optimizer.Algorithm, t.opt.names)
	case ts.Carried != len(t.states):
		return c.mismatch("%d carried states, this trainer has %d", ts.Carried, len(t.states))
	case !t.src.stepStart(loader.Position{Epoch: ts.Epoch, Batch: ts.Batch}):
		return fmt.Errorf("%s: %w: position %d is inside a step", c.path, ErrCorrupt, ts.Batch)
	}
	r := t.src.random()
	random := r != nil
	if random != (ts.Random != nil) {
		return c.mismatch("random state present: %v, the model draws random numbers: %v", ts.Random != nil, random)
	}
	if random {
		if want := len(r.RandomState()); len(ts.Random) != want {
			return c.mismatch("random state of %d numbers, the model's has %d", len(ts.Random), want)
		}
	}
	// Check every tensor before changing anything.
	type load struct {
		dst device.Buffer
		src []byte
	}
	var loads []load
	take := func(name string, dt device.DType, n int, dst device.Buffer, part func([]byte) []byte) error {
		tn, ok := c.file.tensors[name]
		if !ok {
			return c.mismatch("no tensor %q", name)
		}
		if tn.dtype != safeDType(dt) || !slices.Equal(tn.shape, []int{n}) {
			return c.mismatch("tensor %q is %s%v, want %s[%d]", name, tn.dtype, tn.shape, safeDType(dt), n)
		}
		if err := c.checkFinite(name, tn); err != nil {
			return err
		}
		data := tn.data
		if part != nil {
			data = part(data)
		}
		loads = append(loads, load{dst.Slice(0, int64(len(data))), data})
		return nil
	}
	for i, g := range t.groups {
		for s, name := range t.opt.names {
			if err := take(optimPrefix+g.Name+"."+name, g.Params.DType(), g.Params.Len(), t.opt.state[i][s], nil); err != nil {
				return err
			}
		}
	}
	for j, st := range t.states {
		for _, cv := range st.Carried() {
			// The checkpoint holds the whole batch's state; this rank
			// carries its share of the rows.
			part := func(whole []byte) []byte { return t.shardCarried(cv, whole) }
			if err := take(fmt.Sprintf("%scarry.%d.%s", optimPrefix, j, cv.Name), cv.DType, cv.Len*t.ranks(), cv.Buffer, part); err != nil {
				return err
			}
		}
	}
	// LoadWeights validates the model's tensors before it writes any.
	if err := c.LoadWeights(t.dev, t.groups); err != nil {
		return err
	}
	for _, l := range loads {
		if err := t.dev.Upload(l.dst, l.src); err != nil {
			return fmt.Errorf("train: resuming from %s: %w", c.path, err)
		}
	}
	for _, st := range t.states {
		st.Detach()
	}
	t.step, t.skipped = ts.Step, ts.Skipped
	t.pos = loader.Position{Epoch: ts.Epoch, Batch: ts.Batch}
	if samePath(c.path, t.cfg.Checkpoint) {
		t.saved = ts.Step // the run's checkpoint on disk is the one resumed
	}
	if s := ts.Settings; s != nil && s.Schedule.Decay == "cosine" && t.cfg.Schedule.Decay == "cosine" && t.cfg.Schedule.Total == 0 {
		t.cfg.Schedule.Total = s.Schedule.Total
	}
	if random {
		if err := r.SetRandomState(ts.Random); err != nil {
			return fmt.Errorf("train: resuming from %s: %w", c.path, err)
		}
	}
	return nil
}
