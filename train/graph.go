package train

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
)

// stepGraphs is the trainer's recording of a steady step (Config.Graphs):
// one device graph per micro-batch of a step, recorded at the second step
// and replayed at every later one whose micro-batches start no stream
// afresh. The graph of micro-batch g holds what the trainer and the model
// queue for it: at g = 0 the start of the step (zeroed gradients and
// loss, the guarded backup of the carried state), then its forward, loss
// and backward, reading its batch from buffers of its own that the
// trainer copies the loader's batch into first; at the last, the end of
// the step: the gradient's squared norm, the verdict and the update. What
// changes from step to step is read from device memory: the batch, and
// the step's values (vals), which the trainer copies before the last
// graph: the record's slot (device.StepGuard's Slot) and the rate
// and step number (the update's device.Rates). A replay queues exactly
// the calls recorded, so the steps are the same bits as eager ones.
type stepGraphs struct {
	off    bool           // no graphs: not asked for, not possible, or a capture failed
	warm   bool           // a step ran eagerly first, so the cache holds its memory
	graphs []device.Graph // per micro-batch group, nil until recorded
	buf    device.Buffer  // the batches' buffers, one allocation
	// in and tgt are micro-batch g's inputs and targets as the graphs
	// read them; seq and rows the shape they were recorded for.
	in, tgt   []device.Buffer
	seq, rows int
	ended     bool // the step's end (norm, verdict, update) was queued in its last graph
	recorded  int  // graphs recorded so far, over the trainer's life
	vals      stepValues
}

// stepValues is what changes from one replayed step to the next, in the
// device memory the last graph reads (buf, valuesSize bytes: the record's
// slot, a float64, then the update's device.Rates), and the staging ring
// its copies come from (stage), each entry reused once the copy it made
// last completed (copied, their events; next, the entry the next step
// writes). It lives as long as the trainer, since a copy may be in flight
// whatever the graphs do.
type stepValues struct {
	buf    device.Buffer
	stage  device.HostBuffer
	copied []device.Event
	next   int
}

// valuesSize is the bytes of stepValues.buf.
const valuesSize = 8 + device.RatesSize

// allocValues makes the step values' buffer and staging ring, when the
// trainer may record its steps: as many entries as steps whose copies may
// be in flight at once (the readbacks of Pipeline steps wait for those
// before them, so an entry 2·Pipeline+1 steps old is done), so that
// writing one never waits.
func (t *Trainer) allocValues() error {
	v := &t.sg.vals
	if t.sg.off {
		return nil
	}
	n := 2*t.slots() + 1
	var err error
	if v.buf, err = t.dev.Alloc(valuesSize, device.Workspace); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if v.stage, err = t.dev.Staging(int64(n * valuesSize)); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	v.copied = make([]device.Event, n)
	return nil
}

// putValues queues the copy of the next step's values (its record's slot
// and its rates) into the buffer its last graph reads, on the compute
// stream before that graph.
func (t *Trainer) putValues() error {
	v := &t.sg.vals
	i := v.next
	v.next = (i + 1) % len(v.copied)
	copied(v.copied[i])
	slot, n, lr := t.nextStep()
	h := v.stage.Slice(int64(i*valuesSize), valuesSize)
	b := h.Bytes()
	binary.NativeEndian.PutUint64(b, math.Float64bits(float64(slot)))
	o := t.cfg.Optimizer
	device.Rates{LR: lr, Step: int(n + 1), Beta1: o.Beta1, Beta2: o.Beta2}.Put(b[8:])
	ev, err := t.dev.CopyToDevice(v.buf, h, t.dev.Stream())
	if err != nil {
		return fmt.Errorf("train: the step's values: %w", err)
	}
	v.copied[i] = ev
	return nil
}

// copied returns once the copy ev (nil: none) completed, without waiting
// when it has. Only its completion matters: an error of the work before
// it (an index error) is the readback's to report, and Wait leaves it to
// the next synchronisation.
func copied(ev device.Event) {
	if ev == nil {
		return
	}
	if done, _ := ev.Done(); !done {
		_ = ev.Wait()
	}
}

// freeValues waits for the values' copies (a run's end waited for its
// steps, so for nothing then) and frees their memory.
func (t *Trainer) freeValues() error {
	v := &t.sg.vals
	var errs []error
	if v.stage.Len() > 0 {
		for _, ev := range v.copied {
			copied(ev)
		}
		errs = append(errs, t.dev.FreeStaging(v.stage))
	}
	if !v.buf.IsZero() {
		errs = append(errs, t.dev.Free(v.buf))
	}
	*v = stepValues{}
	return errors.Join(errs...)
}

// graphsFor decides whether the trainer records its steps: Config.Graphs,
// a language model's windows, a model Replayable in training and a device
// that records graphs.
func (t *Trainer) graphsFor() {
	w, ok := t.src.(*windows)
	if !ok || !t.cfg.Graphs || t.cfg.Comm != nil && t.cfg.Comm.Size() > 1 {
		t.sg.off = true
		return
	}
	r, ok := w.model.(Replayable)
	_, grapher := t.dev.(device.Grapher)
	t.sg.off = !ok || !grapher || !r.Replayable(rnn.Train)
}

// replay queues micro-batch b as a replay of its graph, recording the
// graph first if it has none; began says the step starts with it. It
// reports false, having queued nothing, when the micro-batch is to run
// eagerly: graphs are off, the step before was the first, the batch
// starts a stream afresh (its state is reset), or the capture was not
// possible (graphs are then off for good).
func (t *Trainer) replay(b micro) (bool, error) {
	sg := &t.sg
	if sg.off || !sg.warm || b.reset {
		return false, nil
	}
	n := t.src.accum()
	if sg.graphs != nil && (b.win.Seq != sg.seq || b.win.Rows != sg.rows) {
		// Another shape than recorded: record again.
		if err := t.closeGraphs(); err != nil {
			return false, err
		}
	}
	if sg.graphs == nil {
		if err := t.graphBuffers(b, n); err != nil {
			return false, err
		}
	}
	k := t.dev.Kernels()
	g := b.group
	if b.last {
		if err := t.putValues(); err != nil {
			return false, err
		}
	}
	if err := errors.Join(k.Copy(device.Copy{Dst: sg.in[g], Src: b.win.Inputs.Slice(0, sg.in[g].Len())}),
		k.Copy(device.Copy{Dst: sg.tgt[g], Src: b.win.Targets.Slice(0, sg.tgt[g].Len())})); err != nil {
		return false, fmt.Errorf("train: %w", err)
	}
	recorded := sg.graphs[g] == nil
	if recorded {
		// The recording runs the model's Go side (a training forward
		// moves where the next dropout masks start) and none of its work.
		random := t.src.random()
		var saved []uint64
		if random != nil {
			saved = random.RandomState()
		}
		gr, err := t.dev.(device.Grapher).Capture(func() error { return t.recordMicro(b) })
		if errors.Is(err, device.ErrNotCapturable) {
			// Nothing recorded ran: this and every later micro-batch run
			// eagerly, from the loader's buffers. What the model's Go side
			// did is undone: the carried state is no longer tied to the
			// forward, and the random state is where the device's is.
			if t.cfg.Logger != nil {
				t.cfg.Logger.Warn("train: steps run eagerly, not as device graphs", "error", err)
			}
			sg.off = true
			if t.states != nil {
				t.states[b.group].Detach()
			}
			err := t.closeGraphs()
			if random != nil {
				err = errors.Join(err, random.SetRandomState(saved))
			}
			return false, err
		}
		if err != nil {
			return false, err
		}
		sg.graphs[g] = gr
		sg.recorded++
	}
	if err := sg.graphs[g].Launch(); err != nil {
		return false, fmt.Errorf("train: %w", err)
	}
	if r, ok := t.src.(*windows).model.(ReplayTracker); ok && !recorded {
		r.Replayed(rnn.Train, sg.seq, sg.rows)
	}
	sg.ended = b.last
	return true, nil
}

// recordMicro queues what micro-batch b's graph holds (replay): the step's
// start at group 0, b's forward, loss and backward on the graph's batch
// buffers, the step's end at the last group, reading its values.
func (t *Trainer) recordMicro(b micro) error {
	sg := &t.sg
	if b.group == 0 {
		if err := t.beginDevice(); err != nil {
			return err
		}
	}
	b.win.Inputs, b.win.Targets = sg.in[b.group], sg.tgt[b.group]
	if err := t.microBatch(b); err != nil {
		return err
	}
	if b.last {
		if err := t.norms(); err != nil {
			return err
		}
		return t.decide(0, 0, 0, sg.vals.buf)
	}
	return nil
}

// graphBuffers allocates the graphs' batch buffers for the shape of b.
func (t *Trainer) graphBuffers(b micro, n int) error {
	sg := &t.sg
	in, tgt := b.win.Seq*b.win.Rows*4, b.win.Seq*b.win.Rows*4
	buf, err := t.dev.Alloc(int64(n*(in+tgt)), device.Batches)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	sg.buf, sg.seq, sg.rows = buf, b.win.Seq, b.win.Rows
	sg.graphs = make([]device.Graph, n)
	sg.in, sg.tgt = make([]device.Buffer, n), make([]device.Buffer, n)
	for g := range n {
		sg.in[g] = buf.Slice(int64(g*(in+tgt)), int64(in))
		sg.tgt[g] = buf.Slice(int64(g*(in+tgt)+in), int64(tgt))
	}
	return nil
}

// closeGraphs closes the graphs and frees their buffers; the next replay
// records them again. On a capture that failed it also turns graphs off.
func (t *Trainer) closeGraphs() error {
	sg := &t.sg
	var errs []error
	for _, g := range sg.graphs {
		if g != nil {
			errs = append(errs, g.Close())
		}
	}
	if !sg.buf.IsZero() {
		errs = append(errs, t.dev.Free(sg.buf))
	}
	*sg = stepGraphs{off: sg.off, warm: sg.warm, recorded: sg.recorded, vals: sg.vals}
	return errors.Join(errs...)
}
