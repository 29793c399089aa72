package nccl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/internal/closedtest"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
)

// The emulated tests run NCCL's cgo bindings over the in-process NCCL of
// the CUDA emulator (internal/cudaemu, nccl.cc.in): one goroutine per
// rank, each with a CUDA device of its own opened over the emulated
// driver (the one emulated GPU) and a Comm from a shared id. They skip
// where the emulator cannot be built (no g++) or loaded (no cgo).

// emuConfig is the dist.Config of the emulated NCCL.
func emuConfig(lib *cudaemu.Lib, timeout time.Duration) dist.Config {
	return dist.Config{NCCLLibrary: lib.Path(), Timeout: timeout}
}

// openDevice opens the CUDA device over the emulator.
func openDevice(t testing.TB, lib *cudaemu.Lib) *cuda.Device {
	t.Helper()
	d, err := cuda.Open(cuda.Config{DriverLibrary: lib.Path(), BLASLibrary: lib.Path()})
	if err != nil {
		t.Fatalf("cuda.Open over the emulator: %v", err)
	}
	return d
}

// rank is one rank of a test job.
type rank struct {
	r    int
	dev  *cuda.Device
	comm *Comm
}

// job runs body on size ranks, each in its own goroutine with its own
// device and Comm joined at one id, and closes them when all returned.
// Errors are collected and reported by rank.
func job(t *testing.T, lib *cudaemu.Lib, size int, cfg dist.Config, body func(rk rank) error) {
	t.Helper()
	id, err := NewUniqueID(cfg)
	if err != nil {
		t.Fatalf("NewUniqueID: %v", err)
	}
	jobWith(t, lib, size, id, cfg, body)
}

func jobWith(t *testing.T, lib *cudaemu.Lib, size int, id UniqueID, cfg dist.Config, body func(rk rank) error) {
	t.Helper()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := openDevice(t, lib)
			defer d.Close()
			c, err := Open(d, r, size, id, cfg)
			if err != nil {
				errs[r] = fmt.Errorf("Open: %w", err)
				return
			}
			errs[r] = body(rank{r: r, dev: d, comm: c})
			if err := c.Close(); err != nil && errs[r] == nil {
				errs[r] = fmt.Errorf("Close: %w", err)
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// values are rank r's n elements: magnitudes far apart, so that a sum in
// another order than the ranks' rounds differently.
func values(r, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		switch (i + r) % 3 {
		case 0:
			v[i] = 1e8 * float64(1+r)
		case 1:
			v[i] = 1.0/3 + float64(i)
		default:
			v[i] = -1e8*float64(1+r) + 0.1*float64(r)
		}
	}
	return v
}

func encode(dt device.DType, v []float64) []byte {
	b := make([]byte, len(v)*int(dt.Size()))
	for i, x := range v {
		if dt == device.Float32 {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
		} else {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
		}
	}
	return b
}

// rankOrderSum is the sum NCCL's emulation promises: ((x0 + x1) + x2)...,
// in dt's arithmetic, encoded.
func rankOrderSum(dt device.DType, size, n int) []byte {
	if dt == device.Float32 {
		acc := make([]float32, n)
		for r := range size {
			for i, x := range values(r, n) {
				if r == 0 {
					acc[i] = float32(x)
				} else {
					acc[i] += float32(x)
				}
			}
		}
		wide := make([]float64, n)
		for i, x := range acc {
			wide[i] = float64(x)
		}
		return encode(dt, wide)
	}
	acc := make([]float64, n)
	for r := range size {
		for i, x := range values(r, n) {
			acc[i] += x
		}
	}
	return encode(dt, acc)
}

// upload allocates a buffer holding data on the rank's device.
func (rk rank) upload(data []byte) (device.Buffer, error) {
	b, err := rk.dev.Alloc(int64(len(data)), device.Workspace)
	if err != nil {
		return b, err
	}
	return b, rk.dev.Upload(b, data)
}

func (rk rank) download(b device.Buffer) ([]byte, error) {
	out := make([]byte, b.Len())
	return out, rk.dev.Download(out, b)
}

// TestEmulatedAllReduce sums float32 and float64 vectors over 2 and 3
// ranks: every rank gets the sum taken in rank order, bit for bit.
func TestEmulatedAllReduce(t *testing.T) {
	lib := cudaemu.ForTest(t)
	for _, size := range []int{2, 3} {
		for _, dt := range []device.DType{device.Float32, device.Float64} {
			t.Run(fmt.Sprintf("%d-ranks-%v", size, dt), func(t *testing.T) {
				const n = 1000
				want := rankOrderSum(dt, size, n)
				got := make([][]byte, size)
				job(t, lib, size, emuConfig(lib, 10*time.Second), func(rk rank) error {
					b, err := rk.upload(encode(dt, values(rk.r, n)))
					if err != nil {
						return err
					}
					ev, err := rk.comm.AllReduce(b, dt, rk.dev.Stream())
					if err != nil {
						return err
					}
					if err := ev.Wait(); err != nil {
						return err
					}
					if got[rk.r], err = rk.download(b); err != nil {
						return err
					}
					if err := rk.comm.Err(); err != nil {
						return fmt.Errorf("Err() = %v after the all-reduces, want nil", err)
					}
					return rk.dev.Free(b)
				})
				for r := range size {
					if !bytes.Equal(got[r], want) {
						t.Errorf("rank %d: the sum differs from the rank-order sum (first bytes %x, want %x)", r, head(got[r]), head(want))
					}
					if !bytes.Equal(got[r], got[0]) {
						t.Errorf("rank %d's sum differs from rank 0's", r)
					}
				}
			})
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

// TestEmulatedPending checks the all-reduce is queued on the stream, not
// run in the call: rank 0's event is not complete until rank 1 queued
// its own, and then the result is in place.
func TestEmulatedPending(t *testing.T) {
	lib := cudaemu.ForTest(t)
	queued := make(chan struct{})
	job(t, lib, 2, emuConfig(lib, 10*time.Second), func(rk rank) error {
		b, err := rk.upload(encode(device.Float64, []float64{float64(rk.r + 1)}))
		if err != nil {
			return err
		}
		if rk.r == 1 {
			<-queued
		}
		ev, err := rk.comm.AllReduce(b, device.Float64, rk.dev.Stream())
		if err != nil {
			return err
		}
		if rk.r == 0 {
			done, err := ev.Done()
			if err != nil || done {
				return fmt.Errorf("Done() = %v, %v before rank 1 queued its all-reduce, want false, nil", done, err)
			}
			close(queued)
		}
		if err := ev.Wait(); err != nil {
			return err
		}
		got, err := rk.download(b)
		if err != nil {
			return err
		}
		if want := encode(device.Float64, []float64{3}); !bytes.Equal(got, want) {
			return fmt.Errorf("got %x, want %x (1+2)", got, want)
		}
		return nil
	})
}

// TestEmulatedBroadcast broadcasts rank 1's bytes to 3 ranks, on a stream
// of the device's other than the compute stream.
func TestEmulatedBroadcast(t *testing.T) {
	lib := cudaemu.ForTest(t)
	const size, root = 3, 1
	fill := func(r int) []byte { return bytes.Repeat([]byte{byte(10 + r), 0xa5, byte(r)}, 341) }
	job(t, lib, size, emuConfig(lib, 10*time.Second), func(rk rank) error {
		b, err := rk.upload(fill(rk.r))
		if err != nil {
			return err
		}
		s, err := rk.dev.NewStream()
		if err != nil {
			return err
		}
		defer s.Close()
		ev, err := rk.comm.Broadcast(b, root, s)
		if err != nil {
			return err
		}
		if err := ev.Wait(); err != nil {
			return err
		}
		got, err := rk.download(b)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, fill(root)) {
			return fmt.Errorf("got %x..., want rank %d's %x...", head(got), root, head(fill(root)))
		}
		return nil
	})
}

// TestEmulatedHang leaves rank 2 of 3 out of an all-reduce: the other
// two ranks' watchdogs abort within the deadline, with a
// *dist.TimeoutError, and their later calls fail with dist.ErrAborted.
func TestEmulatedHang(t *testing.T) {
	lib := cudaemu.ForTest(t)
	const timeout = time.Second
	var waiting sync.WaitGroup
	waiting.Add(2)
	job(t, lib, 3, emuConfig(lib, timeout), func(rk rank) error {
		if rk.r == 2 {
			waiting.Wait() // never joins the all-reduce
			if err := rk.comm.Err(); err != nil {
				return fmt.Errorf("the rank that hung: Err() = %v, want nil", err)
			}
			return nil
		}
		defer waiting.Done()
		b, err := rk.upload(encode(device.Float32, values(rk.r, 64)))
		if err != nil {
			return err
		}
		start := time.Now()
		ev, err := rk.comm.AllReduce(b, device.Float32, rk.dev.Stream())
		if err != nil {
			return err
		}
		if err := ev.Wait(); err != nil { // the abort ends the collective
			return err
		}
		after := time.Since(start)
		if after < timeout || after > timeout+3*time.Second {
			return fmt.Errorf("the all-reduce ended after %v, want the deadline %v (and a poll)", after, timeout)
		}
		stop := rk.comm.Err()
		var te *dist.TimeoutError
		if !errors.As(stop, &te) || !errors.Is(stop, dist.ErrAborted) || !errors.Is(stop, dist.ErrTimeout) {
			return fmt.Errorf("Err() = %v, want a *dist.TimeoutError wrapped with dist.ErrAborted", stop)
		}
		if te.Rank != rk.r || te.Size != 3 || !strings.Contains(te.Op, "all-reduce of 256 bytes") {
			return fmt.Errorf("the TimeoutError is %+v, want rank %d of 3, an all-reduce of 256 bytes", te, rk.r)
		}
		if _, err := rk.comm.AllReduce(b, device.Float32, rk.dev.Stream()); !errors.Is(err, dist.ErrAborted) {
			return fmt.Errorf("AllReduce after the abort = %v, want dist.ErrAborted", err)
		}
		if _, err := rk.comm.Broadcast(b, 0, rk.dev.Stream()); !errors.Is(err, dist.ErrAborted) {
			return fmt.Errorf("Broadcast after the abort = %v, want dist.ErrAborted", err)
		}
		got, err := rk.download(b) // the stream goes on
		if err != nil {
			return err
		}
		if want := encode(device.Float32, values(rk.r, 64)); !bytes.Equal(got, want) {
			return fmt.Errorf("the aborted all-reduce changed the buffer")
		}
		return nil
	})
}

// TestEmulatedAsyncError has NCCL report an asynchronous error while an
// all-reduce is pending: the watchdog aborts with it, long before the
// deadline, and the other rank's next collective fails with it.
func TestEmulatedAsyncError(t *testing.T) {
	lib := cudaemu.ForTest(t)
	cfg := emuConfig(lib, time.Minute)
	id, err := NewUniqueID(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const remoteError = 6 // ncclRemoteError
	aborted := make(chan struct{})
	jobWith(t, lib, 2, id, cfg, func(rk rank) error {
		b, err := rk.upload(encode(device.Float64, values(rk.r, 8)))
		if err != nil {
			return err
		}
		if rk.r == 1 {
			<-aborted
			_, err := rk.comm.AllReduce(b, device.Float64, rk.dev.Stream())
			var ne *Error
			if !errors.As(err, &ne) || ne.Code != remoteError || !errors.Is(err, dist.ErrAborted) || !errors.Is(rk.comm.Err(), dist.ErrAborted) {
				return fmt.Errorf("AllReduce after the network failed = %v, want an *Error %d wrapped with dist.ErrAborted", err, remoteError)
			}
			return nil
		}
		defer close(aborted)
		start := time.Now()
		ev, err := rk.comm.AllReduce(b, device.Float64, rk.dev.Stream())
		if err != nil {
			return err
		}
		if n, err := lib.FailNCCL(id[:], remoteError); err != nil || n != 2 {
			return fmt.Errorf("FailNCCL = %d, %v, want 2 communicators", n, err)
		}
		if err := ev.Wait(); err != nil {
			return err
		}
		stop := rk.comm.Err()
		var ne *Error
		var te *dist.TimeoutError
		if !errors.As(stop, &ne) || ne.Code != remoteError || !errors.Is(stop, dist.ErrAborted) || errors.As(stop, &te) {
			return fmt.Errorf("Err() = %v, want ncclRemoteError wrapped with dist.ErrAborted", stop)
		}
		if !strings.Contains(stop.Error(), "remote process exited") {
			return fmt.Errorf("Err() = %q, want ncclGetErrorString's text", stop)
		}
		if after := time.Since(start); after > 10*time.Second {
			return fmt.Errorf("the watchdog took %v to see the asynchronous error", after)
		}
		return nil
	})
}

// TestEmulatedIDFromAddress derives the id from an address
// (NCCL_COMM_ID), the same on every call, and runs a job with it.
func TestEmulatedIDFromAddress(t *testing.T) {
	lib := cudaemu.ForTest(t)
	cfg := emuConfig(lib, 10*time.Second)
	t.Setenv(commIDVar, "") // restored when the test ends
	const addr = "127.0.0.1:29511"
	a, err := IDFromAddress(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv(commIDVar); got != addr {
		t.Errorf("%s = %q after IDFromAddress, want %q", commIDVar, got, addr)
	}
	b, err := IDFromAddress(addr, cfg)
	if err != nil || b != a {
		t.Errorf("IDFromAddress again = %x, %v; want the same bytes %x", head(b[:]), err, head(a[:]))
	}
	if _, err := IDFromAddress("127.0.0.1:29512", cfg); err == nil {
		t.Errorf("IDFromAddress of another address with %s set: no error", commIDVar)
	}
	for _, bad := range []string{"127.0.0.1", ":29500", "host:port", "host:0", "host:70000"} {
		if _, err := IDFromAddress(bad, cfg); err == nil {
			t.Errorf("IDFromAddress(%q): no error", bad)
		}
	}
	jobWith(t, lib, 2, a, cfg, func(rk rank) error {
		b, err := rk.upload(encode(device.Float32, []float64{float64(rk.r) + 0.5}))
		if err != nil {
			return err
		}
		ev, err := rk.comm.AllReduce(b, device.Float32, rk.dev.Stream())
		if err != nil {
			return err
		}
		if err := ev.Wait(); err != nil {
			return err
		}
		got, err := rk.download(b)
		if want := encode(device.Float32, []float64{2}); err != nil || !bytes.Equal(got, want) {
			return fmt.Errorf("got %x, %v; want %x", got, err, want)
		}
		return nil
	})
}

// TestEmulatedMisuse checks what Comm refuses without calling NCCL, and
// what Abort and Close leave.
func TestEmulatedMisuse(t *testing.T) {
	lib := cudaemu.ForTest(t)
	cfg := emuConfig(lib, 10*time.Second)
	id, err := NewUniqueID(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := openDevice(t, lib)
	defer d.Close()
	for _, rs := range [][2]int{{-1, 1}, {1, 1}, {0, 0}} {
		if _, err := Open(d, rs[0], rs[1], id, cfg); err == nil {
			t.Errorf("Open(rank %d, size %d): no error", rs[0], rs[1])
		}
	}
	c, err := Open(d, 0, 1, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend() != "nccl" || c.Rank() != 0 || c.Size() != 1 || c.Version() != 22807 || c.Library() != lib.Path() {
		t.Errorf("Backend, Rank, Size, Version, Library = %q, %d, %d, %d, %q; want nccl, 0, 1, 22807, %q",
			c.Backend(), c.Rank(), c.Size(), c.Version(), c.Library(), lib.Path())
	}
	b, err := d.Alloc(12, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AllReduce(b, device.Int32, d.Stream()); err == nil {
		t.Error("AllReduce of Int32: no error")
	}
	if _, err := c.AllReduce(b, device.Float64, d.Stream()); !errors.Is(err, device.ErrShape) {
		t.Errorf("AllReduce of 12 bytes as float64 = %v, want device.ErrShape", err)
	}
	if _, err := c.Broadcast(b, 1, d.Stream()); err == nil {
		t.Error("Broadcast from root 1 of 1 rank: no error")
	}
	other := openDevice(t, lib)
	defer other.Close()
	ob, err := other.Alloc(8, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AllReduce(ob, device.Float32, d.Stream()); !errors.Is(err, device.ErrForeignBuffer) {
		t.Errorf("AllReduce of another device's buffer = %v, want device.ErrForeignBuffer", err)
	}
	if _, err := c.AllReduce(b, device.Float32, other.Stream()); !errors.Is(err, device.ErrForeignBuffer) {
		t.Errorf("AllReduce on another device's stream = %v, want device.ErrForeignBuffer", err)
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err() = %v after refused arguments, want nil", err)
	}
	ev, err := c.AllReduce(b, device.Float32, d.Stream()) // one rank: the values stay
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(); err != nil {
		t.Fatal(err)
	}
	reason := errors.New("the trainer gave up")
	c.Abort(reason)
	c.Abort(errors.New("a second reason"))
	if err := c.Err(); !errors.Is(err, dist.ErrAborted) || !errors.Is(err, reason) {
		t.Errorf("Err() after Abort = %v, want dist.ErrAborted and the first reason", err)
	}
	if _, err := c.AllReduce(b, device.Float32, d.Stream()); !errors.Is(err, dist.ErrAborted) {
		t.Errorf("AllReduce after Abort = %v, want dist.ErrAborted", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close after Abort = %v, want nil", err)
	}

	id2, err := NewUniqueID(cfg)
	if err != nil || id2 == id {
		t.Fatalf("a second NewUniqueID = %x, %v; want another id", head(id2[:]), err)
	}
	c2, err := Open(d, 0, 1, id2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if err := c2.Close(); err != nil {
		t.Errorf("a second Close = %v, want nil", err)
	}
	// Every method after Close (closedtest lists them): the collectives
	// and Err are device.ErrClosed, the getters answer, Abort changes
	// nothing, a second Close returns nil.
	closed := func(f func() error) closedtest.Call { return closedtest.Call{Closed: true, F: f, Says: "nccl"} }
	getter := func(f func() error) closedtest.Call { return closedtest.Call{F: f} }
	closedtest.Check(t, "Comm", c2, device.ErrClosed, map[string]closedtest.Call{
		"AllReduce": closed(func() error { _, err := c2.AllReduce(b, device.Float32, d.Stream()); return err }),
		"Broadcast": closed(func() error { _, err := c2.Broadcast(b, 0, d.Stream()); return err }),
		"Err":       closed(c2.Err),
		"Abort": getter(func() error {
			c2.Abort(errors.New("after Close"))
			if !errors.Is(c2.Err(), device.ErrClosed) {
				return fmt.Errorf("Err after Close and Abort = %v, want the Close's", c2.Err())
			}
			return nil
		}),
		"Rank":    getter(func() error { c2.Rank(); return nil }),
		"Size":    getter(func() error { c2.Size(); return nil }),
		"Backend": getter(func() error { c2.Backend(); return nil }),
		"Version": getter(func() error { c2.Version(); return nil }),
		"Library": getter(func() error { c2.Library(); return nil }),
		"Stats":   getter(func() error { c2.Stats(); return nil }),
		"Close":   getter(c2.Close),
	})
}

// TestMissingLibrary checks a missing NCCL, or a library without its
// entry points, is dist.ErrUnavailable naming what is missing.
func TestMissingLibrary(t *testing.T) {
	for _, tc := range []struct{ lib, says string }{
		{"/nonexistent/libnccl.so.2", "/nonexistent/libnccl.so.2"},
		{"libc.so.6", "has no ncclGetVersion"},
	} {
		cfg := dist.Config{NCCLLibrary: tc.lib}
		_, err := NewUniqueID(cfg)
		if !errors.Is(err, dist.ErrUnavailable) {
			t.Errorf("NewUniqueID with %s = %v, want dist.ErrUnavailable", tc.lib, err)
			continue
		}
		if cgoBuild && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("NewUniqueID with %s = %q, want it to say %q", tc.lib, err, tc.says)
		}
		if _, _, err := Version(cfg); !errors.Is(err, dist.ErrUnavailable) {
			t.Errorf("Version with %s = %v, want dist.ErrUnavailable", tc.lib, err)
		}
		if _, err := IDFromAddress("127.0.0.1:29500", cfg); !errors.Is(err, dist.ErrUnavailable) {
			t.Errorf("IDFromAddress with %s = %v, want dist.ErrUnavailable", tc.lib, err)
		}
	}
}
