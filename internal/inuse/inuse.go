// Package inuse is the state word that keeps one of the library's objects
// (a layer, a state, a model) from two calls at once and from use after
// Close: idle, busy while a call is inside, or closed. It refuses rather
// than waits: a second goroutine is misusing the object, and waiting
// would hide that (and could deadlock against a caller's own locks). Two
// atomic operations a call. The packages that use it say the refusal in
// their own words (rnn.ErrBusy, rnn.ErrClosed).
//
// It is a leaf every package of the module may import (internal/
// importgraph), and it is not for users.
package inuse

import "sync/atomic"

// Refusal is why Enter or Close did not let a call in.
type Refusal uint8

const (
	// None: the call is in.
	None Refusal = iota
	// Busy: another call is inside.
	Busy
	// Closed: Close ran.
	Closed
)

// The states of a Word.
const (
	idle uint32 = iota
	busy
	closed
)

// Word is the state word. The zero Word is idle.
type Word struct{ state atomic.Uint32 }

// Enter begins a call: None, to be paired with Leave, or why not.
func (w *Word) Enter() Refusal {
	if w.state.CompareAndSwap(idle, busy) {
		return None
	}
	if w.state.Load() == closed {
		return Closed
	}
	return Busy
}

// Leave ends the call Enter let in.
func (w *Word) Leave() { w.state.Store(idle) }

// Close marks the word closed; first says this call did (a second Close
// has nothing to do). With a call inside it is Busy, and the word stays
// as it was.
func (w *Word) Close() (first bool, r Refusal) {
	if w.state.CompareAndSwap(idle, closed) {
		return true, None
	}
	if w.state.Load() == closed {
		return false, None
	}
	return false, Busy
}

// Closed reports whether Close ran.
func (w *Word) Closed() bool { return w.state.Load() == closed }
