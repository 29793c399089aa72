package cuda

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// Scope is a job's device.Scope on a CUDA device (see device.ScopeConfig
// and this package's section on scopes): a lane of its own in the
// device's one context. It has its own compute stream, status word, cuBLAS
// handle and workspace, NewStream streams and allocation scope; what stays
// shared is the context, the kernels loaded in it, the caching allocator's
// Source and the pinned staging cache. It is safe for concurrent use.
type Scope struct {
	lane
	id    alloc.Scope
	limit int64

	closeMu sync.Mutex // held through Close: a second Close (the device's) waits for the first
}

var _ device.Scope = (*Scope)(nil)

// ProductRows is the device's (device.ProductRower).
func (s *Scope) ProductRows() int { return productRows }

// minScopeWorkspace is the smallest cuBLAS workspace a scope is given: the
// 16 KiB cuBLAS documents as enough to spare its routines
// CUBLAS_STATUS_ALLOC_FAILED. A scope whose limit allows less gets none of
// ours, and cuBLAS uses its own default workspace pool.
const minScopeWorkspace = 16 << 10

// WorkspaceUnder is the cuBLAS workspace a device opened with c, or a
// scope of it, takes under a memory limit of limit bytes (0: none):
// Workspace, but at most a sixteenth of the limit, so that the workspace
// does not take the memory a small limit leaves for the tensors, and none
// below 16 KiB.
func (c Config) WorkspaceUnder(limit int64) int64 {
	ws := c.Workspace()
	if limit > 0 {
		ws = min(ws, limit/16&^511)
	}
	if ws < minScopeWorkspace {
		return 0
	}
	return ws
}

// Scope opens a scope on the device: a compute stream, a status word and
// a cuBLAS handle of its own, in an allocation scope of the device's
// allocator capped at cfg.Limit bytes. A new scope holds no memory: its
// cuBLAS workspace (the device's size, at most a sixteenth of the limit)
// is allocated in it, as alloc.Workspace, by its first Gemm, whose error
// an out-of-memory in doing so is.
func (d *Device) Scope(cfg device.ScopeConfig) (device.Scope, error) {
	if cfg.Limit < 0 {
		return nil, fmt.Errorf("%s: scope limit %d is negative: %w", d.name, cfg.Limit, device.ErrShape)
	}
	d.scopesMu.Lock()
	defer d.scopesMu.Unlock()
	if d.closing || d.closed.Load() {
		return nil, fmt.Errorf("%s: Scope: the device is %w", d.name, device.ErrClosed)
	}
	id, err := d.mem.NewScope(cfg.Name, cfg.Limit)
	if err != nil {
		return nil, fmt.Errorf("%s: Scope: %w", d.name, err)
	}
	name := cfg.Name
	if name == "" {
		name = fmt.Sprintf("scope-%d", id)
	}
	s := &Scope{id: id, limit: cfg.Limit}
	s.lane.d, s.lane.owner, s.lane.name, s.lane.label, s.lane.scope = d, s, d.name+"/"+name, "the scope", id
	d.mu.Lock()
	sid := d.newStreamID()
	d.mu.Unlock()
	err = s.lane.start(sid)
	if err == nil {
		d.mu.Lock()
		d.streams[sid] = s.compute
		d.mu.Unlock()
		err = s.lane.startBLAS(d.cfg.WorkspaceUnder(cfg.Limit), true)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: Scope: %w", s.name, err), s.release())
	}
	d.scopes[id] = s
	return s, nil
}

// Name is "cuda:N/name", name the ScopeConfig's or "scope-I" with I its
// allocation scope.
func (s *Scope) Name() string { return s.name }

// Parent is the device the scope runs on.
func (s *Scope) Parent() device.Device { return s.d }

// ID is the scope's allocation scope in the device's allocator.
func (s *Scope) ID() alloc.Scope { return s.id }

// Limit is the cap on the memory the scope reserves, 0 for none.
func (s *Scope) Limit() int64 { return s.limit }

// MemStats returns the scope's own figures in the device's allocator.
func (s *Scope) MemStats() alloc.Stats { return s.d.mem.ScopeStats(s.id) }

// Close waits for the scope's streams (its branches' included), reports
// the errors their work raised and not yet reported, and gives back
// everything the scope holds: its streams, branches, cuBLAS handle and
// status word, the staging buffers it did
// not free and its allocation scope (buffers not freed included: they
// must not be used again). The device and the other scopes are not
// touched, except that giving segments back to the driver (cuMemFree)
// waits for the whole context, as it does in any CUDA program. A second
// Close, the device's included, waits for the first and does nothing.
func (s *Scope) Close() error {
	d := s.d
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	streams := s.takeStreams()
	branches := s.takeBranches()
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, st := range streams {
		keep(d.api.StreamSynchronize(d.ctx, st.s))
	}
	keep(s.syncBranches(branches))
	keep(s.readStatus(s.compute.s, true))
	keep(s.closeGraphs())
	keep(s.closeBranches(branches))
	d.mu.Lock()
	staging := s.staging
	s.staging = nil
	d.mu.Unlock()
	for p := range staging {
		keep(d.staging.Free(p))
	}
	for _, st := range streams {
		keep(d.api.StreamDestroy(d.ctx, st.s))
	}
	keep(s.release())
	d.scopesMu.Lock()
	delete(d.scopes, s.id)
	d.scopesMu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("%s: Close: %w", s.name, errors.Join(errs...))
	}
	return nil
}

// release gives back the scope's cuBLAS handle, allocation scope, status
// word and compute stream, tolerating a partial start.
func (s *Scope) release() error {
	d := s.d
	errs := []error{s.releaseBLAS(), d.mem.CloseScope(s.id)}
	if s.compute != nil {
		d.mu.Lock()
		delete(d.streams, s.compute.id)
		d.mu.Unlock()
	}
	errs = append(errs, s.releaseStreams())
	return errors.Join(errs...)
}
