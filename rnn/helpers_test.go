// The tests and benchmarks of rnn run on the device internal/testdevice
// opens (testdevice.Open: the CPU by default, the CUDA device with
// GOCURRENT_TEST_DEVICE=cuda), so one test binary checks the layers on
// either. They read device memory only through Download and the host
// accessors (Params.Value, Params.Grad), never a buffer's bytes; they fill
// every buffer whose contents they read (a GPU does not zero fresh memory);
// they compare memory figures as differences on one device. What is exact
// on one device (NoGrad against Train, a rerun, Detach) is held exact, since
// every device gives the same bits for the same calls; what compares
// different arithmetic (PyTorch, gorgonia, a host reference) says where its
// tolerance comes from. Only the Examples, whose output is documentation,
// stay on the CPU.

package rnn_test

import (
	"context"
	"testing"

	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
)

// recurrent is what LSTM and GRU have in common, for tests over both.
type recurrent interface {
	Forward(mode rnn.Mode, x device.Buffer, seq, batch int, s *rnn.State) (device.Buffer, error)
	ForwardLengths(mode rnn.Mode, x device.Buffer, seq, batch int, lengths []int32, s *rnn.State) (device.Buffer, error)
	Backward(dy device.Buffer) (device.Buffer, error)
	NewState(batch int) (*rnn.State, error)
	Params() *rnn.Params
	Config() rnn.Config
	Close() error
}

func newRecurrent(t testing.TB, d device.Device, cell string, c rnn.Config) recurrent {
	t.Helper()
	var (
		r   recurrent
		err error
	)
	if cell == "lstm" {
		r, err = rnn.NewLSTM(context.Background(), d, c)
	} else {
		r, err = rnn.NewGRU(context.Background(), d, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// upload puts float64 values on the device in a new buffer.
func upload(t testing.TB, d device.Device, v []float64) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(v))*8, device.Workspace)
	ok(t, err)
	ok(t, device.UploadSlice(d, b, v))
	return b
}

func uploadInt32(t testing.TB, d device.Device, v []int32) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(v))*4, device.Workspace)
	ok(t, err)
	ok(t, device.UploadSlice(d, b, v))
	return b
}

// put overwrites the start of b with v.
func put(t testing.TB, d device.Device, b device.Buffer, v []float64) {
	t.Helper()
	ok(t, device.UploadSlice(d, b.Slice(0, int64(len(v))*8), v))
}

// hostData is the float64 data of a host tensor.
func hostData(t testing.TB, x *tensor.Dense, err error) []float64 {
	t.Helper()
	ok(t, err)
	v, isF64 := x.Data().([]float64)
	if !isF64 {
		t.Fatalf("tensor of %v, want float64", x.Dtype())
	}
	return v
}
