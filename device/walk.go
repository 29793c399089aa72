package device

import "github.com/gocurrent/gocurrent/alloc"

// Walks: a recurrent layer's walk over many time steps in one call.
//
// A walk is the fused cell calls of a layer's steps (LSTMCell and GRUCell
// given their recurrent product), each reading the state the one before
// it left, queued as one call, so that a device can run the whole
// recurrence as one kernel that stays on the GPU from the first step to
// the last (the CUDA device's persistent walk, cuda.Config.WalkCellsUpTo)
// instead of a launch or two per step; a walk back is the fused cell
// gradient calls of the same steps in the opposite order, each given the
// product of the one walked back before it. Its results are those of the
// per-step calls it stands for (Queue), to the bit: a device either runs
// those calls or computes exactly what they would. Over sequences of
// several lengths (sorted longest first) each step covers the rows still
// running (Rows), as its per-step call given that batch would.

// Walker is implemented by Kernels that take a layer's walk as one call
// (the CPU, CUDA and meta devices'): forward (LSTMWalk, GRUWalk) and back
// (LSTMGradWalk, GRUGradWalk). Callers discover it by type assertion on a
// Kernels value; Kernels without it take the per-step calls, which the
// argument's Queue queues.
type Walker interface {
	LSTMWalk(a LSTMWalk) error
	GRUWalk(a GRUWalk) error
	LSTMGradWalk(a LSTMGradWalk) error
	GRUGradWalk(a GRUGradWalk) error
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
	// Rows, for a walk over sequences of several lengths sorted longest
	// first, is the rows each step runs, in time order (step t's at t):
	// step t's call covers the first Rows[t] rows (its Batch) and leaves
	// the other rows of its outputs as they were; nil for all Batch rows
	// at every step. A row a step runs that the step visited before it
	// did not (a reverse walk's sequence starting there) reads what the
	// caller put in that step's rows of the state. RowsAt is Rows on the
	// device, Steps Int32, which a device's walk kernel reads: both or
	// neither, holding the same counts.
	Rows   []int
	RowsAt Buffer
}

// Step is the LSTMCell call of the walk's i-th step visited (i in [0,
// Steps)).
func (a LSTMWalk) Step(i int) LSTMCell {
	bh := a.Batch * a.Hidden
	t, prev := walkStep(a.Steps, a.Reverse, i)
	c := LSTMCell{DType: a.DType, Batch: walkRows(a.Rows, a.Batch, t), Hidden: a.Hidden, Pre: a.Pre.Elems(a.DType, t*4*bh, 4*bh),
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
	if !c.walkSizes(a.Steps, a.Batch, a.Hidden) {
		return c.err
	}
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
	c.rows(a.Rows, a.RowsAt, a.Steps, a.Batch)
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
	// Rows and RowsAt are LSTMWalk's: the rows each step runs, with
	// lengths.
	Rows   []int
	RowsAt Buffer
}

// Step is the GRUCell call of the walk's i-th step visited.
func (a GRUWalk) Step(i int) GRUCell {
	bh := a.Batch * a.Hidden
	t, prev := walkStep(a.Steps, a.Reverse, i)
	c := GRUCell{DType: a.DType, Batch: walkRows(a.Rows, a.Batch, t), Hidden: a.Hidden, XPre: a.XPre.Elems(a.DType, t*3*bh, 3*bh),
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
	if !c.walkSizes(a.Steps, a.Batch, a.Hidden) {
		return c.err
	}
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
	c.rows(a.Rows, a.RowsAt, a.Steps, a.Batch)
	return c.err
}

// LSTMGradWalk is the walk back over an LSTM layer's walk of Steps steps
// (LSTMWalk, whose Reverse it has): its steps in the opposite order, each
// the fused LSTMCellGrad of the step, given the recurrent product of the
// step walked back before it (DPreIn's, or none, for the first).
type LSTMGradWalk struct {
	DType                DType
	Steps, Batch, Hidden int
	// Reverse is the forward walk's: the walk back visits Steps-1, ..., 0
	// without it, 0, ..., Steps-1 with it.
	Reverse bool
	// Act is [Steps, Batch, 4·Hidden], the forward's activated gates; C
	// is [Steps, Batch, Hidden], the c each step left, and C0 [Batch,
	// Hidden] the c entering the forward's first step: each step's CPrev
	// is C at the step the forward visited before it, C0 for its first.
	Act, C, C0 Buffer
	// DH is [Steps, Batch, Hidden], the gradient with respect to each
	// step's h from above; each step's call adds the recurrent product of
	// the step walked back before it into its slice.
	DH Buffer
	// DC is [Batch, Hidden]: the gradient with respect to the last
	// step's c at first, carried from step to step in place (each call's
	// DC and DCPrev), and with respect to C0 at the end.
	DC Buffer
	// DPre is [Steps, Batch, 4·Hidden], the pre-activation gradients. It
	// may be Act.
	DPre Buffer
	// W is [4·Hidden, Hidden], W_hh.
	W Buffer
	// DPreIn is [rows, 4·Hidden], the pre-activation gradient of the step
	// the forward visited after the walk's steps (the first walked back's
	// DPreNext), or none: the first step walked back then gets no product
	// (its call is not the fused form). Its rows are NextBatch's (below),
	// all the walk reads of it. It must not overlap the walk's outputs
	// (DH, DC, DPre). DH must not overlap DC or DPre.
	DPreIn Buffer
	// Rows and RowsAt are the forward walk's (LSTMWalk): each step's call
	// covers its Rows, and takes the product of the step walked back
	// before it over that step's (its NextBatch). NextBatch is the rows
	// of DPreIn, 0 meaning the first step walked back's.
	Rows      []int
	RowsAt    Buffer
	NextBatch int
}

// Step is the LSTMCellGrad call of the walk back's i-th step (i in [0,
// Steps)).
func (a LSTMGradWalk) Step(i int) LSTMCellGrad {
	bh := a.Batch * a.Hidden
	t, next, fprev := gradWalkStep(a.Steps, a.Reverse, i)
	g := LSTMCellGrad{DType: a.DType, Batch: walkRows(a.Rows, a.Batch, t), Hidden: a.Hidden, Act: a.Act.Elems(a.DType, t*4*bh, 4*bh), CPrev: a.C0,
		C: a.C.Elems(a.DType, t*bh, bh), DH: a.DH.Elems(a.DType, t*bh, bh), DC: a.DC, DPre: a.DPre.Elems(a.DType, t*4*bh, 4*bh),
		DCPrev: a.DC}
	if fprev >= 0 {
		g.CPrev = a.C.Elems(a.DType, fprev*bh, bh)
	}
	switch {
	case next >= 0:
		g.DPreNext, g.W, g.NextBatch = a.DPre.Elems(a.DType, next*4*bh, 4*bh), a.W, walkNext(a.Rows, next)
	case !a.DPreIn.IsZero():
		g.DPreNext, g.W, g.NextBatch = a.DPreIn, a.W, a.NextBatch
	}
	return g
}

// Queue queues the walk back as the per-step calls it stands for, on k.
func (a LSTMGradWalk) Queue(k Kernels) error {
	for i := range a.Steps {
		if err := k.LSTMCellGrad(a.Step(i)); err != nil {
			return err
		}
	}
	return nil
}

// Check reports whether the arguments are valid for d.
func (a LSTMGradWalk) Check(d Device) error {
	c := checker{d: d, kernel: "LSTMGradWalk"}
	if !c.cell(a.DType, a.Batch, a.Hidden) {
		return c.err
	}
	c.positive("Steps", a.Steps)
	if !c.walkSizes(a.Steps, a.Batch, a.Hidden) {
		return c.err
	}
	bh, n := a.Batch*a.Hidden, a.Steps*a.Batch*a.Hidden
	c.buf("Act", a.Act, a.DType, 4*n)
	c.buf("C", a.C, a.DType, n)
	c.buf("C0", a.C0, a.DType, bh)
	c.buf("DH", a.DH, a.DType, n)
	c.buf("DC", a.DC, a.DType, bh)
	c.buf("DPre", a.DPre, a.DType, 4*n)
	c.buf("W", a.W, a.DType, 4*a.Hidden*a.Hidden)
	c.rows(a.Rows, a.RowsAt, a.Steps, a.Batch)
	c.nextRows(a.NextBatch, a.Batch, !a.DPreIn.IsZero(), "DPreIn")
	if c.err != nil {
		return c.err
	}
	in := 4 * gradWalkIn(a.Rows, a.Batch, a.Steps, a.Reverse, a.NextBatch) * a.Hidden
	c.opt("DPreIn", a.DPreIn, a.DType, in)
	c.apart("DH", a.DH, a.DType, n, "DPre", a.DPre, 4*n)
	c.apart("DH", a.DH, a.DType, n, "DC", a.DC, bh)
	if !a.DPreIn.IsZero() {
		c.apart("DPreIn", a.DPreIn, a.DType, in, "DPre", a.DPre, 4*n)
		c.apart("DPreIn", a.DPreIn, a.DType, in, "DC", a.DC, bh)
		c.apart("DPreIn", a.DPreIn, a.DType, in, "DH", a.DH, n)
	}
	return c.err
}

// GRUGradWalk is LSTMGradWalk's counterpart for a GRU layer's walk
// (GRUWalk): its steps in the opposite order, each the fused GRUCellGrad
// of the step, given the recurrent product of the step walked back before
// it (DHPreIn's, or none, for the first), adding the direct part of the
// gradient with respect to the h entering the step into DH at the step
// the forward visited before it (DH0, written, for its first).
type GRUGradWalk struct {
	DType                DType
	Steps, Batch, Hidden int
	Reverse              bool // the forward walk's
	// Act is [Steps, Batch, 4·Hidden], the forward's; H [Steps, Batch,
	// Hidden] the h each step left and H0 [Batch, Hidden] the h entering
	// the forward's first step: each step's HPrev.
	Act, H, H0 Buffer
	// DH is [Steps, Batch, Hidden], the gradient with respect to each
	// step's h from above; each step's call adds into its slice the
	// recurrent product of the step walked back before it, and into the
	// slice of the step the forward visited before it its direct part.
	DH Buffer
	// DH0 is [Batch, Hidden]: where the direct part of the gradient with
	// respect to H0 is written (the forward's first step's DHPrev).
	DH0 Buffer
	// DXPre and DHPre are [Steps, Batch, 3·Hidden], the gradients with
	// respect to the input and recurrent products.
	DXPre, DHPre Buffer
	// W is [3·Hidden, Hidden], W_hh; DHPreIn is [rows, 3·Hidden], the
	// DHPre of the step the forward visited after the walk's steps, or
	// none, as LSTMGradWalk's DPreIn (NextBatch's rows); it must not
	// overlap the outputs (DH, DH0, DXPre, DHPre), nor DH the others.
	W, DHPreIn Buffer
	// Rows, RowsAt and NextBatch (DHPreIn's rows) are LSTMGradWalk's.
	Rows      []int
	RowsAt    Buffer
	NextBatch int
}

// Step is the GRUCellGrad call of the walk back's i-th step.
func (a GRUGradWalk) Step(i int) GRUCellGrad {
	bh := a.Batch * a.Hidden
	t, next, fprev := gradWalkStep(a.Steps, a.Reverse, i)
	g := GRUCellGrad{DType: a.DType, Batch: walkRows(a.Rows, a.Batch, t), Hidden: a.Hidden, Act: a.Act.Elems(a.DType, t*4*bh, 4*bh), HPrev: a.H0,
		DH: a.DH.Elems(a.DType, t*bh, bh), DXPre: a.DXPre.Elems(a.DType, t*3*bh, 3*bh), DHPre: a.DHPre.Elems(a.DType, t*3*bh, 3*bh),
		DHPrev: a.DH0}
	if fprev >= 0 {
		g.HPrev = a.H.Elems(a.DType, fprev*bh, bh)
		g.DHPrev, g.Accumulate = a.DH.Elems(a.DType, fprev*bh, bh), true
	}
	switch {
	case next >= 0:
		g.DHPreNext, g.W, g.NextBatch = a.DHPre.Elems(a.DType, next*3*bh, 3*bh), a.W, walkNext(a.Rows, next)
	case !a.DHPreIn.IsZero():
		g.DHPreNext, g.W, g.NextBatch = a.DHPreIn, a.W, a.NextBatch
	}
	return g
}

// Queue queues the walk back as the per-step calls it stands for, on k.
func (a GRUGradWalk) Queue(k Kernels) error {
	for i := range a.Steps {
		if err := k.GRUCellGrad(a.Step(i)); err != nil {
			return err
		}
	}
	return nil
}

// Check reports whether the arguments are valid for d.
func (a GRUGradWalk) Check(d Device) error {
	c := checker{d: d, kernel: "GRUGradWalk"}
	if !c.cell(a.DType, a.Batch, a.Hidden) {
		return c.err
	}
	c.positive("Steps", a.Steps)
	if !c.walkSizes(a.Steps, a.Batch, a.Hidden) {
		return c.err
	}
	bh, n := a.Batch*a.Hidden, a.Steps*a.Batch*a.Hidden
	c.buf("Act", a.Act, a.DType, 4*n)
	c.buf("H", a.H, a.DType, n)
	c.buf("H0", a.H0, a.DType, bh)
	c.buf("DH", a.DH, a.DType, n)
	c.buf("DH0", a.DH0, a.DType, bh)
	c.buf("DXPre", a.DXPre, a.DType, 3*n)
	c.buf("DHPre", a.DHPre, a.DType, 3*n)
	c.buf("W", a.W, a.DType, 3*a.Hidden*a.Hidden)
	c.rows(a.Rows, a.RowsAt, a.Steps, a.Batch)
	c.nextRows(a.NextBatch, a.Batch, !a.DHPreIn.IsZero(), "DHPreIn")
	if c.err != nil {
		return c.err
	}
	in := 3 * gradWalkIn(a.Rows, a.Batch, a.Steps, a.Reverse, a.NextBatch) * a.Hidden
	c.opt("DHPreIn", a.DHPreIn, a.DType, in)
	c.apart("DH", a.DH, a.DType, n, "DH0", a.DH0, bh)
	c.apart("DH", a.DH, a.DType, n, "DXPre", a.DXPre, 3*n)
	c.apart("DH", a.DH, a.DType, n, "DHPre", a.DHPre, 3*n)
	if !a.DHPreIn.IsZero() {
		for _, o := range []struct {
			name string
			b    Buffer
			n    int
		}{{"DH", a.DH, n}, {"DH0", a.DH0, bh}, {"DXPre", a.DXPre, 3 * n}, {"DHPre", a.DHPre, 3 * n}} {
			c.apart("DHPreIn", a.DHPreIn, a.DType, in, o.name, o.b, o.n)
		}
	}
	return c.err
}

// gradWalkIn is the rows of the product a walk back is handed in
// (DPreIn, DHPreIn), all it reads of it: NextBatch, or with 0 the rows
// of the first step walked back, whose product it is.
func gradWalkIn(rows []int, batch, steps int, reverse bool, next int) int {
	if next != 0 {
		return next
	}
	t, _, _ := gradWalkStep(steps, reverse, 0)
	return walkRows(rows, batch, t)
}

// gradWalkStep is the time step t of a walk back's i-th step, the step
// walked back before it (next, the one the forward visited after t; -1
// for none) and the step the forward visited before t (fprev; -1 for
// none).
func gradWalkStep(steps int, reverse bool, i int) (t, next, fprev int) {
	if reverse {
		t, next, fprev = i, i-1, i+1
		if fprev == steps {
			fprev = -1
		}
	} else {
		t, next, fprev = steps-1-i, steps-i, steps-2-i
	}
	if i == 0 {
		next = -1
	}
	return t, next, fprev
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

// walkRows is the rows a walk's step t runs: rows[t], or batch without
// lengths.
func walkRows(rows []int, batch, t int) int {
	if rows == nil {
		return batch
	}
	return rows[t]
}

// walkNext is the NextBatch of a walk back's step whose product comes
// from step next: 0 (its own Batch) without lengths, else next's rows.
func walkNext(rows []int, next int) int {
	if rows == nil {
		return 0
	}
	return rows[next]
}

// rows checks a walk's Rows and RowsAt: both or neither, a count in [1,
// batch] for each of its steps, and their device copy.
func (c *checker) rows(rows []int, at Buffer, steps, batch int) {
	if rows == nil && at.IsZero() {
		return
	}
	if rows == nil || at.IsZero() {
		c.fail("Rows and RowsAt are the rows each step runs, on the host and on the device: give both or neither")
		return
	}
	if len(rows) != steps {
		c.fail("%d Rows for %d steps, want one a step", len(rows), steps)
		return
	}
	for t, n := range rows {
		if n < 1 || n > batch {
			c.fail("Rows[%d] is %d, want 1 ≤ rows ≤ Batch = %d", t, n, batch)
			return
		}
	}
	c.buf("RowsAt", at, Int32, steps)
}

// nextRows checks a walk back's NextBatch, the rows of its product in
// (named in): in [0, batch], and 0 without it.
func (c *checker) nextRows(next, batch int, given bool, in string) {
	if next < 0 || next > batch {
		c.fail("NextBatch is %d, want 0 ≤ NextBatch ≤ Batch = %d", next, batch)
	}
	if next != 0 && !given {
		c.fail("NextBatch is %d without %s", next, in)
	}
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

// walkSizes checks that a walk's sizes, up to four gate blocks of every
// step's rows and of W, fit an int, so that the products of its checks
// and of its steps' views (bh, n, 4·n, 4·Hidden²) cannot overflow; false
// when they do not.
func (c *checker) walkSizes(steps, batch, hidden int) bool {
	if c.mul(4, c.mul(steps, c.mul(batch, hidden))) < 0 || c.mul(4, c.mul(hidden, hidden)) < 0 {
		c.fail("Steps %d, Batch %d, Hidden %d: 4·Steps·Batch·Hidden or 4·Hidden² elements overflow int", steps, batch, hidden)
	}
	return c.err == nil
}
