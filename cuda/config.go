package cuda

import (
	"fmt"

	"github.com/gocurrent/gocurrent/alloc"
)

// Config configures the CUDA device. The zero Config works: the first GPU,
// the driver and cuBLAS found by the dynamic loader, FP32 GEMMs, PyTorch's
// allocator defaults.
type Config struct {
	// Ordinal is the GPU to open, 0 for the first.
	Ordinal int
	// DriverLibrary is the CUDA driver's file name or path; "" means
	// libcuda.so.1, found by the dynamic loader.
	DriverLibrary string
	// BLASLibrary is cuBLAS's file name or path; "" tries libcublas.so.13,
	// .12 and .11 in that order. The library does not read the
	// environment: a program that wants an override (the char-RNN example
	// reads GOCURRENT_CUBLAS) passes it here.
	BLASLibrary string
	// TF32 lets cuBLAS run float32 GEMMs on tensor cores in TF32 (10-bit
	// mantissa inputs, float32 accumulation), as PyTorch does with
	// torch.backends.cuda.matmul.allow_tf32. Faster on Ampere and later;
	// results then differ from float32 by about 1e-3 relative, so the
	// conformance suite runs without it.
	TF32 bool
	// Memory configures the caching allocator (the zero value is
	// PyTorch's default policy).
	Memory alloc.Config
	// BLASWorkspace is the cuBLAS workspace in bytes, taken from the
	// caching allocator once at Open so that cuBLAS allocates nothing while
	// training; 0 means 32 MiB (what PyTorch gives cuBLAS on Hopper), a
	// negative value lets cuBLAS manage its own. Under a memory limit
	// (Memory.MemoryLimit or MemoryFraction) it is at most a sixteenth of
	// the limit, and none below 16 KiB.
	BLASWorkspace int64
	// FuseCellsUpTo is the largest hidden size at which a recurrent cell
	// given its recurrent product (device.LSTMCell and GRUCell's fused
	// form) runs as one kernel that does the product and the cell (two
	// launches, its product and the cell kernel, when the new h is
	// written over the previous one, as in sampling); above it, and for
	// more batch rows than the fused kernel's grid holds, the call is a
	// cuBLAS GEMM and the cell kernel, two launches. The same bound
	// holds for the cell gradients given the next step's recurrent
	// product (device.LSTMCellGrad and GRUCellGrad's fused form: the
	// backward's GEMM and the cell gradient in one kernel, two launches
	// when the product's operands overlap an output). 0 means 256, where
	// a step's GEMM (batch 32) is a latency-bound launch of a few µs
	// (ARCHITECTURE's performance model), so one launch beats two; a
	// negative value never fuses, to compare the two on a GPU.
	FuseCellsUpTo int
	// WalkCellsUpTo is the largest hidden size at which a layer's walk
	// over its steps and its walk back (device.LSTMWalk, GRUWalk,
	// LSTMGradWalk and GRUGradWalk, which package rnn queues for every
	// window of steps, with lengths too) run as one persistent kernel each:
	// every step's fused cell (or cell gradient) kernel in one launch, its
	// blocks all resident and meeting at a grid-wide barrier between two
	// steps, instead of a launch per step. It runs only where the
	// steps would run as the fused kernel (FuseCellsUpTo, whose results it
	// gives to the bit) and the tiles of hidden units fit the GPU's
	// multiprocessors, with each tile's slice of W_hh, which its block
	// keeps in shared memory from the first step to the last, within what
	// a block can opt into (Info.SharedPerBlock: 227 KiB on an H100 or
	// H200, whose 132 multiprocessors then hold an LSTM walk of up to
	// 1056 units in float32 and 874 in float64, a GRU walk of up to 1180
	// and 1056); elsewhere the walk is its per-step calls. A walk above
	// 256 units needs FuseCellsUpTo raised with it. Each walk is a
	// cooperative launch of at most a block per multiprocessor, which the
	// GPU starts only when all its blocks fit at once (the barrier needs
	// them all resident): walks on several streams at once, from many
	// scopes, run side by side where they fit and wait for each other
	// where they do not, never half resident. Where a block's slice of W
	// fits 39 KiB (hidden 256: 8 units in float32, 4 in float64) a
	// multiprocessor holds three walk blocks (128 threads, at most 142
	// registers a thread and 47.5 KiB of shared memory); with larger
	// slices fewer, one from about 110 KiB (hidden 1024: 128 KiB), so two
	// such walks take turns.
	// A stack runs two at once at most (the wavefront's pair of layers, or
	// a bidirectional layer's two directions). 0 (the
	// default) never uses it: it has not yet been measured on a GPU
	// (issue 21), and a GPU run compares it with the per-step launches by
	// setting it (the char-RNN command reads GOCURRENT_WALK_CELLS_UP_TO).
	WalkCellsUpTo int
}

const defaultFuseCellsUpTo = 256

// fuseCellsUpTo is FuseCellsUpTo resolved: the largest hidden size the
// fused cell kernels are used at, -1 for none.
func (c Config) fuseCellsUpTo() int {
	switch {
	case c.FuseCellsUpTo < 0:
		return -1
	case c.FuseCellsUpTo == 0:
		return defaultFuseCellsUpTo
	}
	return c.FuseCellsUpTo
}

// walkCellsUpTo is WalkCellsUpTo resolved: the largest hidden size the
// persistent walk runs at, capped by the fused kernels' (whose results it
// must give), -1 for none.
func (c Config) walkCellsUpTo() int {
	if c.WalkCellsUpTo <= 0 {
		return -1
	}
	return min(c.WalkCellsUpTo, c.fuseCellsUpTo())
}

// defaultBLASLibraries are the cuBLAS sonames tried in order: CUDA 13, 12
// and 11 each ship one, and their GEMM entry points are the same.
var defaultBLASLibraries = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}

const defaultBLASWorkspace = 32 << 20

// Workspace is the bytes of cuBLAS workspace a device opened with c takes
// from its allocator at Open without a memory limit: BLASWorkspace
// resolved, 0 when cuBLAS manages its own. (A device whose cuBLAS refuses the workspace holds
// none; Device.BLASWorkspace says what it took.)
func (c Config) Workspace() int64 {
	switch ws := c.BLASWorkspace; {
	case ws < 0:
		return 0
	case ws == 0:
		return defaultBLASWorkspace
	default:
		return ws
	}
}

func (c Config) validate() error {
	if c.Ordinal < 0 {
		return fmt.Errorf("cuda: device ordinal %d is negative", c.Ordinal)
	}
	return nil
}

func (c Config) libraries() libraries {
	l := libraries{driver: c.DriverLibrary, blas: defaultBLASLibraries}
	if c.BLASLibrary != "" {
		l.blas = []string{c.BLASLibrary}
	}
	return l
}
