package devicetest

import (
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// seqLen is the length SeqPool and SeqPoolGrad use for sequence b:
// lengths[b] clamped to [0, steps], steps without lengths.
func seqLen(lengths []int32, b, steps int) int {
	if lengths == nil {
		return steps
	}
	return max(0, min(int(lengths[b]), steps))
}

// refSeqPool is device.SeqPool in float64: out with rows b of cols
// elements, ldout apart, replaced by the mean or (takeMax) the maximum of
// rows (t, b), t < n, of y, ldy apart; elements of out between the rows
// keep their values. argmax is [b, cols]: the first step of each maximum,
// a NaN beating any number and the first NaN the later ones, -1 for an
// empty sequence (whose row of out is zeros). mag is each element's
// magnitude: the mean of the absolute values of its terms (a sum's
// magnitude, see Tolerance, over n), |out| for a maximum.
func refSeqPool(steps, b, cols, ldy, ldout int, takeMax bool, lengths []int32, y, out []float64) (pooled, mag []float64, argmax []int32) {
	pooled, mag, argmax = clone(out), make([]float64, len(out)), make([]int32, b*cols)
	for i := range b {
		n := seqLen(lengths, i, steps)
		for c := range cols {
			o := i*ldout + c
			v, m, arg := 0.0, 0.0, int32(-1)
			for t := range n {
				x := y[(t*b+i)*ldy+c]
				switch {
				case !takeMax:
					v += x
					m += math.Abs(x)
				case t == 0 || x > v || math.IsNaN(x) && !math.IsNaN(v):
					v, arg = x, int32(t)
				}
			}
			if n > 0 && !takeMax {
				v, m = v/float64(n), m/float64(n)
			}
			if takeMax {
				m = math.Abs(v)
			}
			pooled[o], mag[o], argmax[i*cols+c] = v, m, arg
		}
	}
	return pooled, mag, argmax
}

// refSeqPoolGrad is device.SeqPoolGrad in float64: dy with rows (t, i) of
// cols elements, ldy apart, replaced by dOut[i]/n at the first n steps of
// sequence i (or with takeMax dOut[i, c] at step argmax[i, c] alone) and
// zeros elsewhere; elements between the rows keep their values. bad says
// whether an argmax of a non-empty sequence lies outside its steps.
func refSeqPoolGrad(steps, b, cols, lddout, lddy int, takeMax bool, lengths []int32, dOut []float64, argmax []int32, dy []float64) (out []float64, bad bool) {
	out = clone(dy)
	for t := range steps {
		for i := range b {
			n := seqLen(lengths, i, steps)
			row := out[(t*b+i)*lddy:][:cols]
			for c := range row {
				g, v := dOut[i*lddout+c], 0.0
				switch {
				case t >= n:
				case !takeMax:
					v = g / float64(n)
				default:
					s := int(argmax[i*cols+c])
					bad = bad || s < 0 || s >= n
					if s == t {
						v = g
					}
				}
				row[c] = v
			}
		}
	}
	return out, bad
}

// poolCase is one SeqPool launch and the SeqPoolGrad of its result: the
// shape, the strides as passed (0 for Cols) and the offsets of Y's and
// Out's first rows in their buffers (the same strides and offsets serve
// DY and DOut), and the optional Lengths. Y holds random values at the real
// steps and NaN everywhere else (padded steps, the gaps between rows), so
// a kernel that reads past a sequence's end yields NaN; Out, ArgMax and DY
// start as NaN or -99, so an element the kernel should write and did not,
// or one it should leave and did not, shows.
type poolCase struct {
	name             string
	steps, b, cols   int
	ldy, ldout       int
	yOff, outOff     int
	lengths          []int32
	takeMax          bool
	noArgMax         bool
	values           func(e *env) float64 // Y's real values; nil: uniform in [-1, 1)
	argmaxUnreadable bool                 // the backward's ArgMax: garbage at empty sequences
}

// strides returns the strides in effect.
func (c poolCase) strides() (ldy, ldout int) {
	ldy, ldout = c.ldy, c.ldout
	if ldy == 0 {
		ldy = c.cols
	}
	if ldout == 0 {
		ldout = c.cols
	}
	return ldy, ldout
}

// y is the case's Y: real steps from values (or uniform), NaN elsewhere.
func (c poolCase) y(e *env, ldy int) []float64 {
	y := nans(c.yOff + c.steps*c.b*ldy)
	for t := range c.steps {
		for i := range c.b {
			if t >= seqLen(c.lengths, i, c.steps) {
				continue
			}
			row := y[c.yOff+(t*c.b+i)*ldy:][:c.cols]
			for k := range row {
				if c.values != nil {
					row[k] = e.r(c.values(e))
				} else {
					row[k] = e.r(2*e.rng.Float64() - 1)
				}
			}
		}
	}
	return y
}

// run launches SeqPool, checks Out and ArgMax against the reference, then
// launches SeqPoolGrad with the device's ArgMax and checks DY.
func (c poolCase) run(e *env) {
	e.t.Helper()
	ldy, ldout := c.strides()
	y := c.y(e, ldy)
	// Exactly as many elements as the shape needs past each offset; the
	// vecs hold the whole last stride, checked untouched.
	ny := c.yOff + max(0, (c.steps*c.b-1)*ldy+c.cols)
	nOut := c.outOff + (c.b-1)*ldout + c.cols
	vY, vOut := e.vec(y), e.vec(nans(c.outOff+c.b*ldout))
	vArg := e.ids(constantInt(c.b*c.cols, -99))
	a := device.SeqPool{DType: e.dt, T: c.steps, B: c.b, Cols: c.cols, Max: c.takeMax, LdY: c.ldy, LdOut: c.ldout,
		Out: vOut.buf.Elems(e.dt, c.outOff, nOut-c.outOff)}
	if c.steps > 0 {
		a.Y = vY.buf.Elems(e.dt, c.yOff, ny-c.yOff)
	}
	if c.lengths != nil {
		a.Lengths = e.ids(c.lengths).buf
	}
	if !c.noArgMax {
		a.ArgMax = vArg.buf
	}
	e.launch(a)
	init := nans(c.outOff + c.b*ldout)
	want, mag, wantArg := refSeqPool(c.steps, c.b, c.cols, ldy, ldout, c.takeMax, c.lengths, y[c.yOff:], init[c.outOff:])
	want, mag = append(init[:c.outOff:c.outOff], want...), append(make([]float64, c.outOff), mag...)
	gotOut, gotArg := e.get("Out", vOut), e.get("ArgMax", vArg)
	switch {
	case !c.takeMax:
		// A sum of n terms and a division.
		checkClose(e.t, "Out", gotOut, want, mag, SumTolerance(e.dt, c.steps+1))
		checkExact(e.t, "ArgMax", gotArg, constant(c.b*c.cols, -99)) // not written
	case c.noArgMax:
		checkExact(e.t, "Out", gotOut, want)
		checkExact(e.t, "ArgMax", gotArg, constant(c.b*c.cols, -99))
	default:
		checkExact(e.t, "Out", gotOut, want)
		checkExact(e.t, "ArgMax", gotArg, int32s(wantArg))
	}

	// The backward, DOut and DY strided and offset as Out and Y.
	dOut := nans(c.outOff + c.b*ldout)
	for i := range c.b {
		copy(dOut[c.outOff+i*ldout:][:c.cols], e.uniform(c.cols, -1, 1))
	}
	argmax := wantArg
	if c.argmaxUnreadable {
		argmax = append([]int32(nil), wantArg...)
		for i := range c.b {
			if seqLen(c.lengths, i, c.steps) == 0 {
				for k := range c.cols {
					argmax[i*c.cols+k] = int32(7 + k) // never read
				}
			}
		}
	}
	vDOut, vDY := e.vec(dOut), e.vec(nans(c.yOff+c.steps*c.b*ldy))
	g := device.SeqPoolGrad{DType: e.dt, T: c.steps, B: c.b, Cols: c.cols, Max: c.takeMax, Lengths: a.Lengths,
		LdDOut: c.ldout, LdDY: c.ldy, DOut: vDOut.buf.Elems(e.dt, c.outOff, nOut-c.outOff)}
	if c.steps > 0 {
		g.DY = vDY.buf.Elems(e.dt, c.yOff, ny-c.yOff)
	}
	if c.takeMax {
		if c.noArgMax || c.argmaxUnreadable {
			g.ArgMax = e.ids(argmax).buf
		} else {
			g.ArgMax = vArg.buf // the device's own
		}
	}
	e.launch(g)
	e.sync()
	dy := nans(c.yOff + c.steps*c.b*ldy)
	wantDY, _ := refSeqPoolGrad(c.steps, c.b, c.cols, ldout, ldy, c.takeMax, c.lengths, dOut[c.outOff:], argmax, dy[c.yOff:])
	wantDY = append(dy[:c.yOff:c.yOff], wantDY...)
	if c.takeMax {
		checkExact(e.t, "DY", e.get("DY", vDY), wantDY)
	} else {
		checkClose(e.t, "DY", e.get("DY", vDY), wantDY, nil, PointwiseTolerance(e.dt))
	}
}

func constantInt(n int, v int32) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

func int32s(x []int32) []float64 {
	f := make([]float64, len(x))
	for i, v := range x {
		f[i] = float64(v)
	}
	return f
}

func testSeqPool(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		const h = 5 // the hidden size of a bidirectional stack's [T, B, 2H] rows
		for _, op := range []struct {
			name    string
			takeMax bool
		}{{"Mean", false}, {"Max", true}} {
			// 30·40·300 = 360,000 elements: split among a CPU device's
			// threads, or many passes of a grid-stride loop with a capped
			// grid; a gap of one element after each of Y's rows.
			big := poolCase{name: "Large", steps: 30, b: 40, cols: 300, ldy: 301, lengths: make([]int32, 40)}
			for i := range big.lengths {
				big.lengths[i] = int32(1 + e.rng.IntN(big.steps)) // in [1, T]
			}
			// Values from {-1, 0, 1}: most maxima are tied, and the first
			// step must win.
			ties := func(e *env) float64 { return float64(e.rng.IntN(3) - 1) }
			// Real NaNs propagate: a NaN among the real steps is the
			// maximum, the first one's step its ArgMax, and the mean NaN.
			someNaN := func(e *env) float64 {
				if e.rng.IntN(4) == 0 {
					return math.NaN()
				}
				return 2*e.rng.Float64() - 1
			}
			for _, c := range []poolCase{
				{name: "Packed", steps: 4, b: 3, cols: 6},
				// Lengths T and 1, padded sequences, a length past T (T)
				// and ones of 0 and below (empty: zeros).
				{name: "Lengths", steps: 6, b: 6, cols: 9, lengths: []int32{6, 1, 3, 0, 8, -1}},
				// Every sequence empty.
				{name: "Lengths/AllEmpty", steps: 3, b: 2, cols: 4, lengths: []int32{0, 0}},
				// The backward half of a bidirectional output (offset H,
				// stride 2H) into the backward half of Out's rows.
				{name: "HalfRows", steps: 5, b: 4, cols: h, ldy: 2 * h, ldout: 2 * h, yOff: h, outOff: h,
					lengths: []int32{2, 5, 1, 4}},
				// A whole bidirectional output into packed rows.
				{name: "BothHalves", steps: 5, b: 4, cols: 2 * h, lengths: []int32{5, 3, 1, 2}},
				{name: "Strided", steps: 4, b: 3, cols: 7, ldy: 9, ldout: 8, yOff: 2, outOff: 3, lengths: []int32{4, 2, 3}},
				// Wider than the CPU device's chunk of columns (64).
				{name: "Wide", steps: 3, b: 2, cols: 150, lengths: []int32{3, 2}},
				{name: "Ties", steps: 7, b: 5, cols: 8, lengths: []int32{7, 6, 5, 2, 1}, values: ties},
				{name: "NaN", steps: 6, b: 4, cols: 8, lengths: []int32{6, 5, 3, 1}, values: someNaN},
				// T = 0: every sequence is empty.
				{name: "T=0", steps: 0, b: 3, cols: 4},
				big,
			} {
				c.takeMax = op.takeMax
				e.run(op.name+"/"+c.name, func(e *env) { c.run(e) })
			}
		}
		e.run("Max/NoArgMax", func(e *env) {
			// No-grad: the maxima without their steps.
			poolCase{steps: 5, b: 3, cols: 4, lengths: []int32{5, 2, 0}, takeMax: true, noArgMax: true}.run(e)
		})
		e.run("Max/EmptyArgMaxUnread", func(e *env) {
			// The backward does not read the ArgMax of an empty sequence:
			// garbage there raises nothing.
			poolCase{steps: 4, b: 3, cols: 5, lengths: []int32{4, 0, -3}, takeMax: true, argmaxUnreadable: true}.run(e)
		})
		e.run("B=0", func(e *env) {
			// With B = 0 there is nothing to pool and no buffer is needed;
			// with T = 0 nothing to differentiate.
			e.launch(device.SeqPool{DType: e.dt, T: 3, B: 0, Cols: 4, Max: true})
			e.launch(device.SeqPoolGrad{DType: e.dt, T: 3, B: 0, Cols: 4, Max: true})
			e.launch(device.SeqPoolGrad{DType: e.dt, T: 0, B: 3, Cols: 4})
			e.sync()
		})
		e.run("Grad/OutOfRange", func(e *env) {
			// Steps past a sequence's end (3 of 3 steps, 5 past T), before
			// its start (-1) and a huge one: those columns get no
			// gradient, the others theirs; an empty sequence's garbage
			// step is not read.
			const steps, b, cols = 4, 4, 3
			lengths := []int32{3, 4, 0, 2}
			argmax := []int32{0, 3, 2, 1, 5, -1, 99, 99, 99, 1, math.MaxInt32, 0}
			dOut := e.uniform(b*cols, -1, 1)
			vDOut, vDY, vL, vA := e.vec(dOut), e.vec(nans(steps*b*cols)), e.ids(lengths), e.ids(argmax)
			g := device.SeqPoolGrad{DType: e.dt, T: steps, B: b, Cols: cols, Max: true, Lengths: vL.buf, DOut: vDOut.buf, ArgMax: vA.buf, DY: vDY.buf}
			e.checkIndexError(g)
			want, bad := refSeqPoolGrad(steps, b, cols, cols, cols, true, lengths, dOut, argmax, nans(steps*b*cols))
			if !bad {
				e.t.Fatal("the reference finds no bad step")
			}
			checkExact(e.t, "DY", e.get("DY", vDY), want)
		})
		e.run("Grad/OutOfRange/LengthOne", func(e *env) {
			// The one bad step is that of a sequence of one step: raised
			// all the same, though the work for its only step is all
			// there is.
			const steps, b, cols = 3, 2, 2
			lengths, argmax := []int32{2, 1}, []int32{1, 0, 0, 1}
			dOut := e.uniform(b*cols, -1, 1)
			vDOut, vDY, vL, vA := e.vec(dOut), e.vec(nans(steps*b*cols)), e.ids(lengths), e.ids(argmax)
			e.launchIndexError(device.SeqPoolGrad{DType: e.dt, T: steps, B: b, Cols: cols, Max: true, Lengths: vL.buf, DOut: vDOut.buf, ArgMax: vA.buf, DY: vDY.buf})
			want, _ := refSeqPoolGrad(steps, b, cols, cols, cols, true, lengths, dOut, argmax, nans(steps*b*cols))
			checkExact(e.t, "DY", e.get("DY", vDY), want)
		})
		e.run("Grad/OutOfRange/Large", func(e *env) {
			// One bad step, in the last column of the last of many
			// sequences: found wherever the work for it runs.
			const steps, b, cols = 3, 700, 5
			argmax := make([]int32, b*cols)
			for i := range argmax {
				argmax[i] = int32(e.rng.IntN(steps))
			}
			argmax[len(argmax)-1] = steps
			dOut := e.uniform(b*cols, -1, 1)
			vDOut, vDY, vA := e.vec(dOut), e.vec(nans(steps*b*cols)), e.ids(argmax)
			e.launchIndexError(device.SeqPoolGrad{DType: e.dt, T: steps, B: b, Cols: cols, Max: true, DOut: vDOut.buf, ArgMax: vA.buf, DY: vDY.buf})
			want, _ := refSeqPoolGrad(steps, b, cols, cols, cols, true, nil, dOut, argmax, nans(steps*b*cols))
			checkExact(e.t, "DY", e.get("DY", vDY), want)
		})
	})
}
