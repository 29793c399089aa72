package meta

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/driver"
)

// graph is a meta device's recorded work: nothing to replay, but the
// memory a real device's graph keeps (driver.GraphMemory), so that a plan
// of a run that replays its steps (train.Config.Graphs) allocates what
// the run does.
type graph struct {
	d      *Device
	blocks *driver.GraphBlocks

	mu     sync.Mutex
	closed bool
}

var (
	_ device.Grapher   = (*Device)(nil)
	_ device.Valueless = (*Device)(nil)
	_ device.Graph     = (*graph)(nil)
)

// Capture runs record and keeps the books of the graph's memory as the
// CPU and CUDA devices do. Like them it refuses waits, events and host
// copies on the compute stream while record runs.
func (d *Device) Capture(record func() error) (device.Graph, error) {
	if err := d.checkOpen("Capture"); err != nil {
		return nil, err
	}
	blocks, err := d.graphs.Begin(d.cfg.Name, driver.LiveBlocks(d.mem, 0))
	if err != nil {
		return nil, err
	}
	err = record()
	d.graphs.End()
	if d.unjoined() && err == nil {
		err = fmt.Errorf("%s: Capture: a branch forked during the capture was not joined: %w", d.cfg.Name, device.ErrNotCapturable)
	}
	if err != nil {
		return nil, errors.Join(err, driver.FreeAll(d.mem, d.graphs.Release(blocks)))
	}
	return &graph{d: d, blocks: blocks}, nil
}

// inCapture is the error of what on the compute stream while a graph is
// being recorded; nil otherwise.
func (d *Device) inCapture(what string) error {
	if !d.graphs.Capturing() {
		return nil
	}
	return fmt.Errorf("%s: %s while the compute stream is being captured: %w", d.cfg.Name, what, device.ErrNotCapturable)
}

// Launch does nothing: the meta device runs nothing.
func (g *graph) Launch() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("%s: Graph.Launch: the graph is %w", g.d.cfg.Name, device.ErrClosed)
	}
	if err := g.d.checkOpen("Graph.Launch"); err != nil {
		return err
	}
	return g.d.inCapture("Graph.Launch")
}

// Close gives back the memory the graph kept.
func (g *graph) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	if g.d.closed.Load() {
		return nil
	}
	return driver.FreeAll(g.d.mem, g.d.graphs.Release(g.blocks))
}
