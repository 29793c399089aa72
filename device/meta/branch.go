package meta

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// branch is a meta device's device.Branch: its kernels check their
// arguments and run nothing, as the device's, and it keeps the books of
// what a real branch holds (the cuBLAS workspace of its own, when the
// Config has one) and of the rules of a capture (a branch forked during
// it must be joined before it ends).
type branch struct {
	d  *Device
	ws alloc.Ptr // its workspace, 0 for none
	// id is the allocator stream its kernels' temporaries come from: a
	// closed branch's, or a new one (as a CUDA branch's), so that the
	// books of the caches per stream are the CUDA device's.
	id alloc.Stream

	mu     sync.Mutex
	forked bool // forked during the capture under way, not joined since
	closed bool
}

var (
	_ device.Brancher = (*Device)(nil)
	_ device.Branch   = (*branch)(nil)
)

// Branch opens a branch, allocating a workspace of Config.Workspace bytes
// for it as a CUDA branch does for its cuBLAS handle.
func (d *Device) Branch() (device.Branch, error) {
	if err := d.checkOpen("Branch"); err != nil {
		return nil, err
	}
	if err := d.inCapture("Branch"); err != nil {
		return nil, err // as CUDA, which makes no stream inside a capture
	}
	b := &branch{d: d}
	if d.cfg.Workspace > 0 {
		p, err := d.mem.AllocCategory(d.cfg.Workspace, 0, alloc.Workspace)
		if err != nil {
			return nil, fmt.Errorf("%s: Branch: its workspace: %w", d.cfg.Name, err)
		}
		b.ws = p
	}
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		b.id, d.idle = d.idle[n-1], d.idle[:n-1]
	} else {
		d.nextID++
		b.id = d.nextID
	}
	d.branches = append(d.branches, b)
	d.mu.Unlock()
	return b, nil
}

func (b *branch) Kernels() device.Kernels { return kernels{d: b.d, temps: b.id} }

func (b *branch) check(what string) error {
	if err := b.d.checkOpen("Branch." + what); err != nil {
		return err
	}
	if b.closed {
		return fmt.Errorf("%s: Branch.%s: the branch is %w", b.d.cfg.Name, what, device.ErrClosed)
	}
	return nil
}

// Fork notes a fork during a capture.
func (b *branch) Fork() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check("Fork"); err != nil {
		return err
	}
	b.forked = b.d.graphs.Capturing()
	return nil
}

// Join ends the branch's part in a capture.
func (b *branch) Join() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check("Join"); err != nil {
		return err
	}
	b.forked = false
	return nil
}

// Close frees the branch's workspace.
func (b *branch) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	d := b.d
	d.mu.Lock()
	if i := slices.Index(d.branches, b); i >= 0 {
		d.branches = slices.Delete(d.branches, i, i+1)
	}
	d.idle = append(d.idle, b.id)
	d.mu.Unlock()
	if b.ws == 0 || d.closed.Load() {
		return nil
	}
	return b.d.mem.Free(b.ws)
}

// unjoined reports whether a branch forked during the capture ending was
// not joined, and ends its part in it.
func (d *Device) unjoined() bool {
	d.mu.Lock()
	branches := slices.Clone(d.branches)
	d.mu.Unlock()
	found := false
	for _, b := range branches {
		b.mu.Lock()
		found = found || b.forked
		b.forked = false
		b.mu.Unlock()
	}
	return found
}
