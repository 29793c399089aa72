package rnn

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/inuse"
)

// State is the recurrent state of a stack for one batch: h, and c for an
// LSTM, each [Layers, Batch, Hidden], with a gradient buffer of the same
// shape for each. The caller owns it (make one with LSTM.NewState or
// GRU.NewState, free it with Free) and passes it to Forward, which reads it
// as the initial state and overwrites it with the final state, in the same
// buffers: H, C and their gradients are the same buffers from one forward
// to the next (only Resize changes them), so a caller may keep them, back
// them up at the start of a step and put them back after a failed one (as
// train.Trainer does with train.State's Carried), and the next forward
// reads what was put there. Nothing reads the values after a forward
// returns but the next forward: Backward reads its own saved copies, so
// the values may change between a training forward and its Backward.
//
// A training forward ties the state to itself: the state then carries the
// gradient path back into that forward, and its gradient buffers start at
// zero. The caller may write the gradient of the loss with respect to the
// final state there; Backward replaces it with the gradient with respect to
// the initial state. Detach cuts the tie: the values stay, so the next
// window starts where this one ended, but no gradient flows back through
// them. That is truncated backpropagation through time, and a training
// forward refuses a state still tied to an earlier training forward, whose
// saved activations it is about to overwrite.
//
// A state is used by one goroutine at a time, in its own calls and in the
// forwards it is passed to (a meeting of two is ErrBusy). After Free its
// methods that touch device memory (Resize, Reset) and the forwards it is
// passed to return an error matching ErrClosed, H, C, GradH and GradC are
// zero Buffers, Batch, Layers and DType stay, and a second Free does
// nothing.
type State struct {
	g                     guard
	dev                   device.Device
	dtype                 device.DType
	lstm                  bool
	layers, batch, hidden int
	h, c, dh, dc          device.Buffer
	all                   device.Buffer // the one allocation holding the four
	// capacity is the batch all has room for (Resize), ≥ batch.
	capacity int
	// tie is the training forward that produced the values, until Detach.
	tie *record
}

func newState(d device.Device, dt device.DType, lstm bool, layers, batch, hidden int) (*State, error) {
	if batch <= 0 {
		return nil, fmt.Errorf("rnn: NewState: batch = %d, want > 0: %w", batch, device.ErrShape)
	}
	s := &State{dev: d, dtype: dt, lstm: lstm, layers: layers, hidden: hidden}
	all, err := d.Alloc(s.bytes(batch), device.State)
	if err != nil {
		return nil, fmt.Errorf("rnn: NewState: %w", err)
	}
	s.all, s.capacity = all, batch
	s.place(batch)
	if err := d.Kernels().Fill(device.Fill{DType: dt, N: int(all.Len() / dt.Size()), X: all}); err != nil {
		return nil, fmt.Errorf("rnn: NewState: %w", errors.Join(err, d.Free(all)))
	}
	return s, nil
}

// parts is the number of [Layers, Batch, Hidden] buffers of the state.
func (s *State) parts() int {
	if s.lstm {
		return 4
	}
	return 2
}

// bytes is the size of the allocation of a state for batch sequences.
func (s *State) bytes(batch int) int64 {
	return int64(s.parts()*s.layers*batch*s.hidden) * s.dtype.Size()
}

// place lays out h, dh (and c, dc) for batch sequences, one after the
// other from the start of the allocation.
func (s *State) place(batch int) {
	b := int64(s.layers*batch*s.hidden) * s.dtype.Size()
	s.batch = batch
	s.h, s.dh = s.all.Slice(0, b), s.all.Slice(b, b)
	if s.lstm {
		s.c, s.dc = s.all.Slice(2*b, b), s.all.Slice(3*b, b)
	}
}

// Resize makes s a zero, detached state for batch sequences, as
// NewState(batch) would, in the memory it holds when batch is at most the
// largest batch it has held (allocating only past that). A caller whose
// batch varies from call to call (a model over bucketed batches) then
// allocates nothing once it has met its largest batch. The buffers of H,
// C and their gradients change with the batch: take them afresh.
func (s *State) Resize(batch int) error {
	if err := s.g.enter("State", "Resize"); err != nil {
		return err
	}
	defer s.g.leave()
	if batch <= 0 {
		return fmt.Errorf("rnn: State.Resize: batch = %d, want > 0: %w", batch, device.ErrShape)
	}
	if batch > s.capacity {
		all, err := s.dev.Alloc(s.bytes(batch), device.State)
		if err != nil {
			return fmt.Errorf("rnn: State.Resize: %w", err)
		}
		old := s.all
		s.all, s.capacity = all, batch
		if err := s.dev.Free(old); err != nil {
			s.place(batch)
			return fmt.Errorf("rnn: State.Resize: %w", err)
		}
	}
	s.place(batch)
	return s.reset()
}

// H is the hidden state, [Layers, Batch, Hidden] (PyTorch's h_n layout).
func (s *State) H() device.Buffer { return s.h }

// C is the cell state of an LSTM, [Layers, Batch, Hidden]; none for a GRU.
func (s *State) C() device.Buffer { return s.c }

// GradH is the gradient with respect to H: of the final state after a
// training forward (zero unless the caller writes it), of the initial state
// after Backward.
func (s *State) GradH() device.Buffer { return s.dh }

// GradC is GradH for the cell state of an LSTM; none for a GRU.
func (s *State) GradC() device.Buffer { return s.dc }

// Batch is the number of sequences the state is for.
func (s *State) Batch() int { return s.batch }

// Layers is the first dimension of H and C: the layers (times the
// directions of a bidirectional stack).
func (s *State) Layers() int { return s.layers }

// DType is the element type of the state's buffers (the stack's).
func (s *State) DType() device.DType { return s.dtype }

// Detach keeps the values and cuts the gradient path back into the forward
// that produced them. It allocates nothing and queues nothing.
func (s *State) Detach() { s.tie = nil }

// Reset queues zeroing the values and gradients and detaches the state, as
// for the start of a new sequence.
func (s *State) Reset() error {
	if err := s.g.enter("State", "Reset"); err != nil {
		return err
	}
	defer s.g.leave()
	return s.reset()
}

func (s *State) reset() error {
	s.tie = nil
	k, n := s.dev.Kernels(), s.layers*s.batch*s.hidden
	var q queue
	for _, b := range []device.Buffer{s.h, s.dh, s.c, s.dc} {
		if !b.IsZero() {
			q.add(k.Fill(device.Fill{DType: s.dtype, N: n, X: b}))
		}
	}
	return q.err
}

// Free returns the state's memory to the device; afterwards the state is
// closed, as State says. Free during another goroutine's use of the state
// is ErrBusy, and frees nothing.
func (s *State) Free() error {
	if first, err := s.g.close("State"); !first {
		return err
	}
	s.tie = nil
	if s.all.IsZero() {
		return nil
	}
	all := s.all
	s.h, s.c, s.dh, s.dc, s.all = device.Buffer{}, device.Buffer{}, device.Buffer{}, device.Buffer{}, device.Buffer{}
	if err := s.dev.Free(all); err != nil {
		return fmt.Errorf("rnn: State.Free: %w", err)
	}
	return nil
}

// check reports whether s fits a stack's forward over batch sequences.
func (s *State) check(op string, d device.Device, dt device.DType, lstm bool, layers, batch, hidden int) error {
	if s.g.closed() {
		return fmt.Errorf("rnn: %s: the state is %w (State.Free)", op, ErrClosed)
	}
	if s.dev != d {
		return fmt.Errorf("rnn: %s: the state is on device %s, the layer on %s: %w", op, s.dev.Name(), d.Name(), device.ErrForeignBuffer)
	}
	kind := func(l bool) string {
		if l {
			return "LSTM"
		}
		return "GRU"
	}
	var problems []string
	if s.lstm != lstm {
		problems = append(problems, fmt.Sprintf("a %s state, want a %s one", kind(s.lstm), kind(lstm)))
	}
	if s.dtype != dt {
		problems = append(problems, fmt.Sprintf("element type %v, want %v", s.dtype, dt))
	}
	if s.layers != layers || s.hidden != hidden {
		problems = append(problems, fmt.Sprintf("%d layers of hidden size %d, want %d of %d", s.layers, s.hidden, layers, hidden))
	}
	if s.batch != batch {
		problems = append(problems, fmt.Sprintf("batch %d, want %d", s.batch, batch))
	}
	if len(problems) > 0 {
		return fmt.Errorf("rnn: %s: the state does not fit the layer: %s: %w", op, strings.Join(problems, "; "), device.ErrShape)
	}
	return nil
}

// use begins a forward's use of the state (op names the forward): nil,
// to be paired with the guard's leave, or the error of a freed state or
// of one another goroutine is using.
func (s *State) use(op string) error {
	switch s.g.w.Enter() {
	case inuse.Closed:
		return fmt.Errorf("rnn: %s: the state is %w (State.Free)", op, ErrClosed)
	case inuse.Busy:
		return fmt.Errorf("rnn: %s: the state is %w (one goroutine at a time; give each goroutine its own state)", op, ErrBusy)
	}
	return nil
}

// The rows of one layer in the state's buffers, n = Batch·Hidden elements
// each; none for a nil state, or for c and its gradient in a GRU's.

func (s *State) layerH(l, n int) device.Buffer {
	return s.layer(func(s *State) device.Buffer { return s.h }, l, n)
}
func (s *State) layerC(l, n int) device.Buffer {
	return s.layer(func(s *State) device.Buffer { return s.c }, l, n)
}
func (s *State) layerGradH(l, n int) device.Buffer {
	return s.layer(func(s *State) device.Buffer { return s.dh }, l, n)
}
func (s *State) layerGradC(l, n int) device.Buffer {
	return s.layer(func(s *State) device.Buffer { return s.dc }, l, n)
}

func (s *State) layer(of func(*State) device.Buffer, l, n int) device.Buffer {
	if s == nil {
		return device.Buffer{}
	}
	b := of(s)
	if b.IsZero() {
		return device.Buffer{}
	}
	return b.Elems(s.dtype, l*n, n)
}
