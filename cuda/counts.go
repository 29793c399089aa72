package cuda

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// counts are device.Counts as the device keeps them.
// replayed is the launches, GEMMs and copies graphs replayed, which are
// not the host's calls (device.Counts.Calls).
type counts struct{ syncs, launches, gemms, copies, graphs, replayed atomic.Int64 }

// Counts returns what the device was asked for since it opened, its
// scopes' work included (device.Counter): kernel launches and memsets,
// cuBLAS calls, memory copies, and the host's waits (Synchronize, one per
// stream; Upload; Download; Event.Wait). The status word's reads, which
// ride along with a synchronisation, are not counted.
func (d *Device) Counts() device.Counts {
	c := &d.counts
	n := device.Counts{Syncs: c.syncs.Load(), Launches: c.launches.Load(), GEMMs: c.gemms.Load(), Copies: c.copies.Load(), Graphs: c.graphs.Load()}
	n.Calls = n.Launches + n.GEMMs + n.Copies + n.Graphs - c.replayed.Load()
	return n
}

var _ device.Counter = (*Device)(nil)

// countingAPI is the driver with the work it queues counted in n: the
// device's api. The synchronisations are counted where the device waits
// (a wait may take several driver calls). Work queued on a stream being
// captured (or with the cuBLAS handle bound to one) is counted in its
// capture's tally instead (captures): it does not run now, but at each
// launch of the graph, which counts it then.
type countingAPI struct {
	api
	n   *counts
	cap *captures
}

// on returns where the work queued on stream s counts.
func (a countingAPI) on(s cuStream) *counts {
	if a.cap.active.Load() == 0 {
		return a.n
	}
	a.cap.mu.Lock()
	defer a.cap.mu.Unlock()
	if t := a.cap.streams[s]; t != nil {
		return t
	}
	return a.n
}

// with returns where a GEMM with handle h counts.
func (a countingAPI) with(h blasHandle) *counts {
	if a.cap.active.Load() == 0 {
		return a.n
	}
	a.cap.mu.Lock()
	defer a.cap.mu.Unlock()
	if t := a.cap.handles[h]; t != nil {
		return t
	}
	return a.n
}

// captures are the streams being captured and the cuBLAS handles bound to
// them, each with its capture's tally: a lane's compute stream from the
// start of its Capture, a branch's from its Fork into it, until the
// capture ends. Other streams' work meanwhile (the loader's copies, from
// its producers) is the device's, counted as it runs.
type captures struct {
	active  atomic.Int32 // entries, so that a call outside any capture takes no lock
	mu      sync.Mutex
	streams map[cuStream]*counts
	handles map[blasHandle]*counts
}

// add counts the work on s and with h in t.
func (c *captures) add(s cuStream, h blasHandle, t *counts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams == nil {
		c.streams, c.handles = map[cuStream]*counts{}, map[blasHandle]*counts{}
	}
	if _, ok := c.streams[s]; !ok {
		c.active.Add(1)
	}
	c.streams[s] = t
	if h != 0 {
		c.handles[h] = t
	}
}

// end removes every stream and handle counted in t.
func (c *captures) end(t *counts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, x := range c.streams {
		if x == t {
			delete(c.streams, s)
			c.active.Add(-1)
		}
	}
	for h, x := range c.handles {
		if x == t {
			delete(c.handles, h)
		}
	}
}

func (a countingAPI) Launch(c cuContext, f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error {
	err := a.api.Launch(c, f, grid, block, sharedBytes, s, args)
	if err == nil {
		a.on(s).launches.Add(1)
	}
	return err
}

func (a countingAPI) LaunchCooperative(c cuContext, f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error {
	err := a.api.LaunchCooperative(c, f, grid, block, sharedBytes, s, args)
	if err == nil {
		a.on(s).launches.Add(1)
	}
	return err
}

func (a countingAPI) MemsetD32Async(c cuContext, dst alloc.Ptr, v uint32, n int64, s cuStream) error {
	err := a.api.MemsetD32Async(c, dst, v, n, s)
	if err == nil {
		a.on(s).launches.Add(1)
	}
	return err
}

func (a countingAPI) BLASGemm(c cuContext, h blasHandle, g blasGemm) error {
	err := a.api.BLASGemm(c, h, g)
	if err == nil {
		a.with(h).gemms.Add(1)
	}
	return err
}

func (a countingAPI) MemcpyHtoDAsync(c cuContext, dst alloc.Ptr, src unsafe.Pointer, n int64, s cuStream) error {
	err := a.api.MemcpyHtoDAsync(c, dst, src, n, s)
	if err == nil {
		a.on(s).copies.Add(1)
	}
	return err
}

func (a countingAPI) MemcpyDtoHAsync(c cuContext, dst unsafe.Pointer, src alloc.Ptr, n int64, s cuStream) error {
	err := a.api.MemcpyDtoHAsync(c, dst, src, n, s)
	if err == nil {
		a.on(s).copies.Add(1)
	}
	return err
}

func (a countingAPI) MemcpyDtoDAsync(c cuContext, dst, src alloc.Ptr, n int64, s cuStream) error {
	err := a.api.MemcpyDtoDAsync(c, dst, src, n, s)
	if err == nil {
		a.on(s).copies.Add(1)
	}
	return err
}
