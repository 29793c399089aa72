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

// With seen (a zeroed bitmap of limit bits), each id in range also sets
// its bit there; the second thread to set one, whichever it is, raises
// repeated: an id given as distinct appears twice.
extern "C" __global__ void gc_check_ids(const int* ids, long long n, long long limit,
                                        unsigned int* status, long long bit, unsigned int* seen,
                                        long long repeated) {
  GC_FOR(i, n) {
    int id = ids[i];
    if (id < 0 || id >= limit) {
      atomicOr(status, (unsigned int)bit);
    } else if (seen != nullptr) {
      unsigned int m = 1u << (id & 31);
      if (atomicOr(&seen[id >> 5], m) & m) atomicOr(status, (unsigned int)repeated);
    }
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

// Distinct ids: every element of dout adds into its own element of
// dtable, one thread each.
template <typename T>
__device__ void embedding_grad_rows(const int* ids, const T* dout, T* dtable, long long n,
                                    long long dim, long long vocab) {
  GC_FOR(k, n * dim) {
    long long i = k / dim;
    int id = ids[i];
    if (id >= 0 && id < vocab) dtable[(long long)id * dim + (k - i * dim)] += dout[k];
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
  extern "C" __global__ void gc_embedding_grad_rows_##S(const int* ids, const T* dout,        \
                                                        T* dtable, long long n, long long dim,\
                                                        long long vocab) {                    \
    embedding_grad_rows(ids, dout, dtable, n, dim, vocab);                                    \
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
                                            unsigned long long offset,                        \
                                            const unsigned long long* state) {                \
    if (state) {                                                                              \
      seed ^= state[0];                                                                       \
      offset += state[1];                                                                     \
    }                                                                                         \
    dropout(x, y, mask, n, p, seed, offset);                                                  \
  }

GC_NN(float, f32)
GC_NN(double, f64)

// device.Advance: one thread moves a count kept in device memory (where the next dropout masks
// start), keeping its old value in prev when prev is not NULL.
extern "C" __global__ void gc_advance(unsigned long long* at, unsigned long long add,
                                      unsigned long long* prev) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  unsigned long long v = *at;
  if (prev) *prev = v;
  *at = v + add;
}

// ---- Sample (device.Sample) ----------------------------------------------------------------
// One block of 256 threads per row, grid-stride over rows. Thread j owns chunk j of the row's
// classes (device.SampleChunks = 256 chunks of S = ceil(classes/256) consecutive classes), so
// the chunk sums are the documented ones, each a sequential sum, and thread 0 adds them and
// walks them in order: the same bits as the CPU device. Every double operation that a
// compiler could fuse into a multiply-add is an explicitly rounded intrinsic.
#define GC_SAMPLE_CHUNKS 256

__device__ __forceinline__ long long gc_min(long long a, long long b) { return a < b ? a : b; }

// device.SampleUniform: the (counter+1)-th output of splitmix64 seeded with seed, its top 53
// bits as a multiple of 2^-53.
__device__ __forceinline__ double gc_sample_uniform(unsigned long long seed,
                                                    unsigned long long counter) {
  unsigned long long z = seed + (counter + 1ull) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-53;
}

// device.SampleExp, operation for operation (its constants are device/sample.go's).
__device__ double gc_sample_exp(double x) {
  if (!(x >= -708.0)) return 0.0;
  if (x > 709.0) return INFINITY;
  const double c[14] = {0x1p+00,
                        0x1p+00,
                        0x1p-01,
                        0x1.5555555555555p-03,
                        0x1.5555555555555p-05,
                        0x1.1111111111111p-07,
                        0x1.6c16c16c16c17p-10,
                        0x1.a01a01a01a01ap-13,
                        0x1.a01a01a01a01ap-16,
                        0x1.71de3a556c734p-19,
                        0x1.27e4fb7789f5cp-22,
                        0x1.ae64567f544e4p-26,
                        0x1.1eed8eff8d898p-29,
                        0x1.6124613a86d09p-33};
  double k = rint(__dmul_rn(x, 0x1.71547652b82fep+00));
  double r = __dsub_rn(__dsub_rn(x, __dmul_rn(k, 0x1.62e42feep-01)),
                       __dmul_rn(k, 0x1.a39ef35793c76p-33));
  double p = c[13];
  for (int n = 12; n >= 0; n--) p = __dadd_rn(__dmul_rn(p, r), c[n]);
  return __dmul_rn(p, __longlong_as_double((long long)(k + 1023.0) << 52));
}

// The rank order of device.Sample as unsigned keys, larger first: NaN 0, -0 as +0.
__device__ __forceinline__ unsigned long long gc_value_key(float x) {
  if (x != x) return 0;
  unsigned int b = x == 0.0f ? 0u : __float_as_uint(x);
  return (b >> 31) ? (unsigned long long)(~b) : (unsigned long long)(b | 0x80000000u);
}
__device__ __forceinline__ unsigned long long gc_value_key(double x) {
  if (x != x) return 0;
  unsigned long long b = x == 0.0 ? 0ull : (unsigned long long)__double_as_longlong(x);
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

// What a row's weights depend on (device.Sample, step 2).
template <typename T> struct gc_sampler {
  const T* x;
  long long classes;
  double m, temperature;
  bool selected;                // the candidates are the classes whose keys are >= (vp, ip)
  unsigned long long vp, ip;

  __device__ double weight(long long i) const {
    T xi = x[i];
    double v = (double)xi;
    if (v != v) return 0.0;
    if (selected) {
      unsigned long long vk = gc_value_key(xi), ik = (unsigned long long)(classes - 1 - i);
      if (vk < vp || (vk == vp && ik < ip)) return 0.0;
    }
    if (isinf(m)) return v == m ? 1.0 : 0.0;
    return gc_sample_exp(__ddiv_rn(__dsub_rn(v, m), temperature));
  }
};

// mx, mi: 256 each, a chunk's largest logit and its first class; hist: 3 x 256 digit counts of
// the radix select (three, so that one barrier a pass suffices: a pass counts into one, clears
// the next, and the one it clears was last read two passes before); part: the chunk sums.
template <typename T>
__device__ void sample(const T* logits, int* ids, int* tokens, long long n, long long classes,
                       double temperature, long long top_k, unsigned long long seed,
                       unsigned long long counter, double* mx, int* mi, int* hist,
                       double* part) {
  const int tid = threadIdx.x;
  const long long size = (classes + GC_SAMPLE_CHUNKS - 1) / GC_SAMPLE_CHUNKS;
  const long long lo = gc_min((long long)tid * size, classes), hi = gc_min(lo + size, classes);
  const bool select = temperature > 0 && top_k > 0 && top_k < classes;
  const int vbytes = (int)sizeof(T);
  int ibytes = 0;
  while (((unsigned long long)(classes - 1) >> (8 * ibytes)) != 0) ibytes++;
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    gc_sampler<T> s;
    s.x = logits + row * classes;
    s.classes = classes;
    s.temperature = temperature;
    s.selected = select;
    s.vp = 0;
    s.ip = 0;
    // 1. The largest logit that is not NaN, and its first class.
    double m = -INFINITY;
    int first = -1;
    for (long long i = lo; i < hi; i++) {
      double v = (double)s.x[i];
      if (v == v && (first < 0 || v > m)) {
        m = v;
        first = (int)i;
      }
    }
    mx[tid] = m;
    mi[tid] = first;
    if (select) hist[tid] = 0;  // the first pass's counts
    __syncthreads();
    m = -INFINITY;
    first = -1;
    for (int j = 0; j < GC_SAMPLE_CHUNKS; j++) {
      int f = mi[j];
      if (f >= 0 && (first < 0 || mx[j] > m)) {
        m = mx[j];
        first = f;
      }
    }
    s.m = m;
    // 2. The top k: the k-th class's keys, a byte a pass from the value key's most significant
    // to the index key's least; every thread scans the counts and keeps the prefix.
    if (select) {
      unsigned long long vmask = 0, imask = 0;
      long long rest = top_k;
      for (int p = 0; p < vbytes + ibytes; p++) {
        int* h = hist + (p % 3) * 256;
        hist[((p + 1) % 3) * 256 + tid] = 0;
        bool value = p < vbytes;
        int shift = value ? 8 * (vbytes - 1 - p) : 8 * (ibytes - 1 - (p - vbytes));
        for (long long i = lo; i < hi; i++) {
          unsigned long long vk = gc_value_key(s.x[i]), ik = (unsigned long long)(classes - 1 - i);
          if ((vk & vmask) != s.vp || (!value && (ik & imask) != s.ip)) continue;
          atomicAdd(h + (int)(((value ? vk : ik) >> shift) & 255), 1);
        }
        __syncthreads();
        long long above = 0;
        int d = 255;
        for (; d > 0 && above + h[d] < rest; d--) above += h[d];
        rest -= above;
        if (value) {
          s.vp |= (unsigned long long)d << shift;
          vmask |= 255ull << shift;
        } else {
          s.ip |= (unsigned long long)d << shift;
          imask |= 255ull << shift;
        }
      }
    }
    // 3. The chunk sums.
    double sum = 0.0;
    if (temperature > 0 && first >= 0) {
      for (long long i = lo; i < hi; i++) sum = __dadd_rn(sum, s.weight(i));
    }
    part[tid] = sum;
    __syncthreads();
    // 4. The draw.
    if (tid == 0) {
      long long id = first < 0 ? 0 : first;
      if (temperature > 0 && first >= 0) {
        double total = 0.0;
        for (int j = 0; j < GC_SAMPLE_CHUNKS; j++) total = __dadd_rn(total, part[j]);
        double t = __dmul_rn(gc_sample_uniform(seed, counter + (unsigned long long)row), total);
        double before = 0.0;
        id = -1;
        for (int j = 0; j < GC_SAMPLE_CHUNKS && id < 0; j++) {
          double after = __dadd_rn(before, part[j]);
          if (t < after) {
            long long a = gc_min((long long)j * size, classes), b = gc_min(a + size, classes);
            long long last = -1;
            double run = before;
            for (long long i = a; i < b; i++) {
              double w = s.weight(i);
              if (w > 0) last = i;
              run = __dadd_rn(run, w);
              if (t < run) {
                id = i;
                break;
              }
            }
            if (id < 0) id = last;
            break;
          }
          before = after;
        }
        // u·W rounded up to W: the last class of positive weight.
        for (int j = GC_SAMPLE_CHUNKS - 1; id < 0 && j >= 0; j--) {
          if (part[j] > 0) {
            long long a = gc_min((long long)j * size, classes), b = gc_min(a + size, classes);
            for (long long i = b - 1; id < 0 && i >= a; i--) {
              if (s.weight(i) > 0) id = i;
            }
          }
        }
        if (id < 0) id = first;  // not reached: the first largest class weighs 1
      }
      ids[row] = (int)id;
      if (tokens) tokens[row] = (int)id;
    }
  }
}

#define GC_SAMPLE(T, S)                                                                       \
  extern "C" __global__ void gc_sample_##S(const T* logits, int* ids, int* tokens,            \
                                           long long n, long long classes,                    \
                                           double temperature, long long top_k,               \
                                           unsigned long long seed,                           \
                                           unsigned long long counter,                        \
                                           const unsigned long long* counter_at) {            \
    GC_SHARED(double, mx, GC_SAMPLE_CHUNKS);                                                  \
    if (counter_at) counter += *counter_at;                                                   \
    GC_SHARED(int, mi, GC_SAMPLE_CHUNKS);                                                     \
    GC_SHARED(int, hist, 3 * 256);                                                            \
    GC_SHARED(double, part, GC_SAMPLE_CHUNKS);                                                \
    sample(logits, ids, tokens, n, classes, temperature, top_k, seed, counter, mx, mi, hist,  \
           part);                                                                             \
  }

GC_SAMPLE(float, f32)
GC_SAMPLE(double, f64)
