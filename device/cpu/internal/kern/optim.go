package kern

import "math"

// The optimizer steps follow PyTorch's single-tensor implementations: the
// per-element arithmetic is in T (PyTorch computes a float32 parameter's
// update in float32) with the float64 hyperparameters rounded to T, and
// per-call scalars such as Adam's bias corrections are computed once in
// float64 and then rounded. The formulas are those of device.SGD,
// device.Adam and device.RMSprop.

// Clip is the gradient an optimizer step uses (device.StepGuard's
// coefficient and an optimizer's Clip): the gradient times Coef, rounded
// to T, then clamped to [-Max, Max] when Max > 0, the bits an Axpby and a
// Clamp over the gradient would leave. NoClip uses it as it is.
type Clip[T Float] struct{ Coef, Max T }

// NoClip is the Clip of a step without a guard.
func NoClip[T Float]() Clip[T] { return Clip[T]{Coef: 1} }

func (c Clip[T]) of(g T) T {
	g = T(g * c.Coef)
	if c.Max > 0 {
		if g < -c.Max {
			g = -c.Max
		} else if g > c.Max {
			g = c.Max
		}
	}
	return g
}

// StepGuard is device.StepGuard: the step's loss, norm and skip flag into
// record, its verdict into guard (the skip flag, once set, stays set).
func StepGuard(loss, normSq, scale, clipNorm float64, record, guard []float64) {
	// The conversions keep the products rounded (no fused multiply-add):
	// the bits are the host's.
	l, n := float64(loss*scale), float64(math.Sqrt(normSq)*scale)
	record[0], record[1] = l, n
	if math.IsNaN(l) || math.IsInf(l, 0) || math.IsNaN(n) || math.IsInf(n, 0) {
		guard[1] = 1
	}
	coef := scale
	if r := clipNorm / (n + 1e-6); clipNorm > 0 && r < 1 {
		coef *= r
	}
	guard[0] = coef
	record[2] = guard[1]
}

// SGD is one torch.optim.SGD step over len(param) elements (device.SGD):
//
//	g = grad + weightDecay·param
//	v = g at the first step, else momentum·v + (1-dampening)·g   (momentum ≠ 0)
//	g = g + momentum·v if nesterov, else v                (momentum ≠ 0)
//	param -= lr·g
//
// velocity is read and written only when momentum ≠ 0 (it may be nil
// otherwise). grad is not modified; the step uses clip.of(grad).
func SGD[T Float](lr, momentum, dampening, weightDecay float64, nesterov, first bool, clip Clip[T], param, grad, velocity []T) {
	grad = grad[:len(param)]
	lrT, wd := T(lr), T(weightDecay)
	if momentum == 0 {
		for i, p := range param {
			g := clip.of(grad[i])
			if weightDecay != 0 {
				g += wd * p
			}
			param[i] = p - lrT*g
		}
		return
	}
	mom, damp := T(momentum), T(1-dampening)
	velocity = velocity[:len(param)]
	for i, p := range param {
		g := clip.of(grad[i])
		if weightDecay != 0 {
			g += wd * p
		}
		v := g
		if !first {
			v = mom*velocity[i] + damp*g
		}
		velocity[i] = v
		if nesterov {
			g += mom * v
		} else {
			g = v
		}
		param[i] = p - lrT*g
	}
}

// Adam is one torch.optim.Adam step (AdamW with decoupled) over
// len(param) elements (device.Adam), t the step's number, pow1 = beta1^t
// and pow2 = beta2^t:
//
//	Adam:  g = grad + weightDecay·param   AdamW: param *= 1 - lr·weightDecay; g = grad
//	m = beta1·m + (1-beta1)·g             v = beta2·v + (1-beta2)·g²
//	param -= (lr/(1-beta1^t)) · m / (sqrt(v)/sqrt(1-beta2^t) + eps)
//
// lr/(1-beta1^t), sqrt(1-beta2^t) and 1 - lr·weightDecay are computed in
// float64 once per call and rounded to T. PyTorch updates m with lerp,
// m + (1-beta1)·(g - m), which equals the formula above up to rounding;
// this follows the formula of device.Adam.
func Adam[T Float](lr, beta1, beta2, eps, weightDecay float64, decoupled bool, pow1, pow2 float64, clip Clip[T], param, grad, m, v []T) {
	grad = grad[:len(param)]
	m = m[:len(param)]
	v = v[:len(param)]
	stepSize := T(lr / (1 - pow1))
	bc2Sqrt := T(math.Sqrt(1 - pow2))
	b1, b1c, b2, b2c, epsT := T(beta1), T(1-beta1), T(beta2), T(1-beta2), T(eps)
	wd := T(weightDecay)
	decay := T(1 - float64(lr*weightDecay))
	coupled := weightDecay != 0 && !decoupled
	shrink := weightDecay != 0 && decoupled
	for i, p := range param {
		g := clip.of(grad[i])
		if coupled {
			g += wd * p
		}
		if shrink {
			p *= decay
		}
		mi := b1*m[i] + b1c*g
		vi := b2*v[i] + b2c*g*g
		m[i], v[i] = mi, vi
		denom := T(math.Sqrt(float64(vi)))/bc2Sqrt + epsT
		param[i] = p - stepSize*mi/denom
	}
}

// RMSprop is one torch.optim.RMSprop step over len(param) elements
// (device.RMSprop):
//
//	g = grad + weightDecay·param
//	squareAvg = alpha·squareAvg + (1-alpha)·g²
//	centered: gradAvg = alpha·gradAvg + (1-alpha)·g; avg = sqrt(squareAvg - gradAvg²) + eps
//	else:     avg = sqrt(squareAvg) + eps
//	momentum ≠ 0: velocity = momentum·velocity + g/avg; param -= lr·velocity
//	else:         param -= lr·g/avg
//
// gradAvg is used only when centered and velocity only when momentum ≠ 0;
// either may be nil otherwise. As in PyTorch, a rounding that makes
// squareAvg - gradAvg² negative gives NaN.
func RMSprop[T Float](lr, alpha, eps, weightDecay, momentum float64, centered bool, clip Clip[T], param, grad, squareAvg, gradAvg, velocity []T) {
	n := len(param)
	grad = grad[:n]
	squareAvg = squareAvg[:n]
	if centered {
		gradAvg = gradAvg[:n]
	}
	if momentum != 0 {
		velocity = velocity[:n]
	}
	lrT, a, ac, epsT, wd, mom := T(lr), T(alpha), T(1-alpha), T(eps), T(weightDecay), T(momentum)
	for i, p := range param {
		g := clip.of(grad[i])
		if weightDecay != 0 {
			g += wd * p
		}
		sq := a*squareAvg[i] + ac*g*g
		squareAvg[i] = sq
		if centered {
			ga := a*gradAvg[i] + ac*g
			gradAvg[i] = ga
			sq -= ga * ga
		}
		avg := T(math.Sqrt(float64(sq))) + epsT
		if momentum != 0 {
			vel := mom*velocity[i] + g/avg
			velocity[i] = vel
			param[i] = p - lrT*vel
		} else {
			param[i] = p - lrT*g/avg
		}
	}
}
