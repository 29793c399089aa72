package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// optimSteps is how many consecutive steps each optimizer takes, with new
// gradients each time, compared with the reference after every step.
const optimSteps = 5

// optimSizes are the parameter counts the optimizers are checked at.
var optimSizes = []int{1, 1001, 1<<16 + 3}

// sgdState is PyTorch's torch.optim.SGD state for the reference. The
// *Mag slices hold each value's magnitude: the same recurrence evaluated on
// absolute values, which bounds the rounding error of any sound evaluation
// where terms cancel (Tolerance).
type sgdState struct {
	param, velocity       []float64
	paramMag, velocityMag []float64
}

func newSGDState(param []float64) *sgdState {
	return &sgdState{param: clone(param), velocity: make([]float64, len(param)),
		paramMag: absAll(param), velocityMag: make([]float64, len(param))}
}

// refSGD is one step of device.SGD's equations (PyTorch's SGD) in float64.
func refSGD(a device.SGD, s *sgdState, grad []float64) {
	for i := range s.param {
		g := grad[i] + a.WeightDecay*s.param[i]
		gm := math.Abs(grad[i]) + math.Abs(a.WeightDecay)*s.paramMag[i]
		if a.Momentum != 0 {
			if a.Step == 1 {
				s.velocity[i], s.velocityMag[i] = g, gm
			} else {
				s.velocity[i] = a.Momentum*s.velocity[i] + (1-a.Dampening)*g
				s.velocityMag[i] = math.Abs(a.Momentum)*s.velocityMag[i] + math.Abs(1-a.Dampening)*gm
			}
			if a.Nesterov {
				g += a.Momentum * s.velocity[i]
				gm += math.Abs(a.Momentum) * s.velocityMag[i]
			} else {
				g, gm = s.velocity[i], s.velocityMag[i]
			}
		}
		s.param[i] -= a.LR * g
		s.paramMag[i] += math.Abs(a.LR) * gm
	}
}

func absAll(x []float64) []float64 {
	m := make([]float64, len(x))
	for i, v := range x {
		m[i] = math.Abs(v)
	}
	return m
}

func testSGD(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		cs := []struct {
			name string
			a    device.SGD
		}{
			{"Plain", device.SGD{LR: 0.1}},
			{"WeightDecay", device.SGD{LR: 0.1, WeightDecay: 0.05}},
			{"Momentum", device.SGD{LR: 0.1, Momentum: 0.9}},
			{"Dampening", device.SGD{LR: 0.1, Momentum: 0.9, Dampening: 0.3}},
			{"Nesterov", device.SGD{LR: 0.1, Momentum: 0.8, Nesterov: true}},
			{"Nesterov/WeightDecay", device.SGD{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01}},
		}
		for _, c := range cs {
			for _, n := range optimSizes {
				e.run(fmt.Sprintf("%s/N=%d", c.name, n), func(e *env) {
					a := c.a
					a.DType, a.N = e.dt, n
					param := e.uniform(n, -1, 1)
					vP := e.vec(param)
					a.Param = vP.buf
					var vV vec
					if a.Momentum != 0 {
						// Read only from step 2 on: at step 1 the velocity
						// is the gradient, so its initial contents (NaN
						// here, undefined after Alloc) must not matter.
						vV = e.vec(nans(n))
						a.Velocity = vV.buf
					}
					ref := newSGDState(param)
					r := a
					r.LR, r.Momentum, r.Dampening, r.WeightDecay = e.r(a.LR), e.r(a.Momentum), e.r(a.Dampening), e.r(a.WeightDecay)
					tol := PointwiseTolerance(e.dt)
					for step := 1; step <= optimSteps; step++ {
						grad := e.uniform(n, -1, 1)
						vG := e.vec(grad)
						a.Grad, a.Step = vG.buf, step
						e.launch(a)
						r.Step = step
						refSGD(r, ref, grad)
						ok := checkClose(e.t, describe("Param after step %d", step), e.get("Param", vP), ref.param, ref.paramMag, tol)
						if a.Momentum != 0 {
							ok = checkClose(e.t, describe("Velocity after step %d", step), e.get("Velocity", vV), ref.velocity, ref.velocityMag, tol) && ok
						}
						checkExact(e.t, describe("Grad (an input) at step %d", step), e.get("Grad", vG), grad)
						if !ok {
							break
						}
					}
				})
			}
		}
		e.run("N=0", func(e *env) {
			e.launch(device.SGD{DType: e.dt, N: 0, LR: 0.1, Momentum: 0.9, Step: 1})
			e.sync()
		})
	})
}

// adamState is torch.optim.Adam's state for the reference, with
// magnitudes as in sgdState (V is a sum of squares: its own magnitude).
type adamState struct {
	param, m, v    []float64
	paramMag, mMag []float64
}

func newAdamState(param []float64) *adamState {
	n := len(param)
	return &adamState{param: clone(param), m: make([]float64, n), v: make([]float64, n),
		paramMag: absAll(param), mMag: make([]float64, n)}
}

// refAdam is one step of device.Adam's equations (PyTorch's Adam and
// AdamW) in float64.
func refAdam(a device.Adam, s *adamState, grad []float64) {
	t := float64(a.Step)
	bc1 := 1 - math.Pow(a.Beta1, t)
	bc2 := 1 - math.Pow(a.Beta2, t)
	for i := range s.param {
		g, gm := grad[i], math.Abs(grad[i])
		if a.Decoupled {
			s.param[i] *= 1 - a.LR*a.WeightDecay
			s.paramMag[i] *= math.Abs(1 - a.LR*a.WeightDecay)
		} else {
			g += a.WeightDecay * s.param[i]
			gm += math.Abs(a.WeightDecay) * s.paramMag[i]
		}
		s.m[i] = a.Beta1*s.m[i] + (1-a.Beta1)*g
		s.mMag[i] = a.Beta1*s.mMag[i] + (1-a.Beta1)*gm
		s.v[i] = a.Beta2*s.v[i] + (1-a.Beta2)*g*g
		denom := math.Sqrt(s.v[i])/math.Sqrt(bc2) + a.Eps
		s.param[i] -= (a.LR / bc1) * s.m[i] / denom
		s.paramMag[i] += math.Abs(a.LR/bc1) * s.mMag[i] / denom
	}
}

func testAdam(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		cs := []struct {
			name string
			a    device.Adam
		}{
			{"Adam", device.Adam{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}},
			{"WeightDecay", device.Adam{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}},
			{"AdamW", device.Adam{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: true}},
			// A large Eps tells apart sqrt(V)/sqrt(1-Beta2^t) + Eps from
			// the other places Eps could go.
			{"LargeEps", device.Adam{LR: 0.05, Beta1: 0.8, Beta2: 0.9, Eps: 0.1}},
			{"AdamW/LargeEps", device.Adam{LR: 0.05, Beta1: 0.5, Beta2: 0.75, Eps: 0.3, WeightDecay: 0.5, Decoupled: true}},
		}
		for _, c := range cs {
			for _, n := range optimSizes {
				e.run(fmt.Sprintf("%s/N=%d", c.name, n), func(e *env) {
					a := c.a
					a.DType, a.N = e.dt, n
					param := e.uniform(n, -1, 1)
					vP, vM, vV := e.vec(param), e.vec(constant(n, 0)), e.vec(constant(n, 0))
					a.Param, a.M, a.V = vP.buf, vM.buf, vV.buf
					ref := newAdamState(param)
					r := a
					r.LR, r.Beta1, r.Beta2, r.Eps, r.WeightDecay = e.r(a.LR), e.r(a.Beta1), e.r(a.Beta2), e.r(a.Eps), e.r(a.WeightDecay)
					tol := PointwiseTolerance(e.dt)
					for step := 1; step <= optimSteps; step++ {
						grad := e.uniform(n, -1, 1)
						vG := e.vec(grad)
						a.Grad, a.Step = vG.buf, step
						e.launch(a)
						r.Step = step
						refAdam(r, ref, grad)
						ok := checkClose(e.t, describe("Param after step %d", step), e.get("Param", vP), ref.param, ref.paramMag, tol)
						ok = checkClose(e.t, describe("M after step %d", step), e.get("M", vM), ref.m, ref.mMag, tol) && ok
						ok = checkClose(e.t, describe("V after step %d", step), e.get("V", vV), ref.v, nil, tol) && ok
						if !ok {
							break
						}
					}
				})
			}
		}
		e.run("N=0", func(e *env) {
			e.launch(device.Adam{DType: e.dt, N: 0, LR: 0.1, Beta1: 0.9, Beta2: 0.99, Step: 1})
			e.sync()
		})
	})
}

// rmspropState is torch.optim.RMSprop's state for the reference, with
// magnitudes as in sgdState (SquareAvg is a sum of squares: its own
// magnitude).
type rmspropState struct {
	param, squareAvg, gradAvg, velocity []float64
	paramMag, gradAvgMag, velocityMag   []float64
}

func newRMSpropState(param []float64) *rmspropState {
	n := len(param)
	return &rmspropState{param: clone(param), squareAvg: make([]float64, n), gradAvg: make([]float64, n), velocity: make([]float64, n),
		paramMag: absAll(param), gradAvgMag: make([]float64, n), velocityMag: make([]float64, n)}
}

// refRMSprop is one step of device.RMSprop's equations (PyTorch's RMSprop)
// in float64.
func refRMSprop(a device.RMSprop, s *rmspropState, grad []float64) {
	for i := range s.param {
		g := grad[i] + a.WeightDecay*s.param[i]
		gm := math.Abs(grad[i]) + math.Abs(a.WeightDecay)*s.paramMag[i]
		s.squareAvg[i] = a.Alpha*s.squareAvg[i] + (1-a.Alpha)*g*g
		var avg float64
		if a.Centered {
			s.gradAvg[i] = a.Alpha*s.gradAvg[i] + (1-a.Alpha)*g
			s.gradAvgMag[i] = a.Alpha*s.gradAvgMag[i] + (1-a.Alpha)*gm
			avg = math.Sqrt(s.squareAvg[i]-s.gradAvg[i]*s.gradAvg[i]) + a.Eps
		} else {
			avg = math.Sqrt(s.squareAvg[i]) + a.Eps
		}
		if a.Momentum != 0 {
			s.velocity[i] = a.Momentum*s.velocity[i] + g/avg
			s.velocityMag[i] = math.Abs(a.Momentum)*s.velocityMag[i] + gm/avg
			s.param[i] -= a.LR * s.velocity[i]
			s.paramMag[i] += math.Abs(a.LR) * s.velocityMag[i]
		} else {
			s.param[i] -= a.LR * g / avg
			s.paramMag[i] += math.Abs(a.LR) * gm / avg
		}
	}
}

func testRMSprop(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		cs := []struct {
			name string
			a    device.RMSprop
		}{
			{"Plain", device.RMSprop{LR: 0.01, Alpha: 0.99, Eps: 1e-8}},
			{"Centered", device.RMSprop{LR: 0.01, Alpha: 0.99, Eps: 1e-8, Centered: true}},
			{"Momentum", device.RMSprop{LR: 0.01, Alpha: 0.99, Eps: 1e-8, Momentum: 0.9}},
			{"WeightDecay", device.RMSprop{LR: 0.01, Alpha: 0.99, Eps: 1e-8, WeightDecay: 0.1}},
			// A large Eps tells apart sqrt(SquareAvg) + Eps from
			// sqrt(SquareAvg + Eps).
			{"Centered/Momentum/WeightDecay/LargeEps", device.RMSprop{LR: 0.02, Alpha: 0.9, Eps: 0.1, Centered: true, Momentum: 0.5, WeightDecay: 0.05}},
		}
		for _, c := range cs {
			for _, n := range optimSizes {
				e.run(fmt.Sprintf("%s/N=%d", c.name, n), func(e *env) {
					a := c.a
					a.DType, a.N = e.dt, n
					param := e.uniform(n, -1, 1)
					vP, vS := e.vec(param), e.vec(constant(n, 0))
					a.Param, a.SquareAvg = vP.buf, vS.buf
					var vGA, vVel vec
					if a.Centered {
						vGA = e.vec(constant(n, 0))
						a.GradAvg = vGA.buf
					}
					if a.Momentum != 0 {
						vVel = e.vec(constant(n, 0))
						a.Velocity = vVel.buf
					}
					ref := newRMSpropState(param)
					r := a
					r.LR, r.Alpha, r.Eps, r.WeightDecay, r.Momentum = e.r(a.LR), e.r(a.Alpha), e.r(a.Eps), e.r(a.WeightDecay), e.r(a.Momentum)
					tol := PointwiseTolerance(e.dt)
					for step := 1; step <= optimSteps; step++ {
						grad := e.uniform(n, -1, 1)
						vG := e.vec(grad)
						a.Grad = vG.buf
						e.launch(a)
						refRMSprop(r, ref, grad)
						ok := checkClose(e.t, describe("Param after step %d", step), e.get("Param", vP), ref.param, ref.paramMag, tol)
						ok = checkClose(e.t, describe("SquareAvg after step %d", step), e.get("SquareAvg", vS), ref.squareAvg, nil, tol) && ok
						if a.Centered {
							ok = checkClose(e.t, describe("GradAvg after step %d", step), e.get("GradAvg", vGA), ref.gradAvg, ref.gradAvgMag, tol) && ok
						}
						if a.Momentum != 0 {
							ok = checkClose(e.t, describe("Velocity after step %d", step), e.get("Velocity", vVel), ref.velocity, ref.velocityMag, tol) && ok
						}
						if !ok {
							break
						}
					}
				})
			}
		}
		e.run("N=0", func(e *env) {
			e.launch(device.RMSprop{DType: e.dt, N: 0, LR: 0.1, Alpha: 0.99, Centered: true, Momentum: 0.9})
			e.sync()
		})
	})
}
