// The pointwise parts of the LSTM and GRU time steps (device.LSTMCell,
// LSTMCellGrad, GRUCell, GRUCellGrad): one thread per element (b, j) of
// the [batch, hidden] state, reading the gates of that element from
// [batch, G·hidden] rows. Consecutive threads take consecutive j, so every
// load and store is coalesced. Each thread reads all it needs before it
// writes, which is what makes the documented aliasing (act = pre,
// dpre = act, dcprev = dc, h = hprev) safe.
#include "common.cuh"

// lstm_point is the LSTM cell on one element (b, j) from its four gates'
// pre-activations u (biases added) and its previous cell state cp: c, h
// and, when act is given, the activated gates at o, o + hidden, ... . It
// is the one statement of the cell that gc_lstm_cell and the fused kernel
// share, so that their results are the same bits.
template <typename T>
__device__ __forceinline__ void lstm_point(const T* u, T cp, T* c, T* h, T* act, long long e,
                                           long long o, long long hidden) {
  T i = gc_sigmoid(u[0]), f = gc_sigmoid(u[1]), gg = gc_tanh(u[2]), og = gc_sigmoid(u[3]);
  T cn = f * cp + i * gg;
  c[e] = cn;
  h[e] = og * gc_tanh(cn);
  if (act) {
    act[o] = i;
    act[o + hidden] = f;
    act[o + 2 * hidden] = gg;
    act[o + 3 * hidden] = og;
  }
}

// gru_point is the GRU cell on one element (b, j), lstm_point's
// counterpart: x* and h* are the input's and the recurrent product's
// pre-activations of the gates r, z, n (without biases), hp the previous
// h; act, when given, gets r, z, n and the n gate's recurrent part at a,
// a + hidden, ... .
template <typename T>
__device__ __forceinline__ void gru_point(T xr, T xz, T xn, T hr, T hz, T hh, const T* bih,
                                          const T* bhh, long long j, long long hidden, T hp,
                                          T* h, T* act, long long e, long long a) {
  T r = gc_sigmoid((xr + hr) + (gc_opt(bih, j) + gc_opt(bhh, j)));
  T z = gc_sigmoid((xz + hz) + (gc_opt(bih, hidden + j) + gc_opt(bhh, hidden + j)));
  T hn = hh + gc_opt(bhh, 2 * hidden + j);
  T n = gc_tanh((xn + gc_opt(bih, 2 * hidden + j)) + r * hn);
  h[e] = (T(1) - z) * n + z * hp;
  if (act) {
    act[a] = r;
    act[a + hidden] = z;
    act[a + 2 * hidden] = n;
    act[a + 3 * hidden] = hn;
  }
}

// lstm_grad_point is the LSTM cell's gradient on one element (b, j) from
// dhe, the whole gradient with respect to its h, the one statement that
// gc_lstm_cell_grad and the fused kernel share, as lstm_point is. It
// reads act, cprev, c and dc before it writes dpre and dcprev, which may
// be act and dc.
template <typename T>
__device__ __forceinline__ void lstm_grad_point(const T* act, const T* cprev, const T* c, T dhe,
                                                const T* dc, T* dpre, T* dcprev, long long e,
                                                long long o, long long hidden) {
  T i = act[o], f = act[o + hidden], g = act[o + 2 * hidden], og = act[o + 3 * hidden];
  T tc = gc_tanh(c[e]);
  T cp = cprev[e];
  T dcT = dc[e] + dhe * og * (T(1) - tc * tc);
  dpre[o] = dcT * g * (i * (T(1) - i));
  dpre[o + hidden] = dcT * cp * (f * (T(1) - f));
  dpre[o + 2 * hidden] = dcT * i * (T(1) - g * g);
  dpre[o + 3 * hidden] = dhe * tc * (og * (T(1) - og));
  dcprev[e] = dcT * f;
}

// gru_grad_point is the GRU cell's gradient on one element (b, j) from d,
// the whole gradient with respect to its h, lstm_grad_point's counterpart
// (a and o index act's and the pre-activations' rows).
template <typename T>
__device__ __forceinline__ void gru_grad_point(const T* act, const T* hprev, T d, T* dxpre,
                                               T* dhpre, T* dhprev, long long accumulate,
                                               long long e, long long a, long long o,
                                               long long hidden) {
  T r = act[a], z = act[a + hidden], n = act[a + 2 * hidden], hn = act[a + 3 * hidden];
  T hp = hprev[e];
  T dz = d * (hp - n) * (z * (T(1) - z));
  T dn = d * (T(1) - z) * (T(1) - n * n);
  T dr = dn * hn * (r * (T(1) - r));
  dxpre[o] = dr;
  dxpre[o + hidden] = dz;
  dxpre[o + 2 * hidden] = dn;
  dhpre[o] = dr;
  dhpre[o + hidden] = dz;
  dhpre[o + 2 * hidden] = dn * r;
  T direct = d * z;
  dhprev[e] = accumulate ? dhprev[e] + direct : direct;
}

template <typename T>
__device__ void lstm_cell(const T* pre, const T* bih, const T* bhh, const T* cprev,
                          T* c, T* h, T* act, long long batch, long long hidden) {
  GC_FOR(e, batch * hidden) {
    long long b = e / hidden, j = e - b * hidden;
    long long o = b * 4 * hidden + j;
    T u[4];
    for (int g = 0; g < 4; g++) {
      long long k = g * hidden + j;
      u[g] = pre[o + g * hidden] + (gc_opt(bih, k) + gc_opt(bhh, k));
    }
    lstm_point(u, cprev[e], c, h, act, e, o, hidden);
  }
}

template <typename T>
__device__ void lstm_cell_grad(const T* act, const T* cprev, const T* c, const T* dh,
                               const T* dc, T* dpre, T* dcprev, long long batch,
                               long long hidden) {
  GC_FOR(e, batch * hidden) {
    long long b = e / hidden, j = e - b * hidden;
    lstm_grad_point(act, cprev, c, dh[e], dc, dpre, dcprev, e, b * 4 * hidden + j, hidden);
  }
}

template <typename T>
__device__ void gru_cell(const T* xpre, const T* hpre, const T* bih, const T* bhh,
                         const T* hprev, T* h, T* act, long long batch, long long hidden) {
  GC_FOR(e, batch * hidden) {
    long long b = e / hidden, j = e - b * hidden;
    long long o = b * 3 * hidden + j;
    gru_point(xpre[o], xpre[o + hidden], xpre[o + 2 * hidden], hpre[o], hpre[o + hidden],
              hpre[o + 2 * hidden], bih, bhh, j, hidden, hprev[e], h, act, e, b * 4 * hidden + j);
  }
}

template <typename T>
__device__ void gru_cell_grad(const T* act, const T* hprev, const T* dh, T* dxpre,
                              T* dhpre, T* dhprev, long long accumulate, long long batch,
                              long long hidden) {
  GC_FOR(e, batch * hidden) {
    long long b = e / hidden, j = e - b * hidden;
    gru_grad_point(act, hprev, dh[e], dxpre, dhpre, dhprev, accumulate, e, b * 4 * hidden + j,
                   b * 3 * hidden + j, hidden);
  }
}

// The fused recurrent step (device.LSTMCell and GRUCell given their
// recurrent product): the step's GEMM, hprev·Wᵀ, and the cell in one
// launch, for small hidden sizes, where the two launches of a GEMM and a
// cell cost more than their arithmetic. blockDim = (J, B) with J·B =
// GC_FUSE_THREADS, J = 32 hidden units, or 16 or 8 below that many (more
// batch rows then, so no thread of a small layer idles: cuda/launch.go's
// fuseTile), gridDim = (ceil(hidden/J), ceil(batch/B)): thread (tx, ty)
// of block (bx, by) owns element (b, j) = (by·B + ty, bx·J + tx) and keeps
// the G dot products of its gates in registers, so the cell runs on them
// right after the last product. The block walks k in chunks of GC_FUSE_K,
// staging its B rows of hprev and its G·J rows of W (gate g's rows
// g·hidden + j) through shared memory; W's rows are padded by one element
// so that a warp, 32 threads of consecutive j, reads 32 different banks.
// Rows past batch are staged as zeros and not written.
//
// Each dot product is one accumulator in T summed in order of k, from 0
// (zero terms past hidden add nothing), whatever the launch: the results
// depend on the shape only, the same on every run. They differ from
// cuBLAS's, which sums in an order of its own, only by rounding.
#define GC_FUSE_THREADS 128
#define GC_FUSE_JMAX 32
#define GC_FUSE_BMAX 16
#define GC_FUSE_K 32

// rec_product sets acc[g] to Σ_k hprev[b·hidden + k]·w[(g·hidden + j)·hidden + k]
// for the calling thread's element (b, j) of tile (bx, by) (a launch's
// block, or one of the tiles a walk's block takes in turn); every thread
// of the block calls it. hprev is read from L2 (gc_ld_l2): in a walk other
// blocks wrote it, since the block last read that memory.
template <typename T, int G>
__device__ void rec_product(const T* hprev, const T* w, long long batch, long long hidden,
                            T* acc, long long bx, long long by) {
  GC_SHARED(T, hs, GC_FUSE_BMAX * GC_FUSE_K);
  GC_SHARED(T, ws, G * GC_FUSE_JMAX * (GC_FUSE_K + 1));
  const int tj = blockDim.x, tb = blockDim.y, threads = tj * tb;
  int tx = threadIdx.x, ty = threadIdx.y, tid = ty * tj + tx;
  long long j0 = bx * tj, b0 = by * tb;
  for (int g = 0; g < G; g++) acc[g] = T(0);
  // The block's units past hidden, and a last chunk's k past it, are
  // neither staged nor summed: they would add zeros (acc starts at +0, so
  // not even a zero's sign changes), and at a hidden size below the tile
  // they are most of it. jn and kn are the same for every thread of the
  // block, so the barriers stay block-uniform.
  const int jn = (int)(hidden - j0 < tj ? hidden - j0 : tj);
  for (long long k0 = 0; k0 < hidden; k0 += GC_FUSE_K) {
    const int kn = (int)(hidden - k0 < GC_FUSE_K ? hidden - k0 : GC_FUSE_K);
    // Consecutive threads load consecutive k of a row: coalesced.
    for (int i = tid; i < tb * kn; i += threads) {
      long long b = b0 + i / kn;
      int kk = i % kn;
      hs[(i / kn) * GC_FUSE_K + kk] = b < batch ? gc_ld_l2(hprev + b * hidden + k0 + kk) : T(0);
    }
    for (int i = tid; i < G * jn * kn; i += threads) {
      int row = i / kn, kk = i % kn, g = row / jn, jj = row % jn;
      ws[(g * tj + jj) * (GC_FUSE_K + 1) + kk] = w[(g * hidden + j0 + jj) * hidden + k0 + kk];
    }
    __syncthreads();
    if (tx < jn) {
      for (int kk = 0; kk < kn; kk++) {
        T x = hs[ty * GC_FUSE_K + kk];
        for (int g = 0; g < G; g++) acc[g] += x * ws[(g * tj + tx) * (GC_FUSE_K + 1) + kk];
      }
    }
    // The chunk read by every thread before the next one overwrites it.
    __syncthreads();
  }
}

// lstm_cell_fused is lstm_cell on pre + hprev·Wᵀ, which it also leaves in
// pre unless act is pre (the gates replace it there), as the GEMM with
// beta 1 would have. With cell 0 it stops there: the product alone, for a
// step whose h is written over hprev, which gc_lstm_cell then finishes
// with the same operations on the same values, so the two launches give
// the fused one's results to the bit.
template <typename T>
__device__ __forceinline__ void lstm_fused_tail(const T* acc, T* pre, const T* bih, const T* bhh,
                                                const T* cprev, T* c, T* h, T* act,
                                                long long batch, long long hidden, long long cell,
                                                long long bx, long long by) {
  long long b = by * blockDim.y + threadIdx.y;
  long long j = bx * blockDim.x + threadIdx.x;
  if (b >= batch || j >= hidden) return;
  long long e = b * hidden + j, o = b * 4 * hidden + j;
  T p[4], u[4];
  for (int g = 0; g < 4; g++) {
    long long k = g * hidden + j;
    p[g] = acc[g] + pre[o + g * hidden];
    u[g] = p[g] + (gc_opt(bih, k) + gc_opt(bhh, k));
  }
  if (!cell) {
    for (int g = 0; g < 4; g++) pre[o + g * hidden] = p[g];
    return;
  }
  if (act != pre)
    for (int g = 0; g < 4; g++) pre[o + g * hidden] = p[g];
  lstm_point(u, cprev[e], c, h, act, e, o, hidden);
}

template <typename T>
__device__ void lstm_cell_fused(const T* hprev, const T* w, T* pre, const T* bih,
                                const T* bhh, const T* cprev, T* c, T* h, T* act,
                                long long batch, long long hidden, long long cell, long long bx,
                                long long by) {
  T acc[4];
  rec_product<T, 4>(hprev, w, batch, hidden, acc, bx, by);
  lstm_fused_tail(acc, pre, bih, bhh, cprev, c, h, act, batch, hidden, cell, bx, by);
}

// gru_cell_fused writes hpre = hprev·Wᵀ (the GEMM with beta 0), then is
// gru_cell on it; with cell 0 it stops after the product, as
// lstm_cell_fused.
template <typename T>
__device__ __forceinline__ void gru_fused_tail(const T* acc, const T* hprev, const T* xpre,
                                               T* hpre, const T* bih, const T* bhh, T* h, T* act,
                                               long long batch, long long hidden, long long cell,
                                               long long bx, long long by) {
  long long b = by * blockDim.y + threadIdx.y;
  long long j = bx * blockDim.x + threadIdx.x;
  if (b >= batch || j >= hidden) return;
  long long e = b * hidden + j, o = b * 3 * hidden + j;
  for (int g = 0; g < 3; g++) hpre[o + g * hidden] = acc[g];
  if (!cell) return;
  gru_point(xpre[o], xpre[o + hidden], xpre[o + 2 * hidden], acc[0], acc[1], acc[2], bih, bhh, j,
            hidden, hprev[e], h, act, e, b * 4 * hidden + j);
}

template <typename T>
__device__ void gru_cell_fused(const T* hprev, const T* w, const T* xpre, T* hpre,
                               const T* bih, const T* bhh, T* h, T* act, long long batch,
                               long long hidden, long long cell, long long bx, long long by) {
  T acc[3];
  rec_product<T, 3>(hprev, w, batch, hidden, acc, bx, by);
  gru_fused_tail(acc, hprev, xpre, hpre, bih, bhh, h, act, batch, hidden, cell, bx, by);
}

// The persistent walks (device.LSTMWalk and GRUWalk, cuda.Config.
// WalkCellsUpTo): a layer's whole walk over its steps in one launch, with
// a grid-wide barrier (gc_grid_sync) between two steps, where the next
// step's products need every block's h. Each block keeps its slice of W_hh
// in shared memory from the first step to the last, staged once: the G·J
// rows of its J units for the walks, the J columns of every row for the
// walks back, in the block's dynamic shared memory, which the launch sizes
// to the slice (G·J·walk_stride elements for the walks, G·hidden rounded
// up to whole vectors, times J, for the walks back; above 48 KiB with the
// function opted in). blockDim = (J, B), J·B = GC_FUSE_THREADS, J one
// of the fused kernels' tile (fuseTile) and its halves down to 4 whose
// slice fits the GPU's opt-in shared memory beside the static staging and
// whose tiles of units fit its multiprocessors (the launcher's walkTile):
// thread (tx, ty) of block (bx, by) owns element (b, j) = (by·B + ty,
// bx·J + tx), as in the fused kernels. The grid's x is the tiles of units;
// its y may be fewer than the tiles of rows, a block then taking tiles by,
// by + gridDim.y, ... in turn: every block must be resident at once, or
// the barrier never opens, so the walks are cooperative launches, which
// the driver starts only when all their blocks fit. Each step
// computes what the fused kernel's launch for it would, the same
// operations on the same values: every dot product is one accumulator
// summed in order of k, whichever thread owns it, so the walk's results
// are the per-step launches' to the bit. The block stages the rows of h
// (or of the pre-activation gradients) it reads in chunks of GC_WALK_K,
// padded by a vector (walk_vec: 16 bytes, 4 floats or 2 doubles), and its
// threads read both the staging and the slice of W a vector at a time,
// consecutive k, adding them into their accumulators in order of k (a
// scalar tail where a chunk's k are not a whole number of vectors): at
// hidden 256, 8 units a block, a warp's vector of each gate's W is one
// shared-memory wavefront for 4 multiply-adds, where scalar loads took 4.
// Rows of W lie walk_stride apart, an odd number of vectors, so that the
// rows a warp reads at once fall in different banks. Each chunk is fetched
// from L2 into registers while the one before it is summed (walk_fetch).
// c goes from step to step in cs (every step's, in time order) or, without
// it, in clast, each element written and read again by the thread that
// owns it; h in hs, read by every block after the barrier, from L2.
// With lengths (rows: each step's running rows, a prefix of the batch)
// a step covers its rows only, as the per-step launch given that batch,
// and leaves the others as they were.
#define GC_WALK_BMAX 32
#define GC_WALK_K 32

// walk_vec<T> is the walks' vector of T, 16 bytes: n elements.
template <typename T> struct walk_vec;
template <> struct walk_vec<float> {
  typedef float4 type;
  static constexpr int n = 4;
};
template <> struct walk_vec<double> {
  typedef double2 type;
  static constexpr int n = 2;
};

// walk_load copies the vector at p (16-byte aligned) into x.
template <typename T>
__device__ __forceinline__ void walk_load(T* x, const T* p) {
  *reinterpret_cast<typename walk_vec<T>::type*>(x) =
      *reinterpret_cast<const typename walk_vec<T>::type*>(p);
}

// walk_pad is the staging's row: GC_WALK_K elements and a vector's
// padding, an odd number of vectors.
template <typename T> __device__ __forceinline__ int walk_pad() {
  return GC_WALK_K + walk_vec<T>::n;
}

// GC_WALK_CARRY is the most elements of a staged chunk one thread
// carries from L2 to the staging (walk_fetch, walk_put): GC_WALK_BMAX
// rows of GC_WALK_K over the block's GC_FUSE_THREADS. Thread tid carries
// column tid % GC_WALK_K of rows tid / GC_WALK_K + q·GC_WALK_ROWS.
#define GC_WALK_ROWS (GC_FUSE_THREADS / GC_WALK_K)
#define GC_WALK_CARRY (GC_WALK_BMAX / GC_WALK_ROWS)

// walk_chunk is the length of the chunk of n elements that starts at k0:
// GC_WALK_K, or what is left.
__device__ __forceinline__ int walk_chunk(long long n, long long k0) {
  return (int)(n - k0 < GC_WALK_K ? n - k0 : GC_WALK_K);
}

// walk_rows is the rows step t of a walk runs: rows[t] with lengths (the
// sequences still running, a prefix of the batch sorted longest first),
// else batch. Every thread of the grid reads the same count, so the tiles
// a block takes at the step, and its barriers, are uniform.
__device__ __forceinline__ long long walk_rows(const int* rows, long long batch, long long t) {
  return rows ? (long long)rows[t] : batch;
}

// walk_fetch loads the thread's part of a chunk, rows [b0, b0 + rows) by
// columns [k0, k0 + kn) of src (rows ld apart), into carry; rows at or
// past nrows read as zero. The loads are issued together and waited for
// at the first use of carry, so a chunk fetched before the product of
// the one before is summed arrives while it is.
template <typename T>
__device__ __forceinline__ void walk_fetch(T* carry, const T* src, long long ld, long long b0,
                                           int rows, long long nrows, long long k0, int kn) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, col = tid % GC_WALK_K;
  const int row = tid / GC_WALK_K;
  if (col >= kn) return;
  const T* p = src + (b0 + row) * ld + k0 + col;
#pragma unroll
  for (int q = 0; q < GC_WALK_CARRY; q++) {
    const int r = row + q * GC_WALK_ROWS;
    if (r < rows) carry[q] = b0 + r < nrows ? gc_ld_l2(p + q * GC_WALK_ROWS * ld) : T(0);
  }
}

// walk_put stores what walk_fetch carried into the staging st, row r at
// r·walk_pad.
template <typename T>
__device__ __forceinline__ void walk_put(const T* carry, T* st, int rows, int kn) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, col = tid % GC_WALK_K;
  const int row = tid / GC_WALK_K;
  if (col >= kn) return;
#pragma unroll
  for (int q = 0; q < GC_WALK_CARRY; q++) {
    const int r = row + q * GC_WALK_ROWS;
    if (r < rows) st[r * walk_pad<T>() + col] = carry[q];
  }
}

// walk_stride is the distance between two rows of a walk's slice of W:
// hidden rounded up to whole vectors, and a vector more where that is an
// even number of them.
template <typename T> __device__ __forceinline__ long long walk_stride(long long hidden) {
  const long long v = walk_vec<T>::n, n = (hidden + v - 1) / v;
  return (n % 2 ? n : n + 1) * v;
}

// walk_stage_rows copies the block's rows of w, [G·hidden, hidden] (gate
// g's rows g·hidden + j0 + jj for its units j0 + jj below hidden), into
// wr, row g·J + jj at (g·J + jj)·walk_stride (the padding past hidden is
// never read). No barrier of its own: the first product reads wr only
// after the barrier that follows staging its first chunk of h.
template <typename T, int G>
__device__ void walk_stage_rows(const T* w, T* wr, long long hidden) {
  const int tj = blockDim.x, threads = tj * blockDim.y, tid = threadIdx.y * tj + threadIdx.x;
  const long long j0 = (long long)blockIdx.x * tj, stride = walk_stride<T>(hidden);
  const int jn = (int)(hidden - j0 < tj ? hidden - j0 : tj);
  // Consecutive threads copy consecutive k of a row: coalesced.
  for (long long i = tid; i < G * jn * hidden; i += threads) {
    long long row = i / hidden, k = i - row * hidden;
    int g = (int)(row / jn), jj = (int)(row % jn);
    wr[(g * tj + jj) * stride + k] = w[(g * hidden + j0 + jj) * hidden + k];
  }
}

// walk_product is rec_product with the block's rows of W in wr
// (walk_stage_rows) and hs the staging of GC_WALK_BMAX rows of h
// (walk_pad apart): the same sums, in the same order, read a vector of k
// at a time. Each chunk of h is fetched from L2 while the one before is
// summed (walk_fetch), so that a step waits on L2 once, not once a chunk.
template <typename T, int G>
__device__ void walk_product(const T* hprev, const T* wr, T* hs, long long batch,
                             long long hidden, T* acc, long long by) {
  constexpr int V = walk_vec<T>::n;
  const int tj = blockDim.x, tb = blockDim.y, pad = walk_pad<T>();
  const int tx = threadIdx.x, ty = threadIdx.y;
  long long j0 = (long long)blockIdx.x * tj, b0 = by * tb, stride = walk_stride<T>(hidden);
  for (int g = 0; g < G; g++) acc[g] = T(0);
  const int jn = (int)(hidden - j0 < tj ? hidden - j0 : tj);
  T carry[GC_WALK_CARRY];
  walk_fetch(carry, hprev, hidden, b0, tb, batch, 0, walk_chunk(hidden, 0));
  for (long long k0 = 0; k0 < hidden; k0 += GC_WALK_K) {
    const int kn = walk_chunk(hidden, k0), kv = kn - kn % V;
    walk_put(carry, hs, tb, kn);
    __syncthreads();
    const long long k1 = k0 + GC_WALK_K;
    if (k1 < hidden) walk_fetch(carry, hprev, hidden, b0, tb, batch, k1, walk_chunk(hidden, k1));
    if (tx < jn) {
      const T* x = hs + ty * pad;
      const T* wk = wr + tx * stride + k0;
      for (int kk = 0; kk < kv; kk += V) {
        T xv[V];
        walk_load(xv, x + kk);
        for (int g = 0; g < G; g++) {
          T wv[V];
          walk_load(wv, wk + g * tj * stride + kk);
#pragma unroll
          for (int v = 0; v < V; v++) acc[g] += xv[v] * wv[v];
        }
      }
      for (int kk = kv; kk < kn; kk++) {
        T xv = x[kk];
        for (int g = 0; g < G; g++) acc[g] += xv * wk[g * tj * stride + kk];
      }
    }
    // The chunk read by every thread before the next one overwrites it.
    __syncthreads();
  }
}

template <typename T>
__device__ void lstm_walk(const T* h0, const T* c0, const T* w, T* pre, const T* bih,
                          const T* bhh, T* hs, T* cs, T* clast, T* act, const int* rows,
                          long long steps, long long batch, long long hidden, long long reverse,
                          unsigned* bar) {
  GC_SHARED_DYNAMIC(T, wr);
  GC_SHARED(T, stage, GC_WALK_BMAX * (GC_WALK_K + walk_vec<T>::n));
  walk_stage_rows<T, 4>(w, wr, hidden);
  const long long bh = batch * hidden, bx = blockIdx.x;
  for (long long i = 0; i < steps; i++) {
    long long t = reverse ? steps - 1 - i : i, prev = reverse ? t + 1 : t - 1;
    const long long nb = walk_rows(rows, batch, t), tiles = (nb + blockDim.y - 1) / blockDim.y;
    const T* hp = i == 0 ? h0 : hs + prev * bh;
    const T* cp = i == 0 ? c0 : cs ? cs + prev * bh : clast;
    T* cn = cs ? cs + t * bh : clast;
    T* at = act ? act + t * 4 * bh : nullptr;
    for (long long by = blockIdx.y; by < tiles; by += gridDim.y) {
      T acc[4];
      walk_product<T, 4>(hp, wr, stage, nb, hidden, acc, by);
      lstm_fused_tail(acc, pre + t * 4 * bh, bih, bhh, cp, cn, hs + t * bh, at, nb, hidden, 1LL, bx,
                      by);
    }
    if (i + 1 < steps) gc_grid_sync(bar);
  }
}

// gru_walk is lstm_walk for the GRU: hpre takes each step's recurrent
// product (the last step's stays there), h goes from step to step in hs.
template <typename T>
__device__ void gru_walk(const T* h0, const T* w, const T* xpre, T* hpre, const T* bih,
                         const T* bhh, T* hs, T* act, const int* rows, long long steps,
                         long long batch, long long hidden, long long reverse, unsigned* bar) {
  GC_SHARED_DYNAMIC(T, wr);
  GC_SHARED(T, stage, GC_WALK_BMAX * (GC_WALK_K + walk_vec<T>::n));
  walk_stage_rows<T, 3>(w, wr, hidden);
  const long long bh = batch * hidden, bx = blockIdx.x;
  for (long long i = 0; i < steps; i++) {
    long long t = reverse ? steps - 1 - i : i, prev = reverse ? t + 1 : t - 1;
    const long long nb = walk_rows(rows, batch, t), tiles = (nb + blockDim.y - 1) / blockDim.y;
    const T* hp = i == 0 ? h0 : hs + prev * bh;
    T* at = act ? act + t * 4 * bh : nullptr;
    for (long long by = blockIdx.y; by < tiles; by += gridDim.y) {
      T acc[3];
      walk_product<T, 3>(hp, wr, stage, nb, hidden, acc, by);
      gru_fused_tail(acc, hp, xpre + t * 3 * bh, hpre, bih, bhh, hs + t * bh, at, nb, hidden, 1LL,
                     bx, by);
    }
    if (i + 1 < steps) gc_grid_sync(bar);
  }
}

// The fused recurrent step of the backward (device.LSTMCellGrad and
// GRUCellGrad given the next step's recurrent pre-activation gradient
// dnext and W_hh): dh += dnext·W, the product a separate GEMM would add,
// and the cell gradient in one launch. The product is folded into the
// call that reads it because each of its elements needs a whole row of
// dnext, which the previous launch wrote completely. The launch shape is
// the forward's (fuseTile: blockDim = (J, B), J·B = GC_FUSE_THREADS,
// thread (tx, ty) of block (bx, by) owning element (b, j) = (by·B + ty,
// bx·J + tx)), over max(batch, nbatch) rows: the next step may cover
// fewer rows (nbatch, a forward walk with lengths) or more (a reverse
// walk), and rows past batch get the product only. The thread's dot
// product runs over the G·hidden columns of dnext, k in order, in one
// accumulator of T; the block walks k in chunks of GC_FUSE_GRAD_K,
// staging its rows of dnext (padded by one element, so that the rows a
// warp reads fall in different banks) and the chunk's rows of W, the
// block's J columns, through shared memory. W is [G·hidden, hidden] and
// used as it is (not transposed), so a warp's 32 consecutive j read
// consecutive addresses of a row of W. Each sum depends on the shape
// only, the same on every run, and differs from cuBLAS's by rounding.
#define GC_FUSE_GRAD_K 64

// rec_grad_product returns Σ_k dnext[b·nk + k]·w[k·hidden + j], nk =
// G·hidden, for the calling thread's element (b, j) of tile (bx, by), or
// 0 for b past nbatch or j past hidden; every thread of the block calls
// it. Units past hidden and rows past nbatch are neither staged nor
// summed, and a block wholly past nbatch stages nothing (nb and jn are
// block-uniform, so the barriers are too). dnext is read from L2, as
// rec_product's hprev.
template <typename T, int G>
__device__ T rec_grad_product(const T* dnext, const T* w, long long nbatch, long long hidden,
                              long long bx, long long by) {
  GC_SHARED(T, ds, GC_FUSE_BMAX * (GC_FUSE_GRAD_K + 1));
  GC_SHARED(T, ws, GC_FUSE_GRAD_K * GC_FUSE_JMAX);
  const int tj = blockDim.x, tb = blockDim.y, threads = tj * tb;
  int tx = threadIdx.x, ty = threadIdx.y, tid = ty * tj + tx;
  long long j0 = bx * tj, b0 = by * tb;
  const long long nk = G * hidden;
  const int jn = (int)(hidden - j0 < tj ? hidden - j0 : tj);
  const int nb = (int)(nbatch - b0 <= 0 ? 0 : nbatch - b0 < tb ? nbatch - b0 : tb);
  T acc = T(0);
  if (nb == 0) return acc;
  for (long long k0 = 0; k0 < nk; k0 += GC_FUSE_GRAD_K) {
    const int kn = (int)(nk - k0 < GC_FUSE_GRAD_K ? nk - k0 : GC_FUSE_GRAD_K);
    // Consecutive threads load consecutive k of a row of dnext, and
    // consecutive j of a row of W: coalesced.
    for (int i = tid; i < nb * kn; i += threads) {
      int r = i / kn, kk = i % kn;
      ds[r * (GC_FUSE_GRAD_K + 1) + kk] = gc_ld_l2(dnext + (b0 + r) * nk + k0 + kk);
    }
    for (int i = tid; i < kn * jn; i += threads) {
      int kk = i / jn, jj = i % jn;
      ws[kk * tj + jj] = w[(k0 + kk) * hidden + j0 + jj];
    }
    __syncthreads();
    if (tx < jn && ty < nb) {
      for (int kk = 0; kk < kn; kk++) acc += ds[ty * (GC_FUSE_GRAD_K + 1) + kk] * ws[kk * tj + tx];
    }
    // The chunk read by every thread before the next one overwrites it.
    __syncthreads();
  }
  return acc;
}

// fused_grad_dh adds the product acc into dh at element (b, j) for b
// below nbatch, writing it back as the GEMM with beta 1 would, and sets
// *d to the whole gradient the cell gradient reads; false when the cell
// gradient has nothing to do there (b past batch, j past hidden, or cell
// 0: the product alone, for a call whose dnext or W overlaps an output,
// which the plain kernel then finishes with the same operations on the
// same values, so the two launches give the fused one's results to the
// bit).
template <typename T>
__device__ __forceinline__ bool fused_grad_dh(T acc, T* dh, long long b, long long j,
                                              long long batch, long long nbatch, long long hidden,
                                              long long cell, T* d) {
  if (j >= hidden || (b >= batch && b >= nbatch)) return false;
  long long e = b * hidden + j;
  if (b < nbatch) {
    *d = dh[e] + acc;
    dh[e] = *d;
  } else {
    *d = dh[e];
  }
  return cell && b < batch;
}

template <typename T>
__device__ __forceinline__ void lstm_grad_fused_tail(T acc, const T* act, const T* cprev,
                                                     const T* c, T* dh, const T* dc, T* dpre,
                                                     T* dcprev, long long batch, long long nbatch,
                                                     long long hidden, long long cell,
                                                     long long bx, long long by) {
  long long b = by * blockDim.y + threadIdx.y;
  long long j = bx * blockDim.x + threadIdx.x;
  T d;
  if (!fused_grad_dh(acc, dh, b, j, batch, nbatch, hidden, cell, &d)) return;
  lstm_grad_point(act, cprev, c, d, dc, dpre, dcprev, b * hidden + j, b * 4 * hidden + j, hidden);
}

template <typename T>
__device__ void lstm_cell_grad_fused(const T* dnext, const T* w, const T* act, const T* cprev,
                                     const T* c, T* dh, const T* dc, T* dpre, T* dcprev,
                                     long long batch, long long nbatch, long long hidden,
                                     long long cell, long long bx, long long by) {
  T acc = rec_grad_product<T, 4>(dnext, w, nbatch, hidden, bx, by);
  lstm_grad_fused_tail(acc, act, cprev, c, dh, dc, dpre, dcprev, batch, nbatch, hidden, cell, bx,
                       by);
}

template <typename T>
__device__ __forceinline__ void gru_grad_fused_tail(T acc, const T* act, const T* hprev, T* dh,
                                                    T* dxpre, T* dhpre, T* dhprev,
                                                    long long accumulate, long long batch,
                                                    long long nbatch, long long hidden,
                                                    long long cell, long long bx, long long by) {
  long long b = by * blockDim.y + threadIdx.y;
  long long j = bx * blockDim.x + threadIdx.x;
  T d;
  if (!fused_grad_dh(acc, dh, b, j, batch, nbatch, hidden, cell, &d)) return;
  gru_grad_point(act, hprev, d, dxpre, dhpre, dhprev, accumulate, b * hidden + j,
                 b * 4 * hidden + j, b * 3 * hidden + j, hidden);
}

template <typename T>
__device__ void gru_cell_grad_fused(const T* dnext, const T* w, const T* act, const T* hprev,
                                    T* dh, T* dxpre, T* dhpre, T* dhprev, long long accumulate,
                                    long long batch, long long nbatch, long long hidden,
                                    long long cell, long long bx, long long by) {
  T acc = rec_grad_product<T, 3>(dnext, w, nbatch, hidden, bx, by);
  gru_grad_fused_tail(acc, act, hprev, dh, dxpre, dhpre, dhprev, accumulate, batch, nbatch, hidden,
                      cell, bx, by);
}

// The persistent walks back (device.LSTMGradWalk and GRUGradWalk): the
// walks' counterparts for the backward, launched as the walks are, each
// block with its J columns of W (all G·hidden rows) in shared memory for
// the whole walk (walk_stage_cols). Step i walked back is step t of the
// forward's walk, visited in the opposite order; next is the step walked
// back before it (whose pre-activation gradient's product the step adds
// into its dh), fprev the step the forward visited before t (whose c or h
// the step read). Each step is the fused cell gradient kernel's block on
// each of the block's tiles, or, for a first step given no product (dnext
// NULL), the plain kernel's element: the per-step launches' results to
// the bit. Between two steps the grid barrier: the next step's product
// reads every block's pre-activation gradients (from L2). dc (LSTM) goes
// from step to step in place, each element read and written by the thread
// that owns it, and so does the GRU's direct part of dh, added into the
// slice of the step walked back next.
__device__ __forceinline__ void grad_walk_step(long long steps, long long reverse, long long i,
                                               long long* t, long long* next, long long* fprev) {
  if (reverse) {
    *t = i, *next = i - 1, *fprev = i + 1 < steps ? i + 1 : -1;
  } else {
    *t = steps - 1 - i, *next = steps - i, *fprev = steps - 2 - i;
  }
  if (i == 0) *next = -1;
}

// grad_walk_rows is the rows of step t walked back (nb), those of the
// product it adds (nn: the step walked back before it, next, or nin rows
// of the product given for the first, 0 meaning nb), and its tiles of
// rows: over max(nb, nn) with a product, as the fused cell gradient's
// launch, whose rows past nb take the product only.
__device__ __forceinline__ void grad_walk_rows(const int* rows, long long nin, long long batch,
                                               long long t, long long next, bool product,
                                               long long* nb, long long* nn, long long* tiles) {
  *nb = walk_rows(rows, batch, t);
  *nn = next >= 0 ? walk_rows(rows, batch, next) : nin ? nin : *nb;
  const long long n = product && *nn > *nb ? *nn : *nb;
  *tiles = (n + blockDim.y - 1) / blockDim.y;
}

// walk_col is where walk_stage_cols puts element (k, j0 + jj) of w in
// wr, a vector of k at a time: (k/V)·J·V + jj·V + k%V, so that a thread's
// consecutive k are one vector and a warp's consecutive j read
// consecutive vectors.
template <typename T>
__device__ __forceinline__ long long walk_col(long long k, int jj, int tj) {
  constexpr int V = walk_vec<T>::n;
  return (k / V) * tj * V + jj * V + k % V;
}

// walk_stage_cols copies the block's columns of w, [G·hidden, hidden]
// (its units j0 + jj below hidden), into wr at walk_col. As
// walk_stage_rows, no barrier of its own: the first product's (after its
// first chunk of dnext) comes before any read of wr.
template <typename T, int G>
__device__ void walk_stage_cols(const T* w, T* wr, long long hidden) {
  const int tj = blockDim.x, threads = tj * blockDim.y, tid = threadIdx.y * tj + threadIdx.x;
  const long long j0 = (long long)blockIdx.x * tj;
  const int jn = (int)(hidden - j0 < tj ? hidden - j0 : tj);
  for (long long i = tid; i < G * hidden * jn; i += threads) {
    long long k = i / jn;
    int jj = (int)(i - k * jn);
    wr[walk_col<T>(k, jj, tj)] = w[k * hidden + j0 + jj];
  }
}

// walk_grad_product is rec_grad_product (over nbatch = batch rows) with
// the block's columns of W in wr (walk_stage_cols) and ds the staging of
// GC_WALK_BMAX rows of dnext (walk_pad apart): the same sums, in the same
// order, read a vector of k at a time, each chunk of dnext fetched while
// the one before is summed, as walk_product's h.
template <typename T, int G>
__device__ T walk_grad_product(const T* dnext, const T* wr, T* ds, long long batch,
                               long long hidden, long long by) {
  constexpr int V = walk_vec<T>::n;
  const int tj = blockDim.x, tb = blockDim.y, pad = walk_pad<T>();
  const int tx = threadIdx.x, ty = threadIdx.y;
  long long j0 = (long long)blockIdx.x * tj, b0 = by * tb;
  const long long nk = G * hidden;
  const int jn = (int)(hidden - j0 < tj ? hidden - j0 : tj);
  const int nb = (int)(batch - b0 <= 0 ? 0 : batch - b0 < tb ? batch - b0 : tb);
  T acc = T(0);
  if (nb == 0) return acc;  // block-uniform: no row of the tile has a product
  T carry[GC_WALK_CARRY];
  walk_fetch(carry, dnext, nk, b0, nb, batch, 0, walk_chunk(nk, 0));
  for (long long k0 = 0; k0 < nk; k0 += GC_WALK_K) {
    const int kn = walk_chunk(nk, k0), kv = kn - kn % V;
    walk_put(carry, ds, nb, kn);
    __syncthreads();
    const long long k1 = k0 + GC_WALK_K;
    if (k1 < nk) walk_fetch(carry, dnext, nk, b0, nb, batch, k1, walk_chunk(nk, k1));
    if (tx < jn && ty < nb) {
      const T* d = ds + ty * pad;
      for (int kk = 0; kk < kv; kk += V) {
        T dv[V], wv[V];
        walk_load(dv, d + kk);
        walk_load(wv, wr + walk_col<T>(k0 + kk, tx, tj));
#pragma unroll
        for (int v = 0; v < V; v++) acc += dv[v] * wv[v];
      }
      for (int kk = kv; kk < kn; kk++) acc += d[kk] * wr[walk_col<T>(k0 + kk, tx, tj)];
    }
    // The chunk read by every thread before the next one overwrites it.
    __syncthreads();
  }
  return acc;
}

template <typename T>
__device__ void lstm_grad_walk(T* act, const T* cs, const T* c0, T* dh, T* dc, T* dpre, const T* w,
                               const T* dpre_in, const int* rows, long long nin,
                               long long steps, long long batch, long long hidden,
                               long long reverse, unsigned* bar) {
  GC_SHARED_DYNAMIC(T, wr);
  GC_SHARED(T, stage, GC_WALK_BMAX * (GC_WALK_K + walk_vec<T>::n));
  walk_stage_cols<T, 4>(w, wr, hidden);
  const long long bh = batch * hidden, bx = blockIdx.x;
  for (long long i = 0; i < steps; i++) {
    long long t, next, fprev, nb, nn, tiles;
    grad_walk_step(steps, reverse, i, &t, &next, &fprev);
    const T* dnext = next >= 0 ? dpre + next * 4 * bh : dpre_in;
    grad_walk_rows(rows, nin, batch, t, next, dnext != nullptr, &nb, &nn, &tiles);
    const T* cp = fprev >= 0 ? cs + fprev * bh : c0;
    const T* at = act + t * 4 * bh;
    for (long long by = blockIdx.y; by < tiles; by += gridDim.y) {
      if (dnext) {
        T acc = walk_grad_product<T, 4>(dnext, wr, stage, nn, hidden, by);
        lstm_grad_fused_tail(acc, at, cp, cs + t * bh, dh + t * bh, dc, dpre + t * 4 * bh, dc, nb, nn,
                             hidden, 1LL, bx, by);
        continue;
      }
      long long b = by * blockDim.y + threadIdx.y, j = bx * blockDim.x + threadIdx.x;
      if (b < nb && j < hidden)
        lstm_grad_point(at, cp, cs + t * bh, dh[t * bh + b * hidden + j], dc, dpre + t * 4 * bh, dc,
                        b * hidden + j, b * 4 * hidden + j, hidden);
    }
    if (i + 1 < steps) gc_grid_sync(bar);
  }
}

template <typename T>
__device__ void gru_grad_walk(const T* act, const T* hs, const T* h0, T* dh, T* dh0, T* dxpre,
                              T* dhpre, const T* w, const T* dhpre_in, const int* rows,
                              long long nin, long long steps, long long batch, long long hidden,
                              long long reverse, unsigned* bar) {
  GC_SHARED_DYNAMIC(T, wr);
  GC_SHARED(T, stage, GC_WALK_BMAX * (GC_WALK_K + walk_vec<T>::n));
  walk_stage_cols<T, 3>(w, wr, hidden);
  const long long bh = batch * hidden, bx = blockIdx.x;
  for (long long i = 0; i < steps; i++) {
    long long t, next, fprev, nb, nn, tiles;
    grad_walk_step(steps, reverse, i, &t, &next, &fprev);
    const T* dnext = next >= 0 ? dhpre + next * 3 * bh : dhpre_in;
    grad_walk_rows(rows, nin, batch, t, next, dnext != nullptr, &nb, &nn, &tiles);
    const T* hp = fprev >= 0 ? hs + fprev * bh : h0;
    T* dhp = fprev >= 0 ? dh + fprev * bh : dh0;
    const long long acc = fprev >= 0;
    const T* at = act + t * 4 * bh;
    for (long long by = blockIdx.y; by < tiles; by += gridDim.y) {
      if (dnext) {
        T p = walk_grad_product<T, 3>(dnext, wr, stage, nn, hidden, by);
        gru_grad_fused_tail(p, at, hp, dh + t * bh, dxpre + t * 3 * bh, dhpre + t * 3 * bh, dhp, acc,
                            nb, nn, hidden, 1LL, bx, by);
        continue;
      }
      long long b = by * blockDim.y + threadIdx.y, j = bx * blockDim.x + threadIdx.x;
      if (b < nb && j < hidden)
        gru_grad_point(at, hp, dh[t * bh + b * hidden + j], dxpre + t * 3 * bh, dhpre + t * 3 * bh,
                       dhp, acc, b * hidden + j, b * 4 * hidden + j, b * 3 * hidden + j, hidden);
    }
    if (i + 1 < steps) gc_grid_sync(bar);
  }
}

#define GC_CELLS(T, S)                                                                        \
  extern "C" __global__ void gc_lstm_cell_##S(const T* pre, const T* bih, const T* bhh,       \
                                              const T* cprev, T* c, T* h, T* act,             \
                                              long long batch, long long hidden) {            \
    lstm_cell(pre, bih, bhh, cprev, c, h, act, batch, hidden);                                \
  }                                                                                           \
  extern "C" __global__ void gc_lstm_cell_grad_##S(const T* act, const T* cprev, const T* c,  \
                                                   const T* dh, const T* dc, T* dpre,         \
                                                   T* dcprev, long long batch,                \
                                                   long long hidden) {                        \
    lstm_cell_grad(act, cprev, c, dh, dc, dpre, dcprev, batch, hidden);                       \
  }                                                                                           \
  extern "C" __global__ void gc_gru_cell_##S(const T* xpre, const T* hpre, const T* bih,      \
                                             const T* bhh, const T* hprev, T* h, T* act,      \
                                             long long batch, long long hidden) {             \
    gru_cell(xpre, hpre, bih, bhh, hprev, h, act, batch, hidden);                             \
  }                                                                                           \
  extern "C" __global__ void gc_gru_cell_grad_##S(const T* act, const T* hprev, const T* dh,  \
                                                  T* dxpre, T* dhpre, T* dhprev,              \
                                                  long long accumulate, long long batch,      \
                                                  long long hidden) {                         \
    gru_cell_grad(act, hprev, dh, dxpre, dhpre, dhprev, accumulate, batch, hidden);           \
  }                                                                                           \
  extern "C" __global__ void gc_lstm_cell_fused_##S(                                          \
      const T* hprev, const T* w, T* pre, const T* bih, const T* bhh, const T* cprev, T* c,   \
      T* h, T* act, long long batch, long long hidden, long long cell) {                      \
    lstm_cell_fused(hprev, w, pre, bih, bhh, cprev, c, h, act, batch, hidden, cell,           \
                    (long long)blockIdx.x, (long long)blockIdx.y);                            \
  }                                                                                           \
  extern "C" __global__ void gc_gru_cell_fused_##S(                                           \
      const T* hprev, const T* w, const T* xpre, T* hpre, const T* bih, const T* bhh, T* h,   \
      T* act, long long batch, long long hidden, long long cell) {                            \
    gru_cell_fused(hprev, w, xpre, hpre, bih, bhh, h, act, batch, hidden, cell,               \
                   (long long)blockIdx.x, (long long)blockIdx.y);                             \
  }                                                                                           \
  extern "C" __global__ void gc_lstm_cell_grad_fused_##S(                                     \
      const T* dnext, const T* w, const T* act, const T* cprev, const T* c, T* dh,            \
      const T* dc, T* dpre, T* dcprev, long long batch, long long nbatch, long long hidden,   \
      long long cell) {                                                                       \
    lstm_cell_grad_fused(dnext, w, act, cprev, c, dh, dc, dpre, dcprev, batch, nbatch, hidden, \
                         cell, (long long)blockIdx.x, (long long)blockIdx.y);                 \
  }                                                                                           \
  extern "C" __global__ void gc_gru_cell_grad_fused_##S(                                      \
      const T* dnext, const T* w, const T* act, const T* hprev, T* dh, T* dxpre, T* dhpre,    \
      T* dhprev, long long accumulate, long long batch, long long nbatch, long long hidden,   \
      long long cell) {                                                                       \
    gru_cell_grad_fused(dnext, w, act, hprev, dh, dxpre, dhpre, dhprev, accumulate, batch,    \
                        nbatch, hidden, cell, (long long)blockIdx.x, (long long)blockIdx.y);  \
  }                                                                                           \
  extern "C" __global__ void gc_lstm_walk_##S(                                                \
      const T* h0, const T* c0, const T* w, T* pre, const T* bih, const T* bhh, T* hs, T* cs, \
      T* clast, T* act, const int* rows, long long steps, long long batch, long long hidden,  \
      long long reverse, unsigned* bar) {                                                     \
    lstm_walk(h0, c0, w, pre, bih, bhh, hs, cs, clast, act, rows, steps, batch, hidden,       \
              reverse, bar);                                                                  \
  }                                                                                           \
  extern "C" __global__ void gc_gru_walk_##S(                                                 \
      const T* h0, const T* w, const T* xpre, T* hpre, const T* bih, const T* bhh, T* hs,     \
      T* act, const int* rows, long long steps, long long batch, long long hidden,            \
      long long reverse, unsigned* bar) {                                                     \
    gru_walk(h0, w, xpre, hpre, bih, bhh, hs, act, rows, steps, batch, hidden, reverse, bar); \
  }                                                                                           \
  extern "C" __global__ void gc_lstm_grad_walk_##S(                                           \
      T* act, const T* cs, const T* c0, T* dh, T* dc, T* dpre, const T* w, const T* dpre_in,  \
      const int* rows, long long nin, long long steps, long long batch, long long hidden,     \
      long long reverse, unsigned* bar) {                                                     \
    lstm_grad_walk(act, cs, c0, dh, dc, dpre, w, dpre_in, rows, nin, steps, batch, hidden,    \
                   reverse, bar);                                                             \
  }                                                                                           \
  extern "C" __global__ void gc_gru_grad_walk_##S(                                            \
      const T* act, const T* hs, const T* h0, T* dh, T* dh0, T* dxpre, T* dhpre, const T* w,  \
      const T* dhpre_in, const int* rows, long long nin, long long steps, long long batch,    \
      long long hidden, long long reverse, unsigned* bar) {                                   \
    gru_grad_walk(act, hs, h0, dh, dh0, dxpre, dhpre, w, dhpre_in, rows, nin, steps, batch,   \
                  hidden, reverse, bar);                                                      \
  }

GC_CELLS(float, f32)
GC_CELLS(double, f64)
