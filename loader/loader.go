package loader

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gocurrent/gocurrent/device"
)

// ErrClosed is matched by the error of a Loader used after Close, and of an
// iteration that Close ended. It is device.ErrClosed (and alloc.ErrClosed):
// one sentinel for a use after Close in every package.
var ErrClosed = device.ErrClosed

// ErrBusy is matched by the error of a second iteration (Batches, or a
// SeqLoader's Load) while one runs: one at a time. It is device.ErrBusy
// (and rnn.ErrBusy), one sentinel for every package.
var ErrBusy = device.ErrBusy

// errRunning is the error of a second iteration of loader type kind.
func errRunning(kind, method string) error {
	return fmt.Errorf("loader: %s.%s: %w (one iteration at a time: another Batches or Load runs)", kind, method, ErrBusy)
}

// errClosed is what a closed loader returns.
var errClosed = fmt.Errorf("loader: %w", ErrClosed)

// Batch is one batch resident on the device.
//
// Inputs and Targets belong to the loader. They are valid from the moment
// the loop body receives the batch until it returns: the loader has made
// the device's compute stream wait for their copy, so kernels the body
// queues on the compute stream may read them, and it reuses their memory
// only after the compute stream has passed the point where the body
// returned. Keep nothing past the loop body.
type Batch struct {
	// Inputs and Targets are [Seq, Rows] device.Int32, time-major: the
	// token of row r at step t is element t·Rows+r; Targets are the
	// inputs shifted by one token.
	Inputs, Targets device.Buffer
	Seq, Rows       int
	// Epoch and Index place the batch: its index within the epoch.
	Epoch int
	Index int64
	// Step is the optimizer step within the epoch the batch belongs to
	// (Streams: the window; Windows: Index), and Group its micro-batch
	// within the step (Streams; 0 in Windows mode).
	Step  int64
	Group int
	// Reset marks the first window of an epoch in Streams mode: the
	// group's state starts from zeros.
	Reset bool
	// Next is the position after this batch.
	Next Position
}

// Stats are a loader's figures.
type Stats struct {
	// BytesRead is the corpus bytes read for batches, by every loader of
	// the same tokenized corpus.
	BytesRead int64
	// Batches and Tokens count the batches delivered and their input
	// tokens.
	Batches, Tokens int64
	// Wait is the time the consumer spent waiting for a batch that was not
	// ready; Wait over the consumer's wall time is its data-wait fraction.
	Wait time.Duration
	// StagingBytes and DeviceBytes are the memory the ring holds.
	StagingBytes, DeviceBytes int64
}

// Loader delivers the batches of a tokenized text to a device. Its ring of
// staging buffers and device batches is allocated once, by New; one
// iteration (Batches) runs at a time. Close may be called from any
// goroutine.
type Loader struct {
	dev   device.Device
	text  *Text
	cfg   Config
	plan  plan
	copy  device.Stream // the copy stream
	slots []slot
	// valueless says the device holds no values (device.Valueless, the
	// planner's): the producers then read no text and fill no staging,
	// whose pages stay untouched, and the batches' copies are queued all
	// the same.
	valueless bool

	batches, tokens, waitNS atomic.Int64

	runGuard
}

// runGuard is what a loader's one iteration at a time and its Close share.
type runGuard struct {
	mu      sync.Mutex
	running bool
	closed  bool
	stop    context.CancelFunc // ends the running iteration
}

// closeWith marks the loader closed, and ends a running iteration (which
// frees the ring when it ends) or frees the ring with free at once.
func (g *runGuard) closeWith(free func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	if g.running {
		g.stop()
		return nil
	}
	return free()
}

// stopped is why an iteration cancelled through ctx ended: Close or ctx.
func (g *runGuard) stopped(ctx context.Context) error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return errClosed
	}
	return ctx.Err()
}

// ringSlot is one staging buffer of a loader's ring and its device batch.
type ringSlot struct {
	host device.HostBuffer
	dev  device.Buffer // the same on the device
	// copied is the event of the last copy out of host; released is the
	// compute stream's event after the consumer returned the batch.
	copied, released device.Event
}

// free waits for the slot's last copy and frees its buffers.
func (s *ringSlot) free(d device.Device) []error {
	var errs []error
	if s.copied != nil {
		errs = append(errs, await(s.copied))
	}
	if !s.dev.IsZero() {
		errs = append(errs, d.Free(s.dev))
	}
	if s.host.Len() > 0 {
		errs = append(errs, d.FreeStaging(s.host))
	}
	return errs
}

// slot is one staging buffer (inputs then targets, 2·Seq·Rows int32) and
// its device batch.
type slot struct {
	ringSlot
	ready chan result // the producer's report for the slot's batch
}

// result is a filled and copied slot, or why it failed.
type result struct {
	pos    Position
	copied device.Event
	err    error
}

// New makes a loader of text's batches onto d, allocating its staging ring
// and a copy stream.
func New(d device.Device, text *Text, cfg Config) (*Loader, error) {
	if d == nil || text == nil {
		return nil, errors.New("loader: New needs a device and a text")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p, err := newPlan(cfg, text.Len())
	if err != nil {
		return nil, err
	}
	l := &Loader{dev: d, text: text, cfg: cfg, plan: p}
	_, l.valueless = d.(device.Valueless)
	if l.copy, err = d.NewStream(); err != nil {
		return nil, fmt.Errorf("loader: copy stream: %w", err)
	}
	bytes := int64(2*cfg.Seq*cfg.Batch) * 4
	for range cfg.Prefetch + 1 {
		var s slot
		if s.host, err = d.Staging(bytes); err == nil {
			if s.dev, err = d.Alloc(bytes, device.Batches); err != nil {
				err = errors.Join(err, d.FreeStaging(s.host))
			}
		}
		if err != nil {
			return nil, fmt.Errorf("loader: staging ring: %w", errors.Join(err, l.free()))
		}
		s.ready = make(chan result, 1)
		l.slots = append(l.slots, s)
	}
	// The device batches come from the compute stream's memory, and their
	// blocks may have been freed by kernels still queued there: the first
	// copy into each slot waits for the compute stream as the later ones
	// wait for the batch's release.
	created, err := d.Stream().Record()
	if err != nil {
		return nil, fmt.Errorf("loader: staging ring: %w", errors.Join(err, l.free()))
	}
	for i := range l.slots {
		l.slots[i].released = created
	}
	return l, nil
}

// PerEpoch is the number of batches in an epoch.
func (l *Loader) PerEpoch() int64 { return l.plan.perEpoch }

// Config returns the configuration, with defaults filled in.
func (l *Loader) Config() Config { return l.cfg }

// Stats returns the loader's figures so far.
func (l *Loader) Stats() Stats {
	s := Stats{BytesRead: l.text.BytesRead(), Batches: l.batches.Load(), Tokens: l.tokens.Load(),
		Wait: time.Duration(l.waitNS.Load())}
	for i := range l.slots { // not a copy of the slot: producers write its events
		sl := &l.slots[i]
		s.StagingBytes += sl.host.Len()
		s.DeviceBytes += sl.dev.Len()
	}
	return s
}

// Batches iterates over the batches from position from (the zero Position
// is the start) to the end of the configured epochs, or until the consumer
// stops, ctx is cancelled (the last pair carries ctx's error) or the loader
// is closed (ErrClosed). Producer goroutines fill the staging ring ahead of
// the consumer and copy each batch to the device on the copy stream; every
// goroutine has ended when the iteration returns, but a producer blocked in
// a read of the text's corpus, which the iteration does not wait for (so
// that a cancellation or Close ends it at once): that one returns when its
// read does, touching nothing of the loader's. A failed read ends the
// iteration with its error. So does a failure found while the iteration
// ends (a copy still in flight, or freeing the ring after a Close from
// the loop body), joined to the error that ended it, unless the consumer
// stopped first.
func (l *Loader) Batches(ctx context.Context, from Position) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		if from.Epoch < 0 || from.Batch < 0 || from.Batch >= l.plan.perEpoch {
			yield(Batch{}, fmt.Errorf("loader: position %+v is outside an epoch of %d batches", from, l.plan.perEpoch))
			return
		}
		run, err := l.begin(ctx)
		if err != nil {
			yield(Batch{}, err)
			return
		}
		ended := false
		defer func() {
			if !ended { // a panic out of the loop body: the panic is the report
				_ = l.end(run)
			}
		}()
		listening, err := l.consume(run, from, yield)
		ended = true
		if endErr := l.end(run); endErr != nil {
			err = errors.Join(err, fmt.Errorf("loader: ending the iteration: %w", endErr))
		}
		if err != nil && listening {
			yield(Batch{}, err)
		}
	}
}

// iteration is one running Batches.
type iteration struct {
	ctx   context.Context
	order chan orderEntry // slots in delivery order
	free  chan int        // slots the consumer returned
	crew  crew            // the dispatcher and the producers
}

type orderEntry struct {
	slot int
	pos  Position
}

type job struct {
	slot int
	pos  Position
	perm []int32
}

func (l *Loader) begin(ctx context.Context) (*iteration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return nil, fmt.Errorf("loader: Loader.Batches: %w", ErrClosed)
	case l.running:
		return nil, errRunning("Loader", "Batches")
	}
	run := &iteration{order: make(chan orderEntry, len(l.slots)), free: make(chan int, len(l.slots))}
	run.ctx, l.stop = context.WithCancel(ctx)
	l.running = true
	for i := range l.slots {
		run.free <- i
	}
	return run, nil
}

// end stops the iteration's goroutines, waits for them (but those blocked
// in a read of the text, see crew) and for the copies in flight, and frees
// the ring if Close came meanwhile. It returns the errors of the copies
// and of freeing the ring: Close, called while the iteration ran, could
// not report the latter.
func (l *Loader) end(run *iteration) error {
	l.mu.Lock()
	l.stop()
	l.mu.Unlock()
	run.crew.end()
	var errs []error
	for i := range l.slots {
		if ev := l.slots[i].copied; ev != nil {
			errs = append(errs, await(ev))
		}
		// Results the consumer never took.
		select {
		case <-l.slots[i].ready:
		default:
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running = false
	if l.closed {
		// free waits for the same copies and reports their errors too.
		return l.free()
	}
	return errors.Join(errs...)
}

// consume delivers the batches to yield until the epochs end, the consumer
// stops, ctx is cancelled or the loader closed. It returns whether the
// consumer still listens and the error that ended the iteration, not yet
// yielded.
func (l *Loader) consume(run *iteration, from Position, yield func(Batch, error) bool) (listening bool, err error) {
	jobs := make(chan job)
	run.crew.start(1 + l.cfg.Workers)
	go l.dispatch(run, from, jobs)
	for range l.cfg.Workers {
		go l.produce(run, jobs)
	}
	compute := l.dev.Stream()
	rows, seq := l.cfg.Batch, l.cfg.Seq
	half := int64(seq*rows) * 4
	for {
		start := time.Now()
		var e orderEntry
		var r result
		var open bool
		select {
		case e, open = <-run.order:
			if !open {
				// The dispatcher closes the order when the configured
				// epochs are done, and when it stops for a cancellation:
				// the select may pick the closed order over ctx then.
				if run.ctx.Err() != nil {
					return true, l.stopped(run.ctx)
				}
				return true, nil
			}
		case <-run.ctx.Done():
			return true, l.stopped(run.ctx)
		}
		s := &l.slots[e.slot]
		select {
		case r = <-s.ready:
		case <-run.ctx.Done():
			return true, l.stopped(run.ctx)
		}
		l.waitNS.Add(int64(time.Since(start)))
		if r.err == nil {
			r.err = compute.Wait(r.copied)
		}
		if r.err != nil {
			return true, r.err
		}
		b := Batch{Inputs: s.dev.Slice(0, half), Targets: s.dev.Slice(half, half), Seq: seq, Rows: rows,
			Epoch: r.pos.Epoch, Index: r.pos.Batch, Step: r.pos.Batch, Next: l.plan.next(r.pos)}
		if l.cfg.Mode == Streams {
			b.Step, b.Group = r.pos.Batch/int64(l.cfg.Accum), int(r.pos.Batch%int64(l.cfg.Accum))
			b.Reset = b.Step == 0
		}
		l.batches.Add(1)
		l.tokens.Add(int64(seq * rows))
		more := yield(b, nil)
		released, err := compute.Record()
		if err != nil {
			return more, fmt.Errorf("loader: releasing a batch: %w", err)
		}
		s.released = released
		run.free <- e.slot
		if !more {
			return false, nil
		}
	}
}

// dispatch hands out slots in delivery order, one batch position each.
func (l *Loader) dispatch(run *iteration, pos Position, jobs chan<- job) {
	defer run.crew.done()
	defer close(jobs)
	defer close(run.order)
	var perm []int32
	permEpoch := -1
	for ; !l.plan.done(pos); pos = l.plan.next(pos) {
		var slot int
		select {
		case slot = <-run.free:
		case <-run.ctx.Done():
			return
		}
		if pos.Epoch != permEpoch {
			perm, permEpoch = l.plan.order(pos.Epoch), pos.Epoch
		}
		// order has room for every slot, so this never blocks.
		run.order <- orderEntry{slot: slot, pos: pos}
		select {
		case jobs <- job{slot: slot, pos: pos, perm: perm}:
		case <-run.ctx.Done():
			return
		}
	}
}

// produce fills slots: reads the batch's tokens into memory of its own,
// waits until the slot's previous copy has left the staging buffer, writes
// them there and copies them to the device once the compute stream has
// released the device batch. The read is the crew's: an iteration that
// ends during it does not wait for it, and the goroutine then returns
// without touching the slot.
func (l *Loader) produce(run *iteration, jobs <-chan job) {
	defer run.crew.done()
	var window, ids []int32
	if !l.valueless {
		window, ids = make([]int32, l.cfg.Seq+1), make([]int32, 2*l.cfg.Seq*l.cfg.Batch)
	}
	for j := range jobs {
		run.crew.read()
		var err error
		if !l.valueless {
			err = l.read(j, window, ids)
		}
		if !run.crew.resume() {
			return
		}
		s := &l.slots[j.slot]
		r := result{pos: j.pos, err: err}
		if r.err == nil && !l.valueless {
			r.err = l.fill(s, ids)
		}
		if r.err == nil && s.released != nil {
			r.err = l.copy.Wait(s.released)
		}
		if r.err == nil {
			r.copied, r.err = l.dev.CopyToDevice(s.dev, s.host, l.copy)
		}
		if r.err != nil {
			r.err = fmt.Errorf("loader: batch %d of epoch %d: %w", j.pos.Batch, j.pos.Epoch, r.err)
		}
		s.copied = r.copied
		s.ready <- r
		if run.ctx.Err() != nil {
			return
		}
	}
}

// read reads the batch at j.pos into ids, as the slot holds it: inputs
// then targets, each [Seq, Batch], through window.
func (l *Loader) read(j job, window, ids []int32) error {
	seq, rows := l.cfg.Seq, l.cfg.Batch
	inputs, targets := ids[:seq*rows], ids[seq*rows:]
	for r := range rows {
		if err := l.text.Read(l.plan.rowStart(j.pos, r, j.perm), window); err != nil {
			return err
		}
		for t := range seq {
			inputs[t*rows+r] = window[t]
			targets[t*rows+r] = window[t+1]
		}
	}
	return nil
}

// fill writes the batch ids into the slot's staging buffer once the
// slot's last copy has left it.
func (l *Loader) fill(s *slot, ids []int32) error {
	if s.copied != nil {
		if err := await(s.copied); err != nil {
			return err
		}
	}
	host := s.host.Bytes()
	copy(unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(host))), len(ids)), ids)
	return nil
}

// await waits for e unless it completed already: a slot's last copy has
// mostly left its staging buffer by the time the slot comes round again,
// and a steady run then never waits for the device (device.Counts.Syncs).
func await(e device.Event) error {
	if done, err := e.Done(); done || err != nil {
		return err
	}
	return e.Wait()
}

// Close ends a running iteration (its consumer sees ErrClosed), and frees
// the ring and the copy stream once no iteration runs.
func (l *Loader) Close() error { return l.closeWith(l.free) }

// free returns the ring's memory and closes the copy stream.
func (l *Loader) free() error {
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
