package train_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// errFree and errAlloc are the failures failDevice injects.
var (
	errFree  = errors.New("injected Free failure")
	errAlloc = errors.New("injected Alloc failure")
)

// failDevice wraps the test device to count its Alloc and Free calls
// while armed, and to fail some: Free after freeing (the freeAt-th call,
// or every one with freeAt < 0), Alloc without allocating (the allocAt-th
// call). Its buffers belong to the device it wraps, so the model is built
// on that one: a layer refuses a buffer of another device.
type failDevice struct {
	device.Device
	mu              sync.Mutex
	armed           bool
	allocs, frees   int
	allocAt, freeAt int
}

// arm starts counting from zero with the given failures (0: none).
func (d *failDevice) arm(allocAt, freeAt int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed, d.allocs, d.frees, d.allocAt, d.freeAt = true, 0, 0, allocAt, freeAt
}

// disarm stops counting and failing, and returns the counts.
func (d *failDevice) disarm() (allocs, frees int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = false
	return d.allocs, d.frees
}

func (d *failDevice) Alloc(n int64, cat device.Category) (device.Buffer, error) {
	d.mu.Lock()
	fail := false
	if d.armed {
		d.allocs++
		fail = d.allocs == d.allocAt
	}
	d.mu.Unlock()
	if fail {
		return device.Buffer{}, errAlloc
	}
	return d.Device.Alloc(n, cat)
}

func (d *failDevice) Free(b device.Buffer) error {
	err := d.Device.Free(b)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed {
		d.frees++
		if d.freeAt < 0 || d.frees == d.freeAt {
			return errors.Join(err, errFree)
		}
	}
	return err
}

func allocated(d device.Device) int64 { return d.MemStats().AllocatedBytes[alloc.AllPools].Current }

// TestCloseReportsEveryFree: Trainer.Close and Sample report a failure of
// any one of the frees they make: the optimizer's state, the loss, the
// norm's scalar, the carried states and their backups, the sample's ids.
func TestCloseReportsEveryFree(t *testing.T) {
	d := &failDevice{Device: testdevice.Open(t)}
	m := newLM(t, d.Device, lmConfig{vocab: 6, embed: 3, hidden: 4, layers: 1, seed: 1})
	txt := text(t, 400, 6, 1)
	l := newLoader(t, d, txt, loader.Config{Batch: 2, Seq: 4, Accum: 2})
	newT := func() *train.Trainer {
		tr, err := train.New(d, m, l, train.Config{Steps: 1})
		check(t, err)
		return tr
	}
	d.arm(0, 0)
	check(t, newT().Close())
	_, frees := d.disarm()
	if frees < 10 { // Adam's 2 slots × 3 groups, the loss's 2, the norm, 2 states, their backups
		t.Fatalf("Close freed %d buffers; the test expects at least 10", frees)
	}
	for k := 1; k <= frees; k++ {
		tr := newT()
		d.arm(0, k)
		err := tr.Close()
		d.disarm()
		if !errors.Is(err, errFree) {
			t.Errorf("Close with free %d of %d failing: %v, want the failure", k, frees, err)
		}
	}

	sample := func() error {
		return train.Sample(context.Background(), d, m, train.SampleConfig{N: 3, Prime: []int32{1}},
			func(int32) error { return nil })
	}
	d.arm(0, 0)
	check(t, sample())
	_, frees = d.disarm()
	for k := 1; k <= frees; k++ {
		d.arm(0, k)
		err := sample()
		d.disarm()
		if !errors.Is(err, errFree) {
			t.Errorf("Sample with free %d of %d failing: %v, want the failure", k, frees, err)
		}
	}
}

// TestNewFailureCleanup: New failing at any allocation frees what it made
// and reports a failure to free it.
func TestNewFailureCleanup(t *testing.T) {
	d := &failDevice{Device: testdevice.Open(t)}
	m := newLM(t, d.Device, lmConfig{vocab: 6, embed: 3, hidden: 4, layers: 1, seed: 1})
	txt := text(t, 400, 6, 1)
	l := newLoader(t, d, txt, loader.Config{Batch: 2, Seq: 4, Accum: 2})
	d.arm(0, 0)
	tr, err := train.New(d, m, l, train.Config{Steps: 1})
	check(t, err)
	allocs, _ := d.disarm()
	check(t, tr.Close())
	for k := 1; k <= allocs; k++ {
		before := allocated(d)
		d.arm(k, -1)
		_, err := train.New(d, m, l, train.Config{Steps: 1})
		_, frees := d.disarm()
		if !errors.Is(err, errAlloc) {
			t.Errorf("New with allocation %d of %d failing: %v, want the failure", k, allocs, err)
		}
		if frees > 0 && !errors.Is(err, errFree) {
			t.Errorf("New with allocation %d of %d failing and %d failed frees: %v, want the frees' failure too", k, allocs, frees, err)
		}
		if after := allocated(d); after != before {
			t.Errorf("New with allocation %d of %d failing left %d bytes allocated", k, allocs, after-before)
		}
	}
}
