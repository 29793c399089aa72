package cpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/driver"
)

// graphs is a lane's part in graphs (device.Grapher): the memory they keep
// and the recording under way. On the CPU device a graph is the list of
// commands its capture queued, run again by one command of its own: a
// replay costs one enqueue instead of hundreds, skips the argument checks
// and the layers' Go code, and computes the same bits, being the same
// commands.
type graphs struct {
	mem driver.GraphMemory
	// rec is the graph whose commands the compute stream is recording,
	// under the stream's mu; nil when none.
	rec *graph
}

// graph is a recorded list of commands of a lane's compute stream.
type graph struct {
	l      *lane
	cmds   []cmd
	blocks *driver.GraphBlocks
	counts device.Counts // what one replay queues, counted as the calls were
	// tally counts the calls recorded into the graph as they are made
	// (kernels.launchAs), apart from the device's counts, which other
	// streams' work meanwhile adds to.
	tally counts

	mu     sync.Mutex
	closed bool
}

var (
	_ device.Grapher = (*Device)(nil)
	_ device.Grapher = (*Scope)(nil)
	_ device.Graph   = (*graph)(nil)
)

// Capture records the commands record queues on the compute stream.
func (l *lane) Capture(record func() error) (device.Graph, error) {
	if err := l.checkOpen("Capture"); err != nil {
		return nil, err
	}
	blocks, err := l.graphs.mem.Begin(l.owner.Name(), driver.LiveBlocks(l.d.mem, l.scope))
	if err != nil {
		return nil, err
	}
	g := &graph{l: l, blocks: blocks}
	s := l.compute
	s.mu.Lock()
	l.graphs.rec = g
	s.mu.Unlock()
	rerr := record()
	s.mu.Lock()
	l.graphs.rec = nil
	s.mu.Unlock()
	if l.unjoined(g) && rerr == nil {
		rerr = fmt.Errorf("%s: Capture: a branch forked during the capture was not joined: %w", l.owner.Name(), device.ErrNotCapturable)
	}
	l.graphs.mem.End()
	if rerr != nil {
		return nil, errors.Join(rerr, l.freeBlocks(blocks))
	}
	t := &g.tally
	g.counts = device.Counts{Launches: t.launches.Load(), GEMMs: t.gemms.Load(), Copies: t.copies.Load()}
	return g, nil
}

// inCapture is the error of what, an operation a recording cannot hold (a
// wait, an event, a copy to or from the host), while the lane's compute
// stream records; nil otherwise.
func (l *lane) inCapture(what string) error {
	if !l.graphs.mem.Capturing() {
		return nil
	}
	return fmt.Errorf("%s: %s while the compute stream is being captured: %w", l.owner.Name(), what, device.ErrNotCapturable)
}

func (l *lane) freeBlocks(blocks *driver.GraphBlocks) error {
	return driver.FreeAll(l.d.mem, l.graphs.mem.Release(blocks))
}

// allocated notes a block just allocated, for the graph being captured.
func (l *lane) allocated(p alloc.Ptr) { l.graphs.mem.Allocated(p) }

// Launch queues the graph's commands, as one command, on the compute
// stream.
func (g *graph) Launch() error {
	l := g.l
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("%s: Graph.Launch: the graph is %w", l.owner.Name(), device.ErrClosed)
	}
	if err := l.checkOpen("Graph.Launch"); err != nil {
		return err
	}
	if err := l.inCapture("Graph.Launch"); err != nil {
		return err
	}
	if _, err := l.compute.enqueue(func(c *cmd) { c.op, c.graph = opGraph, g }); err != nil {
		return err
	}
	d := l.d
	d.counts.graphs.Add(1)
	d.counts.launches.Add(g.counts.Launches)
	d.counts.gemms.Add(g.counts.GEMMs)
	d.counts.copies.Add(g.counts.Copies)
	d.counts.replayed.Add(g.counts.Launches + g.counts.GEMMs + g.counts.Copies)
	return nil
}

// Close gives back the memory the graph kept; the launches queued still
// run (their command holds the graph).
func (g *graph) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	if g.l.closed.Load() || g.l.d.closed.Load() {
		return nil // its memory went with the lane's
	}
	return g.l.freeBlocks(g.blocks)
}

// run executes the graph's commands in order on s, the compute stream's
// worker, and returns the first error they raised; the later ones still
// run, as kernels after a failed one do on a GPU. Each error becomes the
// stream's as it is raised, as the worker makes a command's, so that a
// StepGuard later in the graph sees it (an index error not yet reported
// refuses the step).
func (g *graph) run(s *stream) error {
	var first error
	for i := range g.cmds {
		if err := s.exec(&g.cmds[i]); err != nil && first == nil {
			first = err
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
		}
	}
	return first
}
