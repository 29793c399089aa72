package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	devdriver "github.com/gocurrent/gocurrent/device/driver"
)

// graphs is a lane's part in CUDA graphs (device.Grapher): the memory its
// graphs keep, whether its compute stream is being captured, and the
// graphs still open, which the lane's Close destroys.
type graphs struct {
	mem devdriver.GraphMemory
	// id is the capture going on, numbered from 1 in the lane, 0 when
	// none: the branches forked during it keep it (branch.forkedIn).
	id   atomic.Uint64
	last uint64 // the last capture's id; only Capture, one at a time, uses it
	// tally counts the work the capture going on records (countingAPI):
	// its compute stream's, and its branches' from their Fork.
	tally atomic.Pointer[counts]

	mu   sync.Mutex
	live map[*graph]struct{}
	// closed are the branches closed during the capture going on, which
	// its end releases.
	closed []*branch
}

// graph is a captured, instantiated CUDA graph of a lane's compute stream.
type graph struct {
	l      *lane
	g      cuGraph
	exec   cuExec
	blocks *devdriver.GraphBlocks
	// counts are the launches, GEMMs and copies one replay queues: what
	// the calls recorded would have been counted as.
	counts device.Counts

	mu     sync.Mutex
	closed bool
}

var (
	_ device.Grapher = (*Device)(nil)
	_ device.Grapher = (*Scope)(nil)
	_ device.Graph   = (*graph)(nil)
)

// Capture records the work record queues on the compute stream into a
// CUDA graph (stream capture in relaxed mode: see api.StreamBeginCapture)
// and instantiates it. The device refuses, during record, what a captured
// stream must not do (inCapture); cuBLAS captures as it is, its workspace
// being set already. A driver without graphs (before 11.4) is an error
// matching device.ErrNotCapturable.
//
// Branches forked during record (branch.go) are captured with the compute
// stream, as parallel branches of the graph, by CUDA's cross-stream
// capture; the graph's counts include their work. A branch forked and not
// joined back fails the capture with device.ErrNotCapturable (the driver's
// CUDA_ERROR_STREAM_CAPTURE_UNJOINED, which the device's own books say
// first), and is out of the capture afterwards, usable again.
func (l *lane) Capture(record func() error) (device.Graph, error) {
	if err := l.checkOpen("Capture"); err != nil {
		return nil, err
	}
	d := l.d
	if !d.api.Graphs() {
		return nil, fmt.Errorf("%s: Capture: the CUDA driver has no graphs (they need 11.4): %w", l.name, device.ErrNotCapturable)
	}
	if err := l.readyBLAS(); err != nil {
		return nil, fmt.Errorf("%s: Capture: %w", l.name, err)
	}
	blocks, err := l.graphs.mem.Begin(l.name, devdriver.LiveBlocks(l.d.mem, l.scope))
	if err != nil {
		return nil, err
	}
	l.graphs.last++
	id := l.graphs.last
	tally := &counts{}
	l.graphs.tally.Store(tally)
	d.captures.add(l.compute.s, l.blas, tally)
	defer d.captures.end(tally)
	l.graphs.id.Store(id)
	if err := d.api.StreamBeginCapture(d.ctx, l.compute.s); err != nil {
		l.graphs.id.Store(0)
		l.graphs.mem.End()
		return nil, errors.Join(fmt.Errorf("%s: Capture: %w", l.name, err), l.freeBlocks(blocks))
	}
	rerr := record()
	g, eerr := d.api.StreamEndCapture(d.ctx, l.compute.s)
	unjoined, berr := l.endBranches(id)
	l.graphs.mem.End()
	if unjoined && rerr == nil && eerr == nil {
		eerr = errors.New("a branch forked during the capture was not joined")
	}
	rerr = errors.Join(rerr, berr)
	// What record queued did not run: it runs, and is counted, at each
	// Launch.
	d.captures.end(tally)
	n := device.Counts{Launches: tally.launches.Load(), GEMMs: tally.gemms.Load(), Copies: tally.copies.Load()}
	var exec cuExec
	if rerr == nil && eerr == nil {
		exec, eerr = d.api.GraphInstantiate(d.ctx, g)
	}
	if rerr != nil || eerr != nil {
		if eerr != nil {
			eerr = fmt.Errorf("%s: Capture: %w: %w", l.name, device.ErrNotCapturable, eerr)
		}
		errs := []error{rerr, eerr, l.freeBlocks(blocks)}
		if g != 0 {
			errs = append(errs, d.api.GraphDestroy(d.ctx, g))
		}
		return nil, errors.Join(errs...)
	}
	gr := &graph{l: l, g: g, exec: exec, blocks: blocks, counts: device.Counts{Launches: n.Launches, GEMMs: n.GEMMs, Copies: n.Copies}}
	l.graphs.mu.Lock()
	if l.graphs.live == nil {
		l.graphs.live = map[*graph]struct{}{}
	}
	l.graphs.live[gr] = struct{}{}
	l.graphs.mu.Unlock()
	return gr, nil
}

// readyBLAS gives the cuBLAS handle its workspace now if a scope's first
// Gemm was to allocate it: not inside a capture, where setting it would
// be recorded nowhere and the allocation kept by the graph.
func (l *lane) readyBLAS() error {
	l.blasMu.Lock()
	defer l.blasMu.Unlock()
	return l.setWorkspace()
}

// inCapture is the error of an operation that a captured compute stream
// cannot hold (a wait, an event, a copy to or from the host), while the
// lane's stream is being captured; nil otherwise.
func (l *lane) inCapture(what string) error {
	if !l.graphs.mem.Capturing() {
		return nil
	}
	return fmt.Errorf("%s: %s while the compute stream is being captured: %w", l.name, what, device.ErrNotCapturable)
}

// freeBlocks gives back the blocks that only the graph of blocks kept.
func (l *lane) freeBlocks(blocks *devdriver.GraphBlocks) error {
	return devdriver.FreeAll(l.d.mem, l.graphs.mem.Release(blocks))
}

// Launch queues the graph on its lane's compute stream.
func (g *graph) Launch() error {
	l := g.l
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("%s: Graph.Launch: the graph is %w", l.name, device.ErrClosed)
	}
	if err := l.checkOpen("Graph.Launch"); err != nil {
		return err
	}
	if err := l.inCapture("Graph.Launch"); err != nil {
		return err
	}
	d := l.d
	if err := d.api.GraphLaunch(d.ctx, g.exec, l.compute.s); err != nil {
		return fmt.Errorf("%s: Graph.Launch: %w", l.name, err)
	}
	d.counts.graphs.Add(1)
	d.counts.launches.Add(g.counts.Launches)
	d.counts.gemms.Add(g.counts.GEMMs)
	d.counts.copies.Add(g.counts.Copies)
	d.counts.replayed.Add(g.counts.Launches + g.counts.GEMMs + g.counts.Copies)
	return nil
}

// Close destroys the graph and gives back the memory it kept. The
// launches already queued keep running: the driver defers the
// destruction of an executable graph until they completed, and the kept
// blocks go back to the cache of the compute stream, which hands them out
// only to work queued later.
func (g *graph) Close() error {
	l := g.l
	l.graphs.mu.Lock()
	delete(l.graphs.live, g)
	l.graphs.mu.Unlock()
	return g.destroy()
}

func (g *graph) destroy() error {
	l := g.l
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	d := l.d
	if d.closed.Load() {
		return nil // the context, and the graph with it, is gone
	}
	err := errors.Join(d.api.GraphExecDestroy(d.ctx, g.exec), d.api.GraphDestroy(d.ctx, g.g))
	if !l.isClosed() { // else the scope's memory went with it
		err = errors.Join(err, l.freeBlocks(g.blocks))
	}
	return err
}

// closeGraphs destroys the lane's graphs still open, as its Close begins
// releasing (after its work completed); their memory goes with the lane's.
func (l *lane) closeGraphs() error {
	l.graphs.mu.Lock()
	live := l.graphs.live
	l.graphs.live = nil
	l.graphs.mu.Unlock()
	var errs []error
	d := l.d
	for g := range live {
		g.mu.Lock()
		if !g.closed {
			g.closed = true
			errs = append(errs, d.api.GraphExecDestroy(d.ctx, g.exec), d.api.GraphDestroy(d.ctx, g.g))
			l.graphs.mem.Release(g.blocks)
		}
		g.mu.Unlock()
	}
	return errors.Join(errs...)
}

// allocated notes a block the lane just allocated, for the graph being
// captured.
func (l *lane) allocated(p alloc.Ptr) { l.graphs.mem.Allocated(p) }
