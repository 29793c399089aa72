package devicetest

import (
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// refGatherSeq is device.GatherSeq in float64: y with rows (t, i) of
// cols elements, ldy apart, replaced by rows (t, index[i]) of x, ldx apart,
// or by zeros at steps past lengths[i] and for an index outside [0, b).
// index nil is the identity, lengths nil all steps. Elements of y between
// the rows keep their values.
func refGatherSeq(steps, b, cols, ldx, ldy int, index, lengths []int32, x, y []float64) []float64 {
	out := clone(y)
	for t := range steps {
		for i := range b {
			src, n := i, steps
			if index != nil {
				src = int(index[i])
			}
			if lengths != nil {
				n = int(lengths[i])
			}
			row := out[(t*b+i)*ldy:][:cols]
			if src < 0 || src >= b || t >= n {
				clear(row)
				continue
			}
			copy(row, x[(t*b+src)*ldx:][:cols])
		}
	}
	return out
}

// gatherCase is one GatherSeq launch: the shape, the strides as passed (0
// for Cols), where X's and Y's first rows start in their buffers, and the
// optional Index and Lengths (nil: none). X is filled with random values
// and Y with NaNs, so a row the kernel should zero and did not, or an
// element between rows it wrote, shows.
type gatherCase struct {
	name          string
	steps, b      int
	cols          int
	ldx, ldy      int
	xOff, yOff    int
	index, length []int32
}

// gatherLaunch is a case's arguments with the values and buffers behind
// them.
type gatherLaunch struct {
	args     device.GatherSeq
	ldx, ldy int // the strides in effect
	x, y     []float64
	vY       vec
}

// args uploads the case's X, Y, Index and Lengths to e's device.
func (c gatherCase) args(e *env) gatherLaunch {
	ldx, ldy := c.ldx, c.ldy
	if ldx == 0 {
		ldx = c.cols
	}
	if ldy == 0 {
		ldy = c.cols
	}
	// Exactly as many elements as the shape needs past each offset, the
	// last row ending the slice the kernel gets; Y's vec has the whole
	// last stride, so that an element past the last row is checked too.
	nx := c.xOff + (c.steps*c.b-1)*ldx + c.cols
	ny := c.yOff + (c.steps*c.b-1)*ldy + c.cols
	x := e.uniform(nx, -1, 1)
	y := nans(c.yOff + c.steps*c.b*ldy)
	vX, vY := e.vec(x), e.vec(y)
	a := device.GatherSeq{DType: e.dt, T: c.steps, B: c.b, Cols: c.cols, LdX: c.ldx, LdY: c.ldy,
		X: vX.buf.Elems(e.dt, c.xOff, nx-c.xOff), Y: vY.buf.Elems(e.dt, c.yOff, ny-c.yOff)}
	if c.index != nil {
		a.Index = e.ids(c.index).buf
	}
	if c.length != nil {
		a.Lengths = e.ids(c.length).buf
	}
	return gatherLaunch{args: a, ldx: ldx, ldy: ldy, x: x, y: y, vY: vY}
}

// run launches the case on e's device and checks Y against the
// reference.
func (c gatherCase) run(e *env) {
	a := c.args(e)
	e.launch(a.args)
	a.check(e, c)
}

// check compares all of Y's buffer with the reference: the rows written
// and what lies around them.
func (a gatherLaunch) check(e *env, c gatherCase) {
	e.t.Helper()
	want := clone(a.y)
	copy(want[c.yOff:], refGatherSeq(c.steps, c.b, c.cols, a.ldx, a.ldy, c.index, c.length, a.x[c.xOff:], a.y[c.yOff:]))
	checkExact(e.t, "Y", e.get("Y", a.vY), want)
}

func testGatherSeq(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		const h = 5 // the hidden size of a bidirectional stack's [T, B, 2H] rows
		// 288,000 elements: split among a CPU device's threads, or many
		// passes of a grid-stride loop with a capped grid; a gap of one
		// element after each of Y's rows.
		big := gatherCase{name: "Large", steps: 20, b: 48, cols: 300, ldx: 300, ldy: 301,
			index: e.perm(48), length: make([]int32, 48)}
		for i := range big.length {
			big.length[i] = int32(1 + e.rng.IntN(big.steps)) // in [1, T]
		}
		repeats := make([]int32, 16)
		for i := range repeats {
			repeats[i] = int32(e.rng.IntN(4)) // sequences 0..3 only, each several times
		}
		for _, c := range []gatherCase{
			{name: "Identity/Packed", steps: 3, b: 4, cols: 6},
			// The backward half of X's rows (offset H, stride 2H) into the
			// forward half of Y's, leaving Y's other half alone.
			{name: "Identity/HalfRows", steps: 4, b: 3, cols: h, ldx: 2 * h, ldy: 2 * h, xOff: h},
			// Lengths 1 and T, padded sequences of 3 and 0 steps, a
			// length past T (counts as T) and one below 0 (no steps).
			{name: "Permutation/Lengths", steps: 6, b: 6, cols: 9,
				index: []int32{3, 0, 5, 1, 2, 4}, length: []int32{6, 1, 3, 0, 8, -1}},
			{name: "Permutation/Lengths/Strided", steps: 6, b: 6, cols: 4, ldx: 7, ldy: 5, xOff: 2, yOff: 1,
				index: []int32{5, 4, 3, 2, 1, 0}, length: []int32{1, 6, 2, 6, 5, 3}},
			{name: "LengthsOnly", steps: 5, b: 3, cols: 8, length: []int32{5, 2, 1}},
			{name: "Repeats", steps: 2, b: 16, cols: 3, index: repeats},
			// T = 1: the states of a stack, taken in another order, the
			// second time into the backward half of [B, 2H] rows.
			{name: "State", steps: 1, b: 7, cols: 33, index: []int32{6, 2, 0, 1, 5, 3, 4}},
			{name: "State/HalfRows", steps: 1, b: 4, cols: h, ldx: 2 * h, ldy: 2 * h, yOff: h, index: []int32{1, 3, 0, 2}},
			big,
		} {
			e.run(c.name, func(e *env) { c.run(e) })
		}
		e.run("Empty", func(e *env) {
			// With T = 0 or B = 0 there is nothing to copy and no buffer
			// is needed.
			e.launch(device.GatherSeq{DType: e.dt, T: 0, B: 3, Cols: 4})
			e.launch(device.GatherSeq{DType: e.dt, T: 3, B: 0, Cols: 4})
			e.sync()
		})
		e.run("OutOfRange", func(e *env) {
			// Sequences 1 and 3 have bad indices, -1 and 5 = B, the
			// nearest bad values on either side. Their rows are zeros,
			// the others gathered.
			c := gatherCase{steps: 4, b: 5, cols: 3, ldy: 4,
				index: []int32{4, -1, 0, 5, 2}, length: []int32{4, 2, 1, 0, 3}}
			a := c.args(e)
			e.checkIndexError(a.args)
			a.check(e, c)
		})
		e.run("OutOfRange/LengthZero", func(e *env) {
			// The one bad index is that of a sequence of no steps, whose
			// rows are zeros anyway: it raises all the same.
			c := gatherCase{steps: 3, b: 3, cols: 2, index: []int32{1, 7, 0}, length: []int32{3, 0, 2}}
			a := c.args(e)
			e.launchIndexError(a.args)
			a.check(e, c)
		})
		e.run("OutOfRange/Large", func(e *env) {
			// A large bad index, in the last of many sequences: found
			// wherever the work for it runs (a device's last thread, or a
			// late pass of a loop).
			c := gatherCase{steps: 3, b: 1000, cols: 5, index: e.perm(1000)}
			c.index[999] = math.MinInt32
			a := c.args(e)
			e.launchIndexError(a.args)
			a.check(e, c)
		})
	})
}

// perm is a random permutation of [0, n) as Int32 indices.
func (e *env) perm(n int) []int32 {
	p := make([]int32, n)
	for i, v := range e.rng.Perm(n) {
		p[i] = int32(v)
	}
	return p
}
