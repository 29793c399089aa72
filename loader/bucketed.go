package loader

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gocurrent/gocurrent/device"
)

// bucketed is what the loaders of bucketed batches (SeqLoader over a
// labelled dataset, ExampleLoader over any Examples) share: each epoch's
// batches of example indices (bucketRuns of the examples' lengths), a
// ring of staging slots that a producer goroutine fills and copies to
// the device while the consumer works on the batch before, one iteration
// at a time, and a warm-up's batches (largest, load). H is a batch as
// collated on the host; what a loader hands its consumer is made of the
// slot and H by its own code.
type bucketed[H any] struct {
	dev     device.Device
	name    string // the loader's type, in errors
	bucket  BucketConfig
	passes  int // the configured epochs; 0 means no end
	lengths []int32
	copy    device.Stream
	slots   []ringSlot
	epochs  map[int]epochBatches
	// collate reads and collates the examples of a batch, on the
	// producer goroutine (which an ended iteration does not wait for
	// while it reads: it must touch nothing of the loader's but what it
	// returns); stage writes a collated batch into a slot's staging bytes
	// and returns how many of them it used, from the start.
	collate func(examples []int32) (H, error)
	stage   func(host []byte, h H) int64

	runGuard
}

// place is where a batch stands: its epoch and index, the position after
// it, and its place among the batches of its step.
type place struct {
	Epoch int
	Index int64
	Next  Position
	Group int
	Last  bool
}

// epochBatches are an epoch's batches, each with its place in its step.
type epochBatches struct {
	batches [][]int32
	group   []int32 // the batch's index in its step
	last    []bool  // the batch ends its step
}

// allocRing allocates prefetch+1 slots of bytes each (staging and device
// memory) and the copy stream. The device batches come from the compute
// stream's memory, whose blocks may have been freed by kernels still
// queued there: the first copy into each slot waits for the compute
// stream as the later ones wait for the batch's release.
func (l *bucketed[H]) allocRing(bytes int64, prefetch int) error {
	d := l.dev
	var err error
	if l.copy, err = d.NewStream(); err != nil {
		return fmt.Errorf("loader: copy stream: %w", err)
	}
	created, err := d.Stream().Record()
	for range prefetch + 1 {
		if err != nil {
			break
		}
		var s ringSlot
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
		return fmt.Errorf("loader: staging ring: %w", errors.Join(err, l.free()))
	}
	return nil
}

// batches is epoch's batches, computed once.
func (l *bucketed[H]) batches(epoch int) epochBatches {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.epochs[epoch]
	if !ok {
		runs, _ := bucketRuns(l.lengths, l.bucket, epoch) // the config was checked
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
func (l *bucketed[H]) PerEpoch(epoch int) int64 { return int64(len(l.batches(epoch).batches)) }

// StepStart reports whether pos is the first batch of a step, where a
// run may resume.
func (l *bucketed[H]) StepStart(pos Position) bool {
	e := l.batches(pos.Epoch)
	return pos.Batch >= 0 && pos.Batch < int64(len(e.batches)) && e.group[pos.Batch] == 0
}

// Padding is the fraction of padded positions in epoch's batches.
func (l *bucketed[H]) Padding(epoch int) float64 {
	return Padding(l.lengths, l.batches(epoch).batches)
}

func (l *bucketed[H]) next(pos Position) Position {
	pos.Batch++
	if pos.Batch >= l.PerEpoch(pos.Epoch) {
		pos.Epoch, pos.Batch = pos.Epoch+1, 0
	}
	return pos
}

// staged is a filled and copied slot, or why it failed.
type staged[H any] struct {
	slot   int
	pos    Position
	h      H
	copied device.Event
	err    error
}

// iterate runs an iteration of Batches from position from: yield gets
// each batch's slot, its host batch and its place, and returns whether
// the consumer wants more; what yield gets on error is the error alone
// (nil slot). See SeqLoader.Batches for the contract.
func (l *bucketed[H]) iterate(ctx context.Context, from Position, yield func(s *ringSlot, h H, p place, err error) bool) {
	var zero H
	if from.Epoch < 0 || from.Batch < 0 || from.Batch >= l.PerEpoch(from.Epoch) {
		yield(nil, zero, place{}, fmt.Errorf("loader: position %+v is outside epoch %d's %d batches", from, from.Epoch, l.PerEpoch(from.Epoch)))
		return
	}
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		yield(nil, zero, place{}, fmt.Errorf("loader: %s.Batches: %w", l.name, ErrClosed))
		return
	case l.running:
		l.mu.Unlock()
		yield(nil, zero, place{}, errRunning(l.name, "Batches"))
		return
	}
	ctx, l.stop = context.WithCancel(ctx)
	l.running = true
	l.mu.Unlock()

	free := make(chan int, len(l.slots))
	for i := range l.slots {
		free <- i
	}
	ready := make(chan staged[H], len(l.slots))
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
		yield(nil, zero, place{}, err)
	}
}

// produce collates the batches from pos on into free slots and copies
// them to the device, in order. Collating reads the data: an iteration
// that ends during it does not wait for it (see crew), and the goroutine
// then returns without touching the ring.
func (l *bucketed[H]) produce(ctx context.Context, pos Position, free <-chan int, ready chan<- staged[H], c *crew) {
	defer c.done()
	defer close(ready)
	for l.passes == 0 || pos.Epoch < l.passes {
		var i int
		select {
		case i = <-free:
		case <-ctx.Done():
			return
		}
		r := staged[H]{slot: i, pos: pos}
		examples := l.batches(pos.Epoch).batches[pos.Batch]
		c.read()
		r.h, r.err = l.collate(examples)
		if !c.resume() {
			return
		}
		s := &l.slots[i]
		if r.err == nil && s.copied != nil {
			r.err = await(s.copied)
		}
		if r.err == nil {
			used := l.stage(s.host.Bytes(), r.h)
			if r.err = l.copy.Wait(s.released); r.err == nil {
				r.copied, r.err = l.dev.CopyToDevice(s.dev, s.host.Slice(0, used), l.copy)
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

// consume hands the batches to yield in order; it returns whether the
// consumer still listens and the error that ended the iteration, not yet
// yielded (nil when the epochs ended or the consumer stopped).
func (l *bucketed[H]) consume(ctx context.Context, free chan<- int, ready <-chan staged[H], yield func(*ringSlot, H, place, error) bool) (bool, error) {
	compute := l.dev.Stream()
	for {
		var r staged[H]
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
		e := l.batches(r.pos.Epoch)
		p := place{Epoch: r.pos.Epoch, Index: r.pos.Batch, Next: l.next(r.pos), Group: int(e.group[r.pos.Batch]), Last: e.last[r.pos.Batch]}
		more := yield(s, r.h, p, nil)
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

// largest lists batches (as example indices) that together are as large
// as any the loader makes in every dimension a model's memory grows with
// (SeqLoader.Largest), each of at most ⌈rows/ranks⌉ examples for a rank of
// a job of ranks.
func (l *bucketed[H]) largest(ranks int) [][]int32 {
	b := l.bucket
	byLength := map[int]int32{} // an example of each length
	var lengths []int
	for i, n32 := range l.lengths {
		n := int(n32)
		if _, ok := byLength[n]; !ok {
			byLength[n] = int32(i)
			lengths = append(lengths, n)
		}
	}
	if len(lengths) == 0 {
		return nil
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
		batch := make([]int32, (rows(n)+ranks-1)/ranks)
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

// load collates examples, lets fit check (and widen) the batch, and puts
// it in the ring's first slot on the device, outside an iteration (see
// SeqLoader.Load): the slot and the batch, valid until release.
func (l *bucketed[H]) load(ctx context.Context, examples []int32, fit func(H) (H, error)) (_ *ringSlot, _ H, release func() error, err error) {
	var zero H
	l.mu.Lock()
	switch {
	case l.closed:
		err = fmt.Errorf("loader: %s.Load: %w", l.name, ErrClosed)
	case l.running:
		err = errRunning(l.name, "Load")
	}
	if err != nil {
		l.mu.Unlock()
		return nil, zero, nil, err
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
			err = errors.Join(fmt.Errorf("loader: %s.Load: the loader was closed meanwhile: %w", l.name, ErrClosed), err, l.free())
			release = nil
		}
	}()
	h, err := l.collateCtx(ctx, examples)
	if err != nil {
		return nil, zero, nil, err
	}
	if h, err = fit(h); err != nil {
		return nil, zero, nil, err
	}
	s := &l.slots[0]
	if s.copied != nil {
		if err := await(s.copied); err != nil {
			return nil, zero, nil, err
		}
	}
	used := l.stage(s.host.Bytes(), h)
	if err := l.copy.Wait(s.released); err != nil {
		return nil, zero, nil, err
	}
	if s.copied, err = l.dev.CopyToDevice(s.dev, s.host.Slice(0, used), l.copy); err != nil {
		return nil, zero, nil, err
	}
	if err := l.dev.Stream().Wait(s.copied); err != nil {
		return nil, zero, nil, err
	}
	release = func() error {
		ev, err := l.dev.Stream().Record()
		if err == nil {
			s.released = ev
		}
		return err
	}
	return s, h, release, nil
}

// collateCtx is collate on a goroutine of its own, which a cancelled ctx
// does not wait for.
func (l *bucketed[H]) collateCtx(ctx context.Context, examples []int32) (H, error) {
	type collated struct {
		h   H
		err error
	}
	done := make(chan collated, 1) // the goroutine never waits to send
	go func() {
		h, err := l.collate(examples)
		done <- collated{h, err}
	}()
	select {
	case c := <-done:
		return c.h, c.err
	case <-ctx.Done():
		var zero H
		return zero, fmt.Errorf("loader: Load: %w", ctx.Err())
	}
}

// Close ends a running iteration (its consumer sees ErrClosed) and frees
// the ring and the copy stream once no iteration runs.
func (l *bucketed[H]) Close() error { return l.closeWith(l.free) }

func (l *bucketed[H]) free() error {
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
