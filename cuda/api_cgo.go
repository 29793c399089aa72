//go:build cgo

package cuda

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Our own minimal declarations of the few CUDA types we use: no CUDA
// header is needed to build. Handles are opaque pointers; CUresult and
// cublasStatus_t are ints; CUdeviceptr is 64-bit on every platform CUDA
// supports.
typedef int gcResult;
typedef int gcDevice;
typedef void* gcPtr;
typedef unsigned long long gcDevPtr;

typedef struct {
	gcResult (*cuInit)(unsigned int);
	gcResult (*cuDriverGetVersion)(int*);
	gcResult (*cuGetErrorName)(gcResult, const char**);
	gcResult (*cuDeviceGetCount)(int*);
	gcResult (*cuDeviceGet)(gcDevice*, int);
	gcResult (*cuDeviceGetName)(char*, int, gcDevice);
	gcResult (*cuDeviceGetAttribute)(int*, int, gcDevice);
	gcResult (*cuDeviceTotalMem)(size_t*, gcDevice);
	gcResult (*cuDevicePrimaryCtxRetain)(gcPtr*, gcDevice);
	gcResult (*cuDevicePrimaryCtxRelease)(gcDevice);
	gcResult (*cuCtxGetCurrent)(gcPtr*);
	gcResult (*cuCtxSetCurrent)(gcPtr);
	gcResult (*cuCtxSynchronize)(void);
	gcResult (*cuMemGetInfo)(size_t*, size_t*);
	gcResult (*cuMemAlloc)(gcDevPtr*, size_t);
	gcResult (*cuMemFree)(gcDevPtr);
	gcResult (*cuMemHostAlloc)(void**, size_t, unsigned int);
	gcResult (*cuMemFreeHost)(void*);
	gcResult (*cuMemHostGetDevicePointer)(gcDevPtr*, void*, unsigned int);
	gcResult (*cuMemcpyHtoDAsync)(gcDevPtr, const void*, size_t, gcPtr);
	gcResult (*cuMemcpyDtoHAsync)(void*, gcDevPtr, size_t, gcPtr);
	gcResult (*cuMemcpyDtoDAsync)(gcDevPtr, gcDevPtr, size_t, gcPtr);
	gcResult (*cuMemsetD32Async)(gcDevPtr, unsigned int, size_t, gcPtr);
	gcResult (*cuStreamCreate)(gcPtr*, unsigned int);
	gcResult (*cuStreamDestroy)(gcPtr);
	gcResult (*cuStreamSynchronize)(gcPtr);
	gcResult (*cuStreamWaitEvent)(gcPtr, gcPtr, unsigned int);
	gcResult (*cuEventCreate)(gcPtr*, unsigned int);
	gcResult (*cuEventDestroy)(gcPtr);
	gcResult (*cuEventRecord)(gcPtr, gcPtr);
	gcResult (*cuEventQuery)(gcPtr);
	gcResult (*cuEventSynchronize)(gcPtr);
	gcResult (*cuEventElapsedTime)(float*, gcPtr, gcPtr);
	gcResult (*cuModuleLoadDataEx)(gcPtr*, const void*, unsigned int, int*, void**);
	gcResult (*cuModuleUnload)(gcPtr);
	gcResult (*cuModuleGetFunction)(gcPtr*, gcPtr, const char*);
	gcResult (*cuLaunchKernel)(gcPtr, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, unsigned int, unsigned int, gcPtr, void**, void**);
	gcResult (*cuLaunchCooperativeKernel)(gcPtr, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, unsigned int, unsigned int, gcPtr, void**);
	gcResult (*cuFuncSetAttribute)(gcPtr, int, int);
	gcResult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, gcPtr, int, size_t);
	// Stream capture and graphs (CUDA 11.4 and later), optional: NULL when
	// the driver lacks any of them.
	gcResult (*cuStreamBeginCapture)(gcPtr, int);
	gcResult (*cuStreamEndCapture)(gcPtr, gcPtr*);
	gcResult (*cuGraphInstantiateWithFlags)(gcPtr*, gcPtr, unsigned long long);
	gcResult (*cuGraphLaunch)(gcPtr, gcPtr);
	gcResult (*cuGraphExecDestroy)(gcPtr);
	gcResult (*cuGraphDestroy)(gcPtr);
} gcDriver;

typedef struct {
	int (*cublasGetProperty)(int, int*);
	int (*cublasCreate)(gcPtr*);
	int (*cublasDestroy)(gcPtr);
	int (*cublasSetStream)(gcPtr, gcPtr);
	int (*cublasSetMathMode)(gcPtr, int);
	int (*cublasSetWorkspace)(gcPtr, void*, size_t); // optional (cuBLAS >= 11.4)
	int (*cublasSgemm)(gcPtr, int, int, int, int, int, const float*, const float*, int,
		const float*, int, const float*, float*, int);
	int (*cublasDgemm)(gcPtr, int, int, int, int, int, const double*, const double*, int,
		const double*, int, const double*, double*, int);
	int (*cublasSgemmStridedBatched)(gcPtr, int, int, int, int, int, const float*,
		const float*, int, long long, const float*, int, long long, const float*,
		float*, int, long long, int);
	int (*cublasDgemmStridedBatched)(gcPtr, int, int, int, int, int, const double*,
		const double*, int, long long, const double*, int, long long, const double*,
		double*, int, long long, int);
} gcBLAS;

// gc_dlopen opens name with dlopen and, when that fails, returns in
// *why the loader's reason, copied into memory the caller frees. dlerror
// is read in this same call: its state is the calling thread's, and a
// second cgo call may run on another OS thread, whose dlerror has nothing
// (or another library's failure) to say.
static void* gc_dlopen(const char* name, int flags, char** why) {
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

// gc_sym looks name up in lib and stores it in *slot; it returns name when
// the symbol is missing, NULL when found.
static const char* gc_sym(void* lib, const char* name, void** slot) {
	*slot = dlsym(lib, name);
	return *slot ? NULL : name;
}

#define GC_SYM(lib, table, field, name) \
	do { const char* m = gc_sym(lib, name, (void**)&(table)->field); if (m) return m; } while (0)

// gc_load_graphs resolves the graph entry points, all or none: a driver
// before 11.4 lacks cuGraphInstantiateWithFlags, and then the device runs
// every step eagerly.
static void gc_load_graphs(void* lib, gcDriver* d) {
	d->cuStreamBeginCapture = dlsym(lib, "cuStreamBeginCapture_v2");
	d->cuStreamEndCapture = dlsym(lib, "cuStreamEndCapture");
	d->cuGraphInstantiateWithFlags = dlsym(lib, "cuGraphInstantiateWithFlags");
	d->cuGraphLaunch = dlsym(lib, "cuGraphLaunch");
	d->cuGraphExecDestroy = dlsym(lib, "cuGraphExecDestroy");
	d->cuGraphDestroy = dlsym(lib, "cuGraphDestroy");
	if (!d->cuStreamBeginCapture || !d->cuStreamEndCapture || !d->cuGraphInstantiateWithFlags ||
			!d->cuGraphLaunch || !d->cuGraphExecDestroy || !d->cuGraphDestroy)
		d->cuStreamBeginCapture = NULL;
}

// gc_load_driver resolves every driver entry point; it returns the name of
// the first one missing, or NULL. The _v2 names are the ones cuda.h maps
// the plain names to since CUDA 3.2/4.0, present in every driver since.
static const char* gc_load_driver(void* lib, gcDriver* d) {
	GC_SYM(lib, d, cuInit, "cuInit");
	GC_SYM(lib, d, cuDriverGetVersion, "cuDriverGetVersion");
	GC_SYM(lib, d, cuGetErrorName, "cuGetErrorName");
	GC_SYM(lib, d, cuDeviceGetCount, "cuDeviceGetCount");
	GC_SYM(lib, d, cuDeviceGet, "cuDeviceGet");
	GC_SYM(lib, d, cuDeviceGetName, "cuDeviceGetName");
	GC_SYM(lib, d, cuDeviceGetAttribute, "cuDeviceGetAttribute");
	GC_SYM(lib, d, cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	GC_SYM(lib, d, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	GC_SYM(lib, d, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	GC_SYM(lib, d, cuCtxGetCurrent, "cuCtxGetCurrent");
	GC_SYM(lib, d, cuCtxSetCurrent, "cuCtxSetCurrent");
	GC_SYM(lib, d, cuCtxSynchronize, "cuCtxSynchronize");
	GC_SYM(lib, d, cuMemGetInfo, "cuMemGetInfo_v2");
	GC_SYM(lib, d, cuMemAlloc, "cuMemAlloc_v2");
	GC_SYM(lib, d, cuMemFree, "cuMemFree_v2");
	GC_SYM(lib, d, cuMemHostAlloc, "cuMemHostAlloc");
	GC_SYM(lib, d, cuMemFreeHost, "cuMemFreeHost");
	GC_SYM(lib, d, cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
	GC_SYM(lib, d, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	GC_SYM(lib, d, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	GC_SYM(lib, d, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	GC_SYM(lib, d, cuMemsetD32Async, "cuMemsetD32Async"); // no _v2: cuda.h maps only the synchronous memsets
	GC_SYM(lib, d, cuStreamCreate, "cuStreamCreate");
	GC_SYM(lib, d, cuStreamDestroy, "cuStreamDestroy_v2");
	GC_SYM(lib, d, cuStreamSynchronize, "cuStreamSynchronize");
	GC_SYM(lib, d, cuStreamWaitEvent, "cuStreamWaitEvent");
	GC_SYM(lib, d, cuEventCreate, "cuEventCreate");
	GC_SYM(lib, d, cuEventDestroy, "cuEventDestroy_v2");
	GC_SYM(lib, d, cuEventRecord, "cuEventRecord");
	GC_SYM(lib, d, cuEventQuery, "cuEventQuery");
	GC_SYM(lib, d, cuEventSynchronize, "cuEventSynchronize");
	GC_SYM(lib, d, cuEventElapsedTime, "cuEventElapsedTime");
	GC_SYM(lib, d, cuModuleLoadDataEx, "cuModuleLoadDataEx");
	GC_SYM(lib, d, cuModuleUnload, "cuModuleUnload");
	GC_SYM(lib, d, cuModuleGetFunction, "cuModuleGetFunction");
	GC_SYM(lib, d, cuLaunchKernel, "cuLaunchKernel");
	GC_SYM(lib, d, cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel"); // CUDA 9.0
	GC_SYM(lib, d, cuFuncSetAttribute, "cuFuncSetAttribute");               // CUDA 9.0
	GC_SYM(lib, d, cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
	gc_load_graphs(lib, d);
	return NULL;
}

static const char* gc_load_blas(void* lib, gcBLAS* b) {
	GC_SYM(lib, b, cublasGetProperty, "cublasGetProperty");
	GC_SYM(lib, b, cublasCreate, "cublasCreate_v2");
	GC_SYM(lib, b, cublasDestroy, "cublasDestroy_v2");
	GC_SYM(lib, b, cublasSetStream, "cublasSetStream_v2");
	GC_SYM(lib, b, cublasSetMathMode, "cublasSetMathMode");
	GC_SYM(lib, b, cublasSgemm, "cublasSgemm_v2");
	GC_SYM(lib, b, cublasDgemm, "cublasDgemm_v2");
	GC_SYM(lib, b, cublasSgemmStridedBatched, "cublasSgemmStridedBatched");
	GC_SYM(lib, b, cublasDgemmStridedBatched, "cublasDgemmStridedBatched");
	b->cublasSetWorkspace = dlsym(lib, "cublasSetWorkspace_v2");
	return NULL;
}

// gc_current makes ctx current on the calling thread unless it already
// is. Every call below that works in a context goes through it, inside the
// same cgo call, so the Go side never pins a goroutine to a thread.
static gcResult gc_current(gcDriver* d, gcPtr ctx) {
	gcPtr cur = NULL;
	gcResult r = d->cuCtxGetCurrent(&cur);
	if (r != 0 || cur == ctx) return r;
	return d->cuCtxSetCurrent(ctx);
}

#define GC_IN(d, ctx) do { gcResult r_ = gc_current(d, ctx); if (r_) return r_; } while (0)

static gcResult gc_make_current(gcDriver* d, gcPtr ctx) { return gc_current(d, ctx); }
static gcResult gc_init(gcDriver* d) { return d->cuInit(0); }
static gcResult gc_driver_version(gcDriver* d, int* v) { return d->cuDriverGetVersion(v); }
static const char* gc_error_name(gcDriver* d, gcResult r) {
	const char* s = NULL;
	if (d->cuGetErrorName(r, &s) != 0) return NULL;
	return s;
}
static gcResult gc_device_count(gcDriver* d, int* n) { return d->cuDeviceGetCount(n); }
static gcResult gc_device_get(gcDriver* d, gcDevice* dev, int ordinal) { return d->cuDeviceGet(dev, ordinal); }
static gcResult gc_device_name(gcDriver* d, char* name, int n, gcDevice dev) { return d->cuDeviceGetName(name, n, dev); }
static gcResult gc_device_attribute(gcDriver* d, int* v, int attr, gcDevice dev) { return d->cuDeviceGetAttribute(v, attr, dev); }
static gcResult gc_device_total_mem(gcDriver* d, size_t* n, gcDevice dev) { return d->cuDeviceTotalMem(n, dev); }
static gcResult gc_primary_retain(gcDriver* d, gcPtr* ctx, gcDevice dev) { return d->cuDevicePrimaryCtxRetain(ctx, dev); }
static gcResult gc_primary_release(gcDriver* d, gcDevice dev) { return d->cuDevicePrimaryCtxRelease(dev); }

static gcResult gc_ctx_synchronize(gcDriver* d, gcPtr ctx) { GC_IN(d, ctx); return d->cuCtxSynchronize(); }
static gcResult gc_mem_get_info(gcDriver* d, gcPtr ctx, size_t* f, size_t* t) { GC_IN(d, ctx); return d->cuMemGetInfo(f, t); }
static gcResult gc_mem_alloc(gcDriver* d, gcPtr ctx, gcDevPtr* p, size_t n) { GC_IN(d, ctx); return d->cuMemAlloc(p, n); }
static gcResult gc_mem_free(gcDriver* d, gcPtr ctx, gcDevPtr p) { GC_IN(d, ctx); return d->cuMemFree(p); }
static gcResult gc_mem_host_alloc(gcDriver* d, gcPtr ctx, void** p, size_t n) {
	GC_IN(d, ctx);
	return d->cuMemHostAlloc(p, n, 0x01 | 0x02); // CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
}
static gcResult gc_mem_free_host(gcDriver* d, gcPtr ctx, void* p) { GC_IN(d, ctx); return d->cuMemFreeHost(p); }
static gcResult gc_mem_host_device_ptr(gcDriver* d, gcPtr ctx, gcDevPtr* dp, void* p) {
	GC_IN(d, ctx);
	return d->cuMemHostGetDevicePointer(dp, p, 0);
}
static gcResult gc_memcpy_htod(gcDriver* d, gcPtr ctx, gcDevPtr dst, const void* src, size_t n, gcPtr s) {
	GC_IN(d, ctx);
	return d->cuMemcpyHtoDAsync(dst, src, n, s);
}
static gcResult gc_memcpy_dtoh(gcDriver* d, gcPtr ctx, void* dst, gcDevPtr src, size_t n, gcPtr s) {
	GC_IN(d, ctx);
	return d->cuMemcpyDtoHAsync(dst, src, n, s);
}
static gcResult gc_memcpy_dtod(gcDriver* d, gcPtr ctx, gcDevPtr dst, gcDevPtr src, size_t n, gcPtr s) {
	GC_IN(d, ctx);
	return d->cuMemcpyDtoDAsync(dst, src, n, s);
}
static gcResult gc_memset_d32(gcDriver* d, gcPtr ctx, gcDevPtr dst, unsigned int v, size_t n, gcPtr s) {
	GC_IN(d, ctx);
	return d->cuMemsetD32Async(dst, v, n, s);
}
static gcResult gc_stream_create(gcDriver* d, gcPtr ctx, gcPtr* s) {
	GC_IN(d, ctx);
	return d->cuStreamCreate(s, 0x1); // CU_STREAM_NON_BLOCKING
}
static gcResult gc_stream_destroy(gcDriver* d, gcPtr ctx, gcPtr s) { GC_IN(d, ctx); return d->cuStreamDestroy(s); }
static gcResult gc_stream_synchronize(gcDriver* d, gcPtr ctx, gcPtr s) { GC_IN(d, ctx); return d->cuStreamSynchronize(s); }
static gcResult gc_stream_wait_event(gcDriver* d, gcPtr ctx, gcPtr s, gcPtr e) { GC_IN(d, ctx); return d->cuStreamWaitEvent(s, e, 0); }
static gcResult gc_event_create(gcDriver* d, gcPtr ctx, gcPtr* e, unsigned int flags) { GC_IN(d, ctx); return d->cuEventCreate(e, flags); }
static gcResult gc_event_destroy(gcDriver* d, gcPtr ctx, gcPtr e) { GC_IN(d, ctx); return d->cuEventDestroy(e); }
static gcResult gc_event_record(gcDriver* d, gcPtr ctx, gcPtr e, gcPtr s) { GC_IN(d, ctx); return d->cuEventRecord(e, s); }
static gcResult gc_event_query(gcDriver* d, gcPtr ctx, gcPtr e) { GC_IN(d, ctx); return d->cuEventQuery(e); }
static gcResult gc_event_synchronize(gcDriver* d, gcPtr ctx, gcPtr e) { GC_IN(d, ctx); return d->cuEventSynchronize(e); }
static gcResult gc_event_elapsed(gcDriver* d, gcPtr ctx, float* ms, gcPtr a, gcPtr b) { GC_IN(d, ctx); return d->cuEventElapsedTime(ms, a, b); }

static int gc_graphs(gcDriver* d) { return d->cuStreamBeginCapture != NULL; }
static gcResult gc_begin_capture(gcDriver* d, gcPtr ctx, gcPtr s) {
	GC_IN(d, ctx);
	return d->cuStreamBeginCapture(s, 2); // CU_STREAM_CAPTURE_MODE_RELAXED
}
static gcResult gc_end_capture(gcDriver* d, gcPtr ctx, gcPtr s, gcPtr* g) { GC_IN(d, ctx); return d->cuStreamEndCapture(s, g); }
static gcResult gc_graph_instantiate(gcDriver* d, gcPtr ctx, gcPtr* e, gcPtr g) {
	GC_IN(d, ctx);
	return d->cuGraphInstantiateWithFlags(e, g, 0);
}
static gcResult gc_graph_launch(gcDriver* d, gcPtr ctx, gcPtr e, gcPtr s) { GC_IN(d, ctx); return d->cuGraphLaunch(e, s); }
static gcResult gc_graph_exec_destroy(gcDriver* d, gcPtr ctx, gcPtr e) { GC_IN(d, ctx); return d->cuGraphExecDestroy(e); }
static gcResult gc_graph_destroy(gcDriver* d, gcPtr ctx, gcPtr g) { GC_IN(d, ctx); return d->cuGraphDestroy(g); }

// gc_module_load JIT-compiles image, with the JIT's error log in log.
static gcResult gc_module_load(gcDriver* d, gcPtr ctx, gcPtr* m, const void* image, char* log, size_t logSize) {
	GC_IN(d, ctx);
	int opts[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void* vals[2] = {log, (void*)(uintptr_t)logSize};
	return d->cuModuleLoadDataEx(m, image, 2, opts, vals);
}
static gcResult gc_module_unload(gcDriver* d, gcPtr ctx, gcPtr m) { GC_IN(d, ctx); return d->cuModuleUnload(m); }
static gcResult gc_module_function(gcDriver* d, gcPtr ctx, gcPtr* f, gcPtr m, const char* name) {
	GC_IN(d, ctx);
	return d->cuModuleGetFunction(f, m, name);
}

// gc_launch launches f with nargs parameters, each in an 8-byte slot of
// args (cuda/kernels/ABI.md): the driver reads each parameter's size from
// the kernel's signature, so a 4-byte parameter would read the low half of
// its little-endian slot. cooperative launches it through
// cuLaunchCooperativeKernel.
static gcResult gc_launch(gcDriver* d, gcPtr ctx, gcPtr f,
		unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz,
		unsigned int shared, gcPtr s, uint64_t* args, int nargs, int cooperative) {
	GC_IN(d, ctx);
	void* params[32];
	if (nargs > 32) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) params[i] = &args[i];
	if (cooperative) return d->cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, s, params);
	return d->cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, NULL);
}

static gcResult gc_func_set_attribute(gcDriver* d, gcPtr ctx, gcPtr f, int attr, int v) {
	GC_IN(d, ctx);
	return d->cuFuncSetAttribute(f, attr, v);
}

static gcResult gc_occupancy(gcDriver* d, gcPtr ctx, int* n, gcPtr f, int threads, size_t shared) {
	GC_IN(d, ctx);
	return d->cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, threads, shared);
}

static int gc_blas_version(gcBLAS* b, int* v) {
	int major = 0, minor = 0, patch = 0, r;
	if ((r = b->cublasGetProperty(0, &major)) != 0) return r; // MAJOR_VERSION
	if ((r = b->cublasGetProperty(1, &minor)) != 0) return r; // MINOR_VERSION
	if ((r = b->cublasGetProperty(2, &patch)) != 0) return r; // PATCH_LEVEL
	*v = major * 10000 + minor * 100 + patch;
	return 0;
}

// cuBLAS calls run in the current context of the calling thread, so they
// too go through gc_current; a context error comes back as the negated
// CUresult so the Go side can tell the two apart.
#define GC_BLAS_IN(d, ctx) do { gcResult r_ = gc_current(d, ctx); if (r_) return -r_; } while (0)

static int gc_blas_create(gcDriver* d, gcBLAS* b, gcPtr ctx, gcPtr* h) { GC_BLAS_IN(d, ctx); return b->cublasCreate(h); }
static int gc_blas_destroy(gcDriver* d, gcBLAS* b, gcPtr ctx, gcPtr h) { GC_BLAS_IN(d, ctx); return b->cublasDestroy(h); }
static int gc_blas_set_stream(gcDriver* d, gcBLAS* b, gcPtr ctx, gcPtr h, gcPtr s) { GC_BLAS_IN(d, ctx); return b->cublasSetStream(h, s); }
static int gc_blas_set_math_mode(gcDriver* d, gcBLAS* b, gcPtr ctx, gcPtr h, int mode) { GC_BLAS_IN(d, ctx); return b->cublasSetMathMode(h, mode); }
static int gc_blas_set_workspace(gcDriver* d, gcBLAS* b, gcPtr ctx, gcPtr h, gcDevPtr p, size_t n) {
	if (!b->cublasSetWorkspace) return -1000;
	GC_BLAS_IN(d, ctx);
	return b->cublasSetWorkspace(h, (void*)(uintptr_t)p, n);
}

typedef struct {
	int dbl, transa, transb, m, n, k;
	double alpha, beta;
	gcDevPtr a, b, c;
	int lda, ldb, ldc;
	long long sa, sb, sc;
	int batch;
} gcGemm;

// The GEMM's arguments come by value: a pointer into Go memory passed to C
// moves the struct to the heap, an allocation per GEMM.
static int gc_blas_gemm(gcDriver* d, gcBLAS* b, gcPtr ctx, gcPtr h, gcGemm gv) {
	const gcGemm* g = &gv;
	GC_BLAS_IN(d, ctx);
	int ta = g->transa ? 1 : 0, tb = g->transb ? 1 : 0; // CUBLAS_OP_N, CUBLAS_OP_T
	if (g->dbl) {
		const double* A = (const double*)(uintptr_t)g->a;
		const double* B = (const double*)(uintptr_t)g->b;
		double* C = (double*)(uintptr_t)g->c;
		if (g->batch <= 1)
			return b->cublasDgemm(h, ta, tb, g->m, g->n, g->k, &g->alpha, A, g->lda, B, g->ldb, &g->beta, C, g->ldc);
		return b->cublasDgemmStridedBatched(h, ta, tb, g->m, g->n, g->k, &g->alpha, A, g->lda, g->sa,
			B, g->ldb, g->sb, &g->beta, C, g->ldc, g->sc, g->batch);
	}
	float alpha = (float)g->alpha, beta = (float)g->beta;
	const float* A = (const float*)(uintptr_t)g->a;
	const float* B = (const float*)(uintptr_t)g->b;
	float* C = (float*)(uintptr_t)g->c;
	if (g->batch <= 1)
		return b->cublasSgemm(h, ta, tb, g->m, g->n, g->k, &alpha, A, g->lda, B, g->ldb, &beta, C, g->ldc);
	return b->cublasSgemmStridedBatched(h, ta, tb, g->m, g->n, g->k, &alpha, A, g->lda, g->sa,
		B, g->ldb, g->sb, &beta, C, g->ldc, g->sc, g->batch);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// cgoAPI is api over the driver and cuBLAS opened with dlopen. The tables
// of entry points live in C memory, filled once by loadAPI and read-only
// afterwards, so it is safe for concurrent use (the driver and cuBLAS are
// thread safe; a cuBLAS handle is used under the device's lock).
type cgoAPI struct {
	drv      *C.gcDriver
	blas     *C.gcBLAS // nil when cuBLAS could not be loaded
	blasErr  error
	blasPath string
}

var _ api = (*cgoAPI)(nil)

// loadAPI opens the driver and cuBLAS. A missing driver library is an
// error matching device.ErrUnavailable; a missing cuBLAS is recorded and
// reported by BLASVersion, so the caller can say which library is missing.
func loadAPI(libs libraries) (api, error) {
	name := libs.driver
	if name == "" {
		name = "libcuda.so.1"
	}
	lib, err := dlopen(name)
	if err != nil {
		return nil, fmt.Errorf("%w: cuda: no CUDA driver: %v (is the NVIDIA driver installed?)", device.ErrUnavailable, err)
	}
	drv := (*C.gcDriver)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gcDriver{}))))
	if missing := C.gc_load_driver(lib, drv); missing != nil {
		C.free(unsafe.Pointer(drv))
		return nil, fmt.Errorf("%w: cuda: %s has no %s: the driver is too old", device.ErrUnavailable, name, C.GoString(missing))
	}
	a := &cgoAPI{drv: drv}
	var tried []string
	for _, name := range libs.blas {
		lib, err := dlopen(name)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		b := (*C.gcBLAS)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gcBLAS{}))))
		if missing := C.gc_load_blas(lib, b); missing != nil {
			C.free(unsafe.Pointer(b))
			tried = append(tried, fmt.Sprintf("%s has no %s", name, C.GoString(missing)))
			continue
		}
		a.blas, a.blasPath = b, name
		break
	}
	if a.blas == nil {
		a.blasErr = fmt.Errorf("%w: cuda: no usable cuBLAS (%s); set cuda.Config.BLASLibrary to its path",
			device.ErrUnavailable, strings.Join(tried, "; "))
	}
	return a, nil
}

// dlopen opens the C library name for good: a loaded driver stays loaded
// for the life of the process, as it would if the binary were linked
// against it. Its error is the loader's reason.
func dlopen(name string) (unsafe.Pointer, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var why *C.char
	lib := C.gc_dlopen(cname, C.RTLD_NOW|C.RTLD_LOCAL, &why)
	if lib == nil {
		if why == nil {
			return nil, errors.New(name + ": dlopen failed, and there was no memory for its reason")
		}
		defer C.free(unsafe.Pointer(why))
		return nil, errors.New(C.GoString(why))
	}
	return lib, nil
}

func (a *cgoAPI) check(fn string, r C.gcResult) error {
	if r == 0 {
		return nil
	}
	name := ""
	if s := C.gc_error_name(a.drv, r); s != nil {
		name = C.GoString(s)
	}
	return newError(fn, int(r), name)
}

func (a *cgoAPI) checkBLAS(fn string, r C.int) error {
	switch {
	case r == 0:
		return nil
	case r < 0: // making the context current failed
		return a.check("cuCtxSetCurrent", C.gcResult(-r))
	}
	return newBLASError(fn, int(r))
}

// ctxOf and ptrOf turn a handle back into the C pointer it came from.
// The handles point into the driver's memory, never Go's, so reading the
// integer's bits as a pointer is safe; it is spelled this way because a
// plain uintptr-to-Pointer conversion is what vet rightly flags for Go
// memory.
func ctxOf(c cuContext) C.gcPtr { return ptrOf(uintptr(c)) }
func ptrOf(h uintptr) C.gcPtr   { return *(*C.gcPtr)(unsafe.Pointer(&h)) }

// makeCurrent makes c current on the calling OS thread, for
// Device.Native, which holds the goroutine on that thread.
func (a *cgoAPI) makeCurrent(c cuContext) error {
	return a.check("cuCtxSetCurrent", C.gc_make_current(a.drv, ctxOf(c)))
}

func (a *cgoAPI) Init() error { return a.check("cuInit", C.gc_init(a.drv)) }

func (a *cgoAPI) DriverVersion() (int, error) {
	var v C.int
	err := a.check("cuDriverGetVersion", C.gc_driver_version(a.drv, &v))
	return int(v), err
}

func (a *cgoAPI) DeviceCount() (int, error) {
	var n C.int
	err := a.check("cuDeviceGetCount", C.gc_device_count(a.drv, &n))
	return int(n), err
}

func (a *cgoAPI) DeviceGet(ordinal int) (cuDevice, error) {
	var d C.gcDevice
	err := a.check("cuDeviceGet", C.gc_device_get(a.drv, &d, C.int(ordinal)))
	return cuDevice(d), err
}

func (a *cgoAPI) DeviceName(dev cuDevice) (string, error) {
	var buf [256]C.char
	if err := a.check("cuDeviceGetName", C.gc_device_name(a.drv, &buf[0], C.int(len(buf)), C.gcDevice(dev))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (a *cgoAPI) DeviceAttribute(dev cuDevice, attr int) (int, error) {
	var v C.int
	err := a.check("cuDeviceGetAttribute", C.gc_device_attribute(a.drv, &v, C.int(attr), C.gcDevice(dev)))
	return int(v), err
}

func (a *cgoAPI) DeviceTotalMem(dev cuDevice) (int64, error) {
	var n C.size_t
	err := a.check("cuDeviceTotalMem", C.gc_device_total_mem(a.drv, &n, C.gcDevice(dev)))
	return int64(n), err
}

func (a *cgoAPI) PrimaryCtxRetain(dev cuDevice) (cuContext, error) {
	var c C.gcPtr
	err := a.check("cuDevicePrimaryCtxRetain", C.gc_primary_retain(a.drv, &c, C.gcDevice(dev)))
	return cuContext(uintptr(c)), err
}

func (a *cgoAPI) PrimaryCtxRelease(dev cuDevice) error {
	return a.check("cuDevicePrimaryCtxRelease", C.gc_primary_release(a.drv, C.gcDevice(dev)))
}

func (a *cgoAPI) CtxSynchronize(c cuContext) error {
	return a.check("cuCtxSynchronize", C.gc_ctx_synchronize(a.drv, ctxOf(c)))
}

func (a *cgoAPI) MemGetInfo(c cuContext) (free, total int64, err error) {
	var f, t C.size_t
	err = a.check("cuMemGetInfo", C.gc_mem_get_info(a.drv, ctxOf(c), &f, &t))
	return int64(f), int64(t), err
}

func (a *cgoAPI) MemAlloc(c cuContext, n int64) (alloc.Ptr, error) {
	var p C.gcDevPtr
	err := a.check("cuMemAlloc", C.gc_mem_alloc(a.drv, ctxOf(c), &p, C.size_t(n)))
	return alloc.Ptr(p), err
}

func (a *cgoAPI) MemFree(c cuContext, p alloc.Ptr) error {
	return a.check("cuMemFree", C.gc_mem_free(a.drv, ctxOf(c), C.gcDevPtr(p)))
}

func (a *cgoAPI) MemHostAlloc(c cuContext, n int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := a.check("cuMemHostAlloc", C.gc_mem_host_alloc(a.drv, ctxOf(c), &p, C.size_t(n)))
	return p, err
}

func (a *cgoAPI) MemFreeHost(c cuContext, p unsafe.Pointer) error {
	return a.check("cuMemFreeHost", C.gc_mem_free_host(a.drv, ctxOf(c), p))
}

func (a *cgoAPI) MemHostGetDevicePointer(c cuContext, p unsafe.Pointer) (alloc.Ptr, error) {
	var d C.gcDevPtr
	err := a.check("cuMemHostGetDevicePointer", C.gc_mem_host_device_ptr(a.drv, ctxOf(c), &d, p))
	return alloc.Ptr(d), err
}

func (a *cgoAPI) MemcpyHtoDAsync(c cuContext, dst alloc.Ptr, src unsafe.Pointer, n int64, s cuStream) error {
	return a.check("cuMemcpyHtoDAsync", C.gc_memcpy_htod(a.drv, ctxOf(c), C.gcDevPtr(dst), src, C.size_t(n), ptrOf(uintptr(s))))
}

func (a *cgoAPI) MemcpyDtoHAsync(c cuContext, dst unsafe.Pointer, src alloc.Ptr, n int64, s cuStream) error {
	return a.check("cuMemcpyDtoHAsync", C.gc_memcpy_dtoh(a.drv, ctxOf(c), dst, C.gcDevPtr(src), C.size_t(n), ptrOf(uintptr(s))))
}

func (a *cgoAPI) MemcpyDtoDAsync(c cuContext, dst, src alloc.Ptr, n int64, s cuStream) error {
	return a.check("cuMemcpyDtoDAsync", C.gc_memcpy_dtod(a.drv, ctxOf(c), C.gcDevPtr(dst), C.gcDevPtr(src), C.size_t(n), ptrOf(uintptr(s))))
}

func (a *cgoAPI) MemsetD32Async(c cuContext, dst alloc.Ptr, v uint32, n int64, s cuStream) error {
	return a.check("cuMemsetD32Async", C.gc_memset_d32(a.drv, ctxOf(c), C.gcDevPtr(dst), C.uint(v), C.size_t(n), ptrOf(uintptr(s))))
}

func (a *cgoAPI) StreamCreate(c cuContext) (cuStream, error) {
	var s C.gcPtr
	err := a.check("cuStreamCreate", C.gc_stream_create(a.drv, ctxOf(c), &s))
	return cuStream(uintptr(s)), err
}

func (a *cgoAPI) StreamDestroy(c cuContext, s cuStream) error {
	return a.check("cuStreamDestroy", C.gc_stream_destroy(a.drv, ctxOf(c), ptrOf(uintptr(s))))
}

func (a *cgoAPI) StreamSynchronize(c cuContext, s cuStream) error {
	return a.check("cuStreamSynchronize", C.gc_stream_synchronize(a.drv, ctxOf(c), ptrOf(uintptr(s))))
}

func (a *cgoAPI) StreamWaitEvent(c cuContext, s cuStream, e cuEvent) error {
	return a.check("cuStreamWaitEvent", C.gc_stream_wait_event(a.drv, ctxOf(c), ptrOf(uintptr(s)), ptrOf(uintptr(e))))
}

func (a *cgoAPI) EventCreate(c cuContext, timing bool) (cuEvent, error) {
	var e C.gcPtr
	flags := C.uint(0x2) // CU_EVENT_DISABLE_TIMING
	if timing {
		flags = 0
	}
	err := a.check("cuEventCreate", C.gc_event_create(a.drv, ctxOf(c), &e, flags))
	return cuEvent(uintptr(e)), err
}

func (a *cgoAPI) EventDestroy(c cuContext, e cuEvent) error {
	return a.check("cuEventDestroy", C.gc_event_destroy(a.drv, ctxOf(c), ptrOf(uintptr(e))))
}

func (a *cgoAPI) EventRecord(c cuContext, e cuEvent, s cuStream) error {
	return a.check("cuEventRecord", C.gc_event_record(a.drv, ctxOf(c), ptrOf(uintptr(e)), ptrOf(uintptr(s))))
}

// codeNotReady is CUDA_ERROR_NOT_READY, which queries return for work still
// pending; it is not a failure.
const codeNotReady = 600

func (a *cgoAPI) EventQuery(c cuContext, e cuEvent) (bool, error) {
	r := C.gc_event_query(a.drv, ctxOf(c), ptrOf(uintptr(e)))
	if r == codeNotReady {
		return false, nil
	}
	return r == 0, a.check("cuEventQuery", r)
}

func (a *cgoAPI) EventSynchronize(c cuContext, e cuEvent) error {
	return a.check("cuEventSynchronize", C.gc_event_synchronize(a.drv, ctxOf(c), ptrOf(uintptr(e))))
}

func (a *cgoAPI) EventElapsed(c cuContext, start, end cuEvent) (float32, error) {
	var ms C.float
	err := a.check("cuEventElapsedTime", C.gc_event_elapsed(a.drv, ctxOf(c), &ms, ptrOf(uintptr(start)), ptrOf(uintptr(end))))
	return float32(ms), err
}

func (a *cgoAPI) ModuleLoadData(c cuContext, image []byte) (cuModule, error) {
	if len(image) == 0 || image[len(image)-1] != 0 {
		return 0, errors.New("cuda: a PTX image must end with a NUL byte")
	}
	img := C.CBytes(image)
	defer C.free(img)
	const logSize = 8 << 10
	log := (*C.char)(C.calloc(logSize, 1))
	defer C.free(unsafe.Pointer(log))
	var m C.gcPtr
	if err := a.check("cuModuleLoadDataEx", C.gc_module_load(a.drv, ctxOf(c), &m, img, log, logSize)); err != nil {
		if msg := strings.TrimSpace(C.GoString(log)); msg != "" {
			return 0, fmt.Errorf("%w: %s", err, msg)
		}
		return 0, err
	}
	return cuModule(uintptr(m)), nil
}

func (a *cgoAPI) ModuleUnload(c cuContext, m cuModule) error {
	return a.check("cuModuleUnload", C.gc_module_unload(a.drv, ctxOf(c), ptrOf(uintptr(m))))
}

func (a *cgoAPI) ModuleGetFunction(c cuContext, m cuModule, name string) (cuFunction, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.gcPtr
	if err := a.check("cuModuleGetFunction", C.gc_module_function(a.drv, ctxOf(c), &f, ptrOf(uintptr(m)), cname)); err != nil {
		return 0, fmt.Errorf("%w: kernel %s", err, name)
	}
	return cuFunction(uintptr(f)), nil
}

func (a *cgoAPI) Launch(c cuContext, f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error {
	return a.launch("cuLaunchKernel", 0, c, f, grid, block, sharedBytes, s, args)
}

func (a *cgoAPI) LaunchCooperative(c cuContext, f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error {
	return a.launch("cuLaunchCooperativeKernel", 1, c, f, grid, block, sharedBytes, s, args)
}

func (a *cgoAPI) launch(name string, cooperative C.int, c cuContext, f cuFunction, grid, block [3]uint32, sharedBytes uint32, s cuStream, args []uint64) error {
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	return a.check(name, C.gc_launch(a.drv, ctxOf(c), ptrOf(uintptr(f)),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]), C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(sharedBytes), ptrOf(uintptr(s)), p, C.int(len(args)), cooperative))
}

func (a *cgoAPI) FuncSetAttribute(c cuContext, f cuFunction, attr, value int) error {
	return a.check("cuFuncSetAttribute", C.gc_func_set_attribute(a.drv, ctxOf(c), ptrOf(uintptr(f)), C.int(attr), C.int(value)))
}

func (a *cgoAPI) Occupancy(c cuContext, f cuFunction, threads int, sharedBytes uint32) (int, error) {
	var n C.int
	err := a.check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
		C.gc_occupancy(a.drv, ctxOf(c), &n, ptrOf(uintptr(f)), C.int(threads), C.size_t(sharedBytes)))
	return int(n), err
}

func (a *cgoAPI) Graphs() bool { return C.gc_graphs(a.drv) != 0 }

func (a *cgoAPI) StreamBeginCapture(c cuContext, s cuStream) error {
	return a.check("cuStreamBeginCapture", C.gc_begin_capture(a.drv, ctxOf(c), ptrOf(uintptr(s))))
}

func (a *cgoAPI) StreamEndCapture(c cuContext, s cuStream) (cuGraph, error) {
	var g C.gcPtr
	err := a.check("cuStreamEndCapture", C.gc_end_capture(a.drv, ctxOf(c), ptrOf(uintptr(s)), &g))
	return cuGraph(uintptr(g)), err
}

func (a *cgoAPI) GraphInstantiate(c cuContext, g cuGraph) (cuExec, error) {
	var e C.gcPtr
	err := a.check("cuGraphInstantiateWithFlags", C.gc_graph_instantiate(a.drv, ctxOf(c), &e, ptrOf(uintptr(g))))
	return cuExec(uintptr(e)), err
}

func (a *cgoAPI) GraphLaunch(c cuContext, e cuExec, s cuStream) error {
	return a.check("cuGraphLaunch", C.gc_graph_launch(a.drv, ctxOf(c), ptrOf(uintptr(e)), ptrOf(uintptr(s))))
}

func (a *cgoAPI) GraphExecDestroy(c cuContext, e cuExec) error {
	return a.check("cuGraphExecDestroy", C.gc_graph_exec_destroy(a.drv, ctxOf(c), ptrOf(uintptr(e))))
}

func (a *cgoAPI) GraphDestroy(c cuContext, g cuGraph) error {
	return a.check("cuGraphDestroy", C.gc_graph_destroy(a.drv, ctxOf(c), ptrOf(uintptr(g))))
}

func (a *cgoAPI) BLASVersion() (int, error) {
	if a.blas == nil {
		return 0, a.blasErr
	}
	var v C.int
	if r := C.gc_blas_version(a.blas, &v); r != 0 {
		return 0, newBLASError("cublasGetProperty", int(r))
	}
	return int(v), nil
}

func (a *cgoAPI) BLASLibrary() string { return a.blasPath }

func (a *cgoAPI) BLASCreate(c cuContext) (blasHandle, error) {
	if a.blas == nil {
		return 0, a.blasErr
	}
	var h C.gcPtr
	err := a.checkBLAS("cublasCreate", C.gc_blas_create(a.drv, a.blas, ctxOf(c), &h))
	return blasHandle(uintptr(h)), err
}

func (a *cgoAPI) BLASDestroy(c cuContext, h blasHandle) error {
	return a.checkBLAS("cublasDestroy", C.gc_blas_destroy(a.drv, a.blas, ctxOf(c), ptrOf(uintptr(h))))
}

func (a *cgoAPI) BLASSetStream(c cuContext, h blasHandle, s cuStream) error {
	return a.checkBLAS("cublasSetStream", C.gc_blas_set_stream(a.drv, a.blas, ctxOf(c), ptrOf(uintptr(h)), ptrOf(uintptr(s))))
}

func (a *cgoAPI) BLASSetMathMode(c cuContext, h blasHandle, mode int) error {
	return a.checkBLAS("cublasSetMathMode", C.gc_blas_set_math_mode(a.drv, a.blas, ctxOf(c), ptrOf(uintptr(h)), C.int(mode)))
}

func (a *cgoAPI) BLASSetWorkspace(c cuContext, h blasHandle, p alloc.Ptr, n int64) (bool, error) {
	r := C.gc_blas_set_workspace(a.drv, a.blas, ctxOf(c), ptrOf(uintptr(h)), C.gcDevPtr(p), C.size_t(n))
	if r == -1000 {
		return false, nil
	}
	return true, a.checkBLAS("cublasSetWorkspace", r)
}

func (a *cgoAPI) BLASGemm(c cuContext, h blasHandle, g blasGemm) error {
	cg := C.gcGemm{
		dbl: cbool(g.Double), transa: cbool(g.TransA), transb: cbool(g.TransB),
		m: C.int(g.M), n: C.int(g.N), k: C.int(g.K),
		alpha: C.double(g.Alpha), beta: C.double(g.Beta),
		a: C.gcDevPtr(g.A), b: C.gcDevPtr(g.B), c: C.gcDevPtr(g.C),
		lda: C.int(g.LdA), ldb: C.int(g.LdB), ldc: C.int(g.LdC),
		sa: C.longlong(g.StrideA), sb: C.longlong(g.StrideB), sc: C.longlong(g.StrideC),
		batch: C.int(g.Batch),
	}
	fn := "cublasSgemm"
	if g.Double {
		fn = "cublasDgemm"
	}
	if g.Batch > 1 {
		fn += "StridedBatched"
	}
	return a.checkBLAS(fn, C.gc_blas_gemm(a.drv, a.blas, ctxOf(c), ptrOf(uintptr(h)), cg))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
