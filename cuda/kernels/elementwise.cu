// Element-wise kernels (device.AddBias, Fill, Axpby, Mul, Clamp): grid
// strides over the elements, scalars rounded to T as the CPU device does.
#include "common.cuh"

template <typename T>
__device__ void add_bias(const T* bias, T* y, long long rows, long long cols) {
  GC_FOR(e, rows * cols) y[e] += bias[e % cols];
}

template <typename T> __device__ void fill(T* x, long long n, double value) {
  T v = (T)value; // C's conversion to int truncates toward zero, as Go's does
  GC_FOR(i, n) x[i] = v;
}

template <typename T>
__device__ void axpby(const T* x, T* y, long long n, double alpha, double beta) {
  T a = (T)alpha, b = (T)beta;
  if (b == T(0)) {
    GC_FOR(i, n) y[i] = a * x[i]; // y is not read: NaNs in it do not propagate
  } else {
    GC_FOR(i, n) y[i] = a * x[i] + b * y[i];
  }
}

template <typename T> __device__ void mul(const T* x, const T* y, T* z, long long n) {
  GC_FOR(i, n) z[i] = x[i] * y[i];
}

template <typename T> __device__ void clamp(T* x, long long n, double lo, double hi) {
  T l = (T)lo, h = (T)hi;
  GC_FOR(i, n) {
    T v = x[i];
    x[i] = v < l ? l : (v > h ? h : v); // NaN compares false both ways and stays
  }
}

#define GC_ELEMENTWISE(T, S)                                                                  \
  extern "C" __global__ void gc_add_bias_##S(const T* bias, T* y, long long rows,             \
                                             long long cols) {                                \
    add_bias(bias, y, rows, cols);                                                            \
  }                                                                                           \
  extern "C" __global__ void gc_fill_##S(T* x, long long n, double value) {                   \
    fill(x, n, value);                                                                        \
  }                                                                                           \
  extern "C" __global__ void gc_axpby_##S(const T* x, T* y, long long n, double alpha,        \
                                          double beta) {                                      \
    axpby(x, y, n, alpha, beta);                                                              \
  }                                                                                           \
  extern "C" __global__ void gc_mul_##S(const T* x, const T* y, T* z, long long n) {          \
    mul(x, y, z, n);                                                                          \
  }                                                                                           \
  extern "C" __global__ void gc_clamp_##S(T* x, long long n, double lo, double hi) {          \
    clamp(x, n, lo, hi);                                                                      \
  }

GC_ELEMENTWISE(float, f32)
GC_ELEMENTWISE(double, f64)

extern "C" __global__ void gc_fill_i32(int* x, long long n, double value) { fill(x, n, value); }
