package alloc

// This file opens the allocator's internals to its external tests (package
// alloc_test), which run on the simulated device of package alloctest: an
// in-package test cannot import alloctest, since alloctest imports alloc.

import "fmt"

// HostRoundSize is hostRoundSize, the pinned-host cache's block size.
var HostRoundSize = hostRoundSize

// HostSegments returns the number of segments h has mapped.
func HostSegments(h *Host) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.segs)
}

// CheckInvariants recomputes every current figure from the snapshot and
// the allocator's internal structures and compares them with Stats, the
// way PyTorch's _check_memory_stat_consistency does; it also checks that
// segments are tiled exactly by their blocks, that no two free neighbours
// were left unmerged, and that the pools hold exactly the inactive blocks.
func CheckInvariants(c *Caching) error {
	snap := c.Snapshot()
	st := c.Stats()
	var want Stats
	scopes := map[Scope]*Stats{} // what each scope's figures should be
	inactive := 0
	for _, seg := range snap.Segments {
		k := seg.Pool
		targets := []*Stats{&want}
		if seg.Scope != 0 {
			if scopes[seg.Scope] == nil {
				scopes[seg.Scope] = new(Stats)
			}
			targets = append(targets, scopes[seg.Scope])
		}
		for _, w := range targets {
			w.Segment.add(k, 1)
			w.ReservedBytes.add(k, seg.TotalSize)
		}
		addr := seg.Address
		var prevState BlockState = -1
		for i, b := range seg.Blocks {
			if b.Address != addr {
				return fmt.Errorf("segment %v block %d at %v, want %v (blocks must tile the segment)", seg.Address, i, b.Address, addr)
			}
			if b.Size <= 0 || b.Size%MinBlockSize != 0 {
				return fmt.Errorf("block %v has size %d, want a positive multiple of %d", b.Address, b.Size, MinBlockSize)
			}
			addr += Ptr(b.Size)
			switch b.State {
			case BlockActiveAllocated:
				if b.Scope != seg.Scope {
					return fmt.Errorf("block %v is in scope %d, its segment serves scope %d", b.Address, b.Scope, seg.Scope)
				}
				for _, w := range targets {
					w.Allocation.add(k, 1)
					w.AllocatedBytes.add(k, b.Size)
					w.RequestedBytes.add(k, b.RequestedSize)
					w.Active.add(k, 1)
					w.ActiveBytes.add(k, b.Size)
					w.CategoryBytes[b.Category].add(b.Size)
				}
				if b.RequestedSize > b.Size || b.RequestedSize <= 0 {
					return fmt.Errorf("block %v: requested %d, size %d", b.Address, b.RequestedSize, b.Size)
				}
			case BlockActivePendingFree:
				for _, w := range targets {
					w.Active.add(k, 1)
					w.ActiveBytes.add(k, b.Size)
				}
			case BlockInactive:
				inactive++
				if len(seg.Blocks) > 1 {
					for _, w := range targets {
						w.InactiveSplit.add(k, 1)
						w.InactiveSplitBytes.add(k, b.Size)
					}
				}
				if prevState == BlockInactive {
					return fmt.Errorf("segment %v: free blocks %d and %d are neighbours but were not merged", seg.Address, i-1, i)
				}
			}
			prevState = b.State
		}
		if addr != seg.Address+Ptr(seg.TotalSize) {
			return fmt.Errorf("segment %v: blocks end at %v, want %v", seg.Address, addr, seg.Address+Ptr(seg.TotalSize))
		}
	}
	if err := checkFigures("", &st, &want); err != nil {
		return err
	}
	for _, sc := range c.Scopes() {
		w := scopes[sc]
		if w == nil {
			w = new(Stats)
		}
		got := c.ScopeStats(sc)
		if err := checkFigures(fmt.Sprintf("scope %d: ", sc), &got, w); err != nil {
			return err
		}
		delete(scopes, sc)
	}
	if len(scopes) > 0 {
		return fmt.Errorf("segments serve scopes that are not open: %v", scopes)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.small.blocks.Len() + c.large.blocks.Len(); n != inactive {
		return fmt.Errorf("pools hold %d blocks, snapshot has %d inactive", n, inactive)
	}
	if len(c.live) != int(st.Allocation[AllPools].Current) {
		return fmt.Errorf("%d live blocks in the map, allocation.current %d", len(c.live), st.Allocation[AllPools].Current)
	}
	pending := 0
	for _, q := range c.pending {
		pending += len(q.events)
	}
	if pending != c.npending {
		return fmt.Errorf("%d events queued, npending %d", pending, c.npending)
	}
	return nil
}

// checkFigures compares the figures st with want, recomputed from the
// snapshot, and checks that the categories add up; what prefixes errors.
func checkFigures(what string, st, want *Stats) error {
	type fig struct {
		name      string
		got, want *StatArray
	}
	for _, f := range []fig{
		{"allocation", &st.Allocation, &want.Allocation},
		{"segment", &st.Segment, &want.Segment},
		{"active", &st.Active, &want.Active},
		{"inactive_split", &st.InactiveSplit, &want.InactiveSplit},
		{"allocated_bytes", &st.AllocatedBytes, &want.AllocatedBytes},
		{"reserved_bytes", &st.ReservedBytes, &want.ReservedBytes},
		{"active_bytes", &st.ActiveBytes, &want.ActiveBytes},
		{"inactive_split_bytes", &st.InactiveSplitBytes, &want.InactiveSplitBytes},
		{"requested_bytes", &st.RequestedBytes, &want.RequestedBytes},
	} {
		for p := AllPools; p < numPools; p++ {
			g := f.got[p]
			if g.Current != f.want[p].Current {
				return fmt.Errorf("%s%s.%v.current = %d, want %d from the snapshot", what, f.name, p, g.Current, f.want[p].Current)
			}
			if g.Current > g.Peak || g.Current < 0 {
				return fmt.Errorf("%s%s.%v: current %d, peak %d", what, f.name, p, g.Current, g.Peak)
			}
			if g.Allocated-g.Freed < g.Current {
				return fmt.Errorf("%s%s.%v: allocated %d - freed %d < current %d", what, f.name, p, g.Allocated, g.Freed, g.Current)
			}
		}
	}
	for cat := range st.CategoryBytes {
		g := st.CategoryBytes[cat]
		if g.Current != want.CategoryBytes[cat].Current || g.Current > g.Peak || g.Current < 0 {
			return fmt.Errorf("%scategory_bytes.%v: current %d, peak %d; want current %d from the snapshot",
				what, Category(cat), g.Current, g.Peak, want.CategoryBytes[cat].Current)
		}
	}
	if sum, all := st.CategoryBytes.Total(), st.AllocatedBytes[AllPools].Current; sum != all {
		return fmt.Errorf("%scategories add up to %d bytes, allocated_bytes.all.current is %d", what, sum, all)
	}
	var atPeak int64
	for _, n := range st.AtPeak {
		atPeak += n
	}
	if atPeak != st.AllocatedBytes[AllPools].Peak {
		return fmt.Errorf("%scategories at the peak add up to %d bytes, allocated_bytes.all.peak is %d", what, atPeak, st.AllocatedBytes[AllPools].Peak)
	}
	return nil
}
