//go:build cgo

package mpi

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

// Our own minimal declarations of the few MPI entry points we use: no MPI
// header is needed to build. In Open MPI, MPI_Comm, MPI_Datatype, MPI_Op
// and MPI_Errhandler are pointers to the library's predefined objects
// (MPI_COMM_WORLD is &ompi_mpi_comm_world, and so on), so the handles are
// the addresses of those data symbols. MPICH's handles are integers: this
// table is Open MPI's ABI only.
typedef void* gmHandle;

typedef struct {
	int (*MPI_Init_thread)(int*, char***, int, int*);
	int (*MPI_Initialized)(int*);
	int (*MPI_Finalized)(int*);
	int (*MPI_Finalize)(void);
	int (*MPI_Comm_rank)(gmHandle, int*);
	int (*MPI_Comm_size)(gmHandle, int*);
	int (*MPI_Comm_set_errhandler)(gmHandle, gmHandle);
	int (*MPI_Allreduce)(const void*, void*, int, gmHandle, gmHandle, gmHandle);
	int (*MPI_Bcast)(void*, int, gmHandle, int, gmHandle);
	int (*MPI_Barrier)(gmHandle);
	int (*MPI_Abort)(gmHandle, int);
	int (*MPI_Error_string)(int, char*, int*);
	gmHandle comm_world, float_, double_, byte_, op_sum, errors_return;
} gmMPI;

// gm_dlopen opens name with dlopen and, when that fails, returns in
// *why the loader's reason, copied into memory the caller frees. dlerror
// is read in this same call: its state is the calling thread's, and a
// second cgo call may run on another OS thread, whose dlerror has nothing
// (or another library's failure) to say.
static void* gm_dlopen(const char* name, int flags, char** why) {
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

// gm_sym looks name up in lib and stores it in *slot; it returns name when
// the symbol is missing, NULL when found.
static const char* gm_sym(void* lib, const char* name, void** slot) {
	*slot = dlsym(lib, name);
	return *slot ? NULL : name;
}

#define GM_SYM(lib, m, field, name) \
	do { const char* miss = gm_sym(lib, name, (void**)&(m)->field); if (miss) return miss; } while (0)

// gm_load resolves every entry point and predefined object; it returns
// the name of the first one missing, or NULL.
static const char* gm_load(void* lib, gmMPI* m) {
	GM_SYM(lib, m, MPI_Init_thread, "MPI_Init_thread");
	GM_SYM(lib, m, MPI_Initialized, "MPI_Initialized");
	GM_SYM(lib, m, MPI_Finalized, "MPI_Finalized");
	GM_SYM(lib, m, MPI_Finalize, "MPI_Finalize");
	GM_SYM(lib, m, MPI_Comm_rank, "MPI_Comm_rank");
	GM_SYM(lib, m, MPI_Comm_size, "MPI_Comm_size");
	GM_SYM(lib, m, MPI_Comm_set_errhandler, "MPI_Comm_set_errhandler");
	GM_SYM(lib, m, MPI_Allreduce, "MPI_Allreduce");
	GM_SYM(lib, m, MPI_Bcast, "MPI_Bcast");
	GM_SYM(lib, m, MPI_Barrier, "MPI_Barrier");
	GM_SYM(lib, m, MPI_Abort, "MPI_Abort");
	GM_SYM(lib, m, MPI_Error_string, "MPI_Error_string");
	GM_SYM(lib, m, comm_world, "ompi_mpi_comm_world");
	GM_SYM(lib, m, float_, "ompi_mpi_float");
	GM_SYM(lib, m, double_, "ompi_mpi_double");
	GM_SYM(lib, m, byte_, "ompi_mpi_byte");
	GM_SYM(lib, m, op_sum, "ompi_mpi_op_sum");
	GM_SYM(lib, m, errors_return, "ompi_mpi_errors_return");
	return NULL;
}

static int gm_initialized(gmMPI* m, int* flag) { return m->MPI_Initialized(flag); }
static int gm_finalized(gmMPI* m, int* flag) { return m->MPI_Finalized(flag); }
static int gm_finalize(gmMPI* m) { return m->MPI_Finalize(); }
static int gm_rank(gmMPI* m, int* r) { return m->MPI_Comm_rank(m->comm_world, r); }
static int gm_size(gmMPI* m, int* n) { return m->MPI_Comm_size(m->comm_world, n); }
static int gm_barrier(gmMPI* m) { return m->MPI_Barrier(m->comm_world); }
static int gm_abort(gmMPI* m, int code) { return m->MPI_Abort(m->comm_world, code); }
static int gm_error_string(gmMPI* m, int code, char* s, int* n) { return m->MPI_Error_string(code, s, n); }

static int gm_init_thread(gmMPI* m, int required, int* provided) {
	int rc = m->MPI_Init_thread(NULL, NULL, required, provided);
	if (rc != 0)
		return rc;
	return m->MPI_Comm_set_errhandler(m->comm_world, m->errors_return);
}

static gmHandle gm_type(gmMPI* m, int t) {
	switch (t) {
	case 0: return m->float_;
	case 1: return m->double_;
	default: return m->byte_;
	}
}

// MPI_IN_PLACE is (void*)1 in Open MPI.
static int gm_allreduce_sum(gmMPI* m, void* p, int count, int t) {
	return m->MPI_Allreduce((void*)1, p, count, gm_type(m, t), m->op_sum, m->comm_world);
}

static int gm_bcast(gmMPI* m, void* p, int count, int t, int root) {
	return m->MPI_Bcast(p, count, gm_type(m, t), root, m->comm_world);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/gocurrent/gocurrent/dist"
)

// cgoBuild says whether this build can load Open MPI.
const cgoBuild = true

// cgoAPI is api over Open MPI opened with dlopen. The table lives in C
// memory: it holds C pointers only.
type cgoAPI struct {
	m *C.gmMPI
}

// loadAPI opens path with RTLD_NOW|RTLD_GLOBAL (Open MPI's own components,
// which it dlopens, need libmpi's symbols) and resolves the table. The
// library is never closed: MPI cannot be initialised twice in a process.
func loadAPI(path string) (api, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var why *C.char
	lib := C.gm_dlopen(cpath, C.RTLD_NOW|C.RTLD_GLOBAL, &why)
	if lib == nil {
		return nil, unavailable("cannot load %s: %s", path, dlReason(path, why))
	}
	m := (*C.gmMPI)(C.calloc(1, C.sizeof_gmMPI))
	if missing := C.gm_load(lib, m); missing != nil {
		name := C.GoString(missing)
		C.free(unsafe.Pointer(m))
		C.dlclose(lib)
		return nil, unavailable("%s has no symbol %s: it is not Open MPI 4 or later", path, name)
	}
	return cgoAPI{m}, nil
}

func (a cgoAPI) Initialized() (bool, int) {
	var flag C.int
	code := C.gm_initialized(a.m, &flag)
	return flag != 0, int(code)
}

func (a cgoAPI) Finalized() (bool, int) {
	var flag C.int
	code := C.gm_finalized(a.m, &flag)
	return flag != 0, int(code)
}

func (a cgoAPI) InitThread(required int) (int, int) {
	var provided C.int
	code := C.gm_init_thread(a.m, C.int(required), &provided)
	return int(provided), int(code)
}

func (a cgoAPI) Finalize() int { return int(C.gm_finalize(a.m)) }

func (a cgoAPI) Rank() (int, int) {
	var r C.int
	code := C.gm_rank(a.m, &r)
	return int(r), int(code)
}

func (a cgoAPI) Size() (int, int) {
	var n C.int
	code := C.gm_size(a.m, &n)
	return int(n), int(code)
}

func (a cgoAPI) AllReduceSum(p unsafe.Pointer, count int, t dtype) int {
	return int(C.gm_allreduce_sum(a.m, p, C.int(count), C.int(t)))
}

func (a cgoAPI) Bcast(p unsafe.Pointer, count int, t dtype, root int) int {
	return int(C.gm_bcast(a.m, p, C.int(count), C.int(t), C.int(root)))
}

func (a cgoAPI) Barrier() int { return int(C.gm_barrier(a.m)) }

func (a cgoAPI) Abort(code int) int { return int(C.gm_abort(a.m, C.int(code))) }

// errorStringLen is more than Open MPI's MPI_MAX_ERROR_STRING (256).
const errorStringLen = 1024

func (a cgoAPI) ErrorString(code int) string {
	buf := (*C.char)(C.malloc(errorStringLen))
	defer C.free(unsafe.Pointer(buf))
	var n C.int
	if C.gm_error_string(a.m, C.int(code), buf, &n) != 0 || n <= 0 || n > errorStringLen {
		return ""
	}
	return C.GoStringN(buf, n)
}

// unavailable is the error of a library or symbol that cannot be loaded.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: mpi: %s: install Open MPI (Debian: apt-get install openmpi-bin), or set GOCURRENT_MPI to its libmpi.so.40",
		dist.ErrUnavailable, fmt.Sprintf(format, args...))
}

// dlReason is the reason gm_dlopen gave for name, which it frees.
func dlReason(name string, why *C.char) string {
	if why == nil {
		return name + ": dlopen failed, and there was no memory for its reason"
	}
	defer C.free(unsafe.Pointer(why))
	return C.GoString(why)
}
