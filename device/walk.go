package device

import "github.com/gocurrent/gocurrent/alloc"

// Walks: a recurrent layer's walk over many time steps in one call.
//
// A walk is the fused cell calls of a layer's steps (LSTMCell and GRUCell
// given their recurrent product), each reading the state the one before
// it left, queued as one call, so that a device can run the whole
// recurrence as one kernel that stays on the GPU from the first step to
// the last (the CUDA device's persistent walk, cuda.Config.WalkCellsUpTo)
// instead of a launch or two per step. Its results are those of the
// per-step calls it stands for (Queue), to the bit: a device either runs
// those calls or computes exactly what they would.

// Walker is implemented by Kernels that take a layer's walk as one call
// (the CPU, CUDA and meta devices'). Callers discover it by type assertion
// on a Kernels value; Kernels without it take the per-step calls, which
// LSTMWalk.Queue and GRUWalk.Queue queue.
type Walker interface {
	LSTMWalk(a LSTMWalk) error
	GRUWalk(a GRUWalk) error
}

// LSTMWalk is an LSTM layer's walk over Steps time steps: for each step t
// in the order the walk visits them (0, 1, ..., Steps-1, or the reverse
// with Reverse), the fused LSTMCell on the step's slices, its HPrev and
// CPrev the state the step visited before it left (H0 and C0 for the
// first). Per-step buffers are in time order, step t's slice at t.
type LSTMWalk struct {
	DType                DType
	Steps, Batch, Hidden int
	Reverse              bool
	// Pre is [Steps, Batch, 4·Hidden], the input side of the gate
	// pre-activations without bias; each step adds its recurrent product
	// into its slice, as LSTMCell does (unless Act is Pre).
	Pre Buffer
	// W is [4·Hidden, Hidden], W_hh; BiasIH and BiasHH are [4·Hidden]
	// each, or none.
	W, BiasIH, BiasHH Buffer
	// H0 and C0 are [Batch, Hidden], the state entering the first step
	// visited. H0 must not overlap H.
	H0, C0 Buffer
	// H is [Steps, Batch, Hidden]: the h each step leaves.
	H Buffer
	// C is [Steps, Batch, Hidden], the c each step leaves, or none: then
	// CLast, [Batch, Hidden], holds the cell state from step to step (each
	// step's LSTMCell has it as CPrev, but the first's, and as C) and ends
	// holding the last step's. CLast may be C0. Exactly one of C and CLast
	// is given.
	C, CLast Buffer
	// Act is [Steps, Batch, 4·Hidden], the activated gates of every step
	// (LSTMCell's Act), or none. It may be Pre.
	Act Buffer
}

// Step is the LSTMCell call of the walk's i-th step visited (i in [0,
// Steps)).
func (a LSTMWalk) Step(i int) LSTMCell {
	bh := a.Batch * a.Hidden
	t, prev := walkStep(a.Steps, a.Reverse, i)
	c := LSTMCell{DType: a.DType, Batch: a.Batch, Hidden: a.Hidden, Pre: a.Pre.Elems(a.DType, t*4*bh, 4*bh),
		BiasIH: a.BiasIH, BiasHH: a.BiasHH, H: a.H.Elems(a.DType, t*bh, bh), W: a.W, HPrev: a.H0, CPrev: a.C0}
	if prev >= 0 {
		c.HPrev = a.H.Elems(a.DType, prev*bh, bh)
	}
	switch {
	case !a.C.IsZero():
		c.C = a.C.Elems(a.DType, t*bh, bh)
		if prev >= 0 {
			c.CPrev = a.C.Elems(a.DType, prev*bh, bh)
		}
	default:
		c.C = a.CLast
		if prev >= 0 {
			c.CPrev = a.CLast
		}
	}
	if !a.Act.IsZero() {
		c.Act = a.Act.Elems(a.DType, t*4*bh, 4*bh)
	}
	return c
}

// Queue queues the walk as the per-step calls it stands for, on k: what
// Kernels without a walk of their own run (and what a walk computes).
func (a LSTMWalk) Queue(k Kernels) error {
	for i := range a.Steps {
		if err := k.LSTMCell(a.Step(i)); err != nil {
			return err
		}
	}
	return nil
}

// Check reports whether the arguments are valid for d.
func (a LSTMWalk) Check(d Device) error {
	c := checker{d: d, kernel: "LSTMWalk"}
	if !c.cell(a.DType, a.Batch, a.Hidden) {
		return c.err
	}
	c.positive("Steps", a.Steps)
	bh, n := a.Batch*a.Hidden, a.Steps*a.Batch*a.Hidden
	c.buf("Pre", a.Pre, a.DType, 4*n)
	c.buf("W", a.W, a.DType, 4*a.Hidden*a.Hidden)
	c.opt("BiasIH", a.BiasIH, a.DType, 4*a.Hidden)
	c.opt("BiasHH", a.BiasHH, a.DType, 4*a.Hidden)
	c.buf("H0", a.H0, a.DType, bh)
	c.buf("C0", a.C0, a.DType, bh)
	c.buf("H", a.H, a.DType, n)
	if a.C.IsZero() == a.CLast.IsZero() {
		c.fail("give exactly one of C (every step's) and CLast (the last step's)")
	}
	c.opt("C", a.C, a.DType, n)
	c.opt("CLast", a.CLast, a.DType, bh)
	c.opt("Act", a.Act, a.DType, 4*n)
	c.apart("H0", a.H0, a.DType, bh, "H", a.H, n)
	return c.err
}

// GRUWalk is a GRU layer's walk over Steps time steps, LSTMWalk's
// counterpart: for each step t visited, the fused GRUCell on the step's
// slices, its HPrev the h the step visited before it left (H0 for the
// first).
type GRUWalk struct {
	DType                DType
	Steps, Batch, Hidden int
	Reverse              bool
	// XPre is [Steps, Batch, 3·Hidden], the input products without bias.
	XPre Buffer
	// HPre is [Batch, 3·Hidden], where each step's GRUCell writes its
	// recurrent product: it ends holding the last step's.
	HPre Buffer
	// W is [3·Hidden, Hidden], W_hh; BiasIH and BiasHH are [3·Hidden]
	// each, or none.
	W, BiasIH, BiasHH Buffer
	// H0 is [Batch, Hidden], the h entering the first step visited; it
	// must not overlap H.
	H0 Buffer
	// H is [Steps, Batch, Hidden]: the h each step leaves.
	H Buffer
	// Act is [Steps, Batch, 4·Hidden], every step's GRUCell Act, or none.
	Act Buffer
}

// Step is the GRUCell call of the walk's i-th step visited.
func (a GRUWalk) Step(i int) GRUCell {
	bh := a.Batch * a.Hidden
	t, prev := walkStep(a.Steps, a.Reverse, i)
	c := GRUCell{DType: a.DType, Batch: a.Batch, Hidden: a.Hidden, XPre: a.XPre.Elems(a.DType, t*3*bh, 3*bh),
		HPre: a.HPre, BiasIH: a.BiasIH, BiasHH: a.BiasHH, HPrev: a.H0, H: a.H.Elems(a.DType, t*bh, bh), W: a.W}
	if prev >= 0 {
		c.HPrev = a.H.Elems(a.DType, prev*bh, bh)
	}
	if !a.Act.IsZero() {
		c.Act = a.Act.Elems(a.DType, t*4*bh, 4*bh)
	}
	return c
}

// Queue queues the walk as the per-step calls it stands for, on k.
func (a GRUWalk) Queue(k Kernels) error {
	for i := range a.Steps {
		if err := k.GRUCell(a.Step(i)); err != nil {
			return err
		}
	}
	return nil
}

// Check reports whether the arguments are valid for d.
func (a GRUWalk) Check(d Device) error {
	c := checker{d: d, kernel: "GRUWalk"}
	if !c.cell(a.DType, a.Batch, a.Hidden) {
		return c.err
	}
	c.positive("Steps", a.Steps)
	bh, n := a.Batch*a.Hidden, a.Steps*a.Batch*a.Hidden
	c.buf("XPre", a.XPre, a.DType, 3*n)
	c.buf("HPre", a.HPre, a.DType, 3*bh)
	c.buf("W", a.W, a.DType, 3*a.Hidden*a.Hidden)
	c.opt("BiasIH", a.BiasIH, a.DType, 3*a.Hidden)
	c.opt("BiasHH", a.BiasHH, a.DType, 3*a.Hidden)
	c.buf("H0", a.H0, a.DType, bh)
	c.buf("H", a.H, a.DType, n)
	c.opt("Act", a.Act, a.DType, 4*n)
	c.apart("H0", a.H0, a.DType, bh, "H", a.H, n)
	return c.err
}

// walkStep is the time step t of a walk's i-th step visited, and prev
// the step visited before it (-1 for none).
func walkStep(steps int, reverse bool, i int) (t, prev int) {
	if reverse {
		t, prev = steps-1-i, steps-i
	} else {
		t, prev = i, i-1
	}
	if i == 0 {
		prev = -1
	}
	return t, prev
}

// apart checks that the first n1 elements of b1 and the first n2 of b2 do
// not overlap.
func (c *checker) apart(name1 string, b1 Buffer, t DType, n1 int, name2 string, b2 Buffer, n2 int) {
	if c.err != nil {
		return
	}
	lo1, lo2 := b1.Addr(), b2.Addr()
	hi1, hi2 := lo1+alloc.Ptr(int64(n1)*t.Size()), lo2+alloc.Ptr(int64(n2)*t.Size())
	if lo1 < hi2 && lo2 < hi1 {
		c.fail("%s overlaps %s", name1, name2)
	}
}
