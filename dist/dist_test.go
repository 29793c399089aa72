package dist_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/internal/closedtest"
	"github.com/gocurrent/gocurrent/internal/leak"
)

// TestFromEnv checks the launchers' variables: Open MPI's first, then
// torchrun's, one rank without either, and every malformed or
// inconsistent setting an error that names the variable.
func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want dist.Env
		err  string
	}{
		{"none", nil, dist.Env{Size: 1}, ""},
		{"mpirun", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
			dist.Env{Launcher: "mpirun", Rank: 2, Size: 4}, ""},
		{"mpirun first", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "0", "WORLD_SIZE": "8"},
			dist.Env{Launcher: "mpirun", Rank: 1, Size: 2}, ""},
		{"torchrun", map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
			dist.Env{Launcher: "torchrun", Rank: 3, Size: 4, LocalRank: 1, MasterAddr: "10.0.0.1", MasterPort: "29500"}, ""},
		{"torchrun of one", map[string]string{"RANK": "0", "WORLD_SIZE": "1"}, dist.Env{Launcher: "torchrun", Size: 1}, ""},
		{"rank past size", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"}, dist.Env{}, "rank 2 of 2"},
		{"no size", map[string]string{"OMPI_COMM_WORLD_RANK": "0"}, dist.Env{}, "OMPI_COMM_WORLD_SIZE is not set"},
		{"not a number", map[string]string{"RANK": "one", "WORLD_SIZE": "2"}, dist.Env{}, `RANK="one"`},
		{"no master", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, dist.Env{}, "MASTER_ADDR"},
		{"bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "99999"}, dist.Env{}, "MASTER_PORT"},
		{"zero size", map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, dist.Env{}, "world size 0"},
		{"negative local rank", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "-1"}, dist.Env{}, "local rank -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := dist.FromEnv(func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// TestSingle checks the communicator of one rank: its collectives leave
// the buffer as it is and return an event of the stream; a bad type, a
// partial element or a root past the ranks is an error; after Abort every
// call fails with ErrAborted and Err says why.
func TestSingle(t *testing.T) {
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := dist.Single()
	if c.Rank() != 0 || c.Size() != 1 || c.Backend() != "single" || c.Err() != nil {
		t.Fatalf("rank %d size %d backend %s err %v", c.Rank(), c.Size(), c.Backend(), c.Err())
	}
	b, _ := d.Alloc(8, device.Workspace)
	if err := device.UploadSlice(d, b, []float32{1.5, -2}); err != nil {
		t.Fatal(err)
	}
	e, err := c.AllReduce(b, device.Float32, d.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Broadcast(b, 0, d.Stream()); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 2)
	if err := device.DownloadSlice(d, got, b); err != nil || got[0] != 1.5 || got[1] != -2 {
		t.Fatalf("after the collectives: %v, %v; want [1.5 -2]", got, err)
	}
	if _, err := c.AllReduce(b, device.Int32, d.Stream()); err == nil {
		t.Error("AllReduce of int32: no error")
	}
	if _, err := c.AllReduce(b.Slice(0, 6), device.Float32, d.Stream()); !errors.Is(err, device.ErrShape) {
		t.Errorf("AllReduce of 6 bytes of float32: got %v, want ErrShape", err)
	}
	if _, err := c.Broadcast(b, 1, d.Stream()); err == nil {
		t.Error("Broadcast from rank 1 of 1: no error")
	}
	why := errors.New("why")
	c.Abort(why)
	if _, err := c.AllReduce(b, device.Float32, d.Stream()); !errors.Is(err, dist.ErrAborted) {
		t.Errorf("AllReduce after Abort: got %v, want ErrAborted", err)
	}
	if err := c.Err(); !errors.Is(err, dist.ErrAborted) || !strings.Contains(err.Error(), "why") {
		t.Errorf("Err after Abort: %v, want ErrAborted saying why", err)
	}
}

// TestWatchdog checks the watchdog: a collective that runs past the
// deadline aborts with a *TimeoutError naming it, once; one that
// completes is forgotten and aborts nothing; one whose poll fails aborts
// with that error; Stop ends its goroutine.
func TestWatchdog(t *testing.T) {
	before := leak.Count()
	const timeout = 50 * time.Millisecond
	aborts := make(chan error, 4)
	w := dist.NewWatchdog(1, 3, timeout, func(err error) { aborts <- err })

	var done atomic.Bool
	w.Watch("quick", func() (bool, error) { return done.Load(), nil })
	done.Store(true)
	start := time.Now()
	w.Watch("all-reduce of 8 bytes", func() (bool, error) { return false, nil })
	select {
	case err := <-aborts:
		var te *dist.TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, dist.ErrTimeout) || te.Rank != 1 || te.Size != 3 || te.Op != "all-reduce of 8 bytes" || te.After < timeout {
			t.Fatalf("abort with %v, want a TimeoutError of rank 1 of 3's all-reduce after ≥ %v", err, timeout)
		}
		if !strings.Contains(err.Error(), "rank 1 of 3: all-reduce of 8 bytes not done after") {
			t.Errorf("message %q", err)
		}
		if since := time.Since(start); since > 20*timeout {
			t.Errorf("aborted after %v, deadline %v", since, timeout)
		}
	case <-time.After(100 * timeout):
		t.Fatal("no abort")
	}
	select {
	case err := <-aborts:
		t.Fatalf("a second abort: %v", err)
	case <-time.After(4 * timeout):
	}

	broken := errors.New("remote error")
	forget := w.Watch("failing", func() (bool, error) { return false, broken })
	select {
	case err := <-aborts:
		if !errors.Is(err, broken) {
			t.Fatalf("abort with %v, want the poll's error", err)
		}
	case <-time.After(100 * timeout):
		t.Fatal("no abort for a failing poll")
	}
	forget()
	w.Watch("forgotten", func() (bool, error) { return false, nil })()
	select {
	case err := <-aborts:
		t.Fatalf("abort for a forgotten collective: %v", err)
	case <-time.After(4 * timeout):
	}
	w.Stop()
	w.Stop()
	leak.Expect(t, before, "the watchdog's goroutine")
}

// TestSingleClosed: after Close, Single's collectives and Err are
// device.ErrClosed, its getters answer, Abort changes nothing, and a
// second Close returns nil (every method: closedtest lists them).
func TestSingleClosed(t *testing.T) {
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b, err := d.Alloc(8, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	c := dist.Single()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed := func(f func() error) closedtest.Call { return closedtest.Call{Closed: true, F: f, Says: "single"} }
	closedtest.Check(t, "single", c, device.ErrClosed, map[string]closedtest.Call{
		"AllReduce": closed(func() error { _, err := c.AllReduce(b, device.Float32, d.Stream()); return err }),
		"Broadcast": closed(func() error { _, err := c.Broadcast(b, 0, d.Stream()); return err }),
		"Err":       closed(c.Err),
		"Abort": {F: func() error {
			c.Abort(errors.New("after Close"))
			if !errors.Is(c.Err(), device.ErrClosed) {
				return fmt.Errorf("Err after Close and Abort = %v, want the Close's", c.Err())
			}
			return nil
		}},
		"Rank":    {F: func() error { return expect(c.Rank(), 0, "Rank") }},
		"Size":    {F: func() error { return expect(c.Size(), 1, "Size") }},
		"Backend": {F: func() error { return expect(c.Backend(), "single", "Backend") }},
		"Close":   {F: c.Close},
	})
}

func expect[T comparable](got, want T, what string) error {
	if got != want {
		return fmt.Errorf("%s = %v, want %v", what, got, want)
	}
	return nil
}
