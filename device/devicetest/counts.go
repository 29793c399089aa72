package devicetest

import (
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// testCounts checks the operation counts of a device.Counter: each call
// adds what it queued or waited for, the same on every device.
func testCounts(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	c, ok := e.dev.(device.Counter)
	if !ok {
		t.Skipf("%s counts nothing (device.Counter)", e.dev.Name())
	}
	x, y := e.filled(64, 1), e.filled(64, 2)
	ids := e.ids(make([]int32, 2))
	e.sync()
	h, err := e.dev.Staging(64 * 4)
	if err != nil {
		t.Fatalf("Staging: %v", err)
	}
	defer e.dev.FreeStaging(h)
	s, err := e.dev.NewStream()
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	defer s.Close()
	for _, step := range []struct {
		name string
		do   func() error
		want device.Counts
	}{
		{"Gemm", func() error {
			return e.dev.Kernels().Gemm(device.Gemm{DType: device.Float32, M: 8, N: 8, K: 8, Alpha: 1, A: x.buf, B: x.buf, C: y.buf})
		}, device.Counts{GEMMs: 1, Calls: 1}},
		{"Fill", func() error {
			return e.dev.Kernels().Fill(device.Fill{DType: device.Float32, N: 64, X: y.buf, Value: 3})
		}, device.Counts{Launches: 1, Calls: 1}},
		{"Axpby", func() error {
			return e.dev.Kernels().Axpby(device.Axpby{DType: device.Float32, N: 64, Alpha: 1, Beta: 1, X: x.buf, Y: y.buf})
		}, device.Counts{Launches: 1, Calls: 1}},
		{"Sample", func() error {
			return e.dev.Kernels().Sample(device.Sample{DType: device.Float32, N: 2, Classes: 32, Temperature: 1, Logits: x.buf, IDs: ids.buf, Tokens: ids.buf})
		}, device.Counts{Launches: 1, Calls: 1}},
		{"Advance", func() error {
			return e.dev.Kernels().Advance(device.Advance{At: ids.buf.Slice(0, 8), Add: 1})
		}, device.Counts{Launches: 1, Calls: 1}},
		{"Copy", func() error { return e.dev.Kernels().Copy(device.Copy{Src: x.buf, Dst: y.buf}) }, device.Counts{Copies: 1, Calls: 1}},
		{"empty Fill", func() error {
			return e.dev.Kernels().Fill(device.Fill{DType: device.Float32, N: 0, X: y.buf, Value: 3})
		}, device.Counts{}},
		{"Upload", func() error { return e.dev.Upload(y.buf, make([]byte, 16)) }, device.Counts{Copies: 1, Syncs: 1, Calls: 1}},
		{"Download", func() error { return e.dev.Download(make([]byte, 16), y.buf) }, device.Counts{Copies: 1, Syncs: 1, Calls: 1}},
		{"Synchronize", e.dev.Synchronize, device.Counts{Syncs: 2}}, // the compute stream and s
		{"Stream.Synchronize", e.dev.Stream().Synchronize, device.Counts{Syncs: 1}},
		{"CopyToDevice and its event's Wait", func() error {
			ev, err := e.dev.CopyToDevice(x.buf, h, s)
			if err == nil {
				err = ev.Wait()
			}
			return err
		}, device.Counts{Copies: 1, Syncs: 1, Calls: 1}},
		{"CopyToHost", func() error {
			ev, err := e.dev.CopyToHost(h, y.buf, s)
			if err == nil {
				err = ev.Wait()
			}
			return err
		}, device.Counts{Copies: 1, Syncs: 1, Calls: 1}},
	} {
		before := c.Counts()
		if err := call(t, step.name, step.do); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := c.Counts().Sub(before); got != step.want {
			t.Errorf("%s counted %+v, want %+v", step.name, got, step.want)
		}
	}
}
