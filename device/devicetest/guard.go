package devicetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// refStepGuard is device.StepGuard's arithmetic, each operation rounded
// to float64 on its own. It returns the record and the guard a guard that
// held skip before would hold after.
func refStepGuard(loss, normSq, scale, clipNorm, skip float64) (record [3]float64, guard [2]float64) {
	l, n := float64(loss*scale), float64(math.Sqrt(normSq)*scale)
	guard[1] = skip
	if math.IsNaN(l) || math.IsInf(l, 0) || math.IsNaN(n) || math.IsInf(n, 0) {
		guard[1] = 1
	}
	guard[0] = scale
	if r := clipNorm / float64(n+1e-6); clipNorm > 0 && r < 1 {
		guard[0] = float64(scale * r)
	}
	record = [3]float64{l, n, guard[1]}
	return record, guard
}

// testStepGuard checks the verdict bit for bit: the trainer's results, on
// every device, depend on the coefficient's last bit.
func testStepGuard(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		inf := math.Inf(1)
		cs := []struct {
			name                           string
			loss, normSq, scale, clip, was float64
		}{
			{"NoClip", 2.5, 9, 1, 0, 0},
			// norm 3 < 5: the coefficient is the scale.
			{"ClipInactive", 2.5, 9, 1, 5, 0},
			// norm 30 > 5: coefficient 5/(30+1e-6).
			{"ClipActive", 2.5, 900, 1, 5, 0},
			// A sum made a mean: norm sqrt(900)·0.125 = 3.75 > 1.
			{"ScaledClip", 7.25, 900, 0.125, 1, 0},
			{"Scaled", 7.25, 900, 0.125, 0, 0},
			{"NaNLoss", math.NaN(), 900, 1, 5, 0},
			{"InfLoss", inf, 900, 1, 5, 0},
			{"InfNorm", 2.5, inf, 1, 5, 0},
			{"NaNNorm", 2.5, math.NaN(), 1, 0, 0},
			// A square that overflows to infinity only once scaled up.
			{"LargeScaled", 1e30, 1, 1e300, 0, 0},
			// The flag a step before this one set stays set; the
			// coefficient is written all the same.
			{"Sticky", 2.5, 900, 1, 5, 1},
		}
		for _, c := range cs {
			e.run(c.name, func(e *env) {
				loss, normSq := e.vec([]float64{c.loss}), e.vec([]float64{c.normSq})
				rec := e.vecOf(device.Float64, nans(3))
				g := e.vecOf(device.Float64, []float64{-3, c.was})
				e.launch(device.StepGuard{DType: e.dt, Loss: loss.buf, NormSq: normSq.buf, Scale: c.scale, ClipNorm: c.clip,
					Record: rec.buf, Guard: g.buf})
				wantRec, wantGuard := refStepGuard(e.r(c.loss), e.r(c.normSq), c.scale, c.clip, c.was)
				checkExact(e.t, "Record", e.get("Record", rec), wantRec[:])
				checkExact(e.t, "Guard", e.get("Guard", g), wantGuard[:])
			})
		}
		// A step whose data was bad (an id out of range, reported at the
		// next synchronisation) is refused too, though its figures are
		// finite: its update must not be applied.
		e.run("AfterIndexError", func(e *env) {
			table, ids, out := e.vec(constant(4*2, 1)), e.ids([]int32{7}), e.vec(constant(2, 0))
			e.launch(device.Embedding{DType: e.dt, N: 1, Dim: 2, Vocab: 4, Table: table.buf, IDs: ids.buf, Out: out.buf})
			loss, normSq := e.vec([]float64{2.5}), e.vec([]float64{9})
			rec, g := e.vecOf(device.Float64, nans(3)), e.vecOf(device.Float64, []float64{-3, 0})
			e.launch(device.StepGuard{DType: e.dt, Loss: loss.buf, NormSq: normSq.buf, Scale: 1, Record: rec.buf, Guard: g.buf})
			if err := call(e.t, "Synchronize", e.dev.Synchronize); !errors.Is(err, device.ErrIndex) {
				e.t.Fatalf("Synchronize after an id out of range: %v, want device.ErrIndex", err)
			}
			checkExact(e.t, "Guard", e.get("Guard", g), []float64{1, 1})
			checkExact(e.t, "Record", e.get("Record", rec), []float64{2.5, 3, 1})
		})
	})
}

// testGuardedSteps checks the optimizer steps under a guard: with the skip
// flag set nothing is written; otherwise the step equals, bit for bit, the
// unguarded step on the gradient an Axpby by the coefficient and a Clamp
// made (what the trainer did before the guard), and the gradient is left
// as it was.
func testGuardedSteps(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		const n = 1001
		// A coefficient that is not a power of two, so its rounding
		// shows; a clip that cuts some of the scaled gradients.
		const coef, clip = 0.3711, 0.25
		steps := []struct {
			name  string
			slots int
			make  func(param, grad device.Buffer, slots []device.Buffer, guard device.Buffer, clip float64) any
		}{
			{"SGD", 1, func(p, g device.Buffer, s []device.Buffer, guard device.Buffer, clip float64) any {
				return device.SGD{DType: e.dt, N: n, LR: 0.1, Momentum: 0.9, WeightDecay: 0.01, Step: 2,
					Param: p, Grad: g, Velocity: s[0], Guard: guard, Clip: clip}
			}},
			{"Adam", 2, func(p, g device.Buffer, s []device.Buffer, guard device.Buffer, clip float64) any {
				return device.Adam{DType: e.dt, N: n, LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Step: 3,
					Param: p, Grad: g, M: s[0], V: s[1], Guard: guard, Clip: clip}
			}},
			{"RMSprop", 3, func(p, g device.Buffer, s []device.Buffer, guard device.Buffer, clip float64) any {
				return device.RMSprop{DType: e.dt, N: n, LR: 0.01, Alpha: 0.99, Eps: 1e-8, Momentum: 0.5, Centered: true,
					Param: p, Grad: g, SquareAvg: s[0], GradAvg: s[1], Velocity: s[2], Guard: guard, Clip: clip}
			}},
		}
		for _, st := range steps {
			for _, withClip := range []float64{0, clip} {
				e.run(fmt.Sprintf("%s/Clip=%v", st.name, withClip), func(e *env) {
					param, grad := e.uniform(n, -1, 1), e.uniform(n, -2, 2)
					state := make([][]float64, st.slots)
					for i := range state {
						state[i] = e.uniform(n, 0, 1) // square averages must be >= 0
					}
					// slots uploads a fresh copy of the optimizer's state.
					slots := func() (vs []vec, bufs []device.Buffer) {
						for _, s := range state {
							v := e.vec(s)
							vs, bufs = append(vs, v), append(bufs, v.buf)
						}
						return vs, bufs
					}
					// The reference: Axpby and Clamp, then the step
					// without a guard.
					vP, vG := e.vec(param), e.vec(grad)
					ref, refBufs := slots()
					e.launch(device.Axpby{DType: e.dt, N: n, Alpha: coef, X: vG.buf, Y: vG.buf})
					if withClip > 0 {
						e.launch(device.Clamp{DType: e.dt, N: n, Min: -withClip, Max: withClip, X: vG.buf})
					}
					e.launch(st.make(vP.buf, vG.buf, refBufs, device.Buffer{}, 0))

					// Guarded: the coefficient and the clip on the device.
					gP, gG := e.vec(param), e.vec(grad)
					got, gotBufs := slots()
					guard := e.vecOf(device.Float64, []float64{coef, 0})
					e.launch(st.make(gP.buf, gG.buf, gotBufs, guard.buf, withClip))
					checkExact(e.t, "Param", e.get("Param", gP), e.get("Param (reference)", vP))
					for i := range got {
						checkExact(e.t, fmt.Sprintf("state %d", i), e.get("state", got[i]), e.get("state (reference)", ref[i]))
					}
					roundedGrad := make([]float64, n)
					for i, g := range grad {
						roundedGrad[i] = e.r(g)
					}
					checkExact(e.t, "Grad (an input)", e.get("Grad", gG), roundedGrad)

					// Skipped: nothing moves.
					sP, sG := e.vec(param), e.vec(grad)
					skipped, skippedBufs := slots()
					skip := e.vecOf(device.Float64, []float64{coef, 1})
					e.launch(st.make(sP.buf, sG.buf, skippedBufs, skip.buf, withClip))
					checkExact(e.t, "Param of a skipped step", e.get("Param", sP), e.get("Param (unchanged)", e.vec(param)))
					for i := range skipped {
						checkExact(e.t, fmt.Sprintf("state %d of a skipped step", i), e.get("state", skipped[i]), e.get("state (unchanged)", e.vec(state[i])))
					}
				})
			}
		}
	})
	t.Run("Misuse", func(t *testing.T) {
		e := newEnv(t, open, device.Float32)
		p := e.alloc(device.Float32, 4)
		small := e.alloc(device.Float32, 1) // 4 bytes: not two float64
		for _, a := range []any{
			device.Adam{DType: device.Float32, N: 4, LR: 0.1, Beta1: 0.9, Beta2: 0.99, Step: 1, Param: p, Grad: p, M: p, V: p, Guard: small},
			device.SGD{DType: device.Float32, N: 4, LR: 0.1, Step: 1, Param: p, Grad: p, Clip: -1},
			device.RMSprop{DType: device.Float32, N: 4, LR: 0.1, Alpha: 0.9, Eps: 1e-8, Param: p, Grad: p, SquareAvg: p, Clip: math.Inf(1)},
			device.StepGuard{DType: device.Float32, Loss: p, NormSq: p, Scale: 1, Record: e.alloc(device.Float64, 2), Guard: e.alloc(device.Float64, 2)},
			device.StepGuard{DType: device.Float32, Loss: p, NormSq: p, Scale: 0, Record: e.alloc(device.Float64, 3), Guard: e.alloc(device.Float64, 2)},
			device.StepGuard{DType: device.Float32, Loss: p, NormSq: p, Scale: 1, ClipNorm: math.NaN(), Record: e.alloc(device.Float64, 3), Guard: e.alloc(device.Float64, 2)},
			device.GuardedCopy{Dst: p, Src: p.Slice(0, 6), Guard: e.alloc(device.Float64, 2)},
			device.GuardedCopy{Dst: small, Src: p, Guard: e.alloc(device.Float64, 2)},
			device.GuardedCopy{Dst: p, Src: small, Guard: small},
		} {
			if err := call(t, kernelName(a), func() error { return launchKernel(e.k, a) }); !errors.Is(err, device.ErrShape) {
				t.Errorf("%+v: got %v, want device.ErrShape", a, err)
			}
		}
	})
}

// testGuardedCopy checks that the copy happens exactly when the flag is
// clear, whatever the coefficient.
func testGuardedCopy(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	// 1001 words: more than one block of a GPU, not a multiple of any.
	const n = 1001
	src := e.uniform(n, -1, 1)
	for _, c := range []struct {
		name string
		flag float64
		want []float64
	}{
		{"Clear", 0, src},
		{"Set", 1, constant(n, 5)},
		{"NaNCoefficient", 0, src},
	} {
		e.run(c.name, func(e *env) {
			s, d := e.vec(src), e.vec(constant(n, 5))
			coef := 1.0
			if c.name == "NaNCoefficient" {
				coef = math.NaN()
			}
			g := e.vecOf(device.Float64, []float64{coef, c.flag})
			e.launch(device.GuardedCopy{Dst: d.buf, Src: s.buf.Slice(0, n*4), Guard: g.buf})
			want := make([]float64, n)
			for i, v := range c.want {
				want[i] = e.r(v)
			}
			checkExact(e.t, "Dst", e.get("Dst", d), want)
		})
	}
	e.run("Empty", func(e *env) {
		g := e.vecOf(device.Float64, []float64{1, 0})
		d := e.vec(constant(2, 5))
		e.launch(device.GuardedCopy{Dst: d.buf, Src: d.buf.Slice(0, 0), Guard: g.buf})
		checkExact(e.t, "Dst", e.get("Dst", d), constant(2, 5))
	})
}

// rates is r as a Rates buffer holds it (device.Rates.Put).
func rates(r device.Rates) []float64 {
	b := make([]byte, device.RatesSize)
	r.Put(b)
	v := make([]float64, device.RatesSize/8)
	for i := range v {
		v[i] = math.Float64frombits(binary.NativeEndian.Uint64(b[8*i:]))
	}
	return v
}

// testStepRates checks what a recorded step reads from device memory
// (device.Grapher: one recording serves every step): an optimizer step
// given its rate and number in a Rates buffer is, bit for bit, the step
// given them as arguments, whatever the arguments then hold; a StepGuard
// given a Slot writes its record to that record of the ring, modulo the
// ring's length, and to no other.
func testStepRates(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		const n = 1001
		// An awkward rate, so that its rounding in every scalar derived
		// from it shows.
		const lr = 0.0123
		steps := []struct {
			name         string
			slots        int
			beta1, beta2 float64
			make         func(p, g device.Buffer, s []device.Buffer, lr float64, step int, r, guard device.Buffer) any
		}{
			{"SGD", 1, 0, 0, func(p, g device.Buffer, s []device.Buffer, lr float64, step int, r, guard device.Buffer) any {
				return device.SGD{DType: e.dt, N: n, LR: lr, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01, Step: step,
					Param: p, Grad: g, Velocity: s[0], Guard: guard, Rates: r}
			}},
			{"Adam", 2, 0.9, 0.999, func(p, g device.Buffer, s []device.Buffer, lr float64, step int, r, guard device.Buffer) any {
				return device.Adam{DType: e.dt, N: n, LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Step: step,
					Param: p, Grad: g, M: s[0], V: s[1], Guard: guard, Rates: r}
			}},
			{"AdamW", 2, 0.8, 0.99, func(p, g device.Buffer, s []device.Buffer, lr float64, step int, r, guard device.Buffer) any {
				return device.Adam{DType: e.dt, N: n, LR: lr, Beta1: 0.8, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.3, Decoupled: true,
					Step: step, Param: p, Grad: g, M: s[0], V: s[1], Guard: guard, Rates: r}
			}},
			{"RMSprop", 3, 0, 0, func(p, g device.Buffer, s []device.Buffer, lr float64, step int, r, guard device.Buffer) any {
				return device.RMSprop{DType: e.dt, N: n, LR: lr, Alpha: 0.99, Eps: 1e-8, Momentum: 0.5, Centered: true,
					Param: p, Grad: g, SquareAvg: s[0], GradAvg: s[1], Velocity: s[2], Guard: guard, Rates: r}
			}},
		}
		for _, st := range steps {
			// Step 1 is SGD's first momentum step; 3 gives Adam bias
			// corrections that are not round.
			for _, step := range []int{1, 3} {
				e.run(fmt.Sprintf("%s/Step=%d", st.name, step), func(e *env) {
					param, grad := e.uniform(n, -1, 1), e.uniform(n, -2, 2)
					state := make([][]float64, st.slots)
					for i := range state {
						state[i] = e.uniform(n, 0, 1)
					}
					run := func(lr float64, step int, r device.Buffer) (vec, []vec) {
						p, g := e.vec(param), e.vec(grad)
						var vs []vec
						var bufs []device.Buffer
						for _, s := range state {
							v := e.vec(s)
							vs, bufs = append(vs, v), append(bufs, v.buf)
						}
						guard := e.vecOf(device.Float64, []float64{0.3711, 0})
						e.launch(st.make(p.buf, g.buf, bufs, lr, step, r, guard.buf))
						return p, vs
					}
					wantP, wantS := run(lr, step, device.Buffer{})
					// The arguments say something else; the buffer wins.
					r := e.vecOf(device.Float64, rates(device.Rates{LR: lr, Step: step, Beta1: st.beta1, Beta2: st.beta2}))
					gotP, gotS := run(99, 0, r.buf)
					checkExact(e.t, "Param", e.get("Param", gotP), e.get("Param (from arguments)", wantP))
					for i := range gotS {
						checkExact(e.t, fmt.Sprintf("state %d", i), e.get("state", gotS[i]), e.get("state (from arguments)", wantS[i]))
					}
				})
			}
		}
		e.run("Slot", func(e *env) {
			const ring = 3
			loss, normSq := e.vec([]float64{2.5}), e.vec([]float64{900})
			wantRec, _ := refStepGuard(e.r(2.5), e.r(900), 1, 5, 0)
			// 2^40+2 is 2 mod 3: a slot past float32's exact integers.
			for _, s := range []float64{0, 1, 2, 4, 1<<40 + 2} {
				rec := e.vecOf(device.Float64, nans(3*ring))
				slot := e.vecOf(device.Float64, []float64{s})
				g := e.vecOf(device.Float64, []float64{-3, 0})
				e.launch(device.StepGuard{DType: e.dt, Loss: loss.buf, NormSq: normSq.buf, Scale: 1, ClipNorm: 5,
					Record: rec.buf.Slice(0, 24*ring), Guard: g.buf, Slot: slot.buf})
				want := nans(3 * ring)
				at := int(uint64(s) % ring)
				copy(want[3*at:], wantRec[:])
				checkExact(e.t, fmt.Sprintf("Record ring with slot %v", s), e.get("Record", rec), want)
			}
		})
	})
	t.Run("Misuse", func(t *testing.T) {
		e := newEnv(t, open, device.Float32)
		p := e.alloc(device.Float32, 4)
		three := e.alloc(device.Float64, 3) // not the four of Rates
		small := e.alloc(device.Float32, 1) // 4 bytes: not a float64
		for _, a := range []any{
			device.SGD{DType: device.Float32, N: 4, LR: 0.1, Step: 1, Param: p, Grad: p, Rates: three},
			device.Adam{DType: device.Float32, N: 4, LR: 0.1, Beta1: 0.9, Beta2: 0.99, Step: 1, Param: p, Grad: p, M: p, V: p, Rates: three},
			device.RMSprop{DType: device.Float32, N: 4, LR: 0.1, Alpha: 0.9, Eps: 1e-8, Param: p, Grad: p, SquareAvg: p, Rates: three},
			// Without Rates the step's number must be given.
			device.Adam{DType: device.Float32, N: 4, LR: 0.1, Beta1: 0.9, Beta2: 0.99, Param: p, Grad: p, M: p, V: p},
			device.StepGuard{DType: device.Float32, Loss: p, NormSq: p, Scale: 1, Record: e.alloc(device.Float64, 3), Guard: e.alloc(device.Float64, 2), Slot: small},
		} {
			if err := call(t, kernelName(a), func() error { return launchKernel(e.k, a) }); !errors.Is(err, device.ErrShape) {
				t.Errorf("%+v: got %v, want device.ErrShape", a, err)
			}
		}
	})
}
