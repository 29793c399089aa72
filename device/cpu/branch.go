package cpu

import (
	"fmt"

	"github.com/gocurrent/gocurrent/device"
)

// branch is a second stream of a lane's kernels (device.Branch): a stream
// with a worker of its own, so that its work runs beside the compute
// stream's (both share the thread pool) and a missing Fork or Join gives
// wrong results, as on a GPU (not a report of the race detector: the
// pool's channel orders the two streams for it). While the lane records a graph, a branch forked
// during the recording queues its commands into the recording, in the
// order the host queues them, which is an order every Fork and Join
// allows: the replay runs them on the compute stream, one after another.
type branch struct {
	l    *lane
	s    *stream
	kern kernels // what Kernels hands out (lane.kern says why a pointer)

	// rec is the graph being recorded that the branch was forked into and
	// not yet joined from, nil when none; under s.mu.
	rec *graph
	// closed says Close was called; under l.mu.
	closed bool
}

var (
	_ device.Brancher = (*Device)(nil)
	_ device.Brancher = (*Scope)(nil)
	_ device.Branch   = (*branch)(nil)
)

// Branch opens a branch of the lane's compute stream.
func (l *lane) Branch() (device.Branch, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkOpen("Branch"); err != nil {
		return nil, err
	}
	b := &branch{l: l}
	b.s = newStream(l, false)
	b.s.branch = b
	b.kern = kernels{l: l, s: b.s}
	l.streams = append(l.streams, b.s)
	return b, nil
}

// Kernels are the lane's kernels on the branch's stream.
func (b *branch) Kernels() device.Kernels { return &b.kern }

func (b *branch) checkOpen(what string) error {
	if err := b.l.checkOpen("Branch." + what); err != nil {
		return err
	}
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	if b.closed {
		return fmt.Errorf("%s: Branch.%s: the branch is %w", b.l.owner.Name(), what, device.ErrClosed)
	}
	return nil
}

// Fork queues on the branch a wait for the compute stream's work so far;
// while the lane records a graph, it joins the branch to the recording.
func (b *branch) Fork() error {
	if err := b.checkOpen("Fork"); err != nil {
		return err
	}
	c := b.l.compute
	c.mu.Lock()
	rec, seq := b.l.graphs.rec, c.queued.Load()
	c.mu.Unlock()
	if rec != nil {
		b.s.mu.Lock()
		b.rec = rec
		b.s.mu.Unlock()
		return nil
	}
	_, err := b.s.enqueue(func(cm *cmd) { cm.op, cm.wait = opWait, event{s: c, seq: seq} })
	return err
}

// Join queues on the compute stream a wait for the branch's work so far,
// which then takes the branch's pending error as its own; while the lane
// records a graph the branch was forked into, it ends the branch's part
// in the recording (the recording holds its commands in order already).
func (b *branch) Join() error {
	if err := b.checkOpen("Join"); err != nil {
		return err
	}
	b.s.mu.Lock()
	rec, seq := b.rec, b.s.queued.Load()
	b.rec = nil
	b.s.mu.Unlock()
	if rec != nil {
		return nil
	}
	_, err := b.l.compute.enqueue(func(cm *cmd) { cm.op, cm.wait = opJoin, event{s: b.s, seq: seq} })
	return err
}

// Close stops the branch's stream once its queued work ran.
func (b *branch) Close() error {
	l := b.l
	l.mu.Lock()
	if b.closed {
		l.mu.Unlock()
		return nil
	}
	b.closed = true
	l.mu.Unlock()
	if l.forget(b.s) {
		b.s.shutdown()
	}
	return nil
}

// unjoined ends the part in the recording rec of the lane's branches
// forked into it and not joined, and says whether there was one: a
// capture that ends so is refused, as CUDA refuses an unjoined one.
func (l *lane) unjoined(rec *graph) bool {
	l.mu.Lock()
	streams := append([]*stream(nil), l.streams...)
	l.mu.Unlock()
	found := false
	for _, s := range streams {
		if s.branch == nil {
			continue
		}
		s.mu.Lock()
		if s.branch.rec == rec {
			s.branch.rec = nil
			found = true
		}
		s.mu.Unlock()
	}
	return found
}

// branchCheck is the error of queuing work on the branch of stream s
// while its lane records a graph the branch was not forked into; s.mu is
// held.
func (s *stream) branchCheck() error {
	if s.branch == nil || s.branch.rec != nil || !s.ln.graphs.mem.Capturing() {
		return nil
	}
	return fmt.Errorf("%s: work on a branch not forked while the compute stream is being captured: %w", s.ln.owner.Name(), device.ErrNotCapturable)
}
