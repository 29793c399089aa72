//go:build cgo

package cudaemu

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// emu_dlopen opens name with dlopen and, when that fails, returns in
// *why the loader's reason, copied into memory the caller frees. dlerror
// is read in this same call: its state is the calling thread's, and a
// second cgo call may run on another OS thread, whose dlerror has nothing
// (or another library's failure) to say.
static void* emu_dlopen(const char* name, int flags, char** why) {
	void* lib = dlopen(name, flags);
	*why = NULL;
	if (!lib) {
		const char* e = dlerror();
		if (!e) e = "dlopen failed and gave no reason";
		size_t n = strlen(e) + 1;
		*why = malloc(n);
		if (*why) memcpy(*why, e, n);
	}
	return lib;
}

typedef int (*emu_launch_fn)(const char*, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, const uint64_t*, int);

typedef int (*emu_nccl_fail_fn)(const char*, int);

static int emu_fail(void* f, const char* id, int code) { return ((emu_nccl_fail_fn)f)(id, code); }

static int emu_call(void* f, const char* name, unsigned gx, unsigned gy, unsigned gz,
                    unsigned bx, unsigned by, unsigned bz, unsigned shared, const uint64_t* args, int n) {
	return ((emu_launch_fn)f)(name, gx, gy, gz, bx, by, bz, shared, args, n);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Lib is a compiled and loaded emulator.
type Lib struct {
	path   string
	launch unsafe.Pointer
	fail   unsafe.Pointer // emu_nccl_fail
}

// Build compiles the emulator, the emulated driver and cuBLAS, and the
// kernel sources in kernelsDir into outDir/libgcemu.so and loads it. It
// needs g++ (C++17); errors.Is(err, exec.ErrNotFound) when there is none.
func Build(kernelsDir, outDir string) (*Lib, error) {
	gxx, err := compiler()
	if err != nil {
		return nil, err
	}
	lib, err := absolute(outDir, "libgcemu.so")
	if err != nil {
		return nil, err
	}
	if err := compile(gxx, kernelsDir, lib); err != nil {
		return nil, err
	}
	return load(lib)
}

var cached struct {
	once sync.Once
	lib  *Lib
	err  error
}

// Cached returns the emulator built from this checkout's sources (the
// emulator's and cuda/kernels'), building it the first time a process
// asks and when no earlier build of the same sources with the same g++ is
// in the user's cache directory. Concurrent processes (go test runs
// packages in parallel) may build it at the same time: each writes a file
// of its own and renames it into place, so none loads a partial one.
// errors.Is(err, exec.ErrNotFound) when there is no g++.
func Cached() (*Lib, error) {
	cached.once.Do(func() {
		var path string
		path, cached.err = buildCached()
		if cached.err == nil {
			cached.lib, cached.err = load(path)
		}
	})
	return cached.lib, cached.err
}

// load opens the library at path (absolute) and finds emu_launch.
func load(path string) (*Lib, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var why *C.char
	h := C.emu_dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL, &why)
	if h == nil {
		if why == nil {
			return nil, fmt.Errorf("cudaemu: %s: dlopen failed, and there was no memory for its reason", path)
		}
		defer C.free(unsafe.Pointer(why))
		return nil, fmt.Errorf("cudaemu: %s", C.GoString(why))
	}
	sym := C.CString("emu_launch")
	defer C.free(unsafe.Pointer(sym))
	f := C.dlsym(h, sym)
	if f == nil {
		return nil, fmt.Errorf("cudaemu: %s has no emu_launch", path)
	}
	fsym := C.CString("emu_nccl_fail")
	defer C.free(unsafe.Pointer(fsym))
	fail := C.dlsym(h, fsym)
	if fail == nil {
		return nil, fmt.Errorf("cudaemu: %s has no emu_nccl_fail", path)
	}
	return &Lib{path: path, launch: f, fail: fail}, nil
}

// Path is the library's absolute path: pass it to cuda.Config as both
// DriverLibrary and BLASLibrary.
func (l *Lib) Path() string { return l.path }

// FailNCCL gives every live communicator of the emulated NCCL made from
// id (an ncclUniqueId's 128 bytes) the asynchronous error code (an
// ncclResult_t), as a network failure would: ncclCommGetAsyncError
// reports it, their pending collectives stay pending until they are
// aborted, and their later collectives fail with it. It returns how many
// communicators it found.
func (l *Lib) FailNCCL(id []byte, code int) (int, error) {
	if len(id) != 128 {
		return 0, fmt.Errorf("cudaemu: FailNCCL: an id of %d bytes, want 128", len(id))
	}
	cid := C.CBytes(id)
	defer C.free(cid)
	return int(C.emu_fail(l.fail, (*C.char)(cid), C.int(code))), nil
}

// Launch runs kernel name over grid with block threads per block, each
// block with shared bytes of dynamic shared memory; args are its
// parameters in 8-byte slots. Device pointers in args are host
// addresses: the emulated device's memory is host memory. It bypasses the
// emulated driver: nothing checks that the pointers are device memory.
func (l *Lib) Launch(name string, grid, block [3]uint32, shared uint32, args []uint64) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	switch r := C.emu_call(l.launch, cname, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(shared), p, C.int(len(args))); r {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("cudaemu: no kernel %s", name)
	case 2:
		return fmt.Errorf("cudaemu: kernel %s called with %d arguments", name, len(args))
	case 3:
		return fmt.Errorf("cudaemu: kernel %s: a grid barrier some threads never reach", name)
	default:
		return fmt.Errorf("cudaemu: kernel %s: a grid barrier over more blocks (%d) than the GPU holds at once",
			name, grid[0]*grid[1]*grid[2])
	}
}
