//go:build cgo

package nccl

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Our own declarations of the few NCCL types we use (nccl.h's at 2.x), so
// no NCCL header is needed to build: ncclComm_t and cudaStream_t are
// opaque pointers, ncclResult_t, ncclDataType_t and ncclRedOp_t ints, and
// ncclUniqueId a struct of 128 chars, passed by value.
typedef struct { char internal[128]; } gcNcclId;

typedef struct {
	int (*ncclGetVersion)(int*);
	int (*ncclGetUniqueId)(gcNcclId*);
	int (*ncclCommInitRank)(void**, int, gcNcclId, int);
	int (*ncclAllReduce)(const void*, void*, size_t, int, int, void*, void*);
	int (*ncclBroadcast)(const void*, void*, size_t, int, int, void*, void*);
	int (*ncclCommAbort)(void*);
	int (*ncclCommDestroy)(void*);
	int (*ncclCommGetAsyncError)(void*, int*);
	const char* (*ncclGetErrorString)(int);
} gcNCCL;

// gcn_dlopen opens name with dlopen and, when that fails, returns in
// *why the loader's reason, copied into memory the caller frees. dlerror
// is read in this same call: its state is the calling thread's, and a
// second cgo call may run on another OS thread, whose dlerror has nothing
// (or another library's failure) to say.
static void* gcn_dlopen(const char* name, int flags, char** why) {
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

static const char* gcn_sym(void* lib, const char* name, void** slot) {
	*slot = dlsym(lib, name);
	return *slot ? NULL : name;
}

#define GCN_SYM(lib, n, field) \
	do { const char* m = gcn_sym(lib, #field, (void**)&(n)->field); if (m) return m; } while (0)

// gcn_load resolves every entry point; it returns the name of the first
// one missing, or NULL.
static const char* gcn_load(void* lib, gcNCCL* n) {
	GCN_SYM(lib, n, ncclGetVersion);
	GCN_SYM(lib, n, ncclGetUniqueId);
	GCN_SYM(lib, n, ncclCommInitRank);
	GCN_SYM(lib, n, ncclAllReduce);
	GCN_SYM(lib, n, ncclBroadcast);
	GCN_SYM(lib, n, ncclCommAbort);
	GCN_SYM(lib, n, ncclCommDestroy);
	GCN_SYM(lib, n, ncclCommGetAsyncError);
	GCN_SYM(lib, n, ncclGetErrorString);
	return NULL;
}

static int gcn_version(gcNCCL* n, int* v) { return n->ncclGetVersion(v); }
static const char* gcn_error_string(gcNCCL* n, int r) { return n->ncclGetErrorString(r); }
static int gcn_unique_id(gcNCCL* n, char* out) {
	gcNcclId id;
	int r = n->ncclGetUniqueId(&id);
	if (r == 0) memcpy(out, id.internal, sizeof id.internal);
	return r;
}
// gcn_init_rank passes the id by value, as ncclCommInitRank takes it.
static int gcn_init_rank(gcNCCL* n, void** comm, int nranks, const char* in, int rank) {
	gcNcclId id;
	memcpy(id.internal, in, sizeof id.internal);
	return n->ncclCommInitRank(comm, nranks, id, rank);
}
// gcn_all_reduce and gcn_broadcast work in place: sendbuff == recvbuff.
static int gcn_all_reduce(gcNCCL* n, uint64_t buf, size_t count, int dt, void* comm, void* s) {
	void* p = (void*)(uintptr_t)buf;
	return n->ncclAllReduce(p, p, count, dt, 0, comm, s); // ncclSum
}
static int gcn_broadcast(gcNCCL* n, uint64_t buf, size_t count, int root, void* comm, void* s) {
	void* p = (void*)(uintptr_t)buf;
	return n->ncclBroadcast(p, p, count, 1, root, comm, s); // ncclUint8
}
static int gcn_async_error(gcNCCL* n, void* comm, int* e) { return n->ncclCommGetAsyncError(comm, e); }
static int gcn_abort(gcNCCL* n, void* comm) { return n->ncclCommAbort(comm); }
static int gcn_destroy(gcNCCL* n, void* comm) { return n->ncclCommDestroy(comm); }
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/gocurrent/gocurrent/dist"
)

// cgoLib is library over NCCL opened with dlopen. Its table of entry
// points lives in C memory, filled once and read-only afterwards.
type cgoLib struct {
	name string
	n    *C.gcNCCL
}

var _ library = (*cgoLib)(nil)

// open opens the first of names that loads and has every entry point.
func open(names []string) (library, error) {
	var tried []string
	for _, name := range names {
		cname := C.CString(name)
		var why *C.char
		h := C.gcn_dlopen(cname, C.RTLD_NOW|C.RTLD_LOCAL, &why)
		C.free(unsafe.Pointer(cname))
		if h == nil {
			tried = append(tried, dlReason(name, why))
			continue
		}
		n := (*C.gcNCCL)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gcNCCL{}))))
		if missing := C.gcn_load(h, n); missing != nil {
			C.free(unsafe.Pointer(n))
			tried = append(tried, fmt.Sprintf("%s has no %s", name, C.GoString(missing)))
			continue
		}
		return &cgoLib{name: name, n: n}, nil
	}
	return nil, fmt.Errorf("%w: dist/nccl: no usable NCCL (%s); set dist.Config.NCCLLibrary to libnccl.so.2's path",
		dist.ErrUnavailable, strings.Join(tried, "; "))
}

func (l *cgoLib) check(fn string, r C.int) error {
	if r == 0 {
		return nil
	}
	msg := "unknown error"
	if s := C.gcn_error_string(l.n, r); s != nil {
		msg = C.GoString(s)
	}
	return &Error{Func: fn, Code: int(r), Message: msg}
}

// ptrOf turns a handle back into the C pointer it came from; the handles
// point into NCCL's or the driver's memory, never Go's.
func ptrOf(h uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&h)) }

func (l *cgoLib) path() string { return l.name }

func (l *cgoLib) version() (int, error) {
	var v C.int
	err := l.check("ncclGetVersion", C.gcn_version(l.n, &v))
	return int(v), err
}

func (l *cgoLib) uniqueID() (UniqueID, error) {
	var id UniqueID
	err := l.check("ncclGetUniqueId", C.gcn_unique_id(l.n, (*C.char)(unsafe.Pointer(&id[0]))))
	return id, err
}

func (l *cgoLib) initRank(size, rank int, id UniqueID) (commHandle, error) {
	var c unsafe.Pointer
	err := l.check("ncclCommInitRank", C.gcn_init_rank(l.n, &c, C.int(size), (*C.char)(unsafe.Pointer(&id[0])), C.int(rank)))
	return commHandle(uintptr(c)), err
}

func (l *cgoLib) allReduce(buf uintptr, count int64, dt int, c commHandle, stream uintptr) error {
	return l.check("ncclAllReduce", C.gcn_all_reduce(l.n, C.uint64_t(buf), C.size_t(count), C.int(dt), ptrOf(uintptr(c)), ptrOf(stream)))
}

func (l *cgoLib) broadcast(buf uintptr, count int64, root int, c commHandle, stream uintptr) error {
	return l.check("ncclBroadcast", C.gcn_broadcast(l.n, C.uint64_t(buf), C.size_t(count), C.int(root), ptrOf(uintptr(c)), ptrOf(stream)))
}

func (l *cgoLib) asyncError(c commHandle) error {
	var e C.int
	if err := l.check("ncclCommGetAsyncError", C.gcn_async_error(l.n, ptrOf(uintptr(c)), &e)); err != nil {
		return err
	}
	if e == 0 {
		return nil
	}
	return l.check("ncclCommGetAsyncError: an asynchronous error", e)
}

func (l *cgoLib) abort(c commHandle) error {
	return l.check("ncclCommAbort", C.gcn_abort(l.n, ptrOf(uintptr(c))))
}

func (l *cgoLib) destroy(c commHandle) error {
	return l.check("ncclCommDestroy", C.gcn_destroy(l.n, ptrOf(uintptr(c))))
}

// dlReason is the reason gcn_dlopen gave for name, which it frees.
func dlReason(name string, why *C.char) string {
	if why == nil {
		return name + ": dlopen failed, and there was no memory for its reason"
	}
	defer C.free(unsafe.Pointer(why))
	return C.GoString(why)
}
