package kern

import (
	"fmt"
	"math"
	"testing"
)

// The optimizer references follow the formulas of device.SGD, device.Adam
// and device.RMSprop (PyTorch's torch.optim single-tensor updates) one
// element at a time in float64. Each test runs several steps with a fresh
// gradient per step and compares parameters and state after every step:
// the float64 kernels to 1e-14 relative (the same operations, a few
// roundings apart), the float32 kernels to 1e-5 relative plus 1e-6
// absolute (float32 state carried over steps, each step a handful of
// roundings of 6e-8).

const optimSteps = 5

type optimState struct{ param, a, b, c []float64 }

func clone(s []float64) []float64 { return append([]float64(nil), s...) }

func refSGD(lr, mom, damp, wd float64, nesterov bool, step int, p, grad, vel []float64) {
	for i := range p {
		g := grad[i] + wd*p[i]
		if mom != 0 {
			if step == 1 {
				vel[i] = g
			} else {
				vel[i] = mom*vel[i] + (1-damp)*g
			}
			if nesterov {
				g += mom * vel[i]
			} else {
				g = vel[i]
			}
		}
		p[i] -= lr * g
	}
}

func refAdam(lr, b1, b2, eps, wd float64, decoupled bool, step int, p, grad, m, v []float64) {
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	for i := range p {
		g := grad[i]
		if decoupled {
			p[i] *= 1 - lr*wd
		} else {
			g += wd * p[i]
		}
		m[i] = b1*m[i] + (1-b1)*g
		v[i] = b2*v[i] + (1-b2)*g*g
		p[i] -= (lr / bc1) * m[i] / (math.Sqrt(v[i])/math.Sqrt(bc2) + eps)
	}
}

func refRMSprop(lr, alpha, eps, wd, mom float64, centered bool, p, grad, sq, ga, vel []float64) {
	for i := range p {
		g := grad[i] + wd*p[i]
		sq[i] = alpha*sq[i] + (1-alpha)*g*g
		var avg float64
		if centered {
			ga[i] = alpha*ga[i] + (1-alpha)*g
			avg = math.Sqrt(sq[i]-ga[i]*ga[i]) + eps
		} else {
			avg = math.Sqrt(sq[i]) + eps
		}
		if mom != 0 {
			vel[i] = mom*vel[i] + g/avg
			p[i] -= lr * vel[i]
		} else {
			p[i] -= lr * g / avg
		}
	}
}

// runOptim runs optimSteps steps of kernel (on T) and of ref (float64)
// from the same start and gradients, comparing after every step. The
// kernel's optional state slices are nil where used is false.
func runOptim[T Float](t *testing.T, n int, used [3]bool,
	kernel func(step int, p, g, a, b, c []T), ref func(step int, p, g, a, b, c []float64)) {
	t.Helper()
	rng := newRand(uint64(40 + n))
	// Start from float32-representable values so both types start equal.
	r := func(s []float64) []float64 { return from(to[float32](s)) }
	want := optimState{r(uniform(rng, n, 1)), make([]float64, n), make([]float64, n), make([]float64, n)}
	got := [4][]T{to[T](want.param), to[T](want.a), to[T](want.b), to[T](want.c)}
	// State starts at 0, as PyTorch's does; unused state is nil.
	for k := range 3 {
		if !used[k] {
			got[k+1] = nil
		}
	}
	abs, rel := 1e-15, 1e-14
	if single[T]() {
		abs, rel = 1e-6, 1e-5
	}
	for step := 1; step <= optimSteps; step++ {
		g := r(uniform(rng, n, 1))
		kernel(step, got[0], to[T](g), got[1], got[2], got[3])
		ref(step, want.param, g, want.a, want.b, want.c)
		checkClose(t, fmt.Sprintf("step %d param", step), from(got[0]), want.param, abs, rel)
		for k, w := range [][]float64{want.a, want.b, want.c} {
			if used[k] {
				checkClose(t, fmt.Sprintf("step %d state %d", step, k), from(got[k+1]), w, abs, rel)
			}
		}
	}
}

func TestSGD(t *testing.T) {
	tests := []struct {
		name              string
		lr, mom, damp, wd float64
		nesterov          bool
	}{
		{"plain", 0.1, 0, 0, 0, false},
		{"weight decay", 0.1, 0, 0, 0.01, false},
		{"momentum", 0.05, 0.9, 0, 0, false},
		{"momentum dampening decay", 0.05, 0.9, 0.1, 0.001, false},
		{"nesterov", 0.05, 0.9, 0, 0.01, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			used := [3]bool{tt.mom != 0}
			t.Run("float64", func(t *testing.T) {
				runOptim(t, 37, used,
					func(step int, p, g, v, _, _ []float64) {
						if step == 1 && v != nil {
							Fill(v, math.NaN()) // step 1 sets v = g without reading it
						}
						SGD(tt.lr, tt.mom, tt.damp, tt.wd, tt.nesterov, step, p, g, v)
					},
					func(step int, p, g, v, _, _ []float64) {
						refSGD(tt.lr, tt.mom, tt.damp, tt.wd, tt.nesterov, step, p, g, v)
					})
			})
			t.Run("float32", func(t *testing.T) {
				runOptim(t, 37, used,
					func(step int, p, g, v, _, _ []float32) {
						if step == 1 && v != nil {
							Fill(v, float32(math.NaN()))
						}
						SGD(tt.lr, tt.mom, tt.damp, tt.wd, tt.nesterov, step, p, g, v)
					},
					func(step int, p, g, v, _, _ []float64) {
						refSGD(tt.lr, tt.mom, tt.damp, tt.wd, tt.nesterov, step, p, g, v)
					})
			})
		})
	}
}

func TestAdam(t *testing.T) {
	tests := []struct {
		name                string
		lr, b1, b2, eps, wd float64
		decoupled           bool
	}{
		{"plain", 1e-2, 0.9, 0.999, 1e-8, 0, false},
		{"weight decay", 1e-2, 0.9, 0.999, 1e-8, 0.05, false},
		{"AdamW", 1e-2, 0.9, 0.999, 1e-8, 0.05, true},
		{"large eps", 1e-1, 0.8, 0.99, 1e-1, 0, false},
	}
	used := [3]bool{true, true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := func(step int, p, g, m, v, _ []float64) {
				refAdam(tt.lr, tt.b1, tt.b2, tt.eps, tt.wd, tt.decoupled, step, p, g, m, v)
			}
			t.Run("float64", func(t *testing.T) {
				runOptim(t, 41, used, func(step int, p, g, m, v, _ []float64) {
					Adam(tt.lr, tt.b1, tt.b2, tt.eps, tt.wd, tt.decoupled, step, p, g, m, v)
				}, ref)
			})
			t.Run("float32", func(t *testing.T) {
				runOptim(t, 41, used, func(step int, p, g, m, v, _ []float32) {
					Adam(tt.lr, tt.b1, tt.b2, tt.eps, tt.wd, tt.decoupled, step, p, g, m, v)
				}, ref)
			})
		})
	}
}

func TestRMSprop(t *testing.T) {
	tests := []struct {
		name                    string
		lr, alpha, eps, wd, mom float64
		centered                bool
	}{
		{"plain", 1e-2, 0.99, 1e-8, 0, 0, false},
		{"weight decay", 1e-2, 0.99, 1e-8, 0.01, 0, false},
		{"centered", 1e-2, 0.9, 1e-8, 0, 0, true},
		{"momentum", 1e-2, 0.99, 1e-8, 0, 0.9, false},
		{"centered momentum decay", 1e-2, 0.9, 1e-6, 0.01, 0.5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			used := [3]bool{true, tt.centered, tt.mom != 0}
			ref := func(_ int, p, g, sq, ga, vel []float64) {
				refRMSprop(tt.lr, tt.alpha, tt.eps, tt.wd, tt.mom, tt.centered, p, g, sq, ga, vel)
			}
			t.Run("float64", func(t *testing.T) {
				runOptim(t, 43, used, func(_ int, p, g, sq, ga, vel []float64) {
					RMSprop(tt.lr, tt.alpha, tt.eps, tt.wd, tt.mom, tt.centered, p, g, sq, ga, vel)
				}, ref)
			})
			t.Run("float32", func(t *testing.T) {
				runOptim(t, 43, used, func(_ int, p, g, sq, ga, vel []float32) {
					RMSprop(tt.lr, tt.alpha, tt.eps, tt.wd, tt.mom, tt.centered, p, g, sq, ga, vel)
				}, ref)
			})
		})
	}
}
