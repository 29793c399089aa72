package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// branch is a second stream of a lane's kernels (device.Branch): a CUDA
// stream of its own, a cuBLAS handle bound to it with a workspace of the
// lane's size (allocated when it opens, as alloc.Workspace in the lane's
// allocation scope, as device/meta's branch does, so that memory plans stay
// exact), its own launch-argument buffer, and an allocator stream id of its
// own for its kernels' temporaries. What it shares with its lane: the
// status word its kernels raise index errors in (so the lane's next
// synchronisation after a Join reports them), memory, the counts and the
// graphs being captured.
//
// Fork and Join are an event recorded on one stream and waited for by the
// other (cuEventRecord, cuStreamWaitEvent), with two events of the
// branch's own, reused: a wait takes the event's state when it is queued.
// During a capture of the compute stream the same calls are CUDA's
// cross-stream capture: the branch stream, waiting for an event recorded
// on the capturing stream, joins the capture, and the compute stream's
// wait for the branch's event joins it back (cuStreamEndCapture refuses a
// capture with a branch not joined back, CUDA_ERROR_STREAM_CAPTURE_UNJOINED).
type branch struct {
	q  queue   // its stream, cuBLAS handle, workspace and launch arguments
	st *stream // its stream, for the lane's Synchronize

	fork, join cuEvent // from the device's pool

	mu     sync.Mutex // orders Fork, Join and Close
	closed atomic.Bool
	// forkedIn is the capture (graphs.id) the branch was forked into and
	// not joined from since, 0 for none.
	forkedIn atomic.Uint64
}

// idleID is the allocator stream id of a closed branch, with an event
// recorded on its stream after its last work: the next branch takes the
// id (so the blocks its temporaries left cached are not stranded) and
// waits for the event first (so it reuses them only after that work).
type idleID struct {
	id   alloc.Stream
	done cuEvent
	bar  alloc.Ptr // the id's walk barrier (lane.barrier)
}

var (
	_ device.Brancher = (*Device)(nil)
	_ device.Brancher = (*Scope)(nil)
	_ device.Branch   = (*branch)(nil)
)

// Branch opens a branch of the compute stream: a stream, a cuBLAS handle
// on it and its workspace (the lane's size: Config.BLASWorkspace resolved,
// a scope's under its limit). It is refused while the compute stream is
// being captured (making a cuBLAS handle is no work a graph can hold).
func (l *lane) Branch() (device.Branch, error) {
	if err := l.checkOpen("Branch"); err != nil {
		return nil, err
	}
	if err := l.inCapture("Branch"); err != nil {
		return nil, err
	}
	d := l.d
	b := &branch{}
	b.q.ln, b.q.br = l, b
	err := b.start()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: Branch: %w", l.name, err), b.release(false))
	}
	d.mu.Lock()
	if l.isClosed() { // closed meanwhile: its Close did not see the branch
		d.mu.Unlock()
		return nil, errors.Join(fmt.Errorf("%s: Branch: %s is %w", l.name, l.label, device.ErrClosed), b.release(false))
	}
	if l.branches == nil {
		l.branches = map[*branch]struct{}{}
	}
	l.branches[b] = struct{}{}
	d.mu.Unlock()
	return b, nil
}

// start makes the branch's stream, events, cuBLAS handle and workspace;
// on error, release undoes whatever it made, and the allocator stream id
// it took goes back to the idle ones as it was (nothing ran under it), for
// the next branch opened.
func (b *branch) start() (err error) {
	l := b.q.ln
	d := l.d
	s, err := d.api.StreamCreate(d.ctx)
	if err != nil {
		return fmt.Errorf("creating its stream: %w", err)
	}
	b.q.on = s
	d.mu.Lock()
	var idle idleID
	if n := len(l.idle); n > 0 {
		idle = l.idle[n-1]
		l.idle = l.idle[:n-1]
	} else {
		idle.id = d.newStreamID()
		idle.bar = l.barrier()
	}
	d.mu.Unlock()
	defer func() {
		if err != nil {
			d.mu.Lock()
			l.idle = append(l.idle, idle)
			d.mu.Unlock()
		}
	}()
	b.q.temps, b.q.bar = idle.id, idle.bar
	b.st = &stream{ln: l, s: s, id: idle.id}
	if idle.done != 0 {
		if err := d.api.StreamWaitEvent(d.ctx, s, idle.done); err != nil {
			return err
		}
		// Its wait is queued: the event may be recorded again, but stays
		// the id's until the branch has started.
		defer func() {
			if err == nil {
				d.events.put(idle.done)
			}
		}()
	}
	if b.fork, err = d.events.get(d.api, d.ctx); err != nil {
		return err
	}
	if b.join, err = d.events.get(d.api, d.ctx); err != nil {
		return err
	}
	l.blasMu.Lock()
	ws := max(l.wsBytes, l.wsWant)
	l.blasMu.Unlock()
	return b.q.startBLAS(ws, false)
}

// Kernels are the lane's kernels, queued on the branch's stream with its
// cuBLAS handle.
func (b *branch) Kernels() device.Kernels { return kernels{&b.q} }

// check is the error of queuing what on the branch: a closed branch, or
// one not forked into the capture of the compute stream going on (its
// work would run outside the graph, now).
func (b *branch) check(what string) error {
	l := b.q.ln
	if b.closed.Load() {
		return fmt.Errorf("%s: Branch: %s: the branch is %w", l.name, what, device.ErrClosed)
	}
	if id := l.graphs.id.Load(); id != 0 && b.forkedIn.Load() != id {
		return fmt.Errorf("%s: Branch: %s on a branch not forked while the compute stream is being captured: %w", l.name, what, device.ErrNotCapturable)
	}
	return nil
}

// Fork makes the branch's later work wait for the compute stream's work
// so far; during a capture it joins the branch to the capture.
func (b *branch) Fork() error {
	l := b.q.ln
	d := l.d
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := l.checkOpen("Branch.Fork"); err != nil {
		return err
	}
	if b.closed.Load() {
		return fmt.Errorf("%s: Branch.Fork: the branch is %w", l.name, device.ErrClosed)
	}
	if err := d.api.EventRecord(d.ctx, b.fork, l.compute.s); err != nil {
		return fmt.Errorf("%s: Branch.Fork: %w", l.name, err)
	}
	if err := d.api.StreamWaitEvent(d.ctx, b.q.on, b.fork); err != nil {
		return fmt.Errorf("%s: Branch.Fork: %w", l.name, err)
	}
	if id := l.graphs.id.Load(); id != 0 {
		b.forkedIn.Store(id)
		if t := l.graphs.tally.Load(); t != nil {
			d.captures.add(b.q.on, b.q.blas, t)
		}
	}
	return nil
}

// Join makes the compute stream's later work wait for the branch's work
// so far. Index errors need nothing more: the branch's kernels raise them
// in the lane's status word, which the compute stream's next
// synchronisation reads after the wait. During a capture it joins the
// branch back (a branch not forked into the capture is refused, as its
// work is: the wait would cross the capture's boundary).
func (b *branch) Join() error {
	l := b.q.ln
	d := l.d
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := l.checkOpen("Branch.Join"); err != nil {
		return err
	}
	if err := b.check("Join"); err != nil {
		return err
	}
	if err := d.api.EventRecord(d.ctx, b.join, b.q.on); err != nil {
		return fmt.Errorf("%s: Branch.Join: %w", l.name, err)
	}
	if err := d.api.StreamWaitEvent(d.ctx, l.compute.s, b.join); err != nil {
		return fmt.Errorf("%s: Branch.Join: %w", l.name, err)
	}
	b.forkedIn.Store(0)
	return nil
}

// Close releases the branch once its work queued so far completed,
// without the host waiting for it: an event recorded on its stream after
// that work is waited for by the compute stream, whose cache its workspace
// goes back to (so the compute stream's later work, which may reuse it,
// runs after the branch's: a Join, in effect, which a branch's work takes
// before Close anyway), and by the next branch to take its allocator
// stream id; its stream and cuBLAS handle are destroyed (the driver defers
// the stream's release until its work completed). During
// a capture of the compute stream the release waits for the capture's
// end: a stream taking part in a capture must not be destroyed, nor a
// cuBLAS handle (which synchronises the device).
func (b *branch) Close() error {
	l := b.q.ln
	d := l.d
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Swap(true) {
		return nil
	}
	d.mu.Lock()
	_, open := l.branches[b]
	delete(l.branches, b)
	d.mu.Unlock()
	if !open { // the lane's Close took it
		return nil
	}
	if l.graphs.id.Load() != 0 {
		l.graphs.mu.Lock()
		if l.graphs.id.Load() != 0 {
			l.graphs.closed = append(l.graphs.closed, b)
			l.graphs.mu.Unlock()
			return nil
		}
		l.graphs.mu.Unlock()
	}
	if err := b.release(true); err != nil {
		return fmt.Errorf("%s: Branch.Close: %w", l.name, err)
	}
	return nil
}

// release gives back what the branch holds, tolerating a partial start.
// With reuse (a branch's Close) its work may still run: the compute stream
// waits for it before its workspace goes back to the compute stream's
// cache, and its id goes to the next branch with an event to wait for.
// Without (a failed start, or a lane closing after its work completed)
// the workspace is freed at once and the id goes with the lane.
func (b *branch) release(reuse bool) error {
	l := b.q.ln
	d := l.d
	a, c := d.api, d.ctx
	var errs []error
	if reuse && b.q.on != 0 {
		done, err := d.events.get(a, c)
		if err == nil {
			if err = a.EventRecord(c, done, b.q.on); err == nil {
				err = a.StreamWaitEvent(c, l.compute.s, done)
			}
			if err != nil {
				d.events.put(done)
			}
		}
		if err != nil {
			// Nothing orders the compute stream after the branch's work:
			// its workspace must not go back to the cache.
			errs = append(errs, fmt.Errorf("ordering the compute stream after its work (its workspace is kept): %w", err))
			b.q.workspace = 0
		} else {
			d.mu.Lock()
			l.idle = append(l.idle, idleID{id: b.st.id, done: done, bar: b.q.bar})
			d.mu.Unlock()
		}
	}
	errs = append(errs, b.q.releaseBLAS())
	if b.q.on != 0 {
		b.st.markClosed()
		errs = append(errs, a.StreamDestroy(c, b.q.on))
		b.q.on = 0
	}
	for _, e := range []*cuEvent{&b.fork, &b.join} {
		if *e != 0 {
			d.events.put(*e)
			*e = 0
		}
	}
	return errors.Join(errs...)
}

// takeBranches marks the lane's open branches closed and forgets them, for
// the lane's Close to release (with closeBranches) once their work is done
// or waited for.
func (l *lane) takeBranches() []*branch {
	d := l.d
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*branch, 0, len(l.branches))
	for b := range l.branches {
		b.closed.Store(true)
		out = append(out, b)
	}
	l.branches = nil
	return out
}

// closeBranches releases the branches takeBranches took, and those closed
// during a capture that never ended, as the lane closes: their memory
// goes with the lane's, and the idle ids' events back to the pool.
func (l *lane) closeBranches(branches []*branch) error {
	l.graphs.mu.Lock()
	branches = append(branches, l.graphs.closed...)
	l.graphs.closed = nil
	l.graphs.mu.Unlock()
	var errs []error
	for _, b := range branches {
		b.mu.Lock() // a Fork or Join under way ends first
		errs = append(errs, b.release(false))
		b.mu.Unlock()
	}
	d := l.d
	d.mu.Lock()
	for _, i := range l.idle {
		d.events.put(i.done)
	}
	l.idle = nil
	d.mu.Unlock()
	return errors.Join(errs...)
}

// syncBranches waits for the work of the branches takeBranches took, for
// a scope's Close, which then frees the memory that work may use.
func (l *lane) syncBranches(branches []*branch) error {
	d := l.d
	var errs []error
	for _, b := range branches {
		errs = append(errs, d.api.StreamSynchronize(d.ctx, b.q.on))
	}
	return errors.Join(errs...)
}

// endBranches ends the capture id and the branches' part in it, once the
// driver ended it: it reports whether a branch forked into it was not
// joined back, and releases the branches closed during it.
func (l *lane) endBranches(id uint64) (unjoined bool, err error) {
	d := l.d
	d.mu.Lock()
	open := make([]*branch, 0, len(l.branches))
	for b := range l.branches {
		open = append(open, b)
	}
	d.mu.Unlock()
	l.graphs.mu.Lock()
	closed := l.graphs.closed
	l.graphs.closed = nil
	l.graphs.id.Store(0) // under mu: a Close from now on releases its branch itself
	l.graphs.mu.Unlock()
	for _, b := range append(open, closed...) {
		if b.forkedIn.CompareAndSwap(id, 0) {
			unjoined = true
		}
	}
	var errs []error
	for _, b := range closed {
		errs = append(errs, b.release(true))
	}
	return unjoined, errors.Join(errs...)
}
