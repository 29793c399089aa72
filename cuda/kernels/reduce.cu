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

// Block (32, 8): thread (tx, ty) sums rows ty, ty+8, … of column
// blockIdx.x·32 + tx; consecutive tx read consecutive columns.
template <typename T>
__device__ void sum_rows(const T* x, T* out, long long rows, long long cols,
                         long long accumulate, double* s) {
  long long c = (long long)blockIdx.x * 32 + threadIdx.x;
  double acc = 0;
  if (c < cols)
    for (long long r = threadIdx.y; r < rows; r += 8) acc += (double)x[r * cols + c];
  s[threadIdx.y * 32 + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double total = 0;
    for (int k = 0; k < 8; k++) total += s[k * 32 + threadIdx.x];
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
  }

GC_REDUCE(float, f32)
GC_REDUCE(double, f64)
