package loader

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
)

// SeqConfig says how a SeqLoader batches a labelled dataset.
type SeqConfig struct {
	// Bucket groups the examples into batches (Batch is required).
	Bucket BucketConfig
	// Epochs is the number of passes; 0 means no end.
	Epochs int
	// Prefetch is the number of batches prepared ahead of the one the
	// consumer holds; 0 means 2. The ring of Prefetch+1 staging buffers
	// and device batches is allocated once.
	Prefetch int
	// CollateConfig says what a batch carries besides tokens, labels and
	// lengths: with Chars, its words' characters (SeqBatch.Chars and
	// after), for a dataset of words. A slot then also holds Chars for the
	// longest word (Dataset.LongestWord, at most MaxWordChars) times the
	// most tokens a batch holds: set MaxWordChars when a few very long
	// tokens would make that large.
	CollateConfig
	// Shard makes the loader one rank's part of a data-parallel job: the
	// batches are the job's (Bucket describes them), and each is split
	// evenly among Shard.Of ranks, in order: rank r gets the r-th of Of
	// contiguous runs of its examples, whose sizes differ by one at most
	// (none, for a rank past the examples of a batch smaller than the
	// job). SeqBatch.WholeLabels then holds the whole batch's labels, which
	// a step's mean needs. The zero value is the whole batch.
	Shard Shard
}

// share is rank's part of a batch's examples (SeqConfig.Shard).
func (c SeqConfig) share(examples []int32) []int32 {
	n := c.Shard.ranks()
	if n == 1 {
		return examples
	}
	k, r := len(examples), c.Shard.Rank
	base, extra := k/n, k%n
	start := r*base + min(r, extra)
	size := base
	if r < extra {
		size++
	}
	return examples[start : start+size]
}

// SeqBatch is one batch of labelled sequences resident on the device,
// with its host copy. Its device buffers belong to the loader, valid
// while the loop body runs (as Batch's).
type SeqBatch struct {
	// Tokens is [Seq, Rows] device.Int32, time-major, PadID past a row's
	// length; Labels is [Seq, Rows] (tagging, IgnoreLabel past a row's
	// length) or [Rows]; Lengths is [Rows].
	Tokens, Labels, Lengths device.Buffer
	// With SeqConfig.Chars, the device copies of Host's characters, Int32:
	// Chars [Host.WordLen, Host.Real], CharLengths [Host.Real], WordIndex
	// and WordPositions [Seq·Rows] (see HostBatch); none otherwise.
	Chars, CharLengths, WordIndex, WordPositions device.Buffer
	// Host is the batch as collated on the host: its Lengths are what
	// rnn's ForwardLengths takes and its Real the tokens a loss counts.
	Host HostBatch
	// Epoch and Index place the batch in its epoch; Next is the position
	// after it, which a checkpoint saves to resume there.
	Epoch int
	Index int64
	Next  Position
	// Group is the batch's place among the batches of its step
	// (BucketConfig.Accum), from 0; Last says it ends the step.
	Group int
	Last  bool
	// WholeLabels, with SeqConfig.Shard of more than one rank, are the
	// labels of the job's whole batch, this rank's share and the others'
	// (laid out as a Labels of all its rows): what a step's mean over
	// every real row counts. Nil otherwise. A rank's share may be empty
	// (Host.Rows 0) when the batch has fewer examples than the job ranks.
	// WholeReal is the whole batch's real tokens (Host.Real of all its
	// rows).
	WholeLabels []int32
	WholeReal   int
}

// SeqLoader delivers the batches of a Dataset to a device: a producer
// goroutine reads each batch's examples from disk, collates them into a
// staging buffer and copies them on a copy stream the compute stream
// waits on; one iteration runs at a time.
type SeqLoader struct {
	data *Dataset
	cfg  SeqConfig
	cap  int // tokens a slot holds: Seq·Rows at most
	// wordLen is the characters of the longest word a batch holds, 0
	// without characters.
	wordLen int

	bucketed[seqHost]
}

// seqHost is a batch collated on the host, with the labels and real
// tokens of the job's whole batch for a rank of a data-parallel one
// (SeqConfig.Shard).
type seqHost struct {
	hb    HostBatch
	whole []int32
	real  int
}

// seqSlot is a ring slot: tokens, labels (cap int32 each), lengths
// (Batch int32), and with characters word lengths, word index, word
// positions (cap int32 each) and the characters (wordLen·cap int32), last
// so that a copy covers the slot's used part only.
type seqSlot = ringSlot

// The offsets in a slot, in int32 elements.
func (l *SeqLoader) labelsAt() int  { return l.cap }
func (l *SeqLoader) lengthsAt() int { return 2 * l.cap }
func (l *SeqLoader) charLengthsAt() int {
	return 2*l.cap + l.cfg.Bucket.Batch
}
func (l *SeqLoader) wordIndexAt() int     { return l.charLengthsAt() + l.cap }
func (l *SeqLoader) wordPositionsAt() int { return l.charLengthsAt() + 2*l.cap }
func (l *SeqLoader) charsAt() int         { return l.charLengthsAt() + 3*l.cap }

// slotLen is a slot's size in int32 elements.
func (l *SeqLoader) slotLen() int {
	if l.wordLen == 0 {
		return l.charLengthsAt()
	}
	return l.charsAt() + l.wordLen*l.cap
}

// NewSeqLoader makes a loader of data's batches onto d.
func NewSeqLoader(d device.Device, data *Dataset, cfg SeqConfig) (*SeqLoader, error) {
	if d == nil || data == nil {
		return nil, errors.New("loader: NewSeqLoader needs a device and a dataset")
	}
	b, err := cfg.Bucket.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.CollateConfig.validate(); err != nil {
		return nil, err
	}
	if cfg.Chars && data.LongestWord() == 0 {
		return nil, errors.New("loader: characters of words asked for a dataset of texts, which has no words")
	}
	if cfg.Shard.Of < 0 || cfg.Shard.Rank < 0 || cfg.Shard.Rank >= cfg.Shard.ranks() {
		return nil, fmt.Errorf("loader: Shard is rank %d of %d", cfg.Shard.Rank, cfg.Shard.Of)
	}
	if cfg.Epochs < 0 || cfg.Prefetch < 0 {
		return nil, fmt.Errorf("loader: Epochs %d, Prefetch %d; neither may be negative", cfg.Epochs, cfg.Prefetch)
	}
	if cfg.Prefetch > MaxPrefetch {
		return nil, fmt.Errorf("loader: Prefetch = %d, want at most %d", cfg.Prefetch, MaxPrefetch)
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 2
	}
	cfg.Bucket = b
	longest := 0
	for i := range data.Len() {
		longest = max(longest, data.Length(i))
	}
	capTokens, ok := checked.Mul(b.Batch, longest)
	if !ok {
		return nil, fmt.Errorf("loader: Batch × the longest sequence = %d × %d tokens overflows int", b.Batch, longest)
	}
	l := &SeqLoader{data: data, cfg: cfg, cap: capTokens}
	if b.MaxTokens > 0 {
		l.cap = min(l.cap, max(b.MaxTokens, longest))
	}
	if cfg.Chars {
		l.wordLen = cfg.wordLen(data.LongestWord())
	}
	// A slot is five int32 arrays of cap, Batch lengths and wordLen
	// characters per token (slotLen), in bytes.
	if _, ok := checked.Mul(4, l.cap, 5+l.wordLen); !ok || b.Batch > math.MaxInt/16 {
		return nil, fmt.Errorf("loader: a batch of %d tokens with words of %d characters overflows a staging slot's size", l.cap, l.wordLen)
	}
	l.bucketed = bucketed[seqHost]{dev: d, name: "SeqLoader", bucket: b, passes: cfg.Epochs, lengths: data.lengths,
		epochs: map[int]epochBatches{}, collate: l.collateHost, stage: l.stage}
	if err := l.allocRing(int64(l.slotLen())*4, cfg.Prefetch); err != nil {
		return nil, err
	}
	return l, nil
}

// Config is the loader's configuration, its defaults filled in.
func (l *SeqLoader) Config() SeqConfig { return l.cfg }

// Dataset is the dataset the loader batches.
func (l *SeqLoader) Dataset() *Dataset { return l.data }

// Batches iterates over the batches from position from (the zero Position
// is the start) to the end of the configured epochs, or until the consumer
// stops, ctx is cancelled (the last pair carries ctx's error) or the
// loader is closed (ErrClosed). Its producer goroutine has ended when the
// iteration returns, unless it is blocked reading the dataset: the
// iteration does not wait for that read (so that a cancellation or Close
// ends it at once), and the producer returns when the read does, touching
// nothing of the loader's.
func (l *SeqLoader) Batches(ctx context.Context, from Position) iter.Seq2[SeqBatch, error] {
	return func(yield func(SeqBatch, error) bool) {
		l.iterate(ctx, from, func(s *ringSlot, h seqHost, p place, err error) bool {
			if err != nil {
				return yield(SeqBatch{}, err)
			}
			b := l.deviceBatch(s, h.hb)
			b.Epoch, b.Index, b.Next, b.Group, b.Last = p.Epoch, p.Index, p.Next, p.Group, p.Last
			b.WholeLabels, b.WholeReal = h.whole, h.real
			return yield(b, nil)
		})
	}
}

// collateHost collates a batch's examples: this rank's share, and with
// more than one rank the whole batch's labels too.
func (l *SeqLoader) collateHost(examples []int32) (seqHost, error) {
	var h seqHost
	var err error
	h.hb, err = l.cfg.Collate(l.data, l.cfg.share(examples))
	if err == nil && l.cfg.Shard.ranks() > 1 {
		var whole HostBatch
		whole, err = Collate(l.data, examples)
		h.whole, h.real = whole.Labels, whole.Real
	}
	return h, err
}

// stage writes a collated batch into a slot's staging buffer: tokens,
// labels, lengths (and the characters' parts), each at a fixed offset. It
// returns the int32 elements of the slot the batch uses, from its start.
func (l *SeqLoader) stage(b []byte, h seqHost) int64 {
	hb := h.hb
	put := func(off int, v []int32) {
		for k, x := range v {
			binary.LittleEndian.PutUint32(b[4*(off+k):], uint32(x))
		}
	}
	put(0, hb.Tokens)
	put(l.labelsAt(), hb.Labels)
	put(l.lengthsAt(), hb.Lengths)
	if l.wordLen == 0 {
		return int64(l.slotLen()) * 4
	}
	put(l.charLengthsAt(), hb.CharLengths)
	put(l.wordIndexAt(), hb.WordIndex)
	put(l.wordPositionsAt(), hb.WordPositions)
	put(l.charsAt(), hb.Chars)
	return int64(l.charsAt()+len(hb.Chars)) * 4
}

// deviceBatch is the batch hb, staged in slot s, as its device buffers.
func (l *SeqLoader) deviceBatch(s *seqSlot, hb HostBatch) SeqBatch {
	n := hb.Seq * hb.Rows
	b := SeqBatch{Tokens: s.dev.Elems(device.Int32, 0, n), Labels: s.dev.Elems(device.Int32, l.labelsAt(), len(hb.Labels)),
		Lengths: s.dev.Elems(device.Int32, l.lengthsAt(), hb.Rows), Host: hb, Last: true}
	if l.wordLen > 0 {
		b.Chars = s.dev.Elems(device.Int32, l.charsAt(), len(hb.Chars))
		b.CharLengths = s.dev.Elems(device.Int32, l.charLengthsAt(), hb.Real)
		b.WordIndex = s.dev.Elems(device.Int32, l.wordIndexAt(), n)
		b.WordPositions = s.dev.Elems(device.Int32, l.wordPositionsAt(), n)
	}
	return b
}

// Largest lists batches (as example indices) that together are as large
// as any the loader makes, in every dimension a model's memory grows
// with: for every number of rows r a batch can have, a batch of r' ≥ r
// rows of the longest example that r rows of fit the token budget (without
// a budget, one batch: Batch rows of the longest example). Every batch the
// loader makes, of r rows whose longest is n, is then no larger in rows,
// steps or tokens than one of them, so a model's buffers, whatever mix of
// rows and steps their sizes grow with, are as large after a pass over
// them as any batch needs (Load also gives them the longest word any
// batch can have). A run that trains on them first (train.Config.WarmUp)
// has then allocated what its other batches need.
func (l *SeqLoader) Largest() [][]int32 { return l.largest(l.cfg.Shard.ranks()) }

// Load collates the examples into a batch and puts it on the device,
// outside the iteration of Batches (which must not be running): for a
// warm-up. With characters, the batch's words are padded to the longest
// word a batch of the loader can have (HostBatch.WordLen), the largest
// shape of that dimension. The batch lives in the first slot of the ring,
// until release, which the caller calls once it has queued its work on
// the batch. A cancelled ctx ends Load with an error wrapping ctx.Err(),
// at once even while the read of the examples blocks (that read then ends
// on its own, touching nothing of the loader's).
func (l *SeqLoader) Load(ctx context.Context, examples []int32) (b SeqBatch, release func() error, err error) {
	s, h, release, err := l.load(ctx, examples, func(h seqHost) (seqHost, error) {
		hb := h.hb
		if l.wordLen > hb.WordLen {
			chars := make([]int32, l.wordLen*hb.Real)
			copy(chars, hb.Chars)
			for i := len(hb.Chars); i < len(chars); i++ {
				chars[i] = PadID
			}
			hb.Chars, hb.WordLen = chars, l.wordLen
		}
		if hb.Seq*hb.Rows > l.cap || (l.wordLen > 0 && hb.WordLen > l.wordLen) {
			return h, fmt.Errorf("loader: Load: a batch of %d×%d tokens does not fit the loader's slots of %d", hb.Seq, hb.Rows, l.cap)
		}
		h.hb = hb
		return h, nil
	})
	if err != nil {
		return SeqBatch{}, nil, err
	}
	return l.deviceBatch(s, h.hb), release, nil
}
