package driver

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// GraphMemory keeps the blocks that a device's graphs may use out of the
// cache for as long as those graphs live (device.Grapher's memory rule),
// for a device whose memory is an alloc.Caching: one per compute stream
// that captures (a device's, a scope's). A replay reads and writes exactly
// the addresses its capture used, which can be any block live while it
// was captured: one allocated before (a layer's buffer), during (a
// temporary), freed during. Such a block, once its owner frees it, must
// not be handed to anyone else while a graph that uses it may still be
// launched: the replay would overwrite what the new owner keeps there (a
// layer that grows a buffer for another shape frees the old one, which
// the graph captured before still writes).
//
// The device calls Begin (with the blocks live in its allocation scope)
// and End around Capture's record, Allocated after each Alloc, Keep before
// each Free, and Release when a graph closes; it gives Release's blocks
// back to the cache itself. Safe for concurrent use.
type GraphMemory struct {
	mu        sync.Mutex
	capturing *GraphBlocks
	// refs counts, per block, the live graphs that may write it; freed
	// says its owner freed it (it goes back to the cache when refs drops
	// to 0).
	refs  map[alloc.Ptr]int
	freed map[alloc.Ptr]bool
}

// GraphBlocks are the blocks one graph may write that the cache must not
// hand out while it lives.
type GraphBlocks struct {
	blocks   map[alloc.Ptr]struct{}
	released bool
}

// Begin starts recording the blocks of a capture: live, the blocks
// allocated when it begins, and those allocated until End. Only one
// capture at a time: a second is an error matching
// device.ErrNotCapturable.
func (m *GraphMemory) Begin(name string, live []alloc.Ptr) (*GraphBlocks, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.capturing != nil {
		return nil, fmt.Errorf("%s: Capture: another capture is under way on the same compute stream: %w", name, device.ErrNotCapturable)
	}
	if m.refs == nil {
		m.refs, m.freed = map[alloc.Ptr]int{}, map[alloc.Ptr]bool{}
	}
	g := &GraphBlocks{blocks: make(map[alloc.Ptr]struct{}, len(live))}
	for _, p := range live {
		m.add(g, p)
	}
	m.capturing = g
	return g, nil
}

// LiveBlocks lists the blocks of allocation scope sc that c has handed
// out and not had back: what Begin takes.
func LiveBlocks(c *alloc.Caching, sc alloc.Scope) []alloc.Ptr {
	var out []alloc.Ptr
	for _, seg := range c.Snapshot().Segments {
		if seg.Scope != sc {
			continue
		}
		for _, b := range seg.Blocks {
			if b.State == alloc.BlockActiveAllocated {
				out = append(out, b.Address)
			}
		}
	}
	return out
}

// End stops recording the blocks of the capture Begin started.
func (m *GraphMemory) End() {
	m.mu.Lock()
	m.capturing = nil
	m.mu.Unlock()
}

// Capturing reports whether a capture is under way.
func (m *GraphMemory) Capturing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.capturing != nil
}

// Allocated notes p, just allocated: during a capture, the graph may
// write it.
func (m *GraphMemory) Allocated(p alloc.Ptr) {
	m.mu.Lock()
	if g := m.capturing; g != nil {
		m.add(g, p)
	}
	m.mu.Unlock()
}

func (m *GraphMemory) add(g *GraphBlocks, p alloc.Ptr) {
	if _, ok := g.blocks[p]; !ok {
		g.blocks[p] = struct{}{}
		m.refs[p]++
	}
}

// Keep is called when p's owner frees it: it reports whether a graph keeps
// p, in which case the caller must not give it back to the cache (Release
// returns it when the last graph that may use it closes).
func (m *GraphMemory) Keep(p alloc.Ptr) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.capturing; g != nil {
		m.add(g, p)
	}
	if m.refs[p] == 0 {
		return false
	}
	m.freed[p] = true
	return true
}

// Release drops g's claims and returns the blocks whose owners freed them
// and that no live graph may write any more: the caller frees them. It is
// idempotent.
func (m *GraphMemory) Release(g *GraphBlocks) []alloc.Ptr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g == nil || g.released {
		return nil
	}
	g.released = true
	var out []alloc.Ptr
	for p := range g.blocks {
		if m.refs[p]--; m.refs[p] > 0 {
			continue
		}
		delete(m.refs, p)
		if m.freed[p] {
			delete(m.freed, p)
			out = append(out, p)
		}
	}
	return out
}

// FreeAll gives blocks (Release's) back to c, joining the errors.
func FreeAll(c *alloc.Caching, blocks []alloc.Ptr) error {
	var errs []error
	for _, p := range blocks {
		errs = append(errs, c.Free(p))
	}
	return errors.Join(errs...)
}
