package devicetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// copySizes are the byte counts copies are checked with: odd, one page,
// past a megabyte.
var copySizes = []int64{1, 7, 4096, 1<<20 + 3}

func (e *env) randomBytes(n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(e.rng.Uint32())
	}
	return b
}

func (e *env) uploadBytes(dst device.Buffer, src []byte) {
	e.t.Helper()
	if err := call(e.t, "Upload", func() error { return e.dev.Upload(dst, src) }); err != nil {
		e.t.Fatalf("Upload of %d bytes into a %d-byte buffer: %v", len(src), dst.Len(), err)
	}
}

// downloadBytes reads all of src.
func (e *env) downloadBytes(src device.Buffer) []byte {
	e.t.Helper()
	b := make([]byte, src.Len())
	if err := call(e.t, "Download", func() error { return e.dev.Download(b, src) }); err != nil {
		e.t.Fatalf("Download of %d bytes: %v", len(b), err)
	}
	return b
}

func testCopies(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	for _, n := range copySizes {
		e.run(fmt.Sprintf("%dBytes", n), func(e *env) {
			b := e.allocWhole(n)
			src := e.randomBytes(n)
			e.uploadBytes(b, src)
			if got := e.downloadBytes(b.Slice(0, n)); !bytes.Equal(got, src) {
				e.t.Errorf("Download after Upload: %s", firstByteDiff(got, src))
			}
			// A partial upload leaves the rest alone.
			e.uploadBytes(b, make([]byte, n/2))
			want := append(make([]byte, n/2), src[n/2:]...)
			if got := e.downloadBytes(b.Slice(0, n)); !bytes.Equal(got, want) {
				e.t.Errorf("Download after a partial Upload: %s", firstByteDiff(got, want))
			}
		})
	}
	e.run("Slices", func(e *env) {
		// Views at odd offsets write and read their own bytes only.
		const n = 1000
		b := e.allocWhole(n).Slice(0, n)
		all := e.randomBytes(n)
		e.uploadBytes(b, all)
		for _, r := range [][2]int64{{0, 1}, {3, 7}, {1, 512}, {999, 1}, {500, 500}, {17, 0}} {
			part := e.randomBytes(r[1])
			e.uploadBytes(b.Slice(r[0], r[1]), part)
			copy(all[r[0]:], part)
			if got := e.downloadBytes(b.Slice(r[0], r[1])); !bytes.Equal(got, part) {
				e.t.Errorf("Download of Slice(%d, %d): %s", r[0], r[1], firstByteDiff(got, part))
			}
		}
		if got := e.downloadBytes(b); !bytes.Equal(got, all) {
			e.t.Errorf("Download of the whole buffer after uploads into slices: %s", firstByteDiff(got, all))
		}
		v := b.Slice(100, 800).Slice(50, 40).Elems(device.Float32, 2, 3)
		if v.Len() != 12 || v.Addr() != b.Addr()+alloc.Ptr(100+50+8) || v.Device() != e.dev {
			e.t.Errorf("Slice(100, 800).Slice(50, 40).Elems(Float32, 2, 3) = %d bytes at %v of %v, want 12 bytes at %v of this device",
				v.Len(), v.Addr(), v.Device(), b.Addr()+158)
		}
		if got := e.downloadBytes(v); !bytes.Equal(got, all[158:170]) {
			e.t.Errorf("Download of a view of a view: %s", firstByteDiff(got, all[158:170]))
		}
	})
	e.run("UploadSlice", func(e *env) {
		b := e.allocWhole(8 * 100)
		f32 := []float32{1.5, -2, 3.25, float32(1) / 3}
		f64 := []float64{1.5, -2, 3.25, 1.0 / 3}
		i32 := []int32{7, -1, 1 << 30, 0}
		if err := device.UploadSlice(e.dev, b, f32); err != nil {
			e.t.Fatalf("UploadSlice of float32: %v", err)
		}
		got32 := make([]float32, 4)
		if err := device.DownloadSlice(e.dev, got32, b); err != nil || fmt.Sprint(got32) != fmt.Sprint(f32) {
			e.t.Errorf("DownloadSlice of float32 = %v, %v; want %v", got32, err, f32)
		}
		if err := device.UploadSlice(e.dev, b, f64); err != nil {
			e.t.Fatalf("UploadSlice of float64: %v", err)
		}
		got64 := make([]float64, 4)
		if err := device.DownloadSlice(e.dev, got64, b); err != nil || fmt.Sprint(got64) != fmt.Sprint(f64) {
			e.t.Errorf("DownloadSlice of float64 = %v, %v; want %v", got64, err, f64)
		}
		if err := device.UploadSlice(e.dev, b.Slice(8, 16), i32); err != nil {
			e.t.Fatalf("UploadSlice of int32: %v", err)
		}
		gotI := make([]int32, 4)
		if err := device.DownloadSlice(e.dev, gotI, b.Slice(8, 16)); err != nil || fmt.Sprint(gotI) != fmt.Sprint(i32) {
			e.t.Errorf("DownloadSlice of int32 = %v, %v; want %v", gotI, err, i32)
		}
		if err := call(e.t, "DownloadSlice", func() error {
			return device.DownloadSlice(e.dev, make([]float64, 3), b.Slice(0, 16))
		}); !errors.Is(err, device.ErrShape) {
			e.t.Errorf("DownloadSlice of 24 bytes from a 16-byte buffer = %v, want device.ErrShape", err)
		}
	})
}

func testStaging(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	for _, n := range copySizes {
		e.run(fmt.Sprintf("%dBytes", n), func(e *env) {
			h := e.staging(n)
			if h.Device() != e.dev {
				e.t.Errorf("Staging(%d).Device() = %v, want the device that served it", n, h.Device())
			}
			if got := int64(len(h.Bytes())); got != h.Len() {
				e.t.Errorf("len(Bytes()) = %d, want Len() = %d", got, h.Len())
			}
			// The host writes every byte of it.
			src := e.randomBytes(n)
			copy(h.Bytes(), src)
			b := e.allocWhole(n).Slice(0, n)
			ev := e.copyToDevice(b, h.Slice(0, n), e.dev.Stream())
			if err := call(e.t, "Event.Wait", ev.Wait); err != nil {
				e.t.Fatalf("Event.Wait: %v", err)
			}
			if got := e.downloadBytes(b); !bytes.Equal(got, src) {
				e.t.Errorf("device buffer after CopyToDevice: %s", firstByteDiff(got, src))
			}
			// And back, through a second staging buffer on another stream.
			h2 := e.staging(n)
			s := e.newStream()
			ev = e.copyToHost(h2.Slice(0, n), b, s)
			if err := call(e.t, "Event.Wait", ev.Wait); err != nil {
				e.t.Fatalf("Event.Wait: %v", err)
			}
			if got := h2.Bytes()[:n]; !bytes.Equal(got, src) {
				e.t.Errorf("staging buffer after CopyToHost: %s", firstByteDiff(got, src))
			}
			// A copy into part of a larger buffer, from part of a staging
			// buffer.
			if n > 2 {
				ev = e.copyToDevice(b.Slice(1, n-2), h2.Slice(2, n-2), e.dev.Stream())
				if err := call(e.t, "Event.Wait", ev.Wait); err != nil {
					e.t.Fatalf("Event.Wait: %v", err)
				}
				want := append(append(src[:1:1], src[2:]...), src[n-1])
				if got := e.downloadBytes(b); !bytes.Equal(got, want) {
					e.t.Errorf("device buffer after CopyToDevice of slices: %s", firstByteDiff(got, want))
				}
			}
			e.freeStaging(h)
			e.freeStaging(h2)
		})
	}
	e.run("Reuse", func(e *env) {
		// Staging buffers come and go the way the loader uses them.
		for i := range 50 {
			h := e.staging(4096)
			h.Bytes()[0] = byte(i)
			b := e.allocWhole(4096)
			ev := e.copyToDevice(b.Slice(0, 4096), h.Slice(0, 4096), e.dev.Stream())
			if err := call(e.t, "Event.Wait", ev.Wait); err != nil {
				e.t.Fatalf("Event.Wait: %v", err)
			}
			e.freeStaging(h)
			if got := e.downloadBytes(b.Slice(0, 1)); got[0] != byte(i) {
				e.t.Fatalf("round %d: got %d, want %d", i, got[0], byte(i))
			}
			if err := call(e.t, "Free", func() error { return e.dev.Free(b) }); err != nil {
				e.t.Fatalf("Free: %v", err)
			}
		}
	})
}

func testMemStats(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	for _, n := range []int64{1, 1000, 3 << 20} {
		e.run(fmt.Sprintf("%dBytes", n), func(e *env) {
			e.sync()
			before := e.memStats()
			b := e.allocWhole(n)
			during := e.memStats()
			got := during.AllocatedBytes[alloc.AllPools].Current - before.AllocatedBytes[alloc.AllPools].Current
			if got < n {
				e.t.Errorf("allocated bytes grew by %d after Alloc(%d), want at least %d", got, n, n)
			}
			if during.Allocation[alloc.AllPools].Current != before.Allocation[alloc.AllPools].Current+1 {
				e.t.Errorf("allocations: got %d after Alloc, want %d", during.Allocation[alloc.AllPools].Current, before.Allocation[alloc.AllPools].Current+1)
			}
			e.checkStatsInvariants(during)
			if err := call(e.t, "Free", func() error { return e.dev.Free(b) }); err != nil {
				e.t.Fatalf("Free: %v", err)
			}
			e.sync()
			after := e.memStats()
			if a, w := after.AllocatedBytes[alloc.AllPools].Current, before.AllocatedBytes[alloc.AllPools].Current; a != w {
				e.t.Errorf("allocated bytes after Free: got %d, want %d as before the Alloc", a, w)
			}
			if after.AllocatedBytes[alloc.AllPools].Peak < during.AllocatedBytes[alloc.AllPools].Current {
				e.t.Errorf("peak allocated bytes after Free: got %d, want at least %d", after.AllocatedBytes[alloc.AllPools].Peak, during.AllocatedBytes[alloc.AllPools].Current)
			}
			e.checkStatsInvariants(after)
			if err := call(e.t, "second Free", func() error { return e.dev.Free(b) }); err == nil {
				e.t.Errorf("freeing a buffer twice succeeded, want an error")
			}
		})
	}
	e.run("Categories", func(e *env) {
		// Every Alloc counts in the category it names, and the categories
		// add up to the allocated bytes.
		e.sync()
		before := e.memStats()
		var bufs []device.Buffer
		for i, cat := range alloc.Categories() {
			n := int64(i+1) << 12
			var b device.Buffer
			err := call(e.t, "Alloc", func() (err error) { b, err = e.dev.Alloc(n, cat); return err })
			if err != nil {
				e.t.Fatalf("Alloc(%d, %v): %v", n, cat, err)
			}
			bufs = append(bufs, b)
			st := e.memStats()
			if grew := st.CategoryBytes[cat].Current - before.CategoryBytes[cat].Current; grew < n {
				e.t.Errorf("%v grew by %d bytes after Alloc(%d, %v), want at least %d", cat, grew, n, cat, n)
			}
			if sum, all := st.CategoryBytes.Total(), st.AllocatedBytes[alloc.AllPools].Current; sum != all {
				e.t.Errorf("categories add up to %d bytes, allocated bytes %d", sum, all)
			}
		}
		for _, b := range bufs {
			if err := call(e.t, "Free", func() error { return e.dev.Free(b) }); err != nil {
				e.t.Fatalf("Free: %v", err)
			}
		}
		e.sync()
		after := e.memStats()
		for _, cat := range alloc.Categories() {
			if a, w := after.CategoryBytes[cat].Current, before.CategoryBytes[cat].Current; a != w {
				e.t.Errorf("%v after Free: %d bytes, want %d as before", cat, a, w)
			}
		}
	})
	e.run("Kernels", func(e *env) {
		// Kernels allocate nothing that stays allocated.
		x, out := e.filled(1<<16, 1), e.filled(1, 0)
		e.sync()
		before := e.memStats().AllocatedBytes[alloc.AllPools].Current
		for range 10 {
			e.launch(device.Axpby{DType: device.Float32, N: 1 << 16, Alpha: 1, Beta: 1, X: x.buf, Y: x.buf})
			e.launch(device.SumSquares{DType: device.Float32, N: 1 << 16, X: x.buf, Out: out.buf, Accumulate: true})
		}
		e.sync()
		if got := e.memStats().AllocatedBytes[alloc.AllPools].Current; got != before {
			e.t.Errorf("allocated bytes after kernels: got %d, want %d as before", got, before)
		}
	})
}

func (e *env) memStats() alloc.Stats {
	e.t.Helper()
	var s alloc.Stats
	_ = call(e.t, "MemStats", func() error { s = e.dev.MemStats(); return nil })
	return s
}

// checkStatsInvariants checks what holds of any allocator's figures.
func (e *env) checkStatsInvariants(s alloc.Stats) {
	e.t.Helper()
	for _, p := range []alloc.Pool{alloc.AllPools, alloc.SmallPool, alloc.LargePool} {
		a, r := s.AllocatedBytes[p], s.ReservedBytes[p]
		if r.Current < a.Current {
			e.t.Errorf("%v: reserved bytes %d < allocated bytes %d", p, r.Current, a.Current)
		}
		for _, st := range []struct {
			name string
			s    alloc.Stat
		}{{"allocated bytes", a}, {"reserved bytes", r}, {"allocations", s.Allocation[p]}, {"segments", s.Segment[p]}} {
			if st.s.Peak < st.s.Current || st.s.Current < 0 {
				e.t.Errorf("%v %s: peak %d, current %d; want 0 <= current <= peak", p, st.name, st.s.Peak, st.s.Current)
			}
		}
	}
	if sum := s.AllocatedBytes[alloc.SmallPool].Current + s.AllocatedBytes[alloc.LargePool].Current; sum != s.AllocatedBytes[alloc.AllPools].Current {
		e.t.Errorf("allocated bytes: small + large pools = %d, all pools %d", sum, s.AllocatedBytes[alloc.AllPools].Current)
	}
}
