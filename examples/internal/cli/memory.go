package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
)

// Size is a flag of bytes: a number with an optional unit, "512MiB",
// "8GiB", "1.5GB", "1000000" (KB, MB, GB, TB are powers of 1000; KiB,
// MiB, GiB, TiB of 1024).
type Size int64

// String prints the size as alloc.FormatSize does, or "0".
func (s *Size) String() string {
	if s == nil || *s == 0 {
		return "0"
	}
	return alloc.FormatSize(int64(*s))
}

// Set parses a size.
func (s *Size) Set(v string) error {
	t := strings.TrimSpace(v)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || f < 0 || f*mult > 1<<62 {
		return fmt.Errorf("size %q: want a number of bytes with an optional unit (KB, MB, GB, KiB, MiB, GiB, ...)", v)
	}
	*s = Size(f * mult)
	return nil
}

// BatchVar defines a -batch flag that takes a number, into n (the
// command checks it is positive, as its other flags), or "auto" (the
// largest batch that fits, models.FitBatch), which sets auto and leaves n
// as it is.
func BatchVar(fs *flag.FlagSet, n *int, auto *bool, name string, value int, usage string) {
	*n = value
	fs.Var(batchValue{n, auto}, name, usage)
}

type batchValue struct {
	n    *int
	auto *bool
}

func (b batchValue) String() string {
	switch {
	case b.n == nil:
		return ""
	case *b.auto:
		return "auto"
	}
	return strconv.Itoa(*b.n)
}

func (b batchValue) Set(v string) error {
	if v == "auto" {
		*b.auto = true
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("want a number or auto")
	}
	*b.n, *b.auto = n, false
	return nil
}

// RecomputeVar defines a -recompute flag into k: "auto" (the recurrent
// stack recomputes segments of ⌈√T⌉ steps in backward,
// rnn.RecomputeAuto), a segment length, or 0 (off, the default).
func RecomputeVar(fs *flag.FlagSet, k *int, name string) {
	fs.Var(recomputeValue{k}, name, "recompute the recurrent stack's activations in backward, keeping the state every K steps: auto (K = ⌈√steps⌉), K, or 0 (off): less memory for about one more forward")
}

type recomputeValue struct{ k *int }

func (r recomputeValue) String() string {
	switch {
	case r.k == nil || *r.k == 0:
		return "0"
	case *r.k == rnn.RecomputeAuto:
		return "auto"
	}
	return strconv.Itoa(*r.k)
}

func (r recomputeValue) Set(v string) error {
	if v == "auto" {
		*r.k = rnn.RecomputeAuto
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("want auto, a number of steps, or 0")
	}
	*r.k = n
	return nil
}

// MemStats is the -memstats event: the allocator's figures with PyTorch's
// names, and where the memory goes (alloc.Report): bytes by category, the
// cache, the device's memory outside the allocator, host staging.
type MemStats struct {
	Event              string `json:"event"`
	Device             string `json:"device"`
	AllocatedBytes     int64  `json:"allocated_bytes"`
	ReservedBytes      int64  `json:"reserved_bytes"`
	PeakAllocatedBytes int64  `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64  `json:"peak_reserved_bytes"`
	DeviceAllocs       int64  `json:"device_allocs"`
	DeviceFrees        int64  `json:"device_frees"`
	AllocRetries       int64  `json:"alloc_retries"`
	OOMs               int64  `json:"ooms"`
	MemoryReport
}

// MemoryReport is an alloc.Report in JSON: "categories" maps each
// category that held memory to its current, peak and at-the-peak bytes.
type MemoryReport struct {
	Categories       map[string]CategoryBytes `json:"categories"`
	CachedBytes      int64                    `json:"cached_bytes"`
	OutsideBytes     int64                    `json:"outside_bytes,omitempty"`
	DeviceTotalBytes int64                    `json:"device_total_bytes,omitempty"`
	DeviceFreeBytes  int64                    `json:"device_free_bytes,omitempty"`
	LimitBytes       int64                    `json:"limit_bytes,omitempty"`
	StagingBytes     int64                    `json:"staging_bytes"`
}

// CategoryBytes are one category's figures.
type CategoryBytes struct {
	Current int64 `json:"current"`
	Peak    int64 `json:"peak"`
	AtPeak  int64 `json:"at_peak"`
}

// NewMemoryReport is r in JSON.
func NewMemoryReport(r alloc.Report) MemoryReport {
	m := MemoryReport{Categories: map[string]CategoryBytes{}, CachedBytes: r.Cached, OutsideBytes: r.Outside,
		DeviceTotalBytes: r.DeviceTotal, DeviceFreeBytes: r.DeviceFree, LimitBytes: r.Limit, StagingBytes: r.PeakStaging}
	for _, c := range alloc.Categories() {
		s := r.Categories[c]
		if s.Peak > 0 || s.Current > 0 {
			m.Categories[c.String()] = CategoryBytes{Current: s.Current, Peak: s.Peak, AtPeak: r.AtPeak[c]}
		}
	}
	return m
}

// PrintMemStats emits d's -memstats event: as text, the one line of
// PyTorch's figures and the table of where the memory goes.
func PrintMemStats(p *Printer, d device.Device) {
	s := d.MemStats()
	m := MemStats{Event: "memstats", Device: d.Name(),
		AllocatedBytes: s.AllocatedBytes[alloc.AllPools].Current, ReservedBytes: s.ReservedBytes[alloc.AllPools].Current,
		PeakAllocatedBytes: s.AllocatedBytes[alloc.AllPools].Peak, PeakReservedBytes: s.ReservedBytes[alloc.AllPools].Peak,
		DeviceAllocs: s.DeviceAllocs, DeviceFrees: s.DeviceFrees, AllocRetries: s.AllocRetries, OOMs: s.OOMs}
	table := ""
	if r, ok := device.MemoryReport(d); ok {
		m.MemoryReport, table = NewMemoryReport(r), r.Table()
	}
	p.Emit(m, fmt.Sprintf("memstats: allocated_bytes %d  reserved_bytes %d  peak_allocated_bytes %d  peak_reserved_bytes %d  device_allocs %d  device_frees %d  alloc_retries %d  ooms %d\n%s",
		m.AllocatedBytes, m.ReservedBytes, m.PeakAllocatedBytes, m.PeakReservedBytes, m.DeviceAllocs, m.DeviceFrees, m.AllocRetries, m.OOMs, table))
}

// CategoryCurrents are the bytes each category holds now, the ones that
// hold any: the "memory" of a step event.
func CategoryCurrents(s alloc.Stats) map[string]int64 {
	m := map[string]int64{}
	for _, c := range alloc.Categories() {
		if n := s.CategoryBytes[c].Current; n > 0 {
			m[c.String()] = n
		}
	}
	return m
}

// PlanEvent is the plan command's event: the planned figures of a run
// (models.PlanMemory), whether it fits the device, and what fits if not.
type PlanEvent struct {
	Event              string `json:"event"`
	Device             string `json:"device"`
	PeakAllocatedBytes int64  `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64  `json:"peak_reserved_bytes"`
	MemoryReport
	// LimitBytes (in MemoryReport) is what the run may reserve; Fits
	// whether its peak does; LargestBatch the largest batch that fits.
	Fits         bool    `json:"fits"`
	LargestBatch int     `json:"largest_batch,omitempty"`
	Seconds      float64 `json:"seconds"`
}

// PrintPlan emits the plan command's event for plan, planned in seconds,
// with the advice for a device of limit bytes (0: unknown).
func PrintPlan(p *Printer, plan models.MemoryPlan, advice models.Advice, seconds float64) {
	r := plan.Report
	e := PlanEvent{Event: "plan", Device: r.Device, PeakAllocatedBytes: r.PeakAllocated, PeakReservedBytes: r.PeakReserved,
		MemoryReport: NewMemoryReport(r), Fits: advice.Limit == 0 || r.PeakReserved <= advice.Limit,
		LargestBatch: advice.Batch, Seconds: seconds}
	e.LimitBytes = advice.Limit
	text := r.Table()
	if advice.Limit > 0 {
		if e.Fits {
			text += fmt.Sprintf("fits: a peak of %s of the %s the device has room for; the largest batch that fits is %d\n",
				alloc.FormatSize(r.PeakReserved), alloc.FormatSize(advice.Limit), advice.Batch)
		} else {
			text += "does not fit: " + advice.String() + "\n"
		}
	}
	p.Emit(e, text+fmt.Sprintf("planned in %.2f s without allocating device memory\n", seconds))
}
