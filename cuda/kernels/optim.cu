// Optimizer steps (device.SGD, Adam, RMSprop), PyTorch's single-tensor
// formulas: arithmetic in T, hyperparameters rounded to T, and per-call
// scalars (Adam's bias corrections) computed by the host in double.
#include "common.cuh"

template <typename T>
__device__ void sgd(T* param, const T* grad, T* velocity, long long n, double lr,
                    double momentum, double dampening, double weight_decay, long long nesterov,
                    long long first) {
  T lrT = (T)lr, wd = (T)weight_decay, mom = (T)momentum, damp = (T)(1.0 - dampening);
  GC_FOR(i, n) {
    T p = param[i], g = grad[i];
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
                     double weight_decay, double decay, long long coupled, long long shrink) {
  T ss = (T)step_size, bc2 = (T)bc2_sqrt, b1 = (T)beta1, b1c = (T)(1.0 - beta1),
    b2 = (T)beta2, b2c = (T)(1.0 - beta2), e = (T)eps, wd = (T)weight_decay, dec = (T)decay;
  GC_FOR(i, n) {
    T p = param[i], g = grad[i];
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
                        double momentum, long long centered) {
  T lrT = (T)lr, a = (T)alpha, ac = (T)(1.0 - alpha), e = (T)eps, wd = (T)weight_decay,
    mom = (T)momentum;
  GC_FOR(i, n) {
    T p = param[i], g = grad[i];
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
                                        long long first) {                                    \
    sgd(param, grad, velocity, n, lr, momentum, dampening, weight_decay, nesterov, first);    \
  }                                                                                           \
  extern "C" __global__ void gc_adam_##S(T* param, const T* grad, T* m, T* v, long long n,    \
                                         double step_size, double bc2_sqrt, double beta1,     \
                                         double beta2, double eps, double weight_decay,       \
                                         double decay, long long coupled, long long shrink) { \
    adam(param, grad, m, v, n, step_size, bc2_sqrt, beta1, beta2, eps, weight_decay, decay,   \
         coupled, shrink);                                                                    \
  }                                                                                           \
  extern "C" __global__ void gc_rmsprop_##S(T* param, const T* grad, T* square_avg,           \
                                            T* grad_avg, T* velocity, long long n, double lr, \
                                            double alpha, double eps, double weight_decay,    \
                                            double momentum, long long centered) {            \
    rmsprop(param, grad, square_avg, grad_avg, velocity, n, lr, alpha, eps, weight_decay,     \
            momentum, centered);                                                              \
  }

GC_OPTIM(float, f32)
GC_OPTIM(double, f64)
