// Shared helpers of the gocurrent kernels (cuda/kernels/ABI.md).
#pragma once

#define GC_STATUS_EMBEDDING 1u
#define GC_STATUS_EMBEDDING_GRAD 2u
#define GC_STATUS_SOFTMAX_XENT 4u
#define GC_STATUS_GATHER_SEQ 8u
#define GC_STATUS_SEQ_POOL_GRAD 16u

// Shared memory is declared through this macro so that the CPU emulator
// (internal/cudaemu) can give each emulated block its own copy. Each
// array is aligned to 16 bytes, so a kernel may read it a vector at a
// time (float4, double2).
#ifndef GC_SHARED
#define GC_SHARED(type, name, count) __shared__ __align__(16) type name[count]
#endif

// The block's dynamic shared memory (the bytes its launch asks for, which
// above 48 KiB its function must be opted into), as an array of type: one
// region, so a kernel declares it once.
#ifndef GC_SHARED_DYNAMIC
#define GC_SHARED_DYNAMIC(type, name)                                     \
  extern __shared__ __align__(16) unsigned char gc_dynamic_shared[];      \
  type* name = reinterpret_cast<type*>(gc_dynamic_shared)
#endif

// Grid-stride loop over [0, n): any launch shape covers every element.
#define GC_FOR(i, n)                                                           \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;        \
       i < (n); i += (long long)gridDim.x * blockDim.x)

// gc_ld_l2 loads *p from L2, past the SM's L1, which another block's
// write does not update: for data other blocks of the same launch wrote
// (the persistent walks' h, after gc_grid_sync).
#ifndef GC_LD_L2
template <typename T> __device__ __forceinline__ T gc_ld_l2(const T* p) { return __ldcg(p); }
#endif

__device__ __forceinline__ float gc_exp(float x) { return expf(x); }
__device__ __forceinline__ double gc_exp(double x) { return exp(x); }
__device__ __forceinline__ float gc_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double gc_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float gc_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double gc_sqrt(double x) { return sqrt(x); }

template <typename T> __device__ __forceinline__ T gc_sigmoid(T x) {
  return T(1) / (T(1) + gc_exp(-x));
}

// An optional buffer is NULL: its elements read as zero.
template <typename T>
__device__ __forceinline__ T gc_opt(const T* p, long long i) {
  return p ? p[i] : T(0);
}

// Warp-wide sum and max: every lane gets the result.
__device__ __forceinline__ double gc_warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double gc_warp_max(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// device.DropoutKeep: splitmix64 of seed and index, top 24 bits as a
// uniform in [0, 1), kept when it is at least p.
__device__ __forceinline__ bool gc_dropout_keep(unsigned long long seed,
                                                unsigned long long index,
                                                double p) {
  unsigned long long z = seed ^ (index * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  double u = (double)(z >> 40) * (1.0 / 16777216.0);
  return u >= p;
}

// gc_block_sum256 sums one double per thread of a 256-thread block in a
// fixed tree; thread 0 gets the result. s is 256 doubles of shared memory.
__device__ __forceinline__ double gc_block_sum256(double v, double* s) {
  int t = threadIdx.x;
  s[t] = v;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (t < w) s[t] += s[t + w];
    __syncthreads();
  }
  return s[0];
}

// gc_grid_sync is a barrier of the whole grid, for a kernel whose blocks
// are all resident at once (the persistent walks: their launcher sizes the
// grid so): each block's writes before it are seen by every block after
// it. bar is two words of the launching stream's own, zero before the
// first launch and left zero: the blocks' count of arrivals, which the
// last to arrive resets, and the generation, which it then advances and
// the others wait for. A block that waits more than about 8·10⁹ cycles
// (seconds: the grid is not resident after all) traps, which fails the
// launch, rather than hanging the stream.
#ifndef GC_GRID_SYNC
#define GC_GRID_SYNC_CYCLES 8000000000LL
__device__ __forceinline__ void gc_grid_sync(unsigned* bar) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    volatile unsigned* gen = bar + 1;
    unsigned g = *gen;
    unsigned n = gridDim.x * gridDim.y * gridDim.z;
    __threadfence();
    if (atomicAdd(bar, 1u) == n - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      long long start = clock64();
      while (*gen == g) {
        if (clock64() - start > GC_GRID_SYNC_CYCLES) __trap();
      }
    }
    __threadfence();
  }
  __syncthreads();
}
#endif
