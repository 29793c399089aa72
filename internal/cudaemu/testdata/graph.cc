// A test of the emulator's stream capture and CUDA graphs, run by
// TestGraphs (graph_test.go): it loads the emulator named by argv[1] with
// dlopen, as package cuda does, and calls the driver and cuBLAS entry
// points directly, to reach what cuda's Go API does not (capture modes,
// threads, the legacy stream). Each failed check prints a line starting
// with FAIL; the last line is "ok N" after N scenarios all ran.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <initializer_list>
#include <thread>

namespace {

// The driver's handles, as opaque pointers.
using Ptr = void*;
using DevPtr = unsigned long long;

// The entry points, as the CUDA headers declare them.
int (*cuInit)(unsigned);
int (*cuDevicePrimaryCtxRetain)(Ptr*, int);
int (*cuDevicePrimaryCtxRelease_v2)(int);
int (*cuCtxSetCurrent)(Ptr);
int (*cuCtxSynchronize)();
int (*cuMemAlloc_v2)(DevPtr*, size_t);
int (*cuMemFree_v2)(DevPtr);
int (*cuMemHostAlloc)(void**, size_t, unsigned);
int (*cuMemFreeHost)(void*);
int (*cuMemcpyHtoDAsync_v2)(DevPtr, const void*, size_t, Ptr);
int (*cuMemcpyDtoHAsync_v2)(void*, DevPtr, size_t, Ptr);
int (*cuMemcpyDtoDAsync_v2)(DevPtr, DevPtr, size_t, Ptr);
int (*cuMemsetD32Async)(DevPtr, unsigned, size_t, Ptr);
int (*cuStreamCreate)(Ptr*, unsigned);
int (*cuStreamDestroy_v2)(Ptr);
int (*cuStreamSynchronize)(Ptr);
int (*cuStreamWaitEvent)(Ptr, Ptr, unsigned);
int (*cuEventCreate)(Ptr*, unsigned);
int (*cuEventDestroy_v2)(Ptr);
int (*cuEventRecord)(Ptr, Ptr);
int (*cuEventQuery)(Ptr);
int (*cuEventSynchronize)(Ptr);
int (*cuModuleLoadDataEx)(Ptr*, const void*, unsigned, int*, void**);
int (*cuModuleGetFunction)(Ptr*, Ptr, const char*);
int (*cuLaunchKernel)(Ptr, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Ptr,
                      void**, void**);
int (*cuStreamBeginCapture_v2)(Ptr, int);
int (*cuStreamEndCapture)(Ptr, Ptr*);
int (*cuStreamIsCapturing)(Ptr, int*);
int (*cuGraphInstantiateWithFlags)(Ptr*, Ptr, unsigned long long);
int (*cuGraphLaunch)(Ptr, Ptr);
int (*cuGraphUpload)(Ptr, Ptr);
int (*cuGraphExecDestroy)(Ptr);
int (*cuGraphDestroy)(Ptr);
int (*cublasCreate_v2)(Ptr*);
int (*cublasDestroy_v2)(Ptr);
int (*cublasSetStream_v2)(Ptr, Ptr);
int (*cublasSgemm_v2)(Ptr, int, int, int, int, int, const float*, const float*, int, const float*, int,
                      const float*, float*, int);
int (*cublasDgemmStridedBatched)(Ptr, int, int, int, int, int, const double*, const double*, int,
                                 long long, const double*, int, long long, const double*, double*, int,
                                 long long, int);

// Codes from cuda.h.
enum {
  SUCCESS = 0,
  INVALID_VALUE = 1,
  INVALID_HANDLE = 400,
  ILLEGAL_STATE = 401,
  CAPTURE_UNSUPPORTED = 900,
  CAPTURE_INVALIDATED = 901,
  CAPTURE_MERGE = 902,
  CAPTURE_UNMATCHED = 903,
  CAPTURE_UNJOINED = 904,
  CAPTURE_IMPLICIT = 906,
  CAPTURED_EVENT = 907,
  CAPTURE_WRONG_THREAD = 908,
};
enum { GLOBAL = 0, THREAD_LOCAL = 1, RELAXED = 2 };           // CUstreamCaptureMode
enum { NONE = 0, ACTIVE = 1, INVALIDATED = 2 };               // CUstreamCaptureStatus
constexpr unsigned kNonBlocking = 1, kHostDeviceMap = 2;      // stream and host-alloc flags
constexpr int kBlasOpN = 0;

int failures;

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      printf("FAIL graph.cc:%d: %s\n", __LINE__, #cond);             \
      failures++;                                                    \
    }                                                                \
  } while (0)
// EXPECT checks that a call returns want.
#define EXPECT(want, call)                                                                \
  do {                                                                                    \
    int got_ = (call);                                                                    \
    if (got_ != (want)) {                                                                 \
      printf("FAIL graph.cc:%d: %s = %d, want %d\n", __LINE__, #call, got_, (int)(want)); \
      failures++;                                                                         \
    }                                                                                     \
  } while (0)

Ptr ctx, fill, axpby;

unsigned bits(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}

int status(Ptr s) {
  int st = -1;
  EXPECT(SUCCESS, cuStreamIsCapturing(s, &st));
  return st;
}

// The fake PTX the emulator takes: it needs the .entry names only.
const char kPTX[] = ".visible .entry gc_fill_f32(\n.visible .entry gc_axpby_f32(\n";

// launch_axpby enqueues gc_axpby_f32: y = alpha·x + beta·y over n floats,
// one block of 64 threads (grid-stride). The parameters are read from
// locals that die with this call, as the driver allows.
int launch_axpby(Ptr s, DevPtr x, DevPtr y, long long n, double alpha, double beta) {
  void* params[] = {&x, &y, &n, &alpha, &beta};
  return cuLaunchKernel(axpby, 1, 1, 1, 64, 1, 1, 0, s, params, nullptr);
}

// read copies n floats of device memory to host at once, on a stream of
// its own (not capturing).
void read(Ptr s, float* dst, DevPtr src, int n) {
  EXPECT(SUCCESS, cuMemcpyDtoHAsync_v2(dst, src, n * 4, s));
}

// capture_replay captures a copy in, a memset, two kernels, a copy on the
// device and copies out, checks that nothing ran while capturing, and that
// each launch runs it all again: the kernels with the parameter values of
// capture, the copies reading and writing host memory at launch.
void capture_replay() {
  constexpr int n = 256;
  Ptr s, other;
  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  EXPECT(SUCCESS, cuStreamCreate(&other, kNonBlocking));
  DevPtr x, acc, acc2, out;
  EXPECT(SUCCESS, cuMemAlloc_v2(&x, n * 4));
  EXPECT(SUCCESS, cuMemAlloc_v2(&acc, n * 4));
  EXPECT(SUCCESS, cuMemAlloc_v2(&acc2, n * 4));
  EXPECT(SUCCESS, cuMemAlloc_v2(&out, n * 4));
  EXPECT(SUCCESS, cuMemsetD32Async(acc, 0, n, s));  // not capturing: runs now
  float *in, *hacc, *hout;
  EXPECT(SUCCESS, cuMemHostAlloc((void**)&in, n * 4, kHostDeviceMap));
  EXPECT(SUCCESS, cuMemHostAlloc((void**)&hacc, n * 4, kHostDeviceMap));
  EXPECT(SUCCESS, cuMemHostAlloc((void**)&hout, n * 4, kHostDeviceMap));
  for (int i = 0; i < n; i++) in[i] = 1, hacc[i] = -1, hout[i] = -1;

  EXPECT(NONE, status(s));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(ACTIVE, status(s));
  EXPECT(NONE, status(other));
  EXPECT(SUCCESS, cuMemcpyHtoDAsync_v2(x, in, n * 4, s));
  EXPECT(SUCCESS, cuMemsetD32Async(out, bits(2), n, s));
  EXPECT(SUCCESS, launch_axpby(s, x, acc, n, 1, 1));  // acc += x
  {
    DevPtr p = out;
    long long half = n / 2;
    double value = 3;
    void* params[] = {&p, &half, &value};
    EXPECT(SUCCESS, cuLaunchKernel(fill, 2, 1, 1, 32, 1, 1, 0, s, params, nullptr));
    value = 100, half = n;  // too late: the graph has 3 and n/2
  }
  EXPECT(SUCCESS, cuMemcpyDtoDAsync_v2(acc2, acc, n * 4, s));
  EXPECT(SUCCESS, cuMemcpyDtoHAsync_v2(hacc, acc2, n * 4, s));
  EXPECT(SUCCESS, cuMemcpyDtoHAsync_v2(hout, out, n * 4, s));
  EXPECT(ACTIVE, status(s));
  // Nothing ran: not the copies out, nor the kernel, nor the memset.
  for (int i = 0; i < n; i++) CHECK(hacc[i] == -1 && hout[i] == -1);
  float now[n];
  read(other, now, acc, n);
  for (int i = 0; i < n; i++) CHECK(now[i] == 0);
  read(other, now, out, n);
  for (int i = 0; i < n; i++) CHECK(now[i] != now[i]);  // still the NaN of new memory

  Ptr graph = nullptr, exec = nullptr;
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  CHECK(graph != nullptr);
  EXPECT(NONE, status(s));
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
  // The executable graph is its own: destroying its graph changes nothing.
  EXPECT(SUCCESS, cuGraphDestroy(graph));
  EXPECT(INVALID_HANDLE, cuGraphDestroy(graph));
  EXPECT(SUCCESS, cuGraphUpload(exec, s));
  for (int k = 1; k <= 3; k++) {
    if (k == 3)
      for (int i = 0; i < n; i++) in[i] = 10;  // read at launch: acc += 10
    EXPECT(SUCCESS, cuGraphLaunch(exec, s));
    float want = k < 3 ? k : 12;
    for (int i = 0; i < n; i++) CHECK(hacc[i] == want);
    for (int i = 0; i < n; i++) CHECK(hout[i] == (i < n / 2 ? 3 : 2));
  }

  // A graph launched on a capturing stream is captured, not run.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(SUCCESS, cuGraphLaunch(exec, s));
  EXPECT(SUCCESS, cuGraphLaunch(exec, s));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  for (int i = 0; i < n; i++) CHECK(hacc[i] == 12);
  Ptr twice;
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&twice, graph, 0));
  EXPECT(SUCCESS, cuGraphLaunch(twice, s));
  for (int i = 0; i < n; i++) CHECK(hacc[i] == 32);

  EXPECT(SUCCESS, cuGraphExecDestroy(exec));
  EXPECT(INVALID_HANDLE, cuGraphLaunch(exec, s));
  EXPECT(INVALID_HANDLE, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuGraphExecDestroy(twice));
  EXPECT(SUCCESS, cuGraphDestroy(graph));
  for (DevPtr p : {x, acc, acc2, out}) EXPECT(SUCCESS, cuMemFree_v2(p));
  for (float* p : {in, hacc, hout}) EXPECT(SUCCESS, cuMemFreeHost(p));
  EXPECT(SUCCESS, cuStreamDestroy_v2(s));
  EXPECT(SUCCESS, cuStreamDestroy_v2(other));
}

// expect_invalidated checks that s's capture was invalidated: it is still
// capturing, more work is refused, and ending it gives no graph.
void expect_invalidated(Ptr s, DevPtr d, int line) {
  int got = status(s);
  Ptr graph = (Ptr)1;
  int r1 = cuMemsetD32Async(d, 0, 1, s), r2 = cuStreamEndCapture(s, &graph);
  if (got != INVALIDATED || r1 != CAPTURE_INVALIDATED || r2 != CAPTURE_INVALIDATED || graph != nullptr) {
    printf("FAIL graph.cc:%d: capture not invalidated: status %d, memset %d, end %d, graph %p\n", line, got,
           r1, r2, graph);
    failures++;
  }
  EXPECT(NONE, status(s));
}

// synchronisation: a sync that would wait for captured work is refused
// with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture;
// a captured event cannot be queried or synchronised.
void synchronisation() {
  Ptr s, other, e, before;
  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  EXPECT(SUCCESS, cuStreamCreate(&other, kNonBlocking));
  EXPECT(SUCCESS, cuEventCreate(&e, 0));
  EXPECT(SUCCESS, cuEventCreate(&before, 0));
  DevPtr d;
  EXPECT(SUCCESS, cuMemAlloc_v2(&d, 16));
  EXPECT(SUCCESS, cuMemsetD32Async(d, bits(5), 4, s));

  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(SUCCESS, cuMemsetD32Async(d, bits(6), 4, s));
  EXPECT(CAPTURE_UNSUPPORTED, cuStreamSynchronize(s));
  expect_invalidated(s, d, __LINE__);
  float got[4];
  read(other, got, d, 4);
  for (float v : got) CHECK(v == 5);  // the memset was recorded, never run
  // The stream is whole again: it runs work and captures.
  EXPECT(SUCCESS, cuStreamSynchronize(s));
  Ptr graph, exec;
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
  EXPECT(SUCCESS, cuGraphLaunch(exec, s));  // empty
  EXPECT(SUCCESS, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuGraphDestroy(graph));

  // cuCtxSynchronize, in any mode.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(CAPTURE_UNSUPPORTED, cuCtxSynchronize());
  expect_invalidated(s, d, __LINE__);
  EXPECT(SUCCESS, cuCtxSynchronize());

  // An event recorded in the capture: the stream may wait on it, nobody
  // may query it.
  EXPECT(SUCCESS, cuEventRecord(before, other));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(SUCCESS, cuEventRecord(e, s));
  EXPECT(SUCCESS, cuStreamWaitEvent(s, e, 0));
  EXPECT(SUCCESS, cuStreamWaitEvent(s, before, 0));  // recorded outside: nothing to wait for
  EXPECT(ACTIVE, status(s));
  EXPECT(CAPTURED_EVENT, cuEventQuery(e));
  expect_invalidated(s, d, __LINE__);
  EXPECT(CAPTURED_EVENT, cuEventSynchronize(e));  // last recorded in a capture
  EXPECT(SUCCESS, cuEventRecord(e, s));
  EXPECT(SUCCESS, cuEventQuery(e));
  EXPECT(SUCCESS, cuEventSynchronize(e));

  // In GLOBAL mode, querying even an event recorded before is refused; in
  // RELAXED mode it is not.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(CAPTURE_UNSUPPORTED, cuEventQuery(before));
  expect_invalidated(s, d, __LINE__);
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(SUCCESS, cuEventQuery(before));
  EXPECT(SUCCESS, cuEventSynchronize(before));
  EXPECT(SUCCESS, cuStreamSynchronize(other));  // another stream: not captured work
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(SUCCESS, cuGraphDestroy(graph));

  // A wait between two captures would merge them: refused, both
  // invalidated.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(other, RELAXED));
  EXPECT(SUCCESS, cuEventRecord(e, s));
  EXPECT(CAPTURE_MERGE, cuStreamWaitEvent(other, e, 0));
  expect_invalidated(s, d, __LINE__);
  expect_invalidated(other, d, __LINE__);

  EXPECT(SUCCESS, cuMemFree_v2(d));
  EXPECT(SUCCESS, cuEventDestroy_v2(e));
  EXPECT(SUCCESS, cuEventDestroy_v2(before));
  EXPECT(SUCCESS, cuStreamDestroy_v2(s));
  EXPECT(SUCCESS, cuStreamDestroy_v2(other));
}

// fill_f32 sets n floats at p to v, at once, on stream s.
void fill_f32(Ptr s, DevPtr p, int n, float v) { EXPECT(SUCCESS, cuMemsetD32Async(p, bits(v), n, s)); }

// expect_all checks that the n floats at p are all want, read on s.
void expect_all(Ptr s, DevPtr p, int n, float want, int line) {
  float got[64];
  read(s, got, p, n);
  for (int i = 0; i < n; i++)
    if (got[i] != want) {
      printf("FAIL graph.cc:%d: element %d is %g, want %g\n", line, i, got[i], want);
      failures++;
      return;
    }
}

// fork_join captures work on two streams: a stream that waits for an
// event recorded on the capturing stream joins the capture (a fork), and
// the origin's wait for an event of that stream joins it back. Nothing
// runs while capturing; a launch runs both streams' work in an order the
// dependencies allow; the forked stream leaves the capture when it ends.
// Ending with the fork not joined back is CUDA_ERROR_STREAM_CAPTURE_UNJOINED
// (the forked stream free again), ending on the forked stream
// CUDA_ERROR_STREAM_CAPTURE_UNMATCHED. A launch runs the ready node
// recorded last first, so a graph missing a dependency computes another
// result than the capture's order would. The graph, launched into a
// capture of a third stream, is recorded there whole.
void fork_join() {
  constexpr int n = 64;
  Ptr s, b, c, fork, join, graph, exec;
  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  EXPECT(SUCCESS, cuStreamCreate(&b, kNonBlocking));
  EXPECT(SUCCESS, cuStreamCreate(&c, kNonBlocking));
  EXPECT(SUCCESS, cuEventCreate(&fork, 0));
  EXPECT(SUCCESS, cuEventCreate(&join, 0));
  DevPtr p, q, r;
  EXPECT(SUCCESS, cuMemAlloc_v2(&p, n * 4));
  EXPECT(SUCCESS, cuMemAlloc_v2(&q, n * 4));
  EXPECT(SUCCESS, cuMemAlloc_v2(&r, n * 4));
  for (DevPtr x : {p, q, r}) fill_f32(c, x, n, 0);

  // s: p = 1; fork; b: q = p, q = 2q; s: r = 5; join; s: r += q (7).
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  fill_f32(s, p, n, 1);
  EXPECT(SUCCESS, cuEventRecord(fork, s));
  EXPECT(NONE, status(b));
  EXPECT(SUCCESS, cuStreamWaitEvent(b, fork, 0));
  EXPECT(ACTIVE, status(b));
  EXPECT(SUCCESS, launch_axpby(b, p, q, n, 1, 0));
  EXPECT(SUCCESS, launch_axpby(b, q, q, n, 1, 1));
  fill_f32(s, r, n, 5);
  EXPECT(SUCCESS, cuEventRecord(join, b));
  EXPECT(SUCCESS, cuStreamWaitEvent(s, join, 0));
  EXPECT(SUCCESS, launch_axpby(s, q, r, n, 1, 1));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(NONE, status(b));
  expect_all(c, r, n, 0, __LINE__);  // nothing ran
  expect_all(c, q, n, 0, __LINE__);
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int round = 0; round < 2; round++) {
    EXPECT(SUCCESS, cuGraphLaunch(exec, s));
    expect_all(c, q, n, 2, __LINE__);
    expect_all(c, r, n, 7, __LINE__);
  }

  // The same graph launched into a capture of c: the whole of it again.
  Ptr outer, outerExec;
  fill_f32(c, r, n, 0);
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(c, RELAXED));
  EXPECT(SUCCESS, cuGraphLaunch(exec, c));
  EXPECT(SUCCESS, launch_axpby(c, r, r, n, 0, 2));  // after the child graph: r = 14
  EXPECT(SUCCESS, cuStreamEndCapture(c, &outer));
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&outerExec, outer, 0));
  EXPECT(SUCCESS, cuGraphLaunch(outerExec, c));
  expect_all(c, r, n, 14, __LINE__);
  EXPECT(SUCCESS, cuGraphExecDestroy(outerExec));
  EXPECT(SUCCESS, cuGraphDestroy(outer));
  EXPECT(SUCCESS, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuGraphDestroy(graph));

  // Not joined back: no graph, both streams free again.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(SUCCESS, cuEventRecord(fork, s));
  EXPECT(SUCCESS, cuStreamWaitEvent(b, fork, 0));
  fill_f32(b, q, n, 3);
  graph = (Ptr)1;
  EXPECT(CAPTURE_UNJOINED, cuStreamEndCapture(s, &graph));
  CHECK(graph == nullptr);
  EXPECT(NONE, status(s));
  EXPECT(NONE, status(b));
  fill_f32(b, q, n, 4);  // runs now
  expect_all(c, q, n, 4, __LINE__);
  // Forked with no work of its own: nothing to join.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  fill_f32(s, r, n, 1);
  EXPECT(SUCCESS, cuEventRecord(fork, s));
  EXPECT(SUCCESS, cuStreamWaitEvent(b, fork, 0));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(SUCCESS, cuGraphDestroy(graph));

  // Only the origin ends a capture.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(SUCCESS, cuEventRecord(fork, s));
  EXPECT(SUCCESS, cuStreamWaitEvent(b, fork, 0));
  EXPECT(CAPTURE_UNMATCHED, cuStreamEndCapture(b, &graph));
  EXPECT(INVALIDATED, status(b));
  expect_invalidated(s, r, __LINE__);
  EXPECT(NONE, status(b));

  // A forked stream destroyed during the capture: its work cannot be
  // joined back, the capture is invalidated.
  Ptr gone;
  EXPECT(SUCCESS, cuStreamCreate(&gone, kNonBlocking));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(SUCCESS, cuEventRecord(fork, s));
  EXPECT(SUCCESS, cuStreamWaitEvent(gone, fork, 0));
  EXPECT(SUCCESS, cuStreamDestroy_v2(gone));
  expect_invalidated(s, r, __LINE__);

  // A missing dependency shows: r += q reads q on s without waiting for
  // b's q = 2, though b is joined back afterwards. In capture order q
  // would be written first (r = 2); a launch runs the origin's ready
  // node, recorded after b's, first (r = 0).
  fill_f32(c, q, n, 0);
  fill_f32(c, r, n, 0);
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(SUCCESS, cuEventRecord(fork, s));
  EXPECT(SUCCESS, cuStreamWaitEvent(b, fork, 0));
  fill_f32(b, q, n, 2);
  EXPECT(SUCCESS, launch_axpby(s, q, r, n, 1, 1));
  EXPECT(SUCCESS, cuEventRecord(join, b));
  EXPECT(SUCCESS, cuStreamWaitEvent(s, join, 0));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
  EXPECT(SUCCESS, cuGraphLaunch(exec, s));
  expect_all(c, q, n, 2, __LINE__);
  expect_all(c, r, n, 0, __LINE__);
  EXPECT(SUCCESS, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuGraphDestroy(graph));

  for (DevPtr x : {p, q, r}) EXPECT(SUCCESS, cuMemFree_v2(x));
  EXPECT(SUCCESS, cuEventDestroy_v2(fork));
  EXPECT(SUCCESS, cuEventDestroy_v2(join));
  for (Ptr x : {s, b, c}) EXPECT(SUCCESS, cuStreamDestroy_v2(x));
}

// on_thread runs f on a new thread with the context current, and waits.
template <typename F>
void on_thread(F f) {
  std::thread t([&] {
    EXPECT(SUCCESS, cuCtxSetCurrent(ctx));
    f();
  });
  t.join();
}

// modes: allocating and freeing memory during a capture is refused in
// modes GLOBAL (any thread) and THREAD_LOCAL (the capturing thread), and
// allowed in RELAXED.
void modes() {
  Ptr s;
  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  DevPtr d, kept;
  void* h;
  EXPECT(SUCCESS, cuMemAlloc_v2(&kept, 64));

  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(CAPTURE_UNSUPPORTED, cuMemAlloc_v2(&d, 64));
  expect_invalidated(s, kept, __LINE__);
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(CAPTURE_UNSUPPORTED, cuMemFree_v2(kept));
  expect_invalidated(s, kept, __LINE__);
  EXPECT(SUCCESS, cuMemsetD32Async(kept, 0, 16, s));  // not freed
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(CAPTURE_UNSUPPORTED, cuMemHostAlloc(&h, 64, 0));
  expect_invalidated(s, kept, __LINE__);
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  on_thread([&] { EXPECT(CAPTURE_UNSUPPORTED, cuMemAlloc_v2(&d, 64)); });
  expect_invalidated(s, kept, __LINE__);

  // THREAD_LOCAL: another thread may allocate, the capturing one not.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, THREAD_LOCAL));
  on_thread([&] {
    DevPtr p;
    EXPECT(SUCCESS, cuMemAlloc_v2(&p, 64));
    EXPECT(SUCCESS, cuMemFree_v2(p));
  });
  EXPECT(ACTIVE, status(s));
  EXPECT(CAPTURE_UNSUPPORTED, cuMemAlloc_v2(&d, 64));
  expect_invalidated(s, kept, __LINE__);

  // RELAXED: everything allowed, and the capture is whole.
  Ptr graph;
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(SUCCESS, cuMemAlloc_v2(&d, 64));
  EXPECT(SUCCESS, cuMemFree_v2(d));
  EXPECT(SUCCESS, cuMemHostAlloc(&h, 64, 0));
  EXPECT(SUCCESS, cuMemFreeHost(h));
  EXPECT(ACTIVE, status(s));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(SUCCESS, cuGraphDestroy(graph));

  // Only a RELAXED capture may end on another thread than began it.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  on_thread([&] { EXPECT(CAPTURE_WRONG_THREAD, cuStreamEndCapture(s, &graph)); });
  EXPECT(ACTIVE, status(s));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(SUCCESS, cuGraphDestroy(graph));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, RELAXED));
  on_thread([&] { EXPECT(SUCCESS, cuStreamEndCapture(s, &graph)); });
  EXPECT(NONE, status(s));
  EXPECT(SUCCESS, cuGraphDestroy(graph));

  EXPECT(SUCCESS, cuMemFree_v2(kept));
  EXPECT(SUCCESS, cuStreamDestroy_v2(s));
}

// errors: the capture calls' own checks, the legacy stream, and calls
// that fail while capturing, which invalidate the capture.
void errors() {
  Ptr s, blocking, graph;
  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  EXPECT(SUCCESS, cuStreamCreate(&blocking, 0));
  DevPtr d;
  EXPECT(SUCCESS, cuMemAlloc_v2(&d, 64));

  EXPECT(CAPTURE_UNSUPPORTED, cuStreamBeginCapture_v2(nullptr, GLOBAL));  // the legacy stream
  EXPECT(CAPTURE_UNSUPPORTED, cuStreamBeginCapture_v2((Ptr)1, GLOBAL));   // CU_STREAM_LEGACY
  EXPECT(INVALID_VALUE, cuStreamBeginCapture_v2(s, 3));
  EXPECT(INVALID_HANDLE, cuStreamBeginCapture_v2((Ptr)&d, GLOBAL));
  EXPECT(ILLEGAL_STATE, cuStreamEndCapture(s, &graph));
  EXPECT(NONE, status(nullptr));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(ILLEGAL_STATE, cuStreamBeginCapture_v2(s, RELAXED));
  EXPECT(INVALID_VALUE, cuStreamEndCapture(s, nullptr));
  EXPECT(ACTIVE, status(s));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  Ptr exec;
  EXPECT(INVALID_VALUE, cuGraphInstantiateWithFlags(&exec, graph, 4));  // DEVICE_LAUNCH
  EXPECT(INVALID_HANDLE, cuGraphInstantiateWithFlags(&exec, (Ptr)&d, 0));
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 1));  // AUTO_FREE_ON_LAUNCH
  EXPECT(SUCCESS, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuGraphDestroy(graph));

  // The legacy stream waits for blocking streams, so it is unusable
  // while one captures; asking it is an error that leaves the capture.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(blocking, GLOBAL));
  int st = -1;
  EXPECT(CAPTURE_IMPLICIT, cuStreamIsCapturing(nullptr, &st));
  EXPECT(ACTIVE, status(blocking));
  EXPECT(SUCCESS, cuMemsetD32Async(d, 0, 16, s));  // a non-blocking stream is not concerned
  EXPECT(CAPTURE_IMPLICIT, cuMemsetD32Async(d, 0, 16, nullptr));
  expect_invalidated(blocking, d, __LINE__);
  EXPECT(SUCCESS, cuMemsetD32Async(d, 0, 16, nullptr));

  // A call that fails while capturing invalidates the capture.
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(INVALID_VALUE, cuMemsetD32Async(d, 0, 17, s));  // past the allocation
  expect_invalidated(s, d, __LINE__);
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  {
    DevPtr p = d;
    long long n = 16;
    double v = 1;
    void* params[] = {&p, &n, &v};
    EXPECT(INVALID_VALUE, cuLaunchKernel(fill, 0, 1, 1, 32, 1, 1, 0, s, params, nullptr));
  }
  expect_invalidated(s, d, __LINE__);

  EXPECT(SUCCESS, cuMemFree_v2(d));
  EXPECT(SUCCESS, cuStreamDestroy_v2(s));
  EXPECT(SUCCESS, cuStreamDestroy_v2(blocking));
}

// gemm: cuBLAS GEMMs on a capturing stream are captured with alpha and
// beta as they were, and run at each launch.
void gemm() {
  Ptr s, other, blas;
  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  EXPECT(SUCCESS, cuStreamCreate(&other, kNonBlocking));
  EXPECT(0, cublasCreate_v2(&blas));
  EXPECT(0, cublasSetStream_v2(blas, s));
  // A is 2×3, B 3×2, column-major; C = A·B is [[22, 28], [49, 64]].
  const float a[6] = {1, 4, 2, 5, 3, 6}, b[6] = {1, 3, 5, 2, 4, 6};
  DevPtr A, B, C;
  EXPECT(SUCCESS, cuMemAlloc_v2(&A, sizeof a));
  EXPECT(SUCCESS, cuMemAlloc_v2(&B, sizeof b));
  EXPECT(SUCCESS, cuMemAlloc_v2(&C, 16));
  EXPECT(SUCCESS, cuMemcpyHtoDAsync_v2(A, a, sizeof a, s));
  EXPECT(SUCCESS, cuMemcpyHtoDAsync_v2(B, b, sizeof b, s));
  EXPECT(SUCCESS, cuMemsetD32Async(C, 0, 4, s));
  const float want[4] = {22, 49, 28, 64};

  Ptr graph, exec;
  float alpha = 1, beta = 1;  // C += A·B
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(0, cublasSgemm_v2(blas, kBlasOpN, kBlasOpN, 2, 2, 3, &alpha, (const float*)A, 2, (const float*)B, 3,
                           &beta, (float*)C, 2));
  alpha = 50, beta = 0;  // read at capture: the graph keeps 1 and 1
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  float c[4];
  read(other, c, C, 4);
  for (float v : c) CHECK(v == 0);
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
  EXPECT(SUCCESS, cuGraphDestroy(graph));
  for (int k = 1; k <= 2; k++) {
    EXPECT(SUCCESS, cuGraphLaunch(exec, s));
    read(other, c, C, 4);
    for (int i = 0; i < 4; i++) CHECK(c[i] == k * want[i]);
  }

  // A batch of two in double, with beta 0.
  const double ad[12] = {1, 4, 2, 5, 3, 6, 1, 4, 2, 5, 3, 6}, bd[12] = {1, 3, 5, 2, 4, 6, 2, 6, 10, 4, 8, 12};
  DevPtr Ad, Bd, Cd;
  EXPECT(SUCCESS, cuMemAlloc_v2(&Ad, sizeof ad));
  EXPECT(SUCCESS, cuMemAlloc_v2(&Bd, sizeof bd));
  EXPECT(SUCCESS, cuMemAlloc_v2(&Cd, 64));
  EXPECT(SUCCESS, cuMemcpyHtoDAsync_v2(Ad, ad, sizeof ad, s));
  EXPECT(SUCCESS, cuMemcpyHtoDAsync_v2(Bd, bd, sizeof bd, s));
  double alphad = 2, betad = 0;
  Ptr execd;
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(0, cublasDgemmStridedBatched(blas, kBlasOpN, kBlasOpN, 2, 2, 3, &alphad, (const double*)Ad, 2, 6,
                                      (const double*)Bd, 3, 6, &betad, (double*)Cd, 2, 4, 2));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  double cd[8];
  EXPECT(SUCCESS, cuMemcpyDtoHAsync_v2(cd, Cd, sizeof cd, other));
  for (double v : cd) CHECK(v != v);  // not run: new memory's NaN
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&execd, graph, 0));
  EXPECT(SUCCESS, cuGraphDestroy(graph));
  EXPECT(SUCCESS, cuGraphLaunch(execd, s));
  EXPECT(SUCCESS, cuMemcpyDtoHAsync_v2(cd, Cd, sizeof cd, other));
  for (int i = 0; i < 8; i++) CHECK(cd[i] == 2 * want[i % 4] * (i < 4 ? 1 : 2));

  // A replay whose matrices were freed fails as the GEMM would have.
  EXPECT(SUCCESS, cuMemFree_v2(C));
  EXPECT(INVALID_VALUE, cuGraphLaunch(exec, s));
  EXPECT(SUCCESS, cuMemFree_v2(Bd));
  EXPECT(INVALID_VALUE, cuGraphLaunch(execd, s));

  EXPECT(SUCCESS, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuGraphExecDestroy(execd));
  EXPECT(0, cublasDestroy_v2(blas));
  for (DevPtr p : {A, B, Ad, Cd}) EXPECT(SUCCESS, cuMemFree_v2(p));
  EXPECT(SUCCESS, cuStreamDestroy_v2(s));
  EXPECT(SUCCESS, cuStreamDestroy_v2(other));
}

// freed: a launch whose nodes touch freed memory fails at the first such
// node, as the eager call would; the nodes before it ran, those after not.
void freed() {
  Ptr s, graph, exec;
  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  DevPtr first, gone, last;
  EXPECT(SUCCESS, cuMemAlloc_v2(&first, 16));
  EXPECT(SUCCESS, cuMemAlloc_v2(&gone, 16));
  EXPECT(SUCCESS, cuMemAlloc_v2(&last, 16));
  float host[4] = {-1, -1, -1, -1};
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(SUCCESS, cuMemsetD32Async(first, bits(7), 4, s));
  EXPECT(SUCCESS, cuMemcpyDtoHAsync_v2(host, gone, 16, s));
  EXPECT(SUCCESS, cuMemsetD32Async(last, bits(9), 4, s));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
  EXPECT(SUCCESS, cuMemsetD32Async(gone, bits(8), 4, s));
  EXPECT(SUCCESS, cuGraphLaunch(exec, s));
  for (float v : host) CHECK(v == 8);
  float got[4];
  EXPECT(SUCCESS, cuMemsetD32Async(first, 0, 4, s));
  EXPECT(SUCCESS, cuMemsetD32Async(last, 0, 4, s));
  EXPECT(SUCCESS, cuMemFree_v2(gone));
  host[0] = -1;
  EXPECT(INVALID_VALUE, cuGraphLaunch(exec, s));
  CHECK(host[0] == -1);
  read(s, got, first, 4);
  for (float v : got) CHECK(v == 7);
  read(s, got, last, 4);
  for (float v : got) CHECK(v == 0);
  EXPECT(SUCCESS, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuGraphDestroy(graph));
  EXPECT(SUCCESS, cuMemFree_v2(first));
  EXPECT(SUCCESS, cuMemFree_v2(last));
  EXPECT(SUCCESS, cuStreamDestroy_v2(s));
}

// teardown destroys a capturing stream, then the context with a capture
// going on and a graph instantiated: nothing is left to crash on, the
// context's handles are gone, the graph (no context's) remains.
void teardown() {
  Ptr s, e, graph, exec;
  DevPtr d;
  EXPECT(SUCCESS, cuMemAlloc_v2(&d, 16));
  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  EXPECT(SUCCESS, cuEventCreate(&e, 0));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(SUCCESS, cuMemsetD32Async(d, 0, 4, s));
  EXPECT(SUCCESS, cuEventRecord(e, s));
  EXPECT(SUCCESS, cuStreamDestroy_v2(s));
  EXPECT(CAPTURED_EVENT, cuEventQuery(e));
  EXPECT(SUCCESS, cuCtxSynchronize());  // no capture left
  EXPECT(SUCCESS, cuEventDestroy_v2(e));

  EXPECT(SUCCESS, cuStreamCreate(&s, kNonBlocking));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(SUCCESS, cuMemsetD32Async(d, 0, 4, s));
  EXPECT(SUCCESS, cuStreamEndCapture(s, &graph));
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
  EXPECT(SUCCESS, cuStreamBeginCapture_v2(s, GLOBAL));
  EXPECT(SUCCESS, cuMemsetD32Async(d, 0, 4, s));
  EXPECT(SUCCESS, cuDevicePrimaryCtxRelease_v2(0));  // the last reference
  EXPECT(SUCCESS, cuDevicePrimaryCtxRetain(&ctx, 0));
  EXPECT(SUCCESS, cuCtxSetCurrent(ctx));
  int st;
  EXPECT(INVALID_HANDLE, cuStreamIsCapturing(s, &st));
  EXPECT(INVALID_HANDLE, cuGraphLaunch(exec, nullptr));
  EXPECT(INVALID_HANDLE, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuCtxSynchronize());
  // The graph's memset now targets memory that went with the context.
  EXPECT(SUCCESS, cuGraphInstantiateWithFlags(&exec, graph, 0));
  EXPECT(INVALID_VALUE, cuGraphLaunch(exec, nullptr));
  EXPECT(SUCCESS, cuGraphExecDestroy(exec));
  EXPECT(SUCCESS, cuGraphDestroy(graph));
  DevPtr p;
  EXPECT(SUCCESS, cuMemAlloc_v2(&p, 16));  // no capture forbids it
  EXPECT(SUCCESS, cuMemFree_v2(p));
}

}  // namespace

#define SYM(lib, name)                                          \
  do {                                                          \
    *(void**)&name = dlsym(lib, #name);                         \
    if (name == nullptr) {                                      \
      printf("FAIL: the emulator does not export %s\n", #name); \
      return 1;                                                 \
    }                                                           \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: graph LIBRARY\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    printf("FAIL: %s\n", dlerror());
    return 1;
  }
  SYM(lib, cuInit);
  SYM(lib, cuDevicePrimaryCtxRetain);
  SYM(lib, cuDevicePrimaryCtxRelease_v2);
  SYM(lib, cuCtxSetCurrent);
  SYM(lib, cuCtxSynchronize);
  SYM(lib, cuMemAlloc_v2);
  SYM(lib, cuMemFree_v2);
  SYM(lib, cuMemHostAlloc);
  SYM(lib, cuMemFreeHost);
  SYM(lib, cuMemcpyHtoDAsync_v2);
  SYM(lib, cuMemcpyDtoHAsync_v2);
  SYM(lib, cuMemcpyDtoDAsync_v2);
  SYM(lib, cuMemsetD32Async);
  SYM(lib, cuStreamCreate);
  SYM(lib, cuStreamDestroy_v2);
  SYM(lib, cuStreamSynchronize);
  SYM(lib, cuStreamWaitEvent);
  SYM(lib, cuEventCreate);
  SYM(lib, cuEventDestroy_v2);
  SYM(lib, cuEventRecord);
  SYM(lib, cuEventQuery);
  SYM(lib, cuEventSynchronize);
  SYM(lib, cuModuleLoadDataEx);
  SYM(lib, cuModuleGetFunction);
  SYM(lib, cuLaunchKernel);
  SYM(lib, cuStreamBeginCapture_v2);
  SYM(lib, cuStreamEndCapture);
  SYM(lib, cuStreamIsCapturing);
  SYM(lib, cuGraphInstantiateWithFlags);
  SYM(lib, cuGraphLaunch);
  SYM(lib, cuGraphUpload);
  SYM(lib, cuGraphExecDestroy);
  SYM(lib, cuGraphDestroy);
  SYM(lib, cublasCreate_v2);
  SYM(lib, cublasDestroy_v2);
  SYM(lib, cublasSetStream_v2);
  SYM(lib, cublasSgemm_v2);
  SYM(lib, cublasDgemmStridedBatched);

  EXPECT(SUCCESS, cuInit(0));
  EXPECT(SUCCESS, cuDevicePrimaryCtxRetain(&ctx, 0));
  EXPECT(SUCCESS, cuCtxSetCurrent(ctx));
  Ptr module;
  EXPECT(SUCCESS, cuModuleLoadDataEx(&module, kPTX, 0, nullptr, nullptr));
  EXPECT(SUCCESS, cuModuleGetFunction(&fill, module, "gc_fill_f32"));
  EXPECT(SUCCESS, cuModuleGetFunction(&axpby, module, "gc_axpby_f32"));
  if (failures > 0) return 1;

  struct {
    const char* name;
    void (*run)();
  } scenarios[] = {
      {"capture_replay", capture_replay}, {"synchronisation", synchronisation}, {"modes", modes},
      {"errors", errors},                 {"gemm", gemm},                       {"freed", freed},
      {"fork_join", fork_join},
      {"teardown", teardown},  // last: it destroys the context
  };
  for (auto& sc : scenarios) {
    int before = failures;
    sc.run();
    printf("%s %s\n", failures == before ? "pass" : "FAIL", sc.name);
  }
  if (failures > 0) return 1;
  printf("ok %d\n", (int)(sizeof scenarios / sizeof scenarios[0]));
  return 0;
}
