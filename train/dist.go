package train

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/loader"
)

// GradNotifier is implemented by a model that says, during Backward, when
// each part of its gradient is complete, so that a data-parallel trainer
// (Config.Comm) sums it over the ranks while the backward of the layers
// below runs. A model without it has its gradients summed after its
// Backward returns: the same result, without the overlap.
type GradNotifier interface {
	// NotifyGrads makes every later Backward call ready(i, off, n) once
	// the work that writes elements off to off+n of group i's gradient
	// (Groups()[i], its flat buffer) is queued in full: a whole group, or
	// parts of one (a recurrent stack's layers) that together cover it,
	// each once per Backward. ready's error ends the Backward with it. A
	// nil ready stops the calls.
	NotifyGrads(ready func(group, off, n int) error)
}

// parallel is the trainer's data-parallel part: Config.Comm, when it has
// more than one rank.
type parallel struct {
	comm   dist.Comm
	stream device.Stream // where the collectives queue, beside the compute stream
	vote   device.Buffer // a float64: this rank asks to stop (1) or not (0); summed, whether any rank does

	reduced []int          // per group: the elements of its gradient whose sum is queued this step
	events  []device.Event // the sums queued this step, for the compute stream to wait for
	synced  bool           // rank 0's state was broadcast
}

// newParallel checks that the trainer can run data-parallel on comm and
// makes its stream. nil for a job of one rank.
func (t *Trainer) newParallel() error {
	c := t.cfg.Comm
	if c == nil || c.Size() == 1 {
		return nil
	}
	var sh loader.Shard
	switch src := t.src.(type) {
	case *windows:
		sh = src.data.Config().Shard
		src.ranks = c.Size()
	case *sequences:
		sh = src.data.Config().Shard
	}
	if sh.Of != c.Size() || sh.Rank != c.Rank() {
		return fmt.Errorf("train: the loader is shard %d of %d (its Config.Shard), the communicator rank %d of %d: each rank must read its own share", sh.Rank, sh.Of, c.Rank(), c.Size())
	}
	for _, st := range t.states {
		for _, cv := range st.Carried() {
			if cv.Rows <= 0 || cv.Len%cv.Rows != 0 {
				return fmt.Errorf("train: carried state %q of %d elements says no rows (Carried.Rows %d): data-parallel checkpoints gather it by rows", cv.Name, cv.Len, cv.Rows)
			}
		}
	}
	s, err := t.dev.NewStream()
	if err != nil {
		return fmt.Errorf("train: the collectives' stream: %w", err)
	}
	t.par = &parallel{comm: c, stream: s, reduced: make([]int, len(t.groups))}
	if t.par.vote, err = t.dev.Alloc(8, device.Workspace); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// ranks is the number of ranks the trainer runs on.
func (t *Trainer) ranks() int {
	if t.par == nil {
		return 1
	}
	return t.par.comm.Size()
}

// leader reports whether this rank writes the checkpoints: rank 0, or the
// only one.
func (t *Trainer) leader() bool { return t.par == nil || t.par.comm.Rank() == 0 }

// sumAfter queues the sum over the ranks of b after the work queued on
// the compute stream so far, and keeps its event for the step's end.
func (p *parallel) sumAfter(d device.Device, b device.Buffer, dt device.DType) error {
	err := p.after(d, func() (device.Event, error) { return p.comm.AllReduce(b, dt, p.stream) })
	if err != nil {
		return fmt.Errorf("train: summing over %d ranks: %w", p.comm.Size(), err)
	}
	return nil
}

// broadcastAfter queues a broadcast of b from root after the compute
// stream's work, for the compute stream to wait for.
func (p *parallel) broadcastAfter(d device.Device, b device.Buffer, root int) error {
	err := p.after(d, func() (device.Event, error) { return p.comm.Broadcast(b, root, p.stream) })
	if err != nil {
		return fmt.Errorf("train: broadcast from rank %d: %w", root, err)
	}
	return nil
}

// after queues a collective on the collectives' stream once the compute
// stream's work so far is done, and keeps its event.
func (p *parallel) after(d device.Device, collective func() (device.Event, error)) error {
	e, err := d.Stream().Record()
	if err == nil {
		err = p.stream.Wait(e)
	}
	if err == nil {
		e, err = collective()
	}
	if err != nil {
		return err
	}
	p.events = append(p.events, e)
	return nil
}

// gradReady is the GradNotifier callback of the step's last micro-batch:
// elements off to off+n of group i's gradient are summed over the ranks
// while the backward goes on.
func (t *Trainer) gradReady(i, off, n int) error {
	p := t.par
	if i < 0 || i >= len(t.groups) || off < 0 || n <= 0 || off+n > t.groups[i].Params.Len() || p.reduced[i]+n > t.groups[i].Params.Len() {
		return fmt.Errorf("train: the model notified elements %d to %d of group %d's gradient, out of its %d or twice", off, off+n, i, t.groups[i].Params.Len())
	}
	p.reduced[i] += n
	_, grad := t.groups[i].Params.Flat()
	dt := t.groups[i].Params.DType()
	return p.sumAfter(t.dev, grad.Elems(dt, off, n), dt)
}

// lastBackward brackets the backward of a step's last micro-batch: the
// model notifies its gradients as they complete (GradNotifier).
func (t *Trainer) lastBackward(run func() error) error {
	n, ok := t.modelNotifier()
	if !ok {
		return run()
	}
	n.NotifyGrads(t.gradReady)
	defer n.NotifyGrads(nil)
	return run()
}

func (t *Trainer) modelNotifier() (GradNotifier, bool) {
	w, ok := t.src.(*windows)
	if !ok {
		return nil, false
	}
	n, ok := w.model.(GradNotifier)
	return n, ok
}

// reduceStep completes the step's sums over the ranks, before the norm and
// the verdict: the gradients the model did not notify, the loss (each
// rank's is its share of the mean, 1/ranks of its own) and the stop votes
// (stop: this rank's ctx was cancelled), then makes the compute stream
// wait for all of them and puts the votes beside the step's record in
// slot. Every rank then holds the same gradient, loss and votes, and
// decides the step, and whether to stop after it, alike.
func (t *Trainer) reduceStep(stop bool, slot int) error {
	p := t.par
	k := t.dev.Kernels()
	vote := 0.0
	if stop {
		vote = 1
	}
	if err := k.Fill(device.Fill{DType: device.Float64, N: 1, X: p.vote, Value: vote}); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	for i, g := range t.groups {
		switch p.reduced[i] {
		case 0:
			_, grad := g.Params.Flat()
			if err := p.sumAfter(t.dev, grad.Elems(g.Params.DType(), 0, g.Params.Len()), g.Params.DType()); err != nil {
				return err
			}
		case g.Params.Len():
		default:
			return fmt.Errorf("train: the model notified %d of the %d elements of group %q's gradient", p.reduced[i], g.Params.Len(), g.Name)
		}
		p.reduced[i] = 0
	}
	if err := p.sumAfter(t.dev, t.ce.Total(), t.groups[0].Params.DType()); err != nil {
		return err
	}
	if err := p.sumAfter(t.dev, p.vote, device.Float64); err != nil {
		return err
	}
	for _, e := range p.events {
		if err := t.dev.Stream().Wait(e); err != nil {
			return fmt.Errorf("train: waiting for the sums over the ranks: %w", err)
		}
	}
	p.events = p.events[:0]
	at := recordSize*int64(t.slots()) + 8*int64(slot)
	if err := k.Copy(device.Copy{Dst: t.records.Slice(at, 8), Src: p.vote}); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// ErrRankStopped is wrapped by the error of a data-parallel run that
// stopped because a rank of the job was asked to (its ctx was cancelled):
// each rank votes at every step's end, the votes are summed with the
// gradients, and every rank stops after the same step, which the
// checkpoint then holds, as a single process stops after the step under
// way. It wraps context.Canceled.
var ErrRankStopped = fmt.Errorf("train: a rank of the job was stopped: %w", context.Canceled)

// stopVoted ends a pass whose last read-back found a stop vote: the steps
// still queued are settled (the same on every rank: they read back the
// same steps at the same points), then the run stops.
func (t *Trainer) stopVoted(r *run) error {
	o, err := t.drain(r)
	switch {
	case err != nil:
		return err
	case o.refused != nil:
		return o.refused
	}
	return fmt.Errorf("train: stopped after step %d: %w", t.step, ErrRankStopped)
}

// syncRanks makes every rank start from rank 0's state, once, before the
// first step: the weights and the optimizer state are broadcast, and the
// ranks check that they stand at the same step and position (resumed from
// the same checkpoint, or none).
func (t *Trainer) syncRanks() error {
	p := t.par
	if p == nil || p.synced {
		return nil
	}
	d := t.dev
	var bufs []device.Buffer
	for i, g := range t.groups {
		v, _ := g.Params.Flat()
		bytes := int64(g.Params.Len()) * g.Params.DType().Size()
		bufs = append(bufs, v.Slice(0, bytes))
		for s := range t.opt.names {
			bufs = append(bufs, t.opt.state[i][s].Slice(0, bytes))
		}
	}
	here := make([]byte, 24)
	binary.LittleEndian.PutUint64(here[0:], uint64(t.step))
	binary.LittleEndian.PutUint64(here[8:], uint64(t.pos.Epoch))
	binary.LittleEndian.PutUint64(here[16:], uint64(t.pos.Batch))
	mark, err := d.Alloc(24, device.Workspace)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	defer d.Free(mark)
	if err := d.Upload(mark, here); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	bufs = append(bufs, mark)
	for _, b := range bufs {
		if err := p.broadcastAfter(d, b, 0); err != nil {
			return err
		}
	}
	if err := p.wait(d); err != nil {
		return err
	}
	root := make([]byte, 24)
	if err := d.Download(root, mark); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if string(root) != string(here) {
		at := func(b []byte) string {
			return fmt.Sprintf("step %d, epoch %d batch %d", binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:]))
		}
		return fmt.Errorf("train: rank %d stands at %s, rank 0 at %s: every rank must resume from the same checkpoint", p.comm.Rank(), at(here), at(root))
	}
	p.synced = true
	return nil
}

// wait makes the compute stream wait for the collectives queued.
func (p *parallel) wait(d device.Device) error {
	for _, e := range p.events {
		if err := d.Stream().Wait(e); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	p.events = p.events[:0]
	return nil
}

// gatherCarried returns the state every micro-batch group carries, of
// the whole batch: rank r's rows at their place among the ranks', as one
// process with the undivided batch holds it. Every rank must call it at
// the same point (it is a collective); in a job of one rank it is the
// state as it is.
func (t *Trainer) gatherCarried() ([][][]byte, error) {
	d := t.dev
	out := make([][][]byte, len(t.states))
	n := t.ranks()
	for i, st := range t.states {
		for _, cv := range st.Carried() {
			local := int64(cv.Len) * cv.DType.Size()
			if t.par == nil {
				b, err := downloadBytes(d, cv.Buffer.Slice(0, local))
				if err != nil {
					return nil, err
				}
				out[i] = append(out[i], b)
				continue
			}
			// Broadcast each rank's rows in turn through one buffer.
			tmp, err := d.Alloc(local, device.Workspace)
			if err != nil {
				return nil, fmt.Errorf("train: %w", err)
			}
			whole := make([]byte, local*int64(n))
			rowBytes := int64(cv.Len/cv.Rows/cv.outer()) * cv.DType.Size()
			for r := range n {
				err := d.Kernels().Copy(device.Copy{Dst: tmp, Src: cv.Buffer.Slice(0, local)})
				if err == nil {
					err = t.par.broadcastAfter(d, tmp, r)
				}
				if err == nil {
					err = t.par.wait(d)
				}
				var b []byte
				if err == nil {
					b, err = downloadBytes(d, tmp)
				}
				if err != nil {
					d.Free(tmp)
					return nil, err
				}
				// b is [Outer, Rows, inner] of rank r: its rows go to rows
				// r·Rows.. of the whole [Outer, n·Rows, inner].
				block := int64(cv.Rows) * rowBytes
				for o := range int64(cv.outer()) {
					copy(whole[(o*int64(n)+int64(r))*block:], b[o*block:(o+1)*block])
				}
			}
			if err := d.Free(tmp); err != nil {
				return nil, fmt.Errorf("train: %w", err)
			}
			out[i] = append(out[i], whole)
		}
	}
	return out, nil
}

// shardCarried is the part of a whole batch's carried value (as
// gatherCarried returns it) that this rank carries.
func (t *Trainer) shardCarried(cv Carried, whole []byte) []byte {
	if t.par == nil {
		return whole
	}
	n, r := int64(t.ranks()), int64(t.par.comm.Rank())
	block := int64(cv.Len/cv.outer()) * cv.DType.Size()
	out := make([]byte, 0, int64(cv.Len)*cv.DType.Size())
	for o := range int64(cv.outer()) {
		out = append(out, whole[(o*n+r)*block:(o*n+r+1)*block]...)
	}
	return out
}

// closeParallel releases the collectives' stream; the communicator is the
// caller's.
func (t *Trainer) closeParallel() error {
	if t.par == nil {
		return nil
	}
	var errs []error
	if !t.par.vote.IsZero() {
		errs = append(errs, t.dev.Free(t.par.vote))
		t.par.vote = device.Buffer{}
	}
	if t.par.stream != nil {
		errs = append(errs, t.par.stream.Close())
		t.par.stream = nil
	}
	return errors.Join(errs...)
}
