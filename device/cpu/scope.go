package cpu

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// Scope is a job's part of the CPU device (device.Scope): a compute
// stream of its own, streams of its own, their errors, and an allocation
// scope of the device's caching allocator with an optional limit. Its
// kernels share the device's thread team. It is safe for concurrent use.
type Scope struct {
	lane
	name  string // "cpu/job-3"
	limit int64
}

var _ device.Scope = (*Scope)(nil)

// Scope opens a scope for one job (device.ScopeConfig). Device.Close
// closes it if it is still open.
func (d *Device) Scope(cfg device.ScopeConfig) (device.Scope, error) {
	if cfg.Limit < 0 {
		return nil, fmt.Errorf("cpu: Scope: limit %d is negative: %w", cfg.Limit, device.ErrShape)
	}
	if err := d.checkOpen("Scope"); err != nil {
		return nil, err
	}
	id, err := d.mem.NewScope(cfg.Name, cfg.Limit)
	if err != nil {
		return nil, fmt.Errorf("cpu: Scope: %w", err)
	}
	name := cfg.Name
	if name == "" {
		name = fmt.Sprintf("scope-%d", id)
	}
	s := &Scope{name: "cpu/" + name, limit: cfg.Limit}
	s.lane = lane{d: d, owner: s, label: "the scope", scope: id, staging: map[alloc.Ptr]struct{}{}}
	s.lane.kern = kernels{l: &s.lane}
	s.compute = newStream(&s.lane, true)
	d.scopesMu.Lock()
	if d.closing {
		d.scopesMu.Unlock()
		s.lane.shutdown() // no work was queued: nothing to report
		return nil, errors.Join(fmt.Errorf("cpu: Scope: the device is %w", device.ErrClosed), d.mem.CloseScope(id))
	}
	d.scopes = append(d.scopes, s)
	d.scopesMu.Unlock()
	return s, nil
}

// Name is "cpu/" and the scope's name.
func (s *Scope) Name() string { return s.name }

// Parent is the device.
func (s *Scope) Parent() device.Device { return s.d }

// ID is the scope's allocation scope.
func (s *Scope) ID() alloc.Scope { return s.scope }

// Limit is the scope's memory limit in bytes, 0 if none.
func (s *Scope) Limit() int64 { return s.limit }

// MemStats returns the scope's figures (alloc.Caching.ScopeStats).
func (s *Scope) MemStats() alloc.Stats { return s.d.mem.ScopeStats(s.scope) }

// Close waits for the scope's streams to drain and stops them, then gives
// back everything the scope holds: buffers not freed (they must not be
// used again), its cached memory and staging buffers. It returns the
// errors its work raised that were not reported yet. Later calls return
// nil; other calls on the scope return ErrClosed.
func (s *Scope) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	err := s.lane.shutdown()
	s.mu.Lock()
	staging := s.staging
	s.staging = nil
	s.mu.Unlock()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for p := range staging {
		if err := s.d.staging.Free(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.d.mem.CloseScope(s.scope); err != nil {
		errs = append(errs, err)
	}
	s.d.scopesMu.Lock()
	if i := slices.Index(s.d.scopes, s); i >= 0 {
		s.d.scopes = slices.Delete(s.d.scopes, i, i+1)
	}
	s.d.scopesMu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("%s: Close: %w", s.name, errors.Join(errs...))
	}
	return nil
}
