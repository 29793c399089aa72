package cpu_test

import (
	"fmt"
	"log"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
)

// Example runs a GEMM and a bias on the CPU device, C = A·B + bias for
// 2×2 matrices, and then empties the device's cache through the optional
// device.Allocator interface. Kernels run asynchronously on the compute
// stream; DownloadSlice waits for them.
func Example() {
	d, err := cpu.Open(cpu.Config{Threads: 1})
	if err != nil {
		log.Fatal(err)
	}
	newBuf := func(v []float32) device.Buffer {
		b, err := d.Alloc(int64(len(v))*device.Float32.Size(), device.Workspace)
		if err != nil {
			log.Fatal(err)
		}
		if err := device.UploadSlice(d, b, v); err != nil {
			log.Fatal(err)
		}
		return b
	}
	a := newBuf([]float32{1, 2, 3, 4})
	b := newBuf([]float32{5, 6, 7, 8})
	bias := newBuf([]float32{0.5, -0.5})
	c := newBuf(make([]float32, 4))

	k := d.Kernels()
	if err := k.Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 2, Alpha: 1, A: a, B: b, C: c}); err != nil {
		log.Fatal(err)
	}
	if err := k.AddBias(device.AddBias{DType: device.Float32, Rows: 2, Cols: 2, Bias: bias, Y: c}); err != nil {
		log.Fatal(err)
	}
	out := make([]float32, 4)
	if err := device.DownloadSlice(d, out, c); err != nil {
		log.Fatal(err)
	}
	fmt.Println("A·B + bias =", out)

	for _, buf := range []device.Buffer{a, b, bias, c} {
		if err := d.Free(buf); err != nil {
			log.Fatal(err)
		}
	}
	// Freed buffers stay cached for reuse; EmptyCache gives them back.
	var dev device.Device = d
	if m, ok := dev.(device.Allocator); ok {
		if err := m.Memory().EmptyCache(); err != nil {
			log.Fatal(err)
		}
		fmt.Println("reserved bytes after EmptyCache:", dev.MemStats().ReservedBytes[alloc.AllPools].Current)
	}
	if err := d.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// A·B + bias = [19.5 21.5 43.5 49.5]
	// reserved bytes after EmptyCache: 0
}
