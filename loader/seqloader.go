package loader

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"

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
	dev   device.Device
	data  *Dataset
	cfg   SeqConfig
	copy  device.Stream
	slots []seqSlot
	cap   int // tokens a slot holds: Seq·Rows at most
	// wordLen is the characters of the longest word a batch holds, 0
	// without characters.
	wordLen int
	epochs  map[int]epochBatches

	runGuard
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
	l := &SeqLoader{dev: d, data: data, cfg: cfg, cap: capTokens, epochs: map[int]epochBatches{}}
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
	if l.copy, err = d.NewStream(); err != nil {
		return nil, fmt.Errorf("loader: copy stream: %w", err)
	}
	bytes := int64(l.slotLen()) * 4
	created, err := d.Stream().Record()
	for range cfg.Prefetch + 1 {
		if err != nil {
			break
		}
		var s seqSlot
		if s.host, err = d.Staging(bytes); err == nil {
			if s.dev, err = d.Alloc(bytes, device.Batches); err != nil {
				err = errors.Join(err, d.FreeStaging(s.host))
			}
		}
		s.released = created
		if err == nil {
			l.slots = append(l.slots, s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("loader: staging ring: %w", errors.Join(err, l.free()))
	}
	return l, nil
}

// epochBatches are an epoch's batches, each with its place in its step.
type epochBatches struct {
	batches [][]int32
	group   []int32 // the batch's index in its step
	last    []bool  // the batch ends its step
}

// batches is epoch's batches, computed once.
func (l *SeqLoader) batches(epoch int) epochBatches {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.epochs[epoch]
	if !ok {
		runs, _ := bucketRuns(l.data.lengths, l.cfg.Bucket, epoch) // the config was checked
		for _, run := range runs {
			for g, b := range run {
				e.batches = append(e.batches, b)
				e.group = append(e.group, int32(g))
				e.last = append(e.last, g == len(run)-1)
			}
		}
		// Keep the epochs the consumer and the producer, a few batches
		// ahead, are in.
		for k := range l.epochs {
			if k < epoch-1 || k > epoch+1 {
				delete(l.epochs, k)
			}
		}
		l.epochs[epoch] = e
	}
	return e
}

// PerEpoch is the number of batches of epoch (with a token budget it
// varies from epoch to epoch).
func (l *SeqLoader) PerEpoch(epoch int) int64 { return int64(len(l.batches(epoch).batches)) }

// StepStart reports whether pos is the first batch of a step, where a
// run may resume.
func (l *SeqLoader) StepStart(pos Position) bool {
	e := l.batches(pos.Epoch)
	return pos.Batch >= 0 && pos.Batch < int64(len(e.batches)) && e.group[pos.Batch] == 0
}

// Config is the loader's configuration, its defaults filled in.
func (l *SeqLoader) Config() SeqConfig { return l.cfg }

// Dataset is the dataset the loader batches.
func (l *SeqLoader) Dataset() *Dataset { return l.data }

// Padding is the fraction of padded positions in epoch's batches.
func (l *SeqLoader) Padding(epoch int) float64 {
	return Padding(l.data.lengths, l.batches(epoch).batches)
}

func (l *SeqLoader) next(pos Position) Position {
	pos.Batch++
	if pos.Batch >= l.PerEpoch(pos.Epoch) {
		pos.Epoch, pos.Batch = pos.Epoch+1, 0
	}
	return pos
}

type seqResult struct {
	slot   int
	pos    Position
	hb     HostBatch
	whole  []int32 // the whole batch's labels (SeqConfig.Shard)
	real   int     // and its real tokens
	copied device.Event
	err    error
}

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
		if from.Epoch < 0 || from.Batch < 0 || from.Batch >= l.PerEpoch(from.Epoch) {
			yield(SeqBatch{}, fmt.Errorf("loader: position %+v is outside epoch %d's %d batches", from, from.Epoch, l.PerEpoch(from.Epoch)))
			return
		}
		l.mu.Lock()
		switch {
		case l.closed:
			l.mu.Unlock()
			yield(SeqBatch{}, fmt.Errorf("loader: SeqLoader.Batches: %w", ErrClosed))
			return
		case l.running:
			l.mu.Unlock()
			yield(SeqBatch{}, errRunning("SeqLoader", "Batches"))
			return
		}
		ctx, l.stop = context.WithCancel(ctx)
		l.running = true
		l.mu.Unlock()

		free := make(chan int, len(l.slots))
		for i := range l.slots {
			free <- i
		}
		ready := make(chan seqResult, len(l.slots))
		c := new(crew)
		c.start(1)
		go l.produce(ctx, from, free, ready, c)
		listening, err := l.consume(ctx, free, ready, yield)
		l.mu.Lock()
		l.stop()
		l.mu.Unlock()
		c.end()
		var errs []error
		for i := range l.slots {
			if ev := l.slots[i].copied; ev != nil {
				errs = append(errs, await(ev))
			}
		}
		l.mu.Lock()
		l.running = false
		if l.closed {
			errs = append(errs, l.free())
		}
		l.mu.Unlock()
		if endErr := errors.Join(errs...); endErr != nil {
			err = errors.Join(err, fmt.Errorf("loader: ending the iteration: %w", endErr))
		}
		if err != nil && listening {
			yield(SeqBatch{}, err)
		}
	}
}

// produce collates the batches from pos on into free slots and copies
// them to the device, in order. Collating reads the dataset: an iteration
// that ends during it does not wait for it (see crew), and the goroutine
// then returns without touching the ring.
func (l *SeqLoader) produce(ctx context.Context, pos Position, free <-chan int, ready chan<- seqResult, c *crew) {
	defer c.done()
	defer close(ready)
	for l.cfg.Epochs == 0 || pos.Epoch < l.cfg.Epochs {
		var i int
		select {
		case i = <-free:
		case <-ctx.Done():
			return
		}
		r := seqResult{slot: i, pos: pos}
		examples := l.batches(pos.Epoch).batches[pos.Batch]
		c.read()
		r.hb, r.err = l.cfg.Collate(l.data, l.cfg.share(examples))
		if r.err == nil && l.cfg.Shard.ranks() > 1 {
			var whole HostBatch
			whole, r.err = Collate(l.data, examples)
			r.whole, r.real = whole.Labels, whole.Real
		}
		if !c.resume() {
			return
		}
		s := &l.slots[i]
		if r.err == nil && s.copied != nil {
			r.err = await(s.copied)
		}
		if r.err == nil {
			used := l.stage(s, r.hb)
			if r.err = l.copy.Wait(s.released); r.err == nil {
				r.copied, r.err = l.dev.CopyToDevice(s.dev, s.host.Slice(0, int64(used)*4), l.copy)
				s.copied = r.copied
			}
		}
		if r.err != nil {
			r.err = fmt.Errorf("loader: batch %d of epoch %d: %w", pos.Batch, pos.Epoch, r.err)
		}
		ready <- r // room for every slot: never blocks
		if r.err != nil {
			return
		}
		pos = l.next(pos)
	}
}

// stage writes a collated batch into a slot's staging buffer: tokens,
// labels, lengths (and the characters' parts), each at a fixed offset. It
// returns the int32 elements of the slot the batch uses, from its start.
func (l *SeqLoader) stage(s *seqSlot, hb HostBatch) int {
	b := s.host.Bytes()
	put := func(off int, v []int32) {
		for k, x := range v {
			binary.LittleEndian.PutUint32(b[4*(off+k):], uint32(x))
		}
	}
	put(0, hb.Tokens)
	put(l.labelsAt(), hb.Labels)
	put(l.lengthsAt(), hb.Lengths)
	if l.wordLen == 0 {
		return l.slotLen()
	}
	put(l.charLengthsAt(), hb.CharLengths)
	put(l.wordIndexAt(), hb.WordIndex)
	put(l.wordPositionsAt(), hb.WordPositions)
	put(l.charsAt(), hb.Chars)
	return l.charsAt() + len(hb.Chars)
}

// consume hands the batches to yield in order; it returns whether the
// consumer still listens and the error that ended the iteration, not yet
// yielded (nil when the epochs ended or the consumer stopped).
func (l *SeqLoader) consume(ctx context.Context, free chan<- int, ready <-chan seqResult, yield func(SeqBatch, error) bool) (bool, error) {
	compute := l.dev.Stream()
	for {
		var r seqResult
		var open bool
		select {
		case r, open = <-ready:
			if !open {
				if ctx.Err() != nil {
					return true, l.stopped(ctx)
				}
				return true, nil
			}
		case <-ctx.Done():
			return true, l.stopped(ctx)
		}
		if r.err == nil {
			r.err = compute.Wait(r.copied)
		}
		if r.err != nil {
			return true, r.err
		}
		s := &l.slots[r.slot]
		b := l.deviceBatch(s, r.hb)
		b.Epoch, b.Index, b.Next = r.pos.Epoch, r.pos.Batch, l.next(r.pos)
		b.WholeLabels, b.WholeReal = r.whole, r.real
		e := l.batches(r.pos.Epoch)
		b.Group, b.Last = int(e.group[r.pos.Batch]), e.last[r.pos.Batch]
		more := yield(b, nil)
		released, err := compute.Record()
		if err != nil {
			return more, fmt.Errorf("loader: releasing a batch: %w", err)
		}
		s.released = released
		free <- r.slot
		if !more {
			return false, nil
		}
	}
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
func (l *SeqLoader) Largest() [][]int32 {
	b := l.cfg.Bucket
	byLength := map[int]int32{} // an example of each length
	var lengths []int
	for i := range l.data.Len() {
		n := l.data.Length(i)
		if _, ok := byLength[n]; !ok {
			byLength[n] = int32(i)
			lengths = append(lengths, n)
		}
	}
	slices.Sort(lengths)
	rows := func(n int) int {
		if b.MaxTokens > 0 {
			return min(b.Batch, max(1, b.MaxTokens/n))
		}
		return b.Batch
	}
	var out [][]int32
	seen := map[int]bool{}
	for r := b.Batch; r >= 1; r-- {
		// The longest example r rows of fit the budget (or the longest
		// of all: an example over the budget makes a batch of its own).
		n := lengths[len(lengths)-1]
		if b.MaxTokens > 0 && r > 1 {
			i, _ := slices.BinarySearch(lengths, b.MaxTokens/r+1)
			if i == 0 {
				continue
			}
			n = lengths[i-1]
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		// A rank's share is at most ⌈rows/ranks⌉ of them.
		batch := make([]int32, (rows(n)+l.cfg.Shard.ranks()-1)/l.cfg.Shard.ranks())
		for i := range batch {
			batch[i] = byLength[n]
		}
		out = append(out, batch)
		if b.MaxTokens == 0 {
			break
		}
	}
	return out
}

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
	l.mu.Lock()
	switch {
	case l.closed:
		err = fmt.Errorf("loader: SeqLoader.Load: %w", ErrClosed)
	case l.running:
		err = errRunning("SeqLoader", "Load")
	}
	if err != nil {
		l.mu.Unlock()
		return SeqBatch{}, nil, err
	}
	// Load runs as an iteration does, so that a Close meanwhile (which
	// cancels it) leaves the ring to its end rather than freeing it under
	// it.
	ctx, l.stop = context.WithCancel(ctx)
	l.running = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.stop()
		l.running = false
		if l.closed {
			// The batch went with the ring.
			err = errors.Join(fmt.Errorf("loader: SeqLoader.Load: the loader was closed meanwhile: %w", ErrClosed), err, l.free())
			b, release = SeqBatch{}, nil
		}
	}()
	hb, err := l.collate(ctx, examples)
	if err != nil {
		return SeqBatch{}, nil, err
	}
	if l.wordLen > hb.WordLen {
		chars := make([]int32, l.wordLen*hb.Real)
		copy(chars, hb.Chars)
		for i := len(hb.Chars); i < len(chars); i++ {
			chars[i] = PadID
		}
		hb.Chars, hb.WordLen = chars, l.wordLen
	}
	if hb.Seq*hb.Rows > l.cap || (l.wordLen > 0 && hb.WordLen > l.wordLen) {
		return SeqBatch{}, nil, fmt.Errorf("loader: Load: a batch of %d×%d tokens does not fit the loader's slots of %d", hb.Seq, hb.Rows, l.cap)
	}
	s := &l.slots[0]
	if s.copied != nil {
		if err := await(s.copied); err != nil {
			return SeqBatch{}, nil, err
		}
	}
	used := l.stage(s, hb)
	if err := l.copy.Wait(s.released); err != nil {
		return SeqBatch{}, nil, err
	}
	if s.copied, err = l.dev.CopyToDevice(s.dev, s.host.Slice(0, int64(used)*4), l.copy); err != nil {
		return SeqBatch{}, nil, err
	}
	if err := l.dev.Stream().Wait(s.copied); err != nil {
		return SeqBatch{}, nil, err
	}
	release = func() error {
		ev, err := l.dev.Stream().Record()
		if err == nil {
			s.released = ev
		}
		return err
	}
	return l.deviceBatch(s, hb), release, nil
}

// collate is Collate of examples on a goroutine of its own, which a
// cancelled ctx does not wait for.
func (l *SeqLoader) collate(ctx context.Context, examples []int32) (HostBatch, error) {
	type collated struct {
		hb  HostBatch
		err error
	}
	done := make(chan collated, 1) // the goroutine never waits to send
	go func() {
		hb, err := l.cfg.Collate(l.data, examples)
		done <- collated{hb, err}
	}()
	select {
	case c := <-done:
		return c.hb, c.err
	case <-ctx.Done():
		return HostBatch{}, fmt.Errorf("loader: Load: %w", ctx.Err())
	}
}

// Close ends a running iteration (its consumer sees ErrClosed) and frees
// the ring and the copy stream once no iteration runs.
func (l *SeqLoader) Close() error { return l.closeWith(l.free) }

func (l *SeqLoader) free() error {
	var errs []error
	for i := range l.slots {
		errs = append(errs, l.slots[i].free(l.dev)...)
	}
	l.slots = nil
	if l.copy != nil {
		errs = append(errs, l.copy.Close())
		l.copy = nil
	}
	return errors.Join(errs...)
}
