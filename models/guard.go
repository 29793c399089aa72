package models

import (
	"fmt"
	"sync/atomic"

	"github.com/gocurrent/gocurrent/rnn"
)

// The states of a guard.
const (
	guardIdle uint32 = iota
	guardBusy
	guardClosed
)

// guard is rnn's guard for a whole model (rnn's is unexported): a model's
// call is several layers' calls and reads of the model's own buffers, and
// a second goroutine coming in between two of them would change what the
// first reads, though each layer's own guard let it in. An atomic state
// word, idle, busy or closed; it refuses, never waits.
type guard struct{ state atomic.Uint32 }

// enter begins method's call on model ("Classifier", "Forward"): nil, to
// be paired with leave, or the error of a closed or busy model.
func (g *guard) enter(model, method string) error {
	if g.state.CompareAndSwap(guardIdle, guardBusy) {
		return nil
	}
	if g.state.Load() == guardClosed {
		return fmt.Errorf("models: %s.%s: %w", model, method, rnn.ErrClosed)
	}
	return fmt.Errorf("models: %s.%s: %w (one goroutine at a time; give each goroutine a share of the model, %s.Share, "+
		"or call Predict, which reads its result inside the call)", model, method, rnn.ErrBusy, model)
}

func (g *guard) leave() { g.state.Store(guardIdle) }

// close marks the guard closed: first says this call did; a call inside
// is ErrBusy, and the model stays open.
func (g *guard) close(model string) (first bool, err error) {
	if g.state.CompareAndSwap(guardIdle, guardClosed) {
		return true, nil
	}
	if g.state.Load() == guardClosed {
		return false, nil
	}
	return false, fmt.Errorf("models: %s.Close: %w (a call of another goroutine is inside; the model stays open)", model, rnn.ErrBusy)
}

// sharedError is a share's refusal of what trains.
func sharedError(model, method string) error {
	return fmt.Errorf("models: %s.%s on a share: %w", model, method, rnn.ErrShared)
}
