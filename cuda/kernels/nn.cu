// Embedding and its backward, the gather of sequence rows, the pooling of
// sequences and its backward, the softmax cross-entropy, the softmax and
// dropout (device.Embedding, EmbeddingGrad, GatherSeq, SeqPool,
// SeqPoolGrad, SoftmaxCrossEntropy, Softmax, Dropout). Rows of logits are
// handled one warp per row: 32 lanes stride over the classes, so loads are
// coalesced, and the row's max and sum are warp shuffles, in a fixed order.
#include "common.cuh"

template <typename T>
__device__ void embedding(const T* table, const int* ids, T* out, long long n, long long dim,
                          long long vocab, unsigned int* status) {
  GC_FOR(e, n * dim) {
    long long i = e / dim, d = e - i * dim;
    int id = ids[i];
    if (id < 0 || id >= vocab) {
      out[e] = T(0);
      if (d == 0) atomicOr(status, GC_STATUS_EMBEDDING);
    } else {
      out[e] = table[(long long)id * dim + d];
    }
  }
}

// Element (r, c) of Y, r = t·B + i over steps·batch rows: row (t, index[i])
// of X, or zero past lengths[i] (index NULL: the identity; lengths NULL:
// all steps); an index outside [0, batch) writes zeros and raises the bit,
// whatever the length.
template <typename T>
__device__ void gather_seq(const int* index, const int* lengths, const T* x, T* y, long long steps,
                           long long batch, long long cols, long long ldx, long long ldy,
                           unsigned int* status) {
  GC_FOR(e, steps * batch * cols) {
    long long r = e / cols, c = e - r * cols;
    long long t = r / batch, i = r - t * batch;
    long long src = index ? (long long)index[i] : i;
    long long n = lengths ? (long long)lengths[i] : steps;
    T v = T(0);
    if (src < 0 || src >= batch) {
      if (c == 0) atomicOr(status, GC_STATUS_GATHER_SEQ);
    } else if (t < n) {
      v = x[(t * batch + src) * ldx + c];
    }
    y[r * ldy + c] = v;
  }
}

// The length of sequence b: lengths[b] clamped to [0, steps], steps when
// lengths is NULL.
__device__ __forceinline__ long long gc_seq_len(const int* lengths, long long b,
                                                long long steps) {
  if (!lengths) return steps;
  long long n = lengths[b];
  return n < 0 ? 0 : n > steps ? steps : n;
}

// Element (b, c) of out over batch·cols elements: the mean (a double sum in
// order of t, divided by n, rounded once) or, with take_max, the maximum
// of y's rows (t, b), t < n, ties to the first step and the first NaN
// winning (v != v: a NaN), with its step in argmax (NULL: not written).
// An empty sequence gives 0 and step -1. Consecutive threads take
// consecutive columns, so each step's loads are coalesced.
template <typename T>
__device__ void seq_pool(const int* lengths, const T* y, T* out, int* argmax, long long steps,
                         long long batch, long long cols, long long ldy, long long ldout,
                         long long take_max) {
  GC_FOR(e, batch * cols) {
    long long b = e / cols, c = e - b * cols;
    long long n = gc_seq_len(lengths, b, steps);
    T v = T(0);
    if (take_max) {
      long long arg = -1;
      if (n > 0) {
        v = y[b * ldy + c];
        arg = 0;
      }
      for (long long t = 1; t < n; t++) {
        T x = y[(t * batch + b) * ldy + c];
        if (x > v || (x != x && v == v)) {
          v = x;
          arg = t;
        }
      }
      if (argmax) argmax[e] = (int)arg;
    } else if (n > 0) {
      double s = 0;
      for (long long t = 0; t < n; t++) s += (double)y[(t * batch + b) * ldy + c];
      v = (T)(s / (double)n);
    }
    out[b * ldout + c] = v;
  }
}

// Element (r, c) of dy, r = t·batch + b over steps·batch rows: zero past
// sequence b's n steps; else dout[b, c]/n (the quotient in double, rounded
// once) or, with take_max, dout[b, c] at step argmax[b, c] alone. A step
// outside [0, n) for n >= 1 routes nothing and raises the bit (once, from
// step 0's thread).
template <typename T>
__device__ void seq_pool_grad(const int* lengths, const T* dout, const int* argmax, T* dy,
                              long long steps, long long batch, long long cols,
                              long long lddout, long long lddy, long long take_max,
                              unsigned int* status) {
  GC_FOR(e, steps * batch * cols) {
    long long r = e / cols, c = e - r * cols;
    long long t = r / batch, b = r - t * batch;
    long long n = gc_seq_len(lengths, b, steps);
    T v = T(0);
    if (t < n) {
      T g = dout[b * lddout + c];
      if (take_max) {
        long long s = argmax[b * cols + c];
        if (s < 0 || s >= n) {
          if (t == 0) atomicOr(status, GC_STATUS_SEQ_POOL_GRAD);
        } else if (s == t) {
          v = g;
        }
      } else {
        v = (T)((double)g / (double)n);
      }
    }
    dy[r * lddy + c] = v;
  }
}

extern "C" __global__ void gc_check_ids(const int* ids, long long n, long long limit,
                                        unsigned int* status, long long bit) {
  GC_FOR(i, n) {
    int id = ids[i];
    if (id < 0 || id >= limit) atomicOr(status, (unsigned int)bit);
  }
}

// Block (x, v) owns columns x·128 .. x·128+127 of table row v and adds to
// them, in order of i, every dout row whose id is v. The ids are staged
// through shared memory a tile at a time, loaded by the whole block.
#define GC_SCAN_TILE 1024
template <typename T>
__device__ void embedding_grad_scan(const int* ids, const T* dout, T* dtable, long long n,
                                    long long dim, long long vocab, int* tile) {
  long long d = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  int v = blockIdx.y;
  T acc = T(0);
  for (long long t0 = 0; t0 < n; t0 += GC_SCAN_TILE) {
    long long m = n - t0 < GC_SCAN_TILE ? n - t0 : GC_SCAN_TILE;
    for (long long k = threadIdx.x; k < m; k += blockDim.x) tile[k] = ids[t0 + k];
    __syncthreads();
    if (d < dim) {
      for (long long k = 0; k < m; k++) {
        if (tile[k] == v) acc += dout[(t0 + k) * dim + d];
      }
    }
    __syncthreads();
  }
  if (d < dim) dtable[(long long)v * dim + d] += acc;
}

template <typename T>
__device__ void embedding_grad_seq(const int* ids, const T* dout, T* dtable, long long n,
                                   long long dim, long long vocab) {
  GC_FOR(d, dim) {
    for (long long i = 0; i < n; i++) {
      int id = ids[i];
      if (id >= 0 && id < vocab) dtable[(long long)id * dim + d] += dout[i * dim + d];
    }
  }
}

// The warp of this thread and its row stride: all lanes of a warp share
// the row, so they leave the loop together and every shuffle is full.
#define GC_WARP_ROWS(row, n)                                                                  \
  for (long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < (n);   \
       row += (long long)gridDim.x * blockDim.x / 32)

template <typename T>
__device__ void softmax_xent(const T* logits, const int* targets, long long n,
                             long long classes, double scale, T* dlogits, double* rowloss,
                             unsigned int* status, long long ignore, long long ignore_index,
                             const T* weights) {
  int lane = threadIdx.x & 31;
  GC_WARP_ROWS(row, n) {
    const T* x = logits + row * classes;
    int target = targets[row];
    bool skip = ignore && target == (int)ignore_index;
    bool bad = !skip && (target < 0 || target >= classes);
    double w = (skip || bad || !weights) ? 1.0 : (double)weights[target];
    // Read before the shuffles below: with dlogits = logits another lane
    // may overwrite the target's logit once the warp has synchronised.
    double xt = bad ? 0.0 : (double)x[target];
    double m = -INFINITY;
    for (long long j = lane; j < classes; j += 32) m = fmax(m, (double)x[j]);
    m = gc_warp_max(m);
    double s = 0;
    for (long long j = lane; j < classes; j += 32) s += (double)gc_exp((T)((double)x[j] - m));
    s = gc_warp_sum(s);
    if (lane == 0) {
      if (bad || skip) {
        rowloss[row] = 0;
        if (bad) atomicOr(status, GC_STATUS_SOFTMAX_XENT);
      } else {
        rowloss[row] = w * (log(s) - (xt - m));
      }
    }
    if (dlogits) {
      T* y = dlogits + row * classes;
      for (long long j = lane; j < classes; j += 32) {
        if (bad || skip) {
          y[j] = T(0);
        } else {
          double p = (double)gc_exp((T)((double)x[j] - m)) / s;
          y[j] = (T)(scale * w * (p - (j == target ? 1.0 : 0.0)));
        }
      }
    }
  }
}

template <typename T>
__device__ void softmax(const T* logits, T* probs, long long n, long long classes,
                        double inv_temp) {
  int lane = threadIdx.x & 31;
  GC_WARP_ROWS(row, n) {
    const T* x = logits + row * classes;
    double m = -INFINITY;
    for (long long j = lane; j < classes; j += 32) m = fmax(m, (double)x[j] * inv_temp);
    m = gc_warp_max(m);
    double s = 0;
    for (long long j = lane; j < classes; j += 32) s += (double)gc_exp((T)((double)x[j] * inv_temp - m));
    s = gc_warp_sum(s);
    // Every lane has read its own classes for both passes before writing
    // them, so probs may be logits.
    T* y = probs + row * classes;
    for (long long j = lane; j < classes; j += 32)
      y[j] = (T)((double)gc_exp((T)((double)x[j] * inv_temp - m)) / s);
  }
}

template <typename T>
__device__ void dropout(const T* x, T* y, T* mask, long long n, double p,
                        unsigned long long seed, unsigned long long offset) {
  T keep = (T)(1.0 / (1.0 - p));
  GC_FOR(i, n) {
    T m = gc_dropout_keep(seed, offset + (unsigned long long)i, p) ? keep : T(0);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

#define GC_NN(T, S)                                                                           \
  extern "C" __global__ void gc_gather_seq_##S(const int* index, const int* lengths,         \
                                               const T* x, T* y, long long steps,             \
                                               long long batch, long long cols, long long ldx,\
                                               long long ldy, unsigned int* status) {         \
    gather_seq(index, lengths, x, y, steps, batch, cols, ldx, ldy, status);                   \
  }                                                                                           \
  extern "C" __global__ void gc_seq_pool_##S(const int* lengths, const T* y, T* out,          \
                                             int* argmax, long long steps, long long batch,   \
                                             long long cols, long long ldy, long long ldout,  \
                                             long long take_max) {                            \
    seq_pool(lengths, y, out, argmax, steps, batch, cols, ldy, ldout, take_max);              \
  }                                                                                           \
  extern "C" __global__ void gc_seq_pool_grad_##S(const int* lengths, const T* dout,          \
                                                  const int* argmax, T* dy, long long steps,  \
                                                  long long batch, long long cols,            \
                                                  long long lddout, long long lddy,           \
                                                  long long take_max, unsigned int* status) { \
    seq_pool_grad(lengths, dout, argmax, dy, steps, batch, cols, lddout, lddy, take_max,      \
                  status);                                                                    \
  }                                                                                           \
  extern "C" __global__ void gc_embedding_##S(const T* table, const int* ids, T* out,         \
                                              long long n, long long dim, long long vocab,    \
                                              unsigned int* status) {                         \
    embedding(table, ids, out, n, dim, vocab, status);                                        \
  }                                                                                           \
  extern "C" __global__ void gc_embedding_grad_scan_##S(const int* ids, const T* dout,        \
                                                        T* dtable, long long n, long long dim,\
                                                        long long vocab) {                    \
    GC_SHARED(int, tile, GC_SCAN_TILE);                                                       \
    embedding_grad_scan(ids, dout, dtable, n, dim, vocab, tile);                              \
  }                                                                                           \
  extern "C" __global__ void gc_embedding_grad_seq_##S(const int* ids, const T* dout,         \
                                                       T* dtable, long long n, long long dim, \
                                                       long long vocab) {                     \
    embedding_grad_seq(ids, dout, dtable, n, dim, vocab);                                     \
  }                                                                                           \
  extern "C" __global__ void gc_softmax_xent_##S(const T* logits, const int* targets,         \
                                                 long long n, long long classes,              \
                                                 double scale, T* dlogits, double* rowloss,   \
                                                 unsigned int* status, long long ignore,      \
                                                 long long ignore_index, const T* weights) {  \
    softmax_xent(logits, targets, n, classes, scale, dlogits, rowloss, status, ignore,        \
                 ignore_index, weights);                                                      \
  }                                                                                           \
  extern "C" __global__ void gc_softmax_##S(const T* logits, T* probs, long long n,           \
                                            long long classes, double inv_temp) {             \
    softmax(logits, probs, n, classes, inv_temp);                                             \
  }                                                                                           \
  extern "C" __global__ void gc_dropout_##S(const T* x, T* y, T* mask, long long n, double p, \
                                            unsigned long long seed,                          \
                                            unsigned long long offset) {                      \
    dropout(x, y, mask, n, p, seed, offset);                                                  \
  }

GC_NN(float, f32)
GC_NN(double, f64)
