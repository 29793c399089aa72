package alloc_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/trace"
)

// BenchmarkCachedAllocFree times one Alloc and one Free of a block the
// cache already holds, on the host source: the steady state of a training
// step. The target is under 200 ns per pair (issue 2).
func BenchmarkCachedAllocFree(b *testing.B) {
	for _, size := range []int64{512, 64 * kib, mib, 8 * mib, 64 * mib} {
		b.Run(alloc.FormatSize(size), func(b *testing.B) {
			c, err := alloc.NewCaching(alloc.NewHost(0), alloc.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			p, err := c.Alloc(size, 0)
			if err != nil {
				b.Fatal(err)
			}
			c.Free(p)
			b.ReportAllocs()
			for b.Loop() {
				p, err := c.Alloc(size, 0)
				if err != nil {
					b.Fatal(err)
				}
				c.Free(p)
			}
			if st := c.Stats(); st.DeviceAllocs != 1 {
				b.Fatalf("%d segments allocated, want the one cached", st.DeviceAllocs)
			}
		})
	}
}

// BenchmarkUncachedAllocFree is the same pair straight from the host
// source (mmap and munmap), for the ratio against the cached path.
func BenchmarkUncachedAllocFree(b *testing.B) {
	for _, size := range []int64{alloc.SmallBuffer, alloc.LargeBuffer} {
		b.Run(alloc.FormatSize(size), func(b *testing.B) {
			h := alloc.NewHost(0)
			b.ReportAllocs()
			for b.Loop() {
				p, err := h.Allocate(size)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Release(p, size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCachedAllocFreeParallel runs the cached pair from every
// goroutine at once, each on its own stream: the cost of the one mutex
// under contention.
func BenchmarkCachedAllocFreeParallel(b *testing.B) {
	c, err := alloc.NewCaching(alloc.NewHost(0), alloc.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := alloc.Stream(next.Add(1))
		for pb.Next() {
			p, err := c.Alloc(64*kib, s)
			if err != nil {
				panic(err)
			}
			c.Free(p)
		}
	})
}

// BenchmarkReplay replays the recorded char-RNN trace on the simulated
// device and reports its memory figures next to the speed.
func BenchmarkReplay(b *testing.B) {
	ops := loadTrace(b, charRNNTrace)
	for _, pol := range []struct {
		name string
		cfg  alloc.Config
	}{{"default", alloc.Config{}}, {"max_split_size_mb:64", alloc.Config{MaxSplitSize: 64 * mib}}} {
		b.Run(pol.name, func(b *testing.B) {
			var res trace.ReplayResult
			b.ReportAllocs()
			for b.Loop() {
				_, c := newSim(b, 4*gib, pol.cfg)
				var err error
				if res, err = trace.Replay(c, ops); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(ops))*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(float64(res.PeakReservedBytes)/float64(mib), "peak-reserved-MiB")
			b.ReportMetric(float64(res.PeakAllocatedBytes)/float64(mib), "peak-allocated-MiB")
			b.ReportMetric(res.Fragmentation, "frag-at-peak")
		})
	}
}

func ExampleCaching() {
	c, err := alloc.NewCaching(alloc.NewHost(0), alloc.Config{})
	if err != nil {
		panic(err)
	}
	p, _ := c.Alloc(1000, 0) // rounded to 1,024 bytes in a 2 MiB small-pool segment
	st := c.Stats()
	fmt.Println(st.AllocatedBytes[alloc.AllPools].Current, st.ReservedBytes[alloc.AllPools].Current, st.RequestedBytes[alloc.AllPools].Current)
	c.Free(p)
	q, _ := c.Alloc(1000, 0) // served from the cache: the same block
	fmt.Println(p == q, c.Stats().DeviceAllocs)
	// Output:
	// 1024 2097152 1000
	// true 1
}
