package devicetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

func testStreams(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	const n = 1 << 20 // large enough that a kernel takes a while
	e.run("InOrder", func(e *env) {
		// A long chain of kernels that depend on their order: the
		// Download after it sees the final value. The host computes the
		// same chain.
		v, ones := e.vec(constant(n, 0)), e.filled(n, 1)
		want := 0.0
		for i := range testfull.Count(200, 60) {
			if i%50 == 0 {
				e.launch(device.Fill{DType: device.Float32, N: n, X: v.buf, Value: float64(i)})
				want = float64(i)
				continue
			}
			// x = 2x + 1, then x = (x-1)/2 + 1: net +1, but only if the
			// two run in order.
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 2, X: ones.buf, Y: v.buf})
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 0.5, Beta: 0.5, X: ones.buf, Y: v.buf})
			want = 0.5*(2*want+1) + 0.5
		}
		checkExact(e.t, "X after the chain", e.get("X", v), constant(n, want))
	})
	e.run("UploadInOrder", func(e *env) {
		// Upload runs after the kernels queued before it, and kernels
		// queued after it see what it wrote.
		v, ones := e.vec(constant(n, 0)), e.filled(n, 1)
		for range 20 {
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 1, X: ones.buf, Y: v.buf})
		}
		if err := call(e.t, "Upload", func() error { return upload(e.dev, device.Float32, v.buf, constant(n, 5)) }); err != nil {
			e.t.Fatalf("Upload: %v", err)
		}
		e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 1, X: ones.buf, Y: v.buf})
		checkExact(e.t, "X", e.get("X", v), constant(n, 6))
	})
	e.run("Event", func(e *env) {
		v, ones := e.vec(constant(n, 0)), e.filled(n, 1)
		for range 20 {
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 1, X: ones.buf, Y: v.buf})
		}
		ev := e.record(e.dev.Stream())
		if _, err := call2(e.t, "Event.Done", ev.Done); err != nil {
			e.t.Errorf("Event.Done: %v", err)
		}
		if err := call(e.t, "Event.Wait", ev.Wait); err != nil {
			e.t.Fatalf("Event.Wait: %v", err)
		}
		if done, err := call2(e.t, "Event.Done", ev.Done); !done || err != nil {
			e.t.Errorf("Event.Done after Wait = %v, %v; want true, nil", done, err)
		}
		// Waiting again, and on an event of an idle stream, returns at once.
		if err := call(e.t, "Event.Wait", ev.Wait); err != nil {
			e.t.Errorf("second Event.Wait: %v", err)
		}
		idle := e.record(e.dev.Stream())
		if err := call(e.t, "Event.Wait", idle.Wait); err != nil {
			e.t.Errorf("Event.Wait of an idle stream: %v", err)
		}
		checkExact(e.t, "X", e.get("X", v), constant(n, 20))
	})
	e.run("StreamSynchronize", func(e *env) {
		v, ones := e.vec(constant(n, 0)), e.filled(n, 1)
		for range 10 {
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 1, X: ones.buf, Y: v.buf})
		}
		ev := e.record(e.dev.Stream())
		if err := call(e.t, "Stream.Synchronize", e.dev.Stream().Synchronize); err != nil {
			e.t.Fatalf("Stream.Synchronize: %v", err)
		}
		if done, err := call2(e.t, "Event.Done", ev.Done); !done || err != nil {
			e.t.Errorf("Event.Done after Stream.Synchronize = %v, %v; want true, nil", done, err)
		}
	})
	e.run("CopyStream", func(e *env) {
		// The loader's pattern: copy on a stream of its own, the compute
		// stream waits for the copy's event, then a kernel reads the data.
		s := e.newStream()
		for round := range 4 {
			h := e.staging(4 * n)
			hb := h.Bytes()[:4*n]
			want := make([]float64, n)
			for i := range want {
				want[i] = float64(i%1000 + round)
				binary.LittleEndian.PutUint32(hb[4*i:], math.Float32bits(float32(want[i])))
			}
			dst := e.vec(constant(n, -1))
			ev := e.copyToDevice(dst.buf.Slice(0, 4*n), h.Slice(0, 4*n), s)
			if err := call(e.t, "Stream.Wait", func() error { return e.dev.Stream().Wait(ev) }); err != nil {
				e.t.Fatalf("compute Stream.Wait: %v", err)
			}
			out := e.vec(constant(n, 0))
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 2, Beta: 0, X: dst.buf, Y: out.buf})
			// The host may reuse the staging buffer once the copy's event
			// completed.
			if err := call(e.t, "Event.Wait", ev.Wait); err != nil {
				e.t.Fatalf("Event.Wait: %v", err)
			}
			for i := range hb {
				hb[i] = 0xFF
			}
			for i := range want {
				want[i] *= 2
			}
			checkExact(e.t, describe("kernel output from copied data, round %d", round), e.get("Y", out), want)
			e.freeStaging(h)
		}
	})
	e.run("CopyToHost", func(e *env) {
		// The compute stream writes; another stream waits for it and
		// copies the result to the host.
		s := e.newStream()
		v, ones := e.vec(constant(n, 0)), e.filled(n, 1)
		for range 20 {
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 1, X: ones.buf, Y: v.buf})
		}
		written := e.record(e.dev.Stream())
		if err := call(e.t, "Stream.Wait", func() error { return s.Wait(written) }); err != nil {
			e.t.Fatalf("Stream.Wait: %v", err)
		}
		for _, st := range []struct {
			name string
			s    device.Stream
		}{{"copy stream", s}, {"compute stream", e.dev.Stream()}} {
			h := e.staging(4 * n)
			ev := e.copyToHost(h.Slice(0, 4*n), v.buf.Slice(0, 4*n), st.s)
			if err := call(e.t, "Event.Wait", ev.Wait); err != nil {
				e.t.Fatalf("Event.Wait: %v", err)
			}
			checkExact(e.t, "staging after CopyToHost on the "+st.name, float32s(h.Bytes()[:4*n]), constant(n, 20))
			e.freeStaging(h)
		}
	})
	e.run("DeviceSynchronize", func(e *env) {
		// Device.Synchronize waits for every stream.
		s := e.newStream()
		h := e.staging(8 * n)
		dst := e.alloc(device.Float32, 2*n)
		copied := e.copyToDevice(dst, h.Slice(0, 8*n), s)
		v, ones := e.vec(constant(n, 0)), e.filled(n, 1)
		for range 10 {
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 1, X: ones.buf, Y: v.buf})
		}
		computed := e.record(e.dev.Stream())
		e.sync()
		for _, ev := range []struct {
			name string
			e    device.Event
		}{{"copy", copied}, {"compute", computed}} {
			if done, err := call2(e.t, "Event.Done", ev.e.Done); !done || err != nil {
				e.t.Errorf("Done of the %s stream's event after Device.Synchronize = %v, %v; want true, nil", ev.name, done, err)
			}
		}
		e.freeStaging(h)
	})
	e.run("CloseComputeStream", func(e *env) {
		if err := call(e.t, "Stream().Close", e.dev.Stream().Close); err == nil {
			e.t.Errorf("closing the compute stream succeeded, want an error: it belongs to the device")
		}
		// The device still works.
		v := e.filled(8, 1)
		e.launch(device.Axpby{DType: device.Float32, N: 8, Alpha: 1, Beta: 1, X: v.buf, Y: v.buf})
		checkExact(e.t, "Y after closing the compute stream failed", e.get("Y", v), constant(8, 2))
	})
	e.run("CloseStream", func(e *env) {
		s := e.newStream()
		h := e.staging(64)
		b := e.alloc(device.Float32, 16)
		ev := e.copyToDevice(b, h.Slice(0, 64), s)
		if err := call(e.t, "Stream.Close", s.Close); err != nil {
			e.t.Fatalf("Stream.Close: %v", err)
		}
		// Close waited for the queued copy.
		if done, err := call2(e.t, "Event.Done", ev.Done); !done || err != nil {
			e.t.Errorf("Done of an event of a closed stream = %v, %v; want true, nil", done, err)
		}
		closed := []struct {
			name string
			f    func() error
		}{
			{"Record", func() error { _, err := s.Record(); return err }},
			{"Wait", func() error { return s.Wait(ev) }},
			{"Synchronize", s.Synchronize},
			{"CopyToDevice", func() error { _, err := e.dev.CopyToDevice(b, h.Slice(0, 64), s); return err }},
			{"CopyToHost", func() error { _, err := e.dev.CopyToHost(h.Slice(0, 64), b, s); return err }},
		}
		for _, c := range closed {
			if err := call(e.t, c.name, c.f); !errors.Is(err, device.ErrClosed) {
				e.t.Errorf("%s on a closed stream = %v, want an error matching device.ErrClosed", c.name, err)
			}
		}
		if err := call(e.t, "second Stream.Close", s.Close); err != nil && !errors.Is(err, device.ErrClosed) {
			e.t.Errorf("closing a stream twice = %v, want nil or device.ErrClosed", err)
		}
		e.sync()
		e.freeStaging(h)
	})
	e.run("FreeWhileQueued", func(e *env) {
		// Freeing a buffer that queued work still reads is allowed: the
		// cache hands its memory out again only to work queued later.
		x := e.allocWhole(4 * n)
		if err := call(e.t, "Upload", func() error { return upload(e.dev, device.Float32, x, constant(n, 1)) }); err != nil {
			e.t.Fatalf("Upload: %v", err)
		}
		y := e.vec(constant(n, 0))
		for range 20 {
			e.launch(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 1, X: x, Y: y.buf})
		}
		if err := call(e.t, "Free", func() error { return e.dev.Free(x) }); err != nil {
			e.t.Fatalf("Free: %v", err)
		}
		for range 3 {
			z := e.alloc(device.Float32, n+pad)
			e.launch(device.Fill{DType: device.Float32, N: n + pad, X: z, Value: 1000})
		}
		checkExact(e.t, "Y", e.get("Y", y), constant(n, 20))
	})
}

func testConcurrency(t *testing.T, open opener) {
	// Several goroutines share one device: each allocates, uploads, runs
	// kernels, downloads and frees. Work of one goroutine runs in the
	// order it queued it; under -race nothing races.
	e := newEnv(t, open, device.Float32)
	const workers, rounds, n = 4, 25, 4099
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s, err := e.dev.NewStream()
			if err != nil {
				t.Errorf("worker %d: NewStream: %v", w, err)
				return
			}
			defer s.Close()
			for r := range rounds {
				if err := concurrentRound(e.dev, s, w, r, n); err != nil {
					t.Errorf("worker %d round %d: %v", w, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	e.sync()
}

func concurrentRound(d device.Device, s device.Stream, w, r, n int) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	x, err := d.Alloc(4*int64(n), device.Workspace)
	if err != nil {
		return err
	}
	y, err := d.Alloc(4*int64(n), device.Workspace)
	if err != nil {
		return err
	}
	base := float32(w*1000 + r)
	src := make([]float32, n)
	for i := range src {
		src[i] = base + float32(i%7)
	}
	if err := device.UploadSlice(d, x, src); err != nil {
		return fmt.Errorf("uploading: %w", err)
	}
	k := d.Kernels()
	if err := k.Fill(device.Fill{DType: device.Float32, N: n, X: y, Value: 1}); err != nil {
		return err
	}
	if err := k.Axpby(device.Axpby{DType: device.Float32, N: n, Alpha: 2, Beta: 3, X: x, Y: y}); err != nil {
		return err
	}
	// Read the result back through a staging buffer on this worker's own
	// stream, after the compute stream's work.
	h, err := d.Staging(4 * int64(n))
	if err != nil {
		return err
	}
	ev, err := d.Stream().Record()
	if err != nil {
		return err
	}
	if err := s.Wait(ev); err != nil {
		return err
	}
	done, err := d.CopyToHost(h.Slice(0, 4*int64(n)), y.Slice(0, 4*int64(n)), s)
	if err != nil {
		return err
	}
	if err := done.Wait(); err != nil {
		return err
	}
	got := float32s(h.Bytes()[:4*n])
	for i, v := range got {
		if want := 2*float64(src[i]) + 3; v != want {
			return fmt.Errorf("element %d: got %v, want %v", i, v, want)
		}
	}
	if err := d.FreeStaging(h); err != nil {
		return err
	}
	// Free queues nothing: the next work of any goroutine may reuse the
	// memory, which the compute stream's order makes safe.
	if err := d.Free(x); err != nil {
		return err
	}
	return d.Free(y)
}

// float32s reads little-endian float32s.
func float32s(b []byte) []float64 {
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

// call2 is call for a function that also returns a bool.
func call2(t testing.TB, what string, f func() (bool, error)) (ok bool, err error) {
	t.Helper()
	err = call(t, what, func() (err error) {
		ok, err = f()
		return err
	})
	return ok, err
}

func (e *env) record(s device.Stream) device.Event {
	e.t.Helper()
	var ev device.Event
	err := call(e.t, "Stream.Record", func() (err error) {
		ev, err = s.Record()
		return err
	})
	if err != nil {
		e.t.Fatalf("Stream.Record: %v", err)
	}
	if ev == nil {
		e.t.Fatalf("Stream.Record returned a nil Event")
	}
	return ev
}

// newStream returns a new stream that is closed when the test ends.
func (e *env) newStream() device.Stream {
	e.t.Helper()
	var s device.Stream
	err := call(e.t, "NewStream", func() (err error) {
		s, err = e.dev.NewStream()
		return err
	})
	if err != nil {
		e.t.Fatalf("NewStream: %v", err)
	}
	e.t.Cleanup(func() { _ = call(e.t, "Stream.Close", s.Close) })
	return s
}

func (e *env) staging(bytes int64) device.HostBuffer {
	e.t.Helper()
	var h device.HostBuffer
	err := call(e.t, "Staging", func() (err error) {
		h, err = e.dev.Staging(bytes)
		return err
	})
	if err != nil {
		e.t.Fatalf("Staging(%d): %v", bytes, err)
	}
	if h.Len() < bytes {
		e.t.Fatalf("Staging(%d) returned %d bytes, want at least %d", bytes, h.Len(), bytes)
	}
	return h
}

func (e *env) freeStaging(h device.HostBuffer) {
	e.t.Helper()
	if err := call(e.t, "FreeStaging", func() error { return e.dev.FreeStaging(h) }); err != nil {
		e.t.Errorf("FreeStaging: %v", err)
	}
}

func (e *env) copyToDevice(dst device.Buffer, src device.HostBuffer, s device.Stream) device.Event {
	e.t.Helper()
	var ev device.Event
	err := call(e.t, "CopyToDevice", func() (err error) {
		ev, err = e.dev.CopyToDevice(dst, src, s)
		return err
	})
	if err != nil {
		e.t.Fatalf("CopyToDevice: %v", err)
	}
	return ev
}

func (e *env) copyToHost(dst device.HostBuffer, src device.Buffer, s device.Stream) device.Event {
	e.t.Helper()
	var ev device.Event
	err := call(e.t, "CopyToHost", func() (err error) {
		ev, err = e.dev.CopyToHost(dst, src, s)
		return err
	})
	if err != nil {
		e.t.Fatalf("CopyToHost: %v", err)
	}
	return ev
}
