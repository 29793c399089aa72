package models

import (
	"fmt"

	"github.com/gocurrent/gocurrent/internal/inuse"
	"github.com/gocurrent/gocurrent/rnn"
)

// guard is rnn's for a whole model (internal/inuse's state word): a
// model's call is several layers' calls and reads of the model's own
// buffers, and a second goroutine coming in between two of them would
// change what the first reads, though each layer's own guard let it in.
// It refuses, never waits.
type guard struct{ w inuse.Word }

// enter begins method's call on model ("Classifier", "Forward"): nil, to
// be paired with leave, or the error of a closed or busy model.
func (g *guard) enter(model, method string) error {
	switch g.w.Enter() {
	case inuse.Closed:
		return fmt.Errorf("models: %s.%s: %w", model, method, rnn.ErrClosed)
	case inuse.Busy:
		return fmt.Errorf("models: %s.%s: %w (one goroutine at a time; give each goroutine a share of the model, %s.Share, "+
			"or call Predict, which reads its result inside the call)", model, method, rnn.ErrBusy, model)
	}
	return nil
}

func (g *guard) leave() { g.w.Leave() }

// close marks the guard closed: first says this call did; a call inside
// is ErrBusy, and the model stays open.
func (g *guard) close(model string) (first bool, err error) {
	first, r := g.w.Close()
	if r == inuse.Busy {
		return false, fmt.Errorf("models: %s.Close: %w (a call of another goroutine is inside; the model stays open)", model, rnn.ErrBusy)
	}
	return first, nil
}

// sharedError is a share's refusal of what trains.
func sharedError(model, method string) error {
	return fmt.Errorf("models: %s.%s on a share: %w", model, method, rnn.ErrShared)
}
