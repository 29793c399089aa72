package rnn

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gocurrent/gocurrent/device"
)

var (
	// ErrClosed is matched by the error of every call on a closed layer,
	// loss, state or Params that touches device memory or returns
	// buffers. It is device.ErrClosed (alloc.ErrClosed, loader.ErrClosed):
	// one sentinel for a use after Close in every package.
	ErrClosed = device.ErrClosed
	// ErrBusy is matched by the error of a call on a layer, loss or state
	// that a call from another goroutine is inside. It is device.ErrBusy.
	ErrBusy = device.ErrBusy
	// ErrShared is matched by the error of a call a share (Share) refuses:
	// a Train forward, Backward, SetDropoutState. A share runs NoGrad
	// forwards over its owner's parameters, and nothing that trains them.
	ErrShared = errors.New("rnn: a share runs NoGrad forwards only")
)

// The states of a guard.
const (
	guardIdle uint32 = iota
	guardBusy
	guardClosed
)

// guard is what keeps a layer's buffers from two calls at once and from use
// after Close: an atomic state word, idle, busy (a call is inside) or
// closed. It refuses rather than waits: a second goroutine is misusing the
// object, and waiting would hide that (and could deadlock against a
// caller's own locks). Two atomic operations a call; a refusal alone
// formats an error. The zero guard is idle.
type guard struct{ state atomic.Uint32 }

// enter begins method's call on object ("LSTM", "Forward"): nil, or the
// error of a closed or busy object. A nil return must be paired with
// leave.
func (g *guard) enter(object, method string) error {
	if g.state.CompareAndSwap(guardIdle, guardBusy) {
		return nil
	}
	if g.state.Load() == guardClosed {
		return closedError(object, method)
	}
	return busyError(object, method)
}

// leave ends the call enter began.
func (g *guard) leave() { g.state.Store(guardIdle) }

// close marks the guard closed: first says this call did (a second Close
// has nothing to do); a call inside is ErrBusy, and the object stays open.
func (g *guard) close(object string) (first bool, err error) {
	if g.state.CompareAndSwap(guardIdle, guardClosed) {
		return true, nil
	}
	if g.state.Load() == guardClosed {
		return false, nil
	}
	return false, busyError(object, "Close")
}

// closed reports whether Close ran, for the methods without an error to
// return.
func (g *guard) closed() bool { return g.state.Load() == guardClosed }

func closedError(object, method string) error {
	return fmt.Errorf("rnn: %s.%s: %w", object, method, ErrClosed)
}

func busyError(object, method string) error {
	hint := "give each goroutine its own"
	switch object {
	case "LSTM", "GRU", "Embedding", "Linear":
		hint = "give each goroutine its own, or a share of this one (" + object + ".Share)"
	}
	return fmt.Errorf("rnn: %s.%s: %w (one goroutine at a time; %s)", object, method, ErrBusy, hint)
}

func sharedError(object, method string) error {
	return fmt.Errorf("rnn: %s.%s on a share: %w", object, method, ErrShared)
}
