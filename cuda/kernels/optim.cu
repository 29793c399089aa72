// Optimizer steps (device.SGD, Adam, RMSprop), PyTorch's single-tensor
// formulas: arithmetic in T, hyperparameters rounded to T, and per-call
// scalars (Adam's bias corrections) computed in double, by the host from
// the arguments or, with a rates buffer (device.Rates: a recorded update
// that serves every step), by the kernel with the host's roundings; and
// the step's verdict on the device (device.StepGuard) that they and
// gc_guarded_copy obey.
#include "common.cuh"

// Products rounded on their own, never contracted into a fused
// multiply-add, so that they round as the host's and the CPU device's do.
__device__ __forceinline__ float gc_mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double gc_mul_rn(double a, double b) { return __dmul_rn(a, b); }

// gc_skip reports whether a step's guard (NULL: none) says to skip it.
__device__ __forceinline__ bool gc_skip(const double* guard) { return guard && guard[1] != 0; }

// The gradient an optimizer step uses: g·coef rounded to T, then clamped
// to [-max, max] when max > 0 (an Axpby and a Clamp's bits).
template <typename T> struct gc_clip {
  T coef, max;
  __device__ gc_clip(const double* guard, double clip)
      : coef(guard ? (T)guard[0] : T(1)), max((T)clip) {}
  __device__ __forceinline__ T operator()(T g) const {
    g = gc_mul_rn(g, coef);
    if (max > T(0)) g = g < -max ? -max : (g > max ? max : g);
    return g;
  }
};

// device.StepGuard, one thread: the step's loss, norm and skip flag into record, its
// verdict into guard. The arithmetic is double, rounded step by step as
// the host's (kern.StepGuard). With slot, record is a ring of records
// records and the step's is record slot[0] mod records.
template <typename T>
__device__ void step_guard(const T* loss, const T* norm_sq, double scale, double clip_norm,
                           double* record, double* guard, const unsigned* status,
                           const double* slot, long long records) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  if (slot) record += 3 * ((unsigned long long)slot[0] % (unsigned long long)records);
  if (*status != 0) guard[1] = 1; // an index error in the step's data
  double l = __dmul_rn((double)loss[0], scale);
  double n = __dmul_rn(sqrt((double)norm_sq[0]), scale);
  record[0] = l;
  record[1] = n;
  if (isnan(l) || isinf(l) || isnan(n) || isinf(n)) guard[1] = 1;
  double coef = scale, r = clip_norm / __dadd_rn(n, 1e-6);
  if (clip_norm > 0 && r < 1) coef = __dmul_rn(coef, r);
  guard[0] = coef;
  record[2] = guard[1];
}

template <typename T>
__device__ void sgd(T* param, const T* grad, T* velocity, long long n, double lr,
                    double momentum, double dampening, double weight_decay, long long nesterov,
                    long long first, const double* guard, double clip, const double* rates) {
  if (gc_skip(guard)) return;
  gc_clip<T> cl(guard, clip);
  if (rates) {
    lr = rates[0];
    first = rates[1] == 1;
  }
  T lrT = (T)lr, wd = (T)weight_decay, mom = (T)momentum, damp = (T)(1.0 - dampening);
  GC_FOR(i, n) {
    T p = param[i], g = cl(grad[i]);
    if (weight_decay != 0) g += wd * p;
    if (momentum != 0) {
      T v = first ? g : mom * velocity[i] + damp * g;
      velocity[i] = v;
      g = nesterov ? g + mom * v : v;
    }
    param[i] = p - lrT * g;
  }
}

template <typename T>
__device__ void adam(T* param, const T* grad, T* m, T* v, long long n, double step_size,
                     double bc2_sqrt, double beta1, double beta2, double eps,
                     double weight_decay, double decay, long long coupled, long long shrink,
                     const double* guard, double clip, const double* rates) {
  if (gc_skip(guard)) return;
  gc_clip<T> cl(guard, clip);
  if (rates) {
    // The host's lr/(1-beta1^t), sqrt(1-beta2^t) and 1-lr·weight_decay,
    // each operation rounded on its own.
    step_size = __ddiv_rn(rates[0], __dsub_rn(1.0, rates[2]));
    bc2_sqrt = sqrt(__dsub_rn(1.0, rates[3]));
    decay = __dsub_rn(1.0, __dmul_rn(rates[0], weight_decay));
  }
  T ss = (T)step_size, bc2 = (T)bc2_sqrt, b1 = (T)beta1, b1c = (T)(1.0 - beta1),
    b2 = (T)beta2, b2c = (T)(1.0 - beta2), e = (T)eps, wd = (T)weight_decay, dec = (T)decay;
  GC_FOR(i, n) {
    T p = param[i], g = cl(grad[i]);
    if (coupled) g += wd * p;
    if (shrink) p *= dec;
    T mi = b1 * m[i] + b1c * g;
    T vi = b2 * v[i] + b2c * g * g;
    m[i] = mi;
    v[i] = vi;
    T denom = gc_sqrt(vi) / bc2 + e;
    param[i] = p - ss * mi / denom;
  }
}

template <typename T>
__device__ void rmsprop(T* param, const T* grad, T* square_avg, T* grad_avg, T* velocity,
                        long long n, double lr, double alpha, double eps, double weight_decay,
                        double momentum, long long centered, const double* guard,
                        double clip, const double* rates) {
  if (gc_skip(guard)) return;
  gc_clip<T> cl(guard, clip);
  if (rates) lr = rates[0];
  T lrT = (T)lr, a = (T)alpha, ac = (T)(1.0 - alpha), e = (T)eps, wd = (T)weight_decay,
    mom = (T)momentum;
  GC_FOR(i, n) {
    T p = param[i], g = cl(grad[i]);
    if (weight_decay != 0) g += wd * p;
    T sq = a * square_avg[i] + ac * g * g;
    square_avg[i] = sq;
    if (centered) {
      T ga = a * grad_avg[i] + ac * g;
      grad_avg[i] = ga;
      sq -= ga * ga;
    }
    T avg = gc_sqrt(sq) + e;
    if (momentum != 0) {
      T vel = mom * velocity[i] + g / avg;
      velocity[i] = vel;
      param[i] = p - lrT * vel;
    } else {
      param[i] = p - lrT * g / avg;
    }
  }
}

#define GC_OPTIM(T, S)                                                                        \
  extern "C" __global__ void gc_sgd_##S(T* param, const T* grad, T* velocity, long long n,    \
                                        double lr, double momentum, double dampening,         \
                                        double weight_decay, long long nesterov,              \
                                        long long first, const double* guard, double clip,    \
                                        const double* rates) {                                \
    sgd(param, grad, velocity, n, lr, momentum, dampening, weight_decay, nesterov, first,     \
        guard, clip, rates);                                                                  \
  }                                                                                           \
  extern "C" __global__ void gc_adam_##S(T* param, const T* grad, T* m, T* v, long long n,    \
                                         double step_size, double bc2_sqrt, double beta1,     \
                                         double beta2, double eps, double weight_decay,       \
                                         double decay, long long coupled, long long shrink,   \
                                         const double* guard, double clip,                    \
                                         const double* rates) {                               \
    adam(param, grad, m, v, n, step_size, bc2_sqrt, beta1, beta2, eps, weight_decay, decay,   \
         coupled, shrink, guard, clip, rates);                                                \
  }                                                                                           \
  extern "C" __global__ void gc_rmsprop_##S(T* param, const T* grad, T* square_avg,           \
                                            T* grad_avg, T* velocity, long long n, double lr, \
                                            double alpha, double eps, double weight_decay,    \
                                            double momentum, long long centered,              \
                                            const double* guard, double clip,                 \
                                            const double* rates) {                            \
    rmsprop(param, grad, square_avg, grad_avg, velocity, n, lr, alpha, eps, weight_decay,     \
            momentum, centered, guard, clip, rates);                                          \
  }                                                                                           \
  extern "C" __global__ void gc_step_guard_##S(const T* loss, const T* norm_sq, double scale,  \
                                               double clip_norm, double* record,              \
                                               double* guard, const unsigned* status,         \
                                               const double* slot, long long records) {       \
    step_guard(loss, norm_sq, scale, clip_norm, record, guard, status, slot, records);        \
  }

GC_OPTIM(float, f32)
GC_OPTIM(double, f64)

// device.GuardedCopy: n 32-bit words from src to dst unless the guard's
// skip flag is set.
extern "C" __global__ void gc_guarded_copy(unsigned* dst, const unsigned* src, long long n,
                                           const double* guard) {
  if (gc_skip(guard)) return;
  GC_FOR(i, n) dst[i] = src[i];
}
