package nn

import (
	"fmt"

	"github.com/gocurrent/gocurrent/internal/inuse"
	"github.com/gocurrent/gocurrent/rnn"
)

// guard keeps a module's buffers from two calls at once and from use after
// Close (internal/inuse's state word), in nn's words: it refuses, never
// waits. The zero guard is idle.
type guard struct{ w inuse.Word }

// enter begins method's call on object ("Sequential", "Forward"): nil, to
// be paired with leave, or the error of a closed or busy object.
func (g *guard) enter(object, method string) error {
	switch g.w.Enter() {
	case inuse.Closed:
		return fmt.Errorf("nn: %s.%s: %w", object, method, rnn.ErrClosed)
	case inuse.Busy:
		return fmt.Errorf("nn: %s.%s: %w (one goroutine at a time; give each goroutine a model of its own)", object, method, rnn.ErrBusy)
	}
	return nil
}

func (g *guard) leave() { g.w.Leave() }

// close marks the guard closed: first says this call did; a call inside
// is ErrBusy, and the object stays open.
func (g *guard) close(object string) (first bool, err error) {
	first, r := g.w.Close()
	if r == inuse.Busy {
		return false, fmt.Errorf("nn: %s.Close: %w (a call of another goroutine is inside; it stays open)", object, rnn.ErrBusy)
	}
	return first, nil
}
