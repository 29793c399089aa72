// The pointwise parts of the LSTM and GRU time steps (device.LSTMCell,
// LSTMCellGrad, GRUCell, GRUCellGrad): one thread per element (b, j) of
// the [batch, hidden] state, reading the gates of that element from
// [batch, G·hidden] rows. Consecutive threads take consecutive j, so every
// load and store is coalesced. Each thread reads all it needs before it
// writes, which is what makes the documented aliasing (act = pre,
// dpre = act, dcprev = dc, h = hprev) safe.
#include "common.cuh"

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
    T i = gc_sigmoid(u[0]), f = gc_sigmoid(u[1]), gg = gc_tanh(u[2]), og = gc_sigmoid(u[3]);
    T cn = f * cprev[e] + i * gg;
    c[e] = cn;
    h[e] = og * gc_tanh(cn);
    if (act) {
      act[o] = i;
      act[o + hidden] = f;
      act[o + 2 * hidden] = gg;
      act[o + 3 * hidden] = og;
    }
  }
}

template <typename T>
__device__ void lstm_cell_grad(const T* act, const T* cprev, const T* c, const T* dh,
                               const T* dc, T* dpre, T* dcprev, long long batch,
                               long long hidden) {
  GC_FOR(e, batch * hidden) {
    long long b = e / hidden, j = e - b * hidden;
    long long o = b * 4 * hidden + j;
    T i = act[o], f = act[o + hidden], g = act[o + 2 * hidden], og = act[o + 3 * hidden];
    T tc = gc_tanh(c[e]);
    T dhe = dh[e], cp = cprev[e];
    T dcT = dc[e] + dhe * og * (T(1) - tc * tc);
    dpre[o] = dcT * g * (i * (T(1) - i));
    dpre[o + hidden] = dcT * cp * (f * (T(1) - f));
    dpre[o + 2 * hidden] = dcT * i * (T(1) - g * g);
    dpre[o + 3 * hidden] = dhe * tc * (og * (T(1) - og));
    dcprev[e] = dcT * f;
  }
}

template <typename T>
__device__ void gru_cell(const T* xpre, const T* hpre, const T* bih, const T* bhh,
                         const T* hprev, T* h, T* act, long long batch, long long hidden) {
  GC_FOR(e, batch * hidden) {
    long long b = e / hidden, j = e - b * hidden;
    long long o = b * 3 * hidden + j;
    T r = gc_sigmoid((xpre[o] + hpre[o]) + (gc_opt(bih, j) + gc_opt(bhh, j)));
    T z = gc_sigmoid((xpre[o + hidden] + hpre[o + hidden]) +
                     (gc_opt(bih, hidden + j) + gc_opt(bhh, hidden + j)));
    T hn = hpre[o + 2 * hidden] + gc_opt(bhh, 2 * hidden + j);
    T n = gc_tanh((xpre[o + 2 * hidden] + gc_opt(bih, 2 * hidden + j)) + r * hn);
    T hp = hprev[e];
    h[e] = (T(1) - z) * n + z * hp;
    if (act) {
      long long a = b * 4 * hidden + j;
      act[a] = r;
      act[a + hidden] = z;
      act[a + 2 * hidden] = n;
      act[a + 3 * hidden] = hn;
    }
  }
}

template <typename T>
__device__ void gru_cell_grad(const T* act, const T* hprev, const T* dh, T* dxpre,
                              T* dhpre, T* dhprev, long long accumulate, long long batch,
                              long long hidden) {
  GC_FOR(e, batch * hidden) {
    long long b = e / hidden, j = e - b * hidden;
    long long a = b * 4 * hidden + j, o = b * 3 * hidden + j;
    T r = act[a], z = act[a + hidden], n = act[a + 2 * hidden], hn = act[a + 3 * hidden];
    T d = dh[e], hp = hprev[e];
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
  }

GC_CELLS(float, f32)
GC_CELLS(double, f64)
