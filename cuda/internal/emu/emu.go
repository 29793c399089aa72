//go:build cgo

// Package emu runs the CUDA kernels of cuda/kernels on the CPU, for the
// cuda package's tests on machines without a GPU: Build compiles every
// kernel source with g++ against an emulation header (emu.h.in: blocks run in
// turn, a block's threads are fibers switched at barriers and shuffles)
// into a shared library, and Lib.Launch calls a kernel with the launch
// shape and argument slots cuLaunchKernel would get. With the cuda
// package's simulated driver this runs the conformance suite on the real
// kernels and the real launch code. Only tests import it.
package emu

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef int (*emu_launch_fn)(const char*, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, const uint64_t*, int);

static int emu_call(void* f, const char* name, unsigned gx, unsigned gy, unsigned gz,
                    unsigned bx, unsigned by, unsigned bz, const uint64_t* args, int n) {
	return ((emu_launch_fn)f)(name, gx, gy, gz, bx, by, bz, args, n);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"unsafe"
)

// Lib is a compiled emulator.
type Lib struct {
	launch unsafe.Pointer
}

// Build compiles the emulator and the kernel sources in kernelsDir into
// outDir and loads it. It needs g++ (C++17); errors.Is(err,
// exec.ErrNotFound) when there is none.
func Build(kernelsDir, outDir string) (*Lib, error) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		return nil, err
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, errors.New("emu: cannot locate emu.cc.in")
	}
	lib := filepath.Join(outDir, "libgcemu.so")
	cmd := exec.Command(gxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-I", kernelsDir,
		"-o", lib, "-x", "c++", filepath.Join(filepath.Dir(self), "emu.cc.in"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("emu: g++: %w\n%s", err, out)
	}
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	h := C.dlopen(clib, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("emu: %s", C.GoString(C.dlerror()))
	}
	sym := C.CString("emu_launch")
	defer C.free(unsafe.Pointer(sym))
	f := C.dlsym(h, sym)
	if f == nil {
		return nil, errors.New("emu: no emu_launch")
	}
	return &Lib{launch: f}, nil
}

// Launch runs kernel name over grid with block threads per block; args
// are its parameters in 8-byte slots. Device pointers in args are host
// addresses: the emulated device's memory is host memory.
func (l *Lib) Launch(name string, grid, block [3]uint32, args []uint64) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	switch r := C.emu_call(l.launch, cname, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), p, C.int(len(args))); r {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("emu: no kernel %s", name)
	default:
		return fmt.Errorf("emu: kernel %s called with %d arguments", name, len(args))
	}
}
