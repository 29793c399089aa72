package cpu

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// TestCallHost checks a host function runs in stream order on the
// buffers' memory: after the Fill before it, before the Copy after it,
// and that its error is raised by the stream.
func TestCallHost(t *testing.T) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, _ := d.Alloc(16, device.Workspace)
	b, _ := d.Alloc(16, device.Workspace)
	k := d.Kernels()
	if err := k.Fill(device.Fill{DType: device.Float32, N: 4, X: a, Value: 2}); err != nil {
		t.Fatal(err)
	}
	err = d.CallHost(d.Stream(), func(mem [][]byte) error {
		for i := range 4 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(mem[0][4*i:]))
			binary.LittleEndian.PutUint32(mem[0][4*i:], math.Float32bits(v*float32(i+1)))
		}
		return nil
	}, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Copy(device.Copy{Dst: b, Src: a}); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	if err := device.DownloadSlice(d, got, b); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if want := float32(2 * (i + 1)); v != want {
			t.Errorf("element %d: got %v, want %v", i, v, want)
		}
	}
	boom := errors.New("boom")
	if err := d.CallHost(d.Stream(), func([][]byte) error { return boom }); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("Synchronize after a failing host function: got %v, want %v", err, boom)
	}
	other, _ := Open(Config{})
	defer other.Close()
	ob, _ := other.Alloc(16, device.Workspace)
	if err := d.CallHost(d.Stream(), func([][]byte) error { return nil }, ob); !errors.Is(err, device.ErrForeignBuffer) {
		t.Errorf("CallHost with another device's buffer: got %v, want ErrForeignBuffer", err)
	}
}
