package loader_test

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
)

// TestOneErrClosed checks that the three packages a training process
// stacks (loader over device over alloc) share one sentinel for a use after
// Close, so one errors.Is matches whichever layer noticed it.
func TestOneErrClosed(t *testing.T) {
	wrapped := []struct {
		name string
		err  error
	}{{"alloc", alloc.ErrClosed}, {"device", device.ErrClosed}, {"loader", loader.ErrClosed}}
	for _, a := range wrapped {
		for _, b := range wrapped {
			if !errors.Is(a.err, b.err) {
				t.Errorf("errors.Is(%s.ErrClosed, %s.ErrClosed) = false, want true", a.name, b.name)
			}
		}
	}
}
