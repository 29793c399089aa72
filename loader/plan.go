package loader

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gocurrent/gocurrent/internal/checked"
)

// Mode says how a text is cut into batches.
type Mode uint8

const (
	// Streams is the char-RNN contract: the text is cut into Batch·Accum
	// contiguous streams of floor(Len/(Batch·Accum)) tokens (the tail is
	// dropped), read in order by windows of Seq inputs and Seq targets
	// (the inputs shifted by one) that advance by Seq along every stream.
	// An optimizer step is Accum micro-batches; micro-batch j holds
	// streams j·Batch .. (j+1)·Batch-1 and carries its own hidden state,
	// which starts from zeros at the first window of each epoch.
	Streams Mode = iota
	// Windows cuts the text into windows of Seq inputs and Seq targets
	// starting every Stride tokens, shuffled each epoch from Seed, Batch
	// windows to a batch (the last partial batch is dropped). No state is
	// carried between batches.
	Windows
)

func (m Mode) String() string {
	switch m {
	case Streams:
		return "streams"
	case Windows:
		return "windows"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// MaxPrefetch and MaxWorkers bound Config.Prefetch and Config.Workers:
// each prefetched batch holds a staging slot on the host and on the
// device, each worker a goroutine, and more than these gain nothing.
//
// MaxAccum bounds Config.Accum: in Streams mode every micro-batch of a
// step is streams of its own whose state a trainer carries, so a step of
// 2^24 micro-batches is 2^24 states to allocate before its first step
// (seconds, with nothing to stop them), and no run needs a tenth of this.
const (
	MaxPrefetch = 1024
	MaxWorkers  = 1024
	MaxAccum    = 1 << 16
)

// ErrTooShort is returned when a text cannot fill one batch.
var ErrTooShort = errors.New("loader: text too short for one batch")

// Config describes how batches are cut and delivered. The zero value of
// every field but the text works.
type Config struct {
	Mode Mode
	// Batch is the number of sequences in a batch (rows); 0 means 32.
	Batch int
	// Seq is the number of input tokens of a window; 0 means 64.
	Seq int
	// Accum is the number of micro-batches per optimizer step in Streams
	// mode; 0 means 1, at most MaxAccum.
	Accum int
	// Stride is the distance between window starts in Windows mode, in
	// tokens; 0 means Seq.
	Stride int
	// Seed draws the Windows mode order of each epoch.
	Seed uint64
	// Epochs is the number of passes over the text; 0 means no end (the
	// consumer stops when it has had enough).
	Epochs int
	// Prefetch is the number of batches prepared ahead of the one the
	// consumer holds; 0 means 2, at most MaxPrefetch. It fixes the
	// staging ring: Prefetch+1 slots, allocated once.
	Prefetch int
	// Workers is the number of producer goroutines filling slots; 0
	// means 2, at most MaxWorkers.
	Workers int
	// Shard makes the loader one rank's part of a data-parallel job: the
	// text is cut as for batches of Batch·Shard.Of rows, and the loader
	// delivers rows Shard.Rank·Batch to (Shard.Rank+1)·Batch-1 of each
	// (its own streams in Streams mode, its own windows in Windows mode),
	// so the ranks together read every batch of the undivided job once.
	// The zero value is the whole batch.
	Shard Shard
}

// Shard is a rank's part of each batch (Config.Shard): Rank of Of ranks.
// Of 0 means 1.
type Shard struct {
	Rank, Of int
}

// ranks is the number of ranks, Of or 1.
func (s Shard) ranks() int { return max(s.Of, 1) }

// Rows is the batch of the undivided job: Batch·Shard.Of.
func (c Config) Rows() int { return c.Batch * c.Shard.ranks() }

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Batch, 32)
	def(&c.Seq, 64)
	def(&c.Accum, 1)
	def(&c.Stride, c.Seq)
	def(&c.Prefetch, 2)
	def(&c.Workers, 2)
	return c
}

// Validate checks the configuration, its defaults filled in, without a
// text: each field in its range and the sizes derived from them (rows,
// streams, a window, a batch's staging) free of overflow, each error
// naming the fields and their values. New runs it; a command line or a
// service checks its flags or a job's spec with it before any work.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"Batch", c.Batch}, {"Seq", c.Seq}, {"Accum", c.Accum}, {"Stride", c.Stride}, {"Prefetch", c.Prefetch}, {"Workers", c.Workers}} {
		if f.v <= 0 {
			return fmt.Errorf("loader: %s = %d, want > 0", f.name, f.v)
		}
	}
	// The sizes derived from them must not wrap (issue 46: Batch 2^40
	// and Accum 2^24 are 2^64 streams, which int64 arithmetic made 0, and
	// a divide by zero followed): rows, streams, a window and its target,
	// the staging slot of a batch in bytes, the ring.
	rows, okRows := checked.Mul(c.Batch, c.Shard.ranks())
	streams, okStreams := checked.Mul(rows, c.Accum)
	window, okWindow := checked.Add(c.Seq, 1)
	_, okSlot := checked.Mul(2*4, window, rows)
	switch {
	case !okRows:
		return fmt.Errorf("loader: Batch × Shard.Of = %d × %d overflows int", c.Batch, c.Shard.Of)
	case !okStreams:
		return fmt.Errorf("loader: Batch × Accum = %d × %d overflows int", rows, c.Accum)
	case !okWindow:
		return fmt.Errorf("loader: Seq = %d: a window of Seq inputs and their targets, Seq + 1 tokens, overflows int", c.Seq)
	case !okSlot:
		return fmt.Errorf("loader: Batch × (Seq + 1) = %d × %d tokens of a batch's staging overflow int", rows, window)
	case streams > 0 && window > math.MaxInt/streams:
		return fmt.Errorf("loader: Batch × Accum × (Seq + 1) = %d × %d tokens overflows int", streams, window)
	case c.Accum > MaxAccum:
		return fmt.Errorf("loader: Accum = %d, want at most %d", c.Accum, MaxAccum)
	case c.Prefetch > MaxPrefetch:
		return fmt.Errorf("loader: Prefetch = %d, want at most %d", c.Prefetch, MaxPrefetch)
	case c.Workers > MaxWorkers:
		return fmt.Errorf("loader: Workers = %d, want at most %d", c.Workers, MaxWorkers)
	}
	switch {
	case c.Epochs < 0:
		return fmt.Errorf("loader: Epochs = %d, want >= 0", c.Epochs)
	case c.Mode != Streams && c.Mode != Windows:
		return fmt.Errorf("loader: unknown mode %v", c.Mode)
	case c.Mode == Windows && c.Accum != 1:
		return fmt.Errorf("loader: Accum = %d applies to Streams mode only", c.Accum)
	case c.Shard.Of < 0 || c.Shard.Rank < 0 || c.Shard.Rank >= c.Shard.ranks():
		return fmt.Errorf("loader: Shard is rank %d of %d", c.Shard.Rank, c.Shard.Of)
	}
	return nil
}

// Position is where an iteration starts: the epoch and the index of the
// next batch within it. Batch.Next is the position after a batch, which a
// checkpoint saves to resume exactly there.
type Position struct {
	Epoch int
	Batch int64
}

// plan maps batch positions to token ranges.
type plan struct {
	cfg    Config
	tokens int64
	// Streams: streams of length streamLen, windows of them per epoch.
	streamLen, windows int64
	// Windows: starts of windows per epoch.
	starts int64
	// perEpoch is the number of batches in an epoch.
	perEpoch int64
}

func newPlan(cfg Config, tokens int64) (plan, error) {
	p := plan{cfg: cfg, tokens: tokens}
	seq, rows := int64(cfg.Seq), int64(cfg.Rows())
	switch cfg.Mode {
	case Streams:
		streams := rows * int64(cfg.Accum)
		p.streamLen = tokens / streams
		if p.streamLen > 0 {
			// Window w reads tokens [w·Seq, w·Seq+Seq] of a stream.
			p.windows = (p.streamLen - 1) / seq
		}
		p.perEpoch = p.windows * int64(cfg.Accum)
		if p.perEpoch == 0 {
			return p, fmt.Errorf("loader: %d tokens cut into %d streams (batch %d × accum %d) leave %d per stream; "+
				"one window of %d inputs and its targets needs %d per stream, %d in all: %w",
				tokens, streams, rows, cfg.Accum, p.streamLen, seq, seq+1, streams*(seq+1), ErrTooShort)
		}
	case Windows:
		if tokens >= seq+1 {
			p.starts = (tokens-seq-1)/int64(cfg.Stride) + 1
		}
		if p.starts > math.MaxInt32 {
			return p, fmt.Errorf("loader: %d windows (stride %d) are more than one epoch's order can hold; raise Stride", p.starts, cfg.Stride)
		}
		p.perEpoch = p.starts / rows
		if p.perEpoch == 0 {
			return p, fmt.Errorf("loader: %d tokens give %d windows of %d inputs (stride %d); a batch needs %d: %w",
				tokens, p.starts, seq, cfg.Stride, rows, ErrTooShort)
		}
	}
	return p, nil
}

// next is the position after pos.
func (p *plan) next(pos Position) Position {
	pos.Batch++
	if pos.Batch == p.perEpoch {
		pos.Epoch, pos.Batch = pos.Epoch+1, 0
	}
	return pos
}

// done reports whether pos is past the configured epochs.
func (p *plan) done(pos Position) bool { return p.cfg.Epochs > 0 && pos.Epoch >= p.cfg.Epochs }

// rowStart is the first token of row r of the batch at pos, whose epoch's
// window order is perm (Windows mode).
func (p *plan) rowStart(pos Position, r int, perm []int32) int64 {
	seq, rows := int64(p.cfg.Seq), int64(p.cfg.Rows())
	row := int64(p.cfg.Shard.Rank*p.cfg.Batch + r) // in the undivided batch
	if p.cfg.Mode == Streams {
		w, j := pos.Batch/int64(p.cfg.Accum), pos.Batch%int64(p.cfg.Accum)
		stream := j*rows + row
		return stream*p.streamLen + w*seq
	}
	return int64(perm[pos.Batch*rows+row]) * int64(p.cfg.Stride)
}

// order is the Windows mode window order of an epoch: a permutation of
// the window indices drawn from (Seed, epoch).
func (p *plan) order(epoch int) []int32 {
	if p.cfg.Mode != Windows {
		return nil
	}
	perm := make([]int32, p.starts)
	for i := range perm {
		perm[i] = int32(i)
	}
	r := rand.New(rand.NewPCG(p.cfg.Seed, uint64(epoch)))
	r.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	return perm
}
