package train

import (
	"fmt"
	"sync/atomic"

	"github.com/gocurrent/gocurrent/rnn"
)

// The states of a guard. A run calling its callbacks (OnStep, OnEval) is
// apart from one busy otherwise, for a callback may Save.
const (
	guardIdle uint32 = iota
	guardBusy
	guardCallback // Run is inside OnStep or OnEval
	guardNested   // a Save made from the callback is inside
	guardClosed
)

// guard is the trainer's part of rnn's guard (unexported there): an atomic
// state word that refuses a second goroutine's call (rnn.ErrBusy) and any
// call after Close (rnn.ErrClosed), never waiting. Run lets Save in while
// it calls the callbacks, which run on its goroutine.
type guard struct{ state atomic.Uint32 }

// enter begins method's call: nil, to be paired with leave, or the error
// of a closed or busy trainer. Only methods that a callback may call
// (nested) enter during one.
func (g *guard) enter(method string, nested bool) error {
	if g.state.CompareAndSwap(guardIdle, guardBusy) {
		return nil
	}
	if nested && g.state.CompareAndSwap(guardCallback, guardNested) {
		return nil
	}
	return g.refusal(method)
}

func (g *guard) refusal(method string) error {
	switch g.state.Load() {
	case guardClosed:
		return fmt.Errorf("train: Trainer.%s: %w", method, rnn.ErrClosed)
	case guardCallback, guardNested:
		return fmt.Errorf("train: Trainer.%s: %w (Run is calling OnStep or OnEval; only Save may be called from there)", method, rnn.ErrBusy)
	}
	return fmt.Errorf("train: Trainer.%s: %w (a trainer is used by one goroutine at a time)", method, rnn.ErrBusy)
}

// leave ends the call enter began: a nested one returns to the callback.
func (g *guard) leave() {
	if !g.state.CompareAndSwap(guardNested, guardCallback) {
		g.state.Store(guardIdle)
	}
}

// beginCallback and endCallback bracket Run's call of a callback, which
// may Save meanwhile.
func (g *guard) beginCallback() { g.state.CompareAndSwap(guardBusy, guardCallback) }
func (g *guard) endCallback()   { g.state.CompareAndSwap(guardCallback, guardBusy) }

// close marks the guard closed: first says this call did; a call inside
// is ErrBusy, and the trainer stays open.
func (g *guard) close() (first bool, err error) {
	if g.state.CompareAndSwap(guardIdle, guardClosed) {
		return true, nil
	}
	if g.state.Load() == guardClosed {
		return false, nil
	}
	return false, g.refusal("Close")
}
