package loader_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
)

// orderDevice wraps a device to check the loader's stream order: that no
// copy into a device batch is queued on the copy stream before that
// stream waited for an event of the compute stream recorded after the
// batch's memory was allocated. The memory comes from the compute
// stream's cache, where kernels still queued may have freed it; without
// that wait a copy could overwrite it under them.
type orderDevice struct {
	device.Device
	t *testing.T

	mu      sync.Mutex
	records int                  // compute-stream events recorded so far
	allocAt map[alloc.Ptr]int    // buffer address → records when it was allocated
	waited  map[*orderStream]int // copy stream → the latest compute event it waited on (1-based)
	copies  int
}

type orderStream struct {
	device.Stream
	d       *orderDevice
	compute bool
}

type orderEvent struct {
	device.Event
	seq int // 1-based number of the compute-stream record; 0 for other streams
}

func (d *orderDevice) Stream() device.Stream {
	return &orderStream{Stream: d.Device.Stream(), d: d, compute: true}
}

func (d *orderDevice) NewStream() (device.Stream, error) {
	s, err := d.Device.NewStream()
	if err != nil {
		return nil, err
	}
	return &orderStream{Stream: s, d: d}, nil
}

func (d *orderDevice) Alloc(n int64, cat device.Category) (device.Buffer, error) {
	b, err := d.Device.Alloc(n, cat)
	if err == nil {
		d.mu.Lock()
		d.allocAt[b.Addr()] = d.records
		d.mu.Unlock()
	}
	return b, err
}

func (d *orderDevice) CopyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) (device.Event, error) {
	os := s.(*orderStream)
	d.mu.Lock()
	at, known := d.allocAt[dst.Addr()]
	if known && d.waited[os] <= at {
		d.t.Errorf("copy into the batch at %v queued before the copy stream waited for the compute stream "+
			"(allocated after %d compute events, waited for event %d)", dst.Addr(), at, d.waited[os])
	}
	d.copies++
	d.mu.Unlock()
	e, err := d.Device.CopyToDevice(dst, src, os.Stream)
	if err != nil {
		return nil, err
	}
	return orderEvent{Event: e}, nil
}

func (s *orderStream) Record() (device.Event, error) {
	e, err := s.Stream.Record()
	if err != nil {
		return nil, err
	}
	if !s.compute {
		return orderEvent{Event: e}, nil
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.records++
	return orderEvent{Event: e, seq: s.d.records}, nil
}

func (s *orderStream) Wait(e device.Event) error {
	oe := e.(orderEvent)
	s.d.mu.Lock()
	s.d.waited[s] = max(s.d.waited[s], oe.seq)
	s.d.mu.Unlock()
	return s.Stream.Wait(oe.Event)
}

// TestFirstCopyWaitsForCompute checks every copy of a run, the first into
// each slot included, against the compute stream's order.
func TestFirstCopyWaitsForCompute(t *testing.T) {
	inner := openDevice(t)
	d := &orderDevice{Device: inner, t: t, allocAt: map[alloc.Ptr]int{}, waited: map[*orderStream]int{}}
	text := tokenize(t, randomText(3, 4000))
	for _, prefetch := range []int{1, 3} {
		t.Run(fmt.Sprint("prefetch ", prefetch), func(t *testing.T) {
			l := newLoader(t, d, text, loader.Config{Batch: 4, Seq: 8, Epochs: 1, Prefetch: prefetch})
			n := 0
			for _, err := range l.Batches(context.Background(), loader.Position{}) {
				must(t, err)
				n++
			}
			if n == 0 || d.copies < n {
				t.Fatalf("%d batches and %d copies: the run checked nothing", n, d.copies)
			}
		})
	}
}
