package alloc

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report says where a device's memory goes: the allocated bytes by
// category, what the cache holds free for reuse, and what the device holds
// outside the allocator (on a GPU the driver's context, library handles
// and other processes; on the CPU device without a capacity, the rest of
// the machine). The figures add up:
//
//	Categories[*].Current sum = Allocated
//	Allocated + Cached = Reserved
//	Reserved + Outside + DeviceFree = DeviceTotal (when the device says)
type Report struct {
	Device     string
	Categories CategoryArray
	// AtPeak is what each category held when Allocated last peaked.
	AtPeak [NumCategories]int64

	Allocated, PeakAllocated int64
	Reserved, PeakReserved   int64
	// Cached is reserved but not allocated: free blocks kept for reuse.
	// LargestCached is the largest of them (a request above it needs a
	// new segment).
	Cached, LargestCached int64
	// DeviceTotal and DeviceFree are the device's figures (cuMemGetInfo on
	// CUDA; the capacity, or the machine's memory, on the CPU device), 0
	// when the device could not say. Outside is DeviceTotal - DeviceFree -
	// Reserved: memory in use that this allocator does not hold.
	DeviceTotal, DeviceFree, Outside int64
	// Limit is the allocator's memory limit, 0 if none.
	Limit int64
	// Staging and PeakStaging are the host staging bytes (pinned memory on
	// a GPU), which hold batches on their way to the device; 0 when the
	// report was made without the staging cache.
	Staging, PeakStaging int64
	// Scopes are the bytes of each allocation scope but 0 (jobs sharing
	// the device), by category; nil when there are none.
	Scopes map[Scope]CategoryArray
}

// Report returns the allocator's figures as a Report, with the device's
// free and total memory from the Source (left 0 if it cannot say) and the
// staging figures of staging, which may be nil.
func (c *Caching) Report(staging *HostCache) Report {
	st := c.Stats()
	c.mu.Lock()
	largest, _ := c.largestCached()
	c.mu.Unlock()
	r := reportOf(c.name, &st, largest)
	for _, sc := range c.Scopes() {
		if r.Scopes == nil {
			r.Scopes = map[Scope]CategoryArray{}
		}
		r.Scopes[sc] = c.ScopeBytes(sc)
	}
	c.deviceFigures(&r)
	if staging != nil {
		s := staging.Stats()
		r.Staging, r.PeakStaging = s.ReservedBytes[AllPools].Current, s.ReservedBytes[AllPools].Peak
	}
	return r
}

// reportOf is the Report of the figures st, whose largest cached block is
// largest, for the device (or scope) name.
func reportOf(name string, st *Stats, largest int64) Report {
	r := Report{
		Device:        name,
		Categories:    st.CategoryBytes,
		AtPeak:        st.AtPeak,
		Allocated:     st.AllocatedBytes[AllPools].Current,
		PeakAllocated: st.AllocatedBytes[AllPools].Peak,
		Reserved:      st.ReservedBytes[AllPools].Current,
		PeakReserved:  st.ReservedBytes[AllPools].Peak,
		LargestCached: largest,
		Limit:         st.Limit,
	}
	r.Cached = r.Reserved - r.Allocated // blocks freed but still in use by a stream included
	return r
}

// deviceFigures fills in the device's total and free memory, and what is
// outside r's reserved bytes, from the Source when it can say.
func (c *Caching) deviceFigures(r *Report) {
	if free, total, err := c.src.MemInfo(); err == nil && total > 0 {
		r.DeviceTotal, r.DeviceFree = total, free
		r.Outside = max(0, total-free-r.Reserved)
	}
}

// Table prints the report as an aligned table, one row per category that
// held memory at any time, then the totals.
func (r Report) Table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "memory on %s\tcurrent\tpeak\tat peak\t\n", r.Device)
	for _, c := range Categories() {
		s := r.Categories[c]
		if s.Peak == 0 && s.Current == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t\n", c, FormatSize(s.Current), FormatSize(s.Peak), FormatSize(r.AtPeak[c]))
	}
	fmt.Fprintf(w, "  allocated\t%s\t%s\t%s\t\n", FormatSize(r.Allocated), FormatSize(r.PeakAllocated), FormatSize(r.PeakAllocated))
	fmt.Fprintf(w, "  cached, free for reuse\t%s\t\t\t\n", FormatSize(r.Cached))
	fmt.Fprintf(w, "  reserved from the device\t%s\t%s\t\t\n", FormatSize(r.Reserved), FormatSize(r.PeakReserved))
	if r.DeviceTotal > 0 {
		fmt.Fprintf(w, "  used outside the allocator\t%s\t\t\t\n", FormatSize(r.Outside))
		fmt.Fprintf(w, "  free on the device\t%s\t\t\t\n", FormatSize(r.DeviceFree))
		fmt.Fprintf(w, "  device total\t%s\t\t\t\n", FormatSize(r.DeviceTotal))
	}
	if r.Limit > 0 {
		fmt.Fprintf(w, "  memory limit\t%s\t\t\t\n", FormatSize(r.Limit))
	}
	for _, sc := range slices.Sorted(maps.Keys(r.Scopes)) {
		a := r.Scopes[sc]
		fmt.Fprintf(w, "  of which scope %d\t%s\t\t\t\n", sc, FormatSize(a.Total()))
	}
	if r.Staging > 0 || r.PeakStaging > 0 {
		fmt.Fprintf(w, "  host staging\t%s\t%s\t\t\n", FormatSize(r.Staging), FormatSize(r.PeakStaging))
	}
	_ = w.Flush()
	return b.String()
}
