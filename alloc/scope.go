package alloc

import (
	"fmt"
	"slices"
)

// Scope is an allocation scope: the part of a device's memory one job
// holds when several share the device (a training service's jobs). 0 is
// the device's own, which every allocation not made for a scope is in.
//
// A scope's blocks come from segments of its own, which serve no other
// scope, so its figures (ScopeStats) are a Stats of their own: allocated,
// reserved and cached bytes, categories, peaks. Its limit (NewScope) caps
// the bytes its segments reserve; a request past it first releases the
// scope's own cached segments, never another scope's, then fails with an
// *OutOfMemoryError that names the scope. Give each scope streams of its
// own: a cached block is reused only by the stream and the scope it was
// allocated for.
type Scope uint32

// scopeState is an allocation scope's configuration and figures.
type scopeState struct {
	id    Scope
	name  string
	limit int64 // bytes its segments may reserve, 0 = no cap but the allocator's
	stats Stats
}

// describe names the scope in messages.
func (sc *scopeState) describe() string {
	if sc.name != "" {
		return sc.name
	}
	return fmt.Sprintf("scope %d", sc.id)
}

// NewScope opens an allocation scope named name (for messages; may be
// empty) whose segments may reserve at most limit bytes (0: no cap but the
// allocator's), and returns its id. Ids are never reused.
func (c *Caching) NewScope(name string, limit int64) (Scope, error) {
	if limit < 0 {
		return 0, fmt.Errorf("alloc: NewScope: negative limit %d", limit)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, errClosed
	}
	sc := c.scopeOf(c.lastScope + 1)
	sc.name, sc.limit = name, limit
	sc.stats.Limit = limit
	return sc.id, nil
}

// scopeOf returns scope id's state, made on first use (AllocIn with an id
// NewScope did not give makes an unnamed scope with no limit); c.mu is
// held.
func (c *Caching) scopeOf(id Scope) *scopeState {
	sc := c.scopes[id]
	if sc == nil {
		if c.scopes == nil {
			c.scopes = map[Scope]*scopeState{}
		}
		sc = &scopeState{id: id}
		sc.stats.MaxSplitSize = c.cfg.MaxSplitSize
		c.scopes[id] = sc
		c.lastScope = max(c.lastScope, id)
	}
	return sc
}

// ScopeStats returns scope's figures, as Stats returns the allocator's
// (ResetPeak and ResetAccumulated reset them too; Limit is the scope's);
// zero for scope 0 and for a scope that is not open.
func (c *Caching) ScopeStats(scope Scope) Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.scopes[scope]; sc != nil && scope != 0 {
		return sc.stats
	}
	return Stats{}
}

// ScopeBytes returns the bytes scope holds by category, current and peak:
// ScopeStats(scope).CategoryBytes.
func (c *Caching) ScopeBytes(scope Scope) CategoryArray {
	st := c.ScopeStats(scope)
	return st.CategoryBytes
}

// Scopes lists the open scopes, in order.
func (c *Caching) Scopes() []Scope {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Scope, 0, len(c.scopes))
	for s := range c.scopes {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// CloseScope frees every block still allocated in scope, waits for the
// pending events, gives the scope's cached segments back to the Source and
// forgets the scope: a job that failed halfway leaves nothing behind. The
// caller makes sure no work still uses the scope's memory (the streams that
// used it are synchronised). Other scopes' blocks and cache are not
// touched.
func (c *Caching) CloseScope(scope Scope) error {
	if scope == 0 {
		return fmt.Errorf("alloc: CloseScope: scope 0 is the allocator's own")
	}
	c.mu.Lock()
	sc := c.scopes[scope]
	if c.closed || sc == nil {
		c.mu.Unlock()
		return nil
	}
	var live []Ptr
	for p, b := range c.live {
		if b.seg.scope == sc {
			live = append(live, p)
		}
	}
	c.mu.Unlock()
	for _, p := range live {
		if err := c.Free(p); err != nil {
			return fmt.Errorf("alloc: CloseScope(%s): %w", sc.describe(), err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.releaseCachedBlocks(sc); err != nil {
		return fmt.Errorf("alloc: CloseScope(%s): %w", sc.describe(), err)
	}
	if n := sc.stats.Segment[AllPools].Current; n > 0 {
		return fmt.Errorf("alloc: CloseScope(%s): %d segments (%s) could not be released", sc.describe(), n, FormatSize(sc.stats.ReservedBytes[AllPools].Current))
	}
	delete(c.scopes, scope)
	return nil
}

// ScopeReport is Report for scope: its categories, allocated, reserved and
// cached bytes and its limit, beside the device's free and total memory;
// Outside is then everything the scope does not hold (the other scopes'
// memory included). Staging is the device's, so it is left 0.
func (c *Caching) ScopeReport(scope Scope) Report {
	st := c.ScopeStats(scope)
	c.mu.Lock()
	var largest int64
	name := c.name
	if sc := c.scopes[scope]; sc != nil {
		name += "/" + sc.describe()
		for _, p := range []*blockPool{&c.small, &c.large} {
			p.blocks.Ascend(func(b *block) bool {
				if b.seg.scope == sc {
					largest = max(largest, b.size)
				}
				return true
			})
		}
	}
	c.mu.Unlock()
	r := reportOf(name, &st, largest)
	c.deviceFigures(&r)
	return r
}

// ResetScopePeak sets every peak of scope's figures to its current value,
// leaving the allocator's and the other scopes' alone.
func (c *Caching) ResetScopePeak(scope Scope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.scopes[scope]; sc != nil && scope != 0 {
		sc.stats.resetPeak()
	}
}

// ResetScopeAccumulated zeroes scope's cumulative figures.
func (c *Caching) ResetScopeAccumulated(scope Scope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.scopes[scope]; sc != nil && scope != 0 {
		sc.stats.resetAccumulated()
	}
}

// EmptyScopeCache is EmptyCache for scope: it gives the scope's cached
// segments that hold no allocated block back to the Source, and no other
// scope's.
func (c *Caching) EmptyScopeCache(scope Scope) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	sc := c.scopes[scope]
	if sc == nil || scope == 0 {
		return nil
	}
	return c.releaseCachedBlocks(sc)
}
