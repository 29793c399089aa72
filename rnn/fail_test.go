package rnn_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// errInjected is the failure failDevice injects.
var errInjected = errors.New("injected failure")

// failDevice wraps the test device to fail on demand: Upload, and the Fill
// kernel, each without doing the work.
type failDevice struct {
	device.Device
	failUpload, failFill atomic.Bool
}

type failKernels struct {
	device.Kernels
	d *failDevice
}

func (d *failDevice) Upload(dst device.Buffer, src []byte) error {
	if d.failUpload.Load() {
		return errInjected
	}
	return d.Device.Upload(dst, src)
}

func (d *failDevice) Kernels() device.Kernels { return failKernels{d.Device.Kernels(), d} }

func (k failKernels) Fill(a device.Fill) error {
	if k.d.failFill.Load() {
		return errInjected
	}
	return k.Kernels.Fill(a)
}

// closer is any layer, for tests over every constructor.
type closer interface{ Close() error }

// TestInitFailures: a constructor whose parameter upload or gradient
// zeroing fails returns the failure (never a layer with undefined
// parameters) and leaves nothing allocated.
func TestInitFailures(t *testing.T) {
	d := &failDevice{Device: testdevice.Open(t)}
	makers := []struct {
		name string
		make func() (closer, error)
	}{
		{"LSTM", func() (closer, error) {
			return rnn.NewLSTM(context.Background(), d, rnn.Config{Input: 3, Hidden: 4, Layers: 2})
		}},
		{"GRU", func() (closer, error) { return rnn.NewGRU(context.Background(), d, rnn.Config{Input: 3, Hidden: 4}) }},
		{"Embedding", func() (closer, error) {
			return rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: 5, Dim: 3})
		}},
		{"Linear", func() (closer, error) { return rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: 3, Out: 5}) }},
		{"CrossEntropy", func() (closer, error) { return rnn.NewCrossEntropy(d, 5, 0) }},
	}
	for _, fail := range []struct {
		name string
		flag *atomic.Bool
	}{{"upload", &d.failUpload}, {"fill", &d.failFill}} {
		for _, m := range makers {
			t.Run(fail.name+"/"+m.name, func(t *testing.T) {
				before := d.MemStats().AllocatedBytes[alloc.AllPools].Current
				fail.flag.Store(true)
				layer, err := m.make()
				fail.flag.Store(false)
				if m.name == "CrossEntropy" && fail.name == "upload" {
					// It uploads nothing: zeroing its total is a Fill.
					ok(t, err)
					ok(t, layer.Close())
					return
				}
				if !errors.Is(err, errInjected) {
					if err == nil {
						layer.Close()
					}
					t.Fatalf("New%s with a failing %s: error %v, want the injected failure", m.name, fail.name, err)
				}
				if after := d.MemStats().AllocatedBytes[alloc.AllPools].Current; after != before {
					t.Errorf("New%s failed and left %d bytes allocated", m.name, after-before)
				}
			})
		}
	}
	t.Run("fill/State", func(t *testing.T) {
		lstm := newRecurrent(t, d, "lstm", rnn.Config{Input: 3, Hidden: 4})
		before := d.MemStats().AllocatedBytes[alloc.AllPools].Current
		d.failFill.Store(true)
		_, err := lstm.NewState(2)
		d.failFill.Store(false)
		if !errors.Is(err, errInjected) {
			t.Fatalf("NewState with a failing Fill: error %v, want the injected failure", err)
		}
		if after := d.MemStats().AllocatedBytes[alloc.AllPools].Current; after != before {
			t.Errorf("NewState failed and left %d bytes allocated", after-before)
		}
	})
}
