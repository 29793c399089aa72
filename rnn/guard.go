package rnn

import (
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/inuse"
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

// guard is what keeps a layer's buffers from two calls at once and from use
// after Close (internal/inuse's state word), in rnn's words. The zero
// guard is idle.
type guard struct{ w inuse.Word }

// enter begins method's call on object ("LSTM", "Forward"): nil, or the
// error of a closed or busy object. A nil return must be paired with
// leave.
func (g *guard) enter(object, method string) error {
	switch g.w.Enter() {
	case inuse.Closed:
		return closedError(object, method)
	case inuse.Busy:
		return busyError(object, method)
	}
	return nil
}

// leave ends the call enter began.
func (g *guard) leave() { g.w.Leave() }

// close marks the guard closed: first says this call did (a second Close
// has nothing to do); a call inside is ErrBusy, and the object stays open.
func (g *guard) close(object string) (first bool, err error) {
	first, r := g.w.Close()
	if r == inuse.Busy {
		return false, busyError(object, "Close")
	}
	return first, nil
}

// closed reports whether Close ran, for the methods without an error to
// return.
func (g *guard) closed() bool { return g.w.Closed() }

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
