package cuda

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// openBenchGPU opens the first GPU for a benchmark or skips it.
func openBenchGPU(b *testing.B) *Device {
	b.Helper()
	d, err := Open(Config{BLASLibrary: os.Getenv("GOCURRENT_CUBLAS")})
	if errors.Is(err, device.ErrUnavailable) {
		b.Skipf("no usable GPU: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

// BenchmarkAlloc compares an allocation served by the caching allocator
// with a raw cuMemAlloc + cuMemFree of the same size (issue 7's latency
// figure): go test -run '^$' -bench Alloc ./cuda.
func BenchmarkAlloc(b *testing.B) {
	for _, size := range []int64{4 << 10, 1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("cached/%dKiB", size>>10), func(b *testing.B) {
			d := openBenchGPU(b)
			b.ReportAllocs()
			for b.Loop() {
				buf, err := d.Alloc(size)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Free(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("cuMemAlloc/%dKiB", size>>10), func(b *testing.B) {
			d := openBenchGPU(b)
			for b.Loop() {
				p, err := d.api.MemAlloc(d.ctx, size)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.api.MemFree(d.ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCopyOverlap measures whether host-to-device copies on a copy
// stream overlap kernels on the compute stream: it times, with CUDA
// events, a run of GEMMs alone, a run of 64 MiB copies from pinned memory
// alone, and both queued together, and reports
// overlap = (compute + copy − both) / min(compute, copy): 1 when the
// shorter one hides entirely under the longer, 0 when they serialise.
func BenchmarkCopyOverlap(b *testing.B) {
	d := openBenchGPU(b)
	const n, copies, copyBytes = 2048, 8, 64 << 20
	mats := make([]device.Buffer, 3)
	for i := range mats {
		var err error
		if mats[i], err = d.Alloc(n * n * 4); err != nil {
			b.Fatal(err)
		}
	}
	dst, err := d.Alloc(copyBytes)
	if err != nil {
		b.Fatal(err)
	}
	src, err := d.Staging(copyBytes)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := d.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	copyStream := cs.(*stream)
	k := d.Kernels()
	gemms := func() {
		for range 20 {
			if err := k.Gemm(device.Gemm{DType: device.Float32, M: n, N: n, K: n, Alpha: 1, A: mats[0], B: mats[1], C: mats[2]}); err != nil {
				b.Fatal(err)
			}
		}
	}
	copyAll := func() {
		for range copies {
			if _, err := d.CopyToDevice(dst, src, copyStream); err != nil {
				b.Fatal(err)
			}
		}
	}
	timed := func(queue func()) float64 {
		start, err := d.api.EventCreate(d.ctx, true)
		if err != nil {
			b.Fatal(err)
		}
		end, err := d.api.EventCreate(d.ctx, true)
		if err != nil {
			b.Fatal(err)
		}
		defer d.api.EventDestroy(d.ctx, start)
		defer d.api.EventDestroy(d.ctx, end)
		if err := d.Synchronize(); err != nil {
			b.Fatal(err)
		}
		if err := d.api.EventRecord(d.ctx, start, d.compute.s); err != nil {
			b.Fatal(err)
		}
		startEv, err := d.compute.Record()
		if err != nil {
			b.Fatal(err)
		}
		if err := copyStream.Wait(startEv); err != nil {
			b.Fatal(err)
		}
		queue()
		copied, err := copyStream.Record()
		if err != nil {
			b.Fatal(err)
		}
		if err := d.compute.Wait(copied); err != nil {
			b.Fatal(err)
		}
		if err := d.api.EventRecord(d.ctx, end, d.compute.s); err != nil {
			b.Fatal(err)
		}
		if err := d.api.EventSynchronize(d.ctx, end); err != nil {
			b.Fatal(err)
		}
		ms, err := d.api.EventElapsed(d.ctx, start, end)
		if err != nil {
			b.Fatal(err)
		}
		return float64(ms)
	}
	var compute, cp, both float64
	for b.Loop() {
		compute = timed(gemms)
		cp = timed(copyAll)
		both = timed(func() { copyAll(); gemms() })
	}
	b.ReportMetric(compute, "compute-ms")
	b.ReportMetric(cp, "copy-ms")
	b.ReportMetric(both, "both-ms")
	b.ReportMetric((compute+cp-both)/min(compute, cp), "overlap")
	b.ReportMetric(float64(copies*copyBytes)/(cp/1e3)/1e9, "copy-GB/s")
}
