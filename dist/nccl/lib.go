package nccl

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/gocurrent/gocurrent/dist"
)

// commHandle is an ncclComm_t.
type commHandle uintptr

// NCCL's data types and reduction (ncclDataType_t, ncclRedOp_t).
const (
	ncclUint8   = 1
	ncclFloat32 = 7
	ncclFloat64 = 8
	ncclSum     = 0
)

// library is the part of NCCL a communicator uses, loaded at run time:
// over dlopen in the cgo build (lib_cgo.go); the CGO_ENABLED=0 build has
// none. Every call but version, uniqueID and errorString must run where
// the device's context is current (cuda's Native). Errors are *Error.
type library interface {
	path() string
	version() (int, error)
	uniqueID() (UniqueID, error)
	initRank(size, rank int, id UniqueID) (commHandle, error)
	// allReduce sums count elements of type dt at buf in place.
	allReduce(buf uintptr, count int64, dt int, c commHandle, stream uintptr) error
	// broadcast copies root's count bytes at buf into every rank's, in place.
	broadcast(buf uintptr, count int64, root int, c commHandle, stream uintptr) error
	asyncError(c commHandle) error
	abort(c commHandle) error
	destroy(c commHandle) error
}

// Error is a failed NCCL call: the function, its ncclResult_t and what
// ncclGetErrorString says about it.
type Error struct {
	Func    string
	Code    int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("nccl: %s: %s (ncclResult_t %d)", e.Func, e.Message, e.Code)
}

// defaultLibrary is NCCL's soname: version 2's ABI, every release since
// 2.0.
const defaultLibrary = "libnccl.so.2"

// candidates are the names tried in order when dist.Config.NCCLLibrary is
// "": the dynamic linker's own search, then where NCCL is installed
// without being on its path: PyTorch's pip wheels (nvidia-nccl-cu12 and
// -cu13 put it in site-packages/nvidia/nccl/lib), conda's, and the CUDA
// toolkit's and Debian/Ubuntu's library folders.
func candidates() []string {
	names := []string{defaultLibrary}
	var globs []string
	for _, root := range []string{"/usr/lib", "/usr/local/lib", "/opt/conda/lib"} {
		for _, pkgs := range []string{"site-packages", "dist-packages"} {
			globs = append(globs, filepath.Join(root, "python3*", pkgs, "nvidia", "nccl", "lib", defaultLibrary))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		globs = append(globs, filepath.Join(home, ".local", "lib", "python3*", "site-packages", "nvidia", "nccl", "lib", defaultLibrary))
	}
	for _, g := range globs {
		m, _ := filepath.Glob(g) // the pattern is well formed
		names = append(names, m...)
	}
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/cuda/lib64", "/usr/local/nccl/lib"} {
		names = append(names, filepath.Join(dir, defaultLibrary))
	}
	return names
}

var loaded struct {
	mu   sync.Mutex
	libs map[string]library // by Config.NCCLLibrary ("" for the search)
}

// load opens NCCL as cfg says, once per process for each name: a library
// stays loaded for the life of the process, as if the binary were linked
// against it. A missing library or entry point is an error wrapping
// dist.ErrUnavailable that names what is missing.
func load(cfg dist.Config) (library, error) {
	loaded.mu.Lock()
	defer loaded.mu.Unlock()
	if l, ok := loaded.libs[cfg.NCCLLibrary]; ok {
		return l, nil
	}
	names := candidates()
	if cfg.NCCLLibrary != "" {
		names = []string{cfg.NCCLLibrary}
	}
	l, err := open(names)
	if err != nil {
		return nil, err
	}
	if loaded.libs == nil {
		loaded.libs = map[string]library{}
	}
	loaded.libs[cfg.NCCLLibrary] = l
	return l, nil
}
