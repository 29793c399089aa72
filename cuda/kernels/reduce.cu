// Deterministic reductions (device.SumSquares, SumRows, and the total of
// SoftmaxCrossEntropy's row losses): fixed launch shapes and fixed trees,
// so the order of every sum depends on the shape only, and results are
// bit-identical from run to run. Sums are in double.
#include "common.cuh"

template <typename T>
__device__ void sum_squares_partial(const T* x, long long n, double* partials, double* s) {
  double acc = 0;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n;
       i += (long long)gridDim.x * 256) {
    double v = (double)x[i];
    acc += v * v;
  }
  double total = gc_block_sum256(acc, s);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

template <typename T>
__device__ void sum_finish(const double* x, long long n, T* out, double scale,
                           long long accumulate, double* s) {
  double acc = 0;
  for (long long i = threadIdx.x; i < n; i += 256) acc += x[i];
  double total = gc_block_sum256(acc, s);
  if (threadIdx.x == 0) out[0] = (T)((accumulate ? (double)out[0] : 0.0) + scale * total);
}

// Block (32, 8): thread (tx, ty) sums rows r0 + ty, r0 + ty + 8, … below
// r1 of column blockIdx.x·32 + tx (consecutive tx read consecutive
// columns); the 8 partials are added in order of ty. Threads with ty = 0
// of a column inside the matrix get the sum of rows [r0, r1).
template <typename T>
__device__ double sum_rows_block(const T* x, long long r0, long long r1, long long cols, double* s) {
  long long c = (long long)blockIdx.x * 32 + threadIdx.x;
  double acc = 0;
  if (c < cols)
    for (long long r = r0 + threadIdx.y; r < r1; r += 8) acc += (double)x[r * cols + c];
  s[threadIdx.y * 32 + threadIdx.x] = acc;
  __syncthreads();
  double total = 0;
  if (threadIdx.y == 0)
    for (int k = 0; k < 8; k++) total += s[k * 32 + threadIdx.x];
  return total;
}

// One pass: gridDim.x = ceil(cols/32), every row in one block.
template <typename T>
__device__ void sum_rows(const T* x, T* out, long long rows, long long cols,
                         long long accumulate, double* s) {
  long long c = (long long)blockIdx.x * 32 + threadIdx.x;
  double total = sum_rows_block(x, 0, rows, cols, s);
  if (threadIdx.y == 0 && c < cols) out[c] = (T)((accumulate ? (double)out[c] : 0.0) + total);
}

// Two passes, parallel over rows too: block (bx, by) sums the rows of
// slice by, [by·slice, min((by+1)·slice, rows)), into
// partials[by·cols + c]; sum_rows_finish adds a column's partials in
// order of the slice.
template <typename T>
__device__ void sum_rows_partial(const T* x, double* partials, long long rows, long long cols,
                                 long long slice, double* s) {
  long long c = (long long)blockIdx.x * 32 + threadIdx.x;
  long long r0 = (long long)blockIdx.y * slice;
  long long r1 = r0 + slice < rows ? r0 + slice : rows;
  double total = sum_rows_block(x, r0, r1, cols, s);
  if (threadIdx.y == 0 && c < cols) partials[(long long)blockIdx.y * cols + c] = total;
}

template <typename T>
__device__ void sum_rows_finish(const double* partials, T* out, long long slices, long long cols,
                                long long accumulate) {
  GC_FOR(c, cols) {
    double total = 0;
    for (long long k = 0; k < slices; k++) total += partials[k * cols + c];
    out[c] = (T)((accumulate ? (double)out[c] : 0.0) + total);
  }
}

#define GC_REDUCE(T, S)                                                                       \
  extern "C" __global__ void gc_sum_squares_partial_##S(const T* x, long long n,              \
                                                        double* partials) {                   \
    GC_SHARED(double, s, 256);                                                                \
    sum_squares_partial(x, n, partials, s);                                                   \
  }                                                                                           \
  extern "C" __global__ void gc_sum_finish_##S(const double* x, long long n, T* out,          \
                                               double scale, long long accumulate) {          \
    GC_SHARED(double, s, 256);                                                                \
    sum_finish(x, n, out, scale, accumulate, s);                                              \
  }                                                                                           \
  extern "C" __global__ void gc_sum_rows_##S(const T* x, T* out, long long rows,              \
                                             long long cols, long long accumulate) {          \
    GC_SHARED(double, s, 256);                                                                \
    sum_rows(x, out, rows, cols, accumulate, s);                                              \
  }                                                                                           \
  extern "C" __global__ void gc_sum_rows_partial_##S(const T* x, double* partials,            \
                                                     long long rows, long long cols,          \
                                                     long long slice) {                       \
    GC_SHARED(double, s, 256);                                                                \
    sum_rows_partial(x, partials, rows, cols, slice, s);                                      \
  }                                                                                           \
  extern "C" __global__ void gc_sum_rows_finish_##S(const double* partials, T* out,           \
                                                    long long slices, long long cols,         \
                                                    long long accumulate) {                   \
    sum_rows_finish(partials, out, slices, cols, accumulate);                                 \
  }

GC_REDUCE(float, f32)
GC_REDUCE(double, f64)
