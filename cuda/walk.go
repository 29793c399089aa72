package cuda

import (
	"fmt"
	"sync"

	"github.com/gocurrent/gocurrent/device"
)

// The persistent walks' launch (device.Walker, cells.cu's gc_*_walk): the
// tile, grid and dynamic shared memory of a walk, and what they need of
// the GPU, found at Open.

// walkKernels are the persistent walk kernels.
var walkKernels = [...]kernel{kLSTMWalk, kGRUWalk, kLSTMGradWalk, kGRUGradWalk}

// walks is what a device's persistent walks run with.
type walks struct {
	// budget is the dynamic shared memory a walk block may ask for, by
	// typ: what a block can opt into (Info.SharedPerBlock) less the
	// walks' static staging, each walk kernel opted into it at Open; 0
	// where the walks never run (Config.WalkCellsUpTo unset, or a GPU
	// without cooperative launches).
	budget [2]int64

	mu  sync.Mutex
	occ map[walkLaunch]int // the driver's occupancy, asked once a shape
}

// walkLaunch is a walk kernel's variant and dynamic shared memory.
type walkLaunch struct {
	k      kernel
	t      int
	shared uint32
}

// prepareWalks opts the walk kernels into the dynamic shared memory their
// slices of W_hh may take, where the walks may run: with
// Config.WalkCellsUpTo set, on a GPU with cooperative launches.
func (d *Device) prepareWalks() error {
	if d.cfg.walkCellsUpTo() < 0 || !d.info.Cooperative {
		return nil
	}
	for t, dt := range []device.DType{device.Float32, device.Float64} {
		budget := int64(d.info.SharedPerBlock) - walkStaging(dt)
		if budget <= 0 {
			continue
		}
		for _, k := range walkKernels {
			if err := d.api.FuncSetAttribute(d.ctx, d.fn[k][t], funcMaxDynamicShared, int(budget)); err != nil {
				return fmt.Errorf("opting gc_%s into %d bytes of dynamic shared memory: %w", kernelNames[k], budget, err)
			}
		}
		d.walks.budget[t] = budget
	}
	return nil
}

// walkBudget is the dynamic shared memory a walk block in dt may take, 0
// where walks never run.
func (d *Device) walkBudget(dt device.DType) int64 { return d.walks.budget[typ(dt)] }

// walkOccupancy is how many blocks of walk kernel wk in dt, with shared
// bytes of dynamic shared memory, a multiprocessor holds, as the driver
// says (asked once a shape, then remembered); 0 when the driver could not
// say, and the walk then runs step by step.
func (d *Device) walkOccupancy(wk kernel, dt device.DType, shared uint32) int {
	key := walkLaunch{wk, typ(dt), shared}
	w := &d.walks
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, ok := w.occ[key]; ok {
		return n
	}
	n, err := d.api.Occupancy(d.ctx, d.fn[wk][key.t], fuseThreads, shared)
	if err != nil {
		n = 0
	}
	if w.occ == nil {
		w.occ = map[walkLaunch]int{}
	}
	w.occ[key] = n
	return n
}

// walkShape is persistent walk kernel wk's grid, block and dynamic shared
// memory for a layer of batch rows and hidden units, ok false where the
// walk runs step by step: above Config.WalkCellsUpTo (which the fused
// kernels' bound caps, so that every step it stands for would be the
// fused kernel, whose arithmetic it repeats: an h never written over the
// previous one, by the walk's contract), with no barrier left for the
// queue's stream, on a GPU without cooperative launches, where no tile
// has its slice of W within the shared memory a block can opt into and
// its tiles of units within the GPU's multiprocessors (walkTile), or
// where the driver says a multiprocessor holds no such block
// (walkOccupancy). The grid's x is the tiles of units; its y, the tiles of
// rows, is cut so that the grid has at most a block per multiprocessor, a
// block then taking several tiles of rows in turn. Every block must be resident at once
// (gc_grid_sync), which the cooperative launch makes the GPU wait for: a
// walk whose blocks do not all fit beside the work running (another
// stream's walk, at hidden sizes whose slices fill a multiprocessor's
// shared memory) starts when they do, never partly.
func (k kernels) walkShape(wk kernel, batch, hidden int, dt device.DType) (grid, block [3]uint32, shared uint32, ok bool) {
	d := k.q.ln.d
	gates, back := walkGates(wk)
	sms := d.info.Multiprocessors
	tj, tb, fits := walkTile(hidden, gates, dt, d.walkBudget(dt), sms)
	if !fits || hidden > d.cfg.walkCellsUpTo() || k.q.bar == 0 {
		return grid, block, 0, false
	}
	units, rows := (hidden+tj-1)/tj, (batch+tb-1)/tb
	if rows > maxGridY {
		return grid, block, 0, false
	}
	shared = uint32(walkSlice(hidden, gates, tj, back, dt))
	if d.walkOccupancy(wk, dt, shared) < 1 {
		return grid, block, 0, false
	}
	return [3]uint32{uint32(units), uint32(min(rows, max(1, sms/units))), 1}, [3]uint32{uint32(tj), uint32(tb), 1}, shared, true
}

// walkGates is walk kernel wk's gates (4 for the LSTM's, 3 for the
// GRU's), and whether it walks back.
func walkGates(wk kernel) (gates int, back bool) {
	switch wk {
	case kLSTMWalk:
		return 4, false
	case kGRUWalk:
		return 3, false
	case kLSTMGradWalk:
		return 4, true
	}
	return 3, true
}

// The walks' static shared memory (cells.cu's GC_WALK_BMAX and GC_WALK_K):
// the staging of the h or pre-activation gradients their products read,
// walkMaxRows rows of walkK elements padded by a vector (walkVec), which
// bounds the tile's rows and so its units from below (walkMinJ). Their
// slice of W_hh is the launch's dynamic shared memory (walkSlice).
const (
	walkMaxRows = 32
	walkK       = 32
	walkMinJ    = fuseThreads / walkMaxRows
)

// walkVec is the elements of dt in the kernels' vector (walk_vec): 16
// bytes.
func walkVec(dt device.DType) int { return int(16 / dt.Size()) }

// walkStaging is the walks' static shared memory in dt.
func walkStaging(dt device.DType) int64 {
	return int64(walkMaxRows*(walkK+walkVec(dt))) * dt.Size()
}

// walkStride is the kernels' walk_stride: the elements between two rows
// of a walk's slice of W, hidden rounded up to whole vectors and a vector
// more where that is an even number of them.
func walkStride(hidden int, dt device.DType) int {
	v := walkVec(dt)
	n := (hidden + v - 1) / v
	if n%2 == 0 {
		n++
	}
	return n * v
}

// walkSlice is the bytes of a walk block's slice of W_hh for J units: the
// G·J rows of its units, walkStride apart, for a walk; the J columns of
// all G·hidden rows, rounded up to whole vectors (the kernels' walk_col),
// for a walk back.
func walkSlice(hidden, gates, j int, back bool, dt device.DType) int64 {
	if back {
		v := walkVec(dt)
		return int64((gates*hidden+v-1)/v*v*j) * dt.Size()
	}
	return int64(gates*j*walkStride(hidden, dt)) * dt.Size()
}

// walkSmallSlice is the most bytes of W_hh a walk block keeps where a
// tile that small serves: with the staging, at most 47.5 KiB of shared
// memory a block in float64 (43.5 in float32), so that shared memory is
// not what limits the walk blocks a multiprocessor holds (four by it,
// three by the registers: at most 142 a thread), and the walks a stack
// runs at once on two streams are resident side by side.
const walkSmallSlice = 39936

// walkTile is the walks' block for a layer of hidden units with gates
// gates on a GPU of sms multiprocessors whose walk blocks may take budget
// bytes of dynamic shared memory (Device.walkBudget): J units by
// fuseThreads/J rows, J one of the fused kernels' (fuseTile) and its
// halves down to walkMinJ whose ceil(hidden/J) tiles of units fit the
// multiprocessors (a block each at most) and whose walk slice fits budget
// (the walk back's, never larger, fits then too): the largest whose
// slice is at most walkSmallSlice, else the smallest, whose slice is the
// smallest; fits false when none does. The tile changes which thread
// computes an element, never how: each sum runs over k in order, as the
// fused kernels' do.
func walkTile(hidden, gates int, dt device.DType, budget int64, sms int) (j, b int, fits bool) {
	first, _ := fuseTile(hidden)
	for j = first; j >= walkMinJ; j /= 2 {
		if (hidden+j-1)/j <= sms && walkSlice(hidden, gates, j, false, dt) <= min(budget, walkSmallSlice) {
			return j, fuseThreads / j, true
		}
	}
	for j = walkMinJ; j <= first; j *= 2 {
		if (hidden+j-1)/j <= sms && walkSlice(hidden, gates, j, false, dt) <= budget {
			return j, fuseThreads / j, true
		}
	}
	return 0, 0, false
}
