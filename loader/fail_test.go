package loader_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
)

// errInjected is the failure failDevice injects.
var errInjected = errors.New("injected failure")

// failDevice wraps the test device to fail on demand, after doing the real
// work: FreeStaging, and the Wait of the events of copies to the device.
// Its streams unwrap the events they are given.
type failDevice struct {
	device.Device
	failFree, failWait atomic.Bool
}

type failStream struct{ device.Stream }

type failEvent struct {
	device.Event
	d *failDevice
}

func (d *failDevice) FreeStaging(h device.HostBuffer) error {
	err := d.Device.FreeStaging(h)
	if d.failFree.Load() {
		return errors.Join(err, errInjected)
	}
	return err
}

func (d *failDevice) Stream() device.Stream { return failStream{d.Device.Stream()} }

func (d *failDevice) NewStream() (device.Stream, error) {
	s, err := d.Device.NewStream()
	if err != nil {
		return nil, err
	}
	return failStream{s}, nil
}

func (d *failDevice) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	e, err := d.Device.CopyToDevice(dst, src, s.(failStream).Stream)
	if err != nil {
		return nil, err
	}
	return failEvent{Event: e, d: d}, nil
}

func (s failStream) Wait(e device.Event) error {
	if fe, ok := e.(failEvent); ok {
		e = fe.Event
	}
	return s.Stream.Wait(e)
}

// Done fails as Wait does: a failed copy is reported by either (the
// loader asks Done first, and waits only for a copy not done).
func (e failEvent) Done() (bool, error) {
	done, err := e.Event.Done()
	if e.d.failWait.Load() {
		return true, errors.Join(err, errInjected)
	}
	return done, err
}

func (e failEvent) Wait() error {
	err := e.Event.Wait()
	if e.d.failWait.Load() {
		return errors.Join(err, errInjected)
	}
	return err
}

// TestEndErrors: what ending an iteration fails at reaches the consumer
// when it still listens: a copy that failed after the last batch was
// delivered, and freeing the ring after a Close from the loop body (Close
// itself could not report it, the ring being in use).
func TestEndErrors(t *testing.T) {
	text := tokenize(t, randomText(5, 2000))
	cfg := loader.Config{Batch: 2, Seq: 8, Epochs: 1, Prefetch: 1, Workers: 1}

	t.Run("copy", func(t *testing.T) {
		d := &failDevice{Device: openDevice(t)}
		l, err := loader.New(d, text, cfg)
		must(t, err)
		var last error
		for b, err := range l.Batches(context.Background(), loader.Position{}) {
			if last = err; err != nil {
				break
			}
			if b.Index == l.PerEpoch()-1 {
				// Every copy was made and waited for by the producers; only
				// the end of the iteration waits for them now.
				d.failWait.Store(true)
			}
		}
		if !errors.Is(last, errInjected) {
			t.Errorf("last error %v, want the failed copy's", last)
		}
		if err := l.Close(); !errors.Is(err, errInjected) {
			t.Errorf("Close: %v, want the failed copy's error", err)
		}
	})

	t.Run("free after Close", func(t *testing.T) {
		d := &failDevice{Device: openDevice(t)}
		l, err := loader.New(d, text, cfg)
		must(t, err)
		var last error
		n := 0
		for _, err := range l.Batches(context.Background(), loader.Position{}) {
			if last = err; err != nil {
				break
			}
			if n++; n == 2 {
				d.failFree.Store(true)
				must(t, l.Close()) // the ring is in use: freed when the iteration ends
			}
		}
		if !errors.Is(last, loader.ErrClosed) || !errors.Is(last, errInjected) {
			t.Errorf("last error %v, want ErrClosed and the failed free", last)
		}
	})
}
