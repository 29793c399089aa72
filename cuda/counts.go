package cuda

import (
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
// (a wait may take several driver calls).
type countingAPI struct {
	api
	n *counts
}

func (a countingAPI) Launch(c cuContext, f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error {
	err := a.api.Launch(c, f, grid, block, sharedBytes, s, args)
	if err == nil {
		a.n.launches.Add(1)
	}
	return err
}

func (a countingAPI) MemsetD32Async(c cuContext, dst alloc.Ptr, v uint32, n int64, s cuStream) error {
	err := a.api.MemsetD32Async(c, dst, v, n, s)
	if err == nil {
		a.n.launches.Add(1)
	}
	return err
}

func (a countingAPI) BLASGemm(c cuContext, h blasHandle, g blasGemm) error {
	err := a.api.BLASGemm(c, h, g)
	if err == nil {
		a.n.gemms.Add(1)
	}
	return err
}

func (a countingAPI) MemcpyHtoDAsync(c cuContext, dst alloc.Ptr, src unsafe.Pointer, n int64, s cuStream) error {
	err := a.api.MemcpyHtoDAsync(c, dst, src, n, s)
	if err == nil {
		a.n.copies.Add(1)
	}
	return err
}

func (a countingAPI) MemcpyDtoHAsync(c cuContext, dst unsafe.Pointer, src alloc.Ptr, n int64, s cuStream) error {
	err := a.api.MemcpyDtoHAsync(c, dst, src, n, s)
	if err == nil {
		a.n.copies.Add(1)
	}
	return err
}

func (a countingAPI) MemcpyDtoDAsync(c cuContext, dst, src alloc.Ptr, n int64, s cuStream) error {
	err := a.api.MemcpyDtoDAsync(c, dst, src, n, s)
	if err == nil {
		a.n.copies.Add(1)
	}
	return err
}
