package svc

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/gocurrent/gocurrent/examples/internal/cli"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// ErrInvalid is matched by the error of a job spec that cannot run (an
// unknown model kind, a negative size, no data); over HTTP it is a 400.
var ErrInvalid = errors.New("trainsvc: invalid job")

// Spec is a training job, as POST /jobs takes it in JSON. The zero value
// of every field but Data works; Submit fills the defaults in, and the
// job's spec.json and GET /jobs/{id} show the spec as it runs.
type Spec struct {
	// Data is the training text: a file or a directory tree on the
	// server's disk, streamed (loader.Open). Required; Submit makes it
	// absolute.
	Data string `json:"data"`
	// Model is the network trained.
	Model ModelSpec `json:"model"`
	// Batch is the streams per micro-batch (default 32), Seq the
	// characters per window (default 64), Accum the micro-batches per
	// optimizer step (default 1): the char-RNN's batching.
	Batch int `json:"batch,omitempty"`
	Seq   int `json:"seq,omitempty"`
	Accum int `json:"accum,omitempty"`
	// Optimizer is "adam" (default), "adamw", "sgd" or "rmsprop", with
	// PyTorch's defaults at learning rate LR (default 2e-3).
	Optimizer string  `json:"optimizer,omitempty"`
	LR        float64 `json:"lr,omitempty"`
	// Clip clips the gradient to this global L2 norm; 0 means off.
	Clip float64 `json:"clip,omitempty"`
	// Steps is the optimizer steps the job runs to (default 1000).
	Steps int64 `json:"steps,omitempty"`
	// Seed seeds the initial weights and dropout.
	Seed uint64 `json:"seed,omitempty"`
	// MemoryLimit caps the device memory the job's scope reserves, in
	// bytes (JSON: a number, or a string with a unit, "64MiB"); 0 means
	// no cap but the device's.
	MemoryLimit Bytes `json:"memory_limit,omitempty"`
	// SkipNonFinite skips a step whose loss or gradient is NaN or
	// infinite instead of failing the job, at most MaxSkips in a row
	// (0: 100; negative is invalid, though train.Config reads it as no
	// limit); train.Config's fields.
	SkipNonFinite bool  `json:"skip_nonfinite,omitempty"`
	MaxSkips      int64 `json:"max_skips,omitempty"`
	// CheckpointEvery saves the job's checkpoint every this many steps
	// (0: only when it ends or stops).
	CheckpointEvery int64 `json:"checkpoint_every,omitempty"`
}

// ModelSpec is the model a job trains: its kind and size.
type ModelSpec struct {
	// Kind is "charrnn" (the default): models.CharRNN, a character-level
	// language model.
	Kind string `json:"kind,omitempty"`
	// Cell is "lstm" (default) or "gru"; Embed (default 64), Hidden
	// (default 256) and Layers (default 2) its sizes; Dropout between the
	// recurrent layers, in [0, 1).
	Cell    string  `json:"cell,omitempty"`
	Embed   int     `json:"embed,omitempty"`
	Hidden  int     `json:"hidden,omitempty"`
	Layers  int     `json:"layers,omitempty"`
	Dropout float64 `json:"dropout,omitempty"`
	// Vocab is the size of the model's vocabulary: the first Vocab
	// characters of the data's (its distinct characters by code point);
	// 0 means all of them. The data's token ids stay the data's, so a
	// model with fewer classes than the data has characters is given ids
	// outside its range, which the device reports as device.ErrIndex at
	// the first step: a model sized for other data fails the job there.
	Vocab int `json:"vocab,omitempty"`
}

// withDefaults returns s with every default filled in.
func (s Spec) withDefaults() Spec {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if s.Model.Kind == "" {
		s.Model.Kind = "charrnn"
	}
	if s.Model.Cell == "" {
		s.Model.Cell = "lstm"
	}
	def(&s.Model.Embed, 64)
	def(&s.Model.Hidden, 256)
	def(&s.Model.Layers, 2)
	def(&s.Batch, 32)
	def(&s.Seq, 64)
	def(&s.Accum, 1)
	if s.Optimizer == "" {
		s.Optimizer = string(train.Adam)
	}
	if s.LR == 0 {
		s.LR = 2e-3
	}
	if s.Steps == 0 {
		s.Steps = 1000
	}
	return s
}

// validate checks a spec with its defaults filled in.
func (s Spec) validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s %v, want %s", ErrInvalid, field, v, want)
	}
	m := s.Model
	switch {
	case s.Data == "":
		return fmt.Errorf("%w: no data: want the path of a text file or directory", ErrInvalid)
	case m.Kind != "charrnn":
		return bad("model.kind", strconv.Quote(m.Kind), `"charrnn"`)
	case m.Cell != "lstm" && m.Cell != "gru":
		return bad("model.cell", strconv.Quote(m.Cell), `"lstm" or "gru"`)
	case m.Embed < 0 || m.Hidden < 0 || m.Layers < 0 || m.Vocab < 0:
		return fmt.Errorf("%w: model sizes embed %d, hidden %d, layers %d, vocab %d: want none negative", ErrInvalid, m.Embed, m.Hidden, m.Layers, m.Vocab)
	case !(m.Dropout >= 0 && m.Dropout < 1):
		return bad("model.dropout", m.Dropout, "[0, 1)")
	case s.Batch < 0 || s.Seq < 0 || s.Accum < 0:
		return fmt.Errorf("%w: batch %d, seq %d, accum %d: want none negative", ErrInvalid, s.Batch, s.Seq, s.Accum)
	case s.Steps < 0:
		return bad("steps", s.Steps, "> 0")
	case !(s.LR > 0) || math.IsInf(s.LR, 0):
		return bad("lr", s.LR, "a finite number > 0")
	case !(s.Clip >= 0) || math.IsInf(s.Clip, 0):
		return bad("clip", s.Clip, "a finite number >= 0")
	case s.MemoryLimit < 0:
		return bad("memory_limit", s.MemoryLimit, ">= 0")
	case s.CheckpointEvery < 0:
		return bad("checkpoint_every", s.CheckpointEvery, ">= 0")
	case s.MaxSkips < 0:
		// train.Config reads a negative MaxSkips as no limit; the spec's
		// contract has no such value, and a job that skips forever
		// trains nothing.
		return bad("max_skips", s.MaxSkips, ">= 0 (0: 100)")
	}
	if _, err := train.NewOptimizer(train.Algorithm(s.Optimizer), s.LR); err != nil {
		return fmt.Errorf("%w: optimizer: %v", ErrInvalid, err)
	}
	// The sizes the numbers give together, as the library checks them:
	// products that overflow, counts past a maximum (issue 46: batch 2^40
	// with accum 2^24 killed the server with a divide by zero, layers
	// 2^40 grew it without end).
	if err := m.charRNN().Validate(); err != nil {
		return fmt.Errorf("%w: model: %v", ErrInvalid, err)
	}
	if err := (loader.Config{Batch: s.Batch, Seq: s.Seq, Accum: s.Accum}).Validate(); err != nil {
		return fmt.Errorf("%w: batch, seq, accum: %v", ErrInvalid, err)
	}
	return nil
}

// charRNN is the model's configuration.
func (m ModelSpec) charRNN() models.CharRNNConfig {
	return models.CharRNNConfig{Cell: m.Cell, Embed: m.Embed, Hidden: m.Hidden, Layers: m.Layers, Dropout: m.Dropout}
}

// Bytes is a number of bytes. In JSON it is written as a number and read
// from a number or a string with an optional unit ("512MiB", "1.5GB"; KB,
// MB, GB powers of 1000, KiB, MiB, GiB of 1024).
type Bytes int64

// UnmarshalJSON reads a number or a string with a unit.
func (b *Bytes) UnmarshalJSON(p []byte) error {
	var n int64
	if err := json.Unmarshal(p, &n); err == nil {
		*b = Bytes(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(p, &s); err != nil {
		return fmt.Errorf("bytes %s: want a number or a string such as \"64MiB\"", p)
	}
	var size cli.Size
	if err := size.Set(s); err != nil {
		return err
	}
	*b = Bytes(size)
	return nil
}
