package mpi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/internal/closedtest"
)

// caseVar selects the part TestRank plays in a job the other tests start.
const caseVar = "GOCURRENT_MPI_TEST_CASE"

// TestRank is one rank of a job started by the tests in mpi_test.go, under
// mpirun (or alone, for the singleton case): it runs the case named by
// GOCURRENT_MPI_TEST_CASE and fails, so the process exits non-zero, when
// the case does.
func TestRank(t *testing.T) {
	name := os.Getenv(caseVar)
	if name == "" {
		t.Skip(caseVar + " is unset: TestRank is one rank of a job that the other tests start under mpirun")
	}
	cases := map[string]func(*testing.T){
		"collectives": rankCollectives,
		"hang":        rankHang,
		"exit":        rankExit,
		"singleton":   rankSingleton,
	}
	run, ok := cases[name]
	if !ok {
		t.Fatalf("%s=%q: no such case", caseVar, name)
	}
	run(t)
}

// open joins the world and makes a communicator on a CPU device; all are
// closed when the test ends, the World last.
func open(t *testing.T, timeout time.Duration) (*World, *cpu.Device, dist.Comm) {
	t.Helper()
	w, err := Join(dist.Config{})
	if err != nil {
		t.Fatalf("Join: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("World.Close: %v", err)
		}
	})
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatalf("cpu.Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	c, err := New(d, w, dist.Config{Timeout: timeout})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return w, d, c
}

func bytesOf[T any](v []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(v[0])))
}

// allReduce uploads v, sums it over the ranks and downloads the result.
func allReduce[T float32 | float64](t *testing.T, d *cpu.Device, c dist.Comm, dt device.DType, v []T) []T {
	t.Helper()
	src := bytesOf(v)
	b, err := d.Alloc(int64(len(src)), device.Gradients)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(b)
	if err := d.Upload(b, src); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AllReduce(b, dt, d.Stream()); err != nil {
		t.Fatalf("AllReduce: %v", err)
	}
	got := make([]T, len(v))
	if err := d.Download(bytesOf(got), b); err != nil {
		t.Fatalf("AllReduce, then Download: %v", err)
	}
	return got
}

// checkSum all-reduces rank r's v[i] = i%1000 + r/2 over size ranks: every
// term and partial sum is a small multiple of 1/2, exact in float32, so
// the sum must be size*(i%1000) + size*(size-1)/4 exactly, and the same
// bits on every rank (checked against rank 0's by a broadcast).
func checkSum[T float32 | float64](t *testing.T, w *World, d *cpu.Device, c dist.Comm, dt device.DType, n int) {
	t.Helper()
	r, size := float64(w.Rank()), float64(w.Size())
	v := make([]T, n)
	for i := range v {
		v[i] = T(float64(i%1000) + r/2)
	}
	got := allReduce(t, d, c, dt, v)
	for i, g := range got {
		if want := T(size*float64(i%1000) + size*(size-1)/4); g != want {
			t.Fatalf("rank %d: all-reduce of %d %v: element %d is %v, want %v", w.Rank(), n, dt, i, g, want)
		}
	}
	mine := bytesOf(got)
	root := bytes.Clone(mine)
	if err := w.Broadcast(root, 0); err != nil {
		t.Fatalf("World.Broadcast: %v", err)
	}
	if !bytes.Equal(mine, root) {
		t.Fatalf("rank %d: all-reduce of %d %v: the sum's bits differ from rank 0's", w.Rank(), n, dt)
	}
}

func rankCollectives(t *testing.T) {
	w, d, c := open(t, 30*time.Second)
	if w.Size() < 2 {
		t.Fatalf("world of %d ranks, want at least 2 (run under mpirun)", w.Size())
	}
	if c.Rank() != w.Rank() || c.Size() != w.Size() || c.Backend() != "mpi" {
		t.Fatalf("comm: rank %d of %d, backend %q; want rank %d of %d, \"mpi\"", c.Rank(), c.Size(), c.Backend(), w.Rank(), w.Size())
	}
	// 1<<20 elements: 4 MiB of float32, 8 MiB of float64.
	for _, n := range []int{1, 1000, 1 << 20} {
		checkSum[float32](t, w, d, c, device.Float32, n)
		checkSum[float64](t, w, d, c, device.Float64, n)
	}
	// A vector longer than one MPI call moves (INT_MAX elements, lowered
	// here) takes several calls.
	w.maxCount = 1000
	checkSum[float32](t, w, d, c, device.Float32, 2500)
	w.maxCount = 1<<31 - 1

	// Broadcast of device bytes from rank 1.
	const root = 1
	b, err := d.Alloc(1000, device.Other)
	if err != nil {
		t.Fatal(err)
	}
	mine := make([]byte, 1000)
	for i := range mine {
		mine[i] = byte(i*7 + w.Rank())
	}
	if err := d.Upload(b, mine); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Broadcast(b, root, d.Stream()); err != nil {
		t.Fatalf("Broadcast: %v", err)
	}
	got := make([]byte, 1000)
	if err := d.Download(got, b); err != nil {
		t.Fatalf("Broadcast, then Download: %v", err)
	}
	for i, g := range got {
		if want := byte(i*7 + root); g != want {
			t.Fatalf("rank %d: Broadcast from rank %d: byte %d is %d, want %d", w.Rank(), root, i, g, want)
		}
	}

	// World.Broadcast of 128 bytes (the size of NCCL's unique id).
	id := make([]byte, 128)
	if w.Rank() == 0 {
		for i := range id {
			id[i] = byte(255 - i)
		}
	}
	if err := w.Broadcast(id, 0); err != nil {
		t.Fatalf("World.Broadcast: %v", err)
	}
	for i, g := range id {
		if want := byte(255 - i); g != want {
			t.Fatalf("rank %d: World.Broadcast: byte %d is %d, want %d", w.Rank(), i, g, want)
		}
	}
	if err := w.Barrier(); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err: %v, want nil", err)
	}
	if w.Size() == 2 {
		benchAllReduce(t, w, d, c)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.AllReduce(b, device.Float32, d.Stream()); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("AllReduce after Close: %v, want device.ErrClosed", err)
	}
}

// benchAllReduce logs the mean time of an all-reduce of float32 vectors,
// through the communicator (queued on the stream, then waited for).
// Figures, not assertions: they depend on the machine.
func benchAllReduce(t *testing.T, w *World, d *cpu.Device, c dist.Comm) {
	const calls = 50
	for _, bytes := range []int64{4 << 10, 1 << 20, 4 << 20} {
		b, err := d.Alloc(bytes, device.Gradients)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Upload(b, make([]byte, bytes)); err != nil {
			t.Fatal(err)
		}
		run := func() {
			if _, err := c.AllReduce(b, device.Float32, d.Stream()); err != nil {
				t.Fatal(err)
			}
			if err := d.Stream().Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
		for range 5 {
			run()
		}
		if err := w.Barrier(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for range calls {
			run()
		}
		mean := time.Since(start) / calls
		if w.Rank() == 0 {
			t.Logf("bench: all-reduce of %s of float32 on %d ranks: %v per call (mean of %d)", size(bytes), w.Size(), mean, calls)
		}
		d.Free(b)
	}
}

func size(b int64) string {
	if b >= 1<<20 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// rankHang: rank 1 never joins the all-reduce; rank 0's watchdog must end
// the job after its 2 s timeout.
func rankHang(t *testing.T) {
	w, d, c := open(t, 2*time.Second)
	if w.Rank() == 1 {
		time.Sleep(time.Hour)
	}
	allReduce(t, d, c, device.Float32, make([]float32, 1024))
	t.Fatalf("rank %d: the all-reduce returned, though rank 1 never joined it", w.Rank())
}

// rankExit: rank 1 exits with status 3 before the all-reduce; mpirun must
// end rank 0, which waits in it (its watchdog would take a minute).
func rankExit(t *testing.T) {
	w, d, c := open(t, time.Minute)
	if w.Rank() == 1 {
		os.Exit(3)
	}
	allReduce(t, d, c, device.Float32, make([]float32, 1024))
	t.Fatalf("rank %d: the all-reduce returned, though rank 1 exited", w.Rank())
}

// rankSingleton runs outside mpirun: a world of one rank.
func rankSingleton(t *testing.T) {
	t.Cleanup(func() { // after the World's last Close
		if _, err := Join(dist.Config{}); !errors.Is(err, errFinalized) {
			t.Errorf("Join after the last Close: %v, want %v", err, errFinalized)
		}
	})
	w, d, c := open(t, 30*time.Second)
	if w.Rank() != 0 || w.Size() != 1 {
		t.Fatalf("singleton: rank %d of %d, want 0 of 1", w.Rank(), w.Size())
	}
	again, err := Join(dist.Config{})
	if err != nil || again != w {
		t.Fatalf("a second Join: %p, %v; want the same World %p", again, err, w)
	}
	if err := again.Close(); err != nil {
		t.Fatalf("the second Join's Close: %v", err)
	}
	if err := w.Barrier(); err != nil {
		t.Fatalf("Barrier after the second user's Close: %v", err)
	}
	// A device without host functions on its streams (the CPU device,
	// hidden behind device.Device) has no MPI communicator.
	if _, err := New(struct{ device.Device }{d}, w, dist.Config{}); err == nil || !strings.Contains(err.Error(), "device.HostCaller") {
		t.Fatalf("New on a device that is not a device.HostCaller: %v, want an error naming device.HostCaller", err)
	}
	_, err = Join(dist.Config{MPILibrary: "/elsewhere/libmpi.so.40"})
	if err == nil {
		t.Fatal("Join from another library while MPI is initialised: nil error")
	}
	checkSum[float32](t, w, d, c, device.Float32, 3000)
	checkSum[float64](t, w, d, c, device.Float64, 3000)

	// MPI's own argument check (past World.Broadcast's): an error code,
	// returned rather than fatal, with MPI_Error_string's text.
	err = w.do(func() error { return w.bcast(make([]byte, 8), mpiByte, 1, 5) })
	var mpiErr *Error
	if !errors.As(err, &mpiErr) || mpiErr.Op != "MPI_Bcast" || mpiErr.Code == 0 || mpiErr.Message == "" || mpiErr.Message == "unknown error" {
		t.Fatalf("MPI_Bcast from root 5 of 1: %v; want an *Error from MPI_Bcast with MPI's text", err)
	}
	t.Logf("MPI_Bcast from root 5 of 1: %v", err)
	if err := w.Barrier(); err != nil {
		t.Fatalf("Barrier after an MPI error: %v", err)
	}

	// Every method of a closed communicator (closedtest lists them): the
	// collectives and Err are device.ErrClosed, Abort does not end the
	// job, the getters answer, a second Close returns nil.
	b, err := d.Alloc(8, device.Gradients)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed := func(f func() error) closedtest.Call { return closedtest.Call{Closed: true, F: f, Says: "mpi"} }
	getter := func(f func() error) closedtest.Call { return closedtest.Call{F: f} }
	closedtest.Check(t, "comm", c, device.ErrClosed, map[string]closedtest.Call{
		"AllReduce": closed(func() error { _, err := c.AllReduce(b, device.Float32, d.Stream()); return err }),
		"Broadcast": closed(func() error { _, err := c.Broadcast(b, 0, d.Stream()); return err }),
		"Err":       closed(c.Err),
		"Abort":     getter(func() error { c.Abort(errors.New("after Close")); return w.Barrier() }),
		"Rank":      getter(func() error { c.Rank(); return nil }),
		"Size":      getter(func() error { c.Size(); return nil }),
		"Backend":   getter(func() error { c.Backend(); return nil }),
		"Stats":     getter(func() error { c.(dist.Counter).Stats(); return nil }),
		"Close":     getter(c.Close),
	})
}
