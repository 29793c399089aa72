package rnn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// branchCounts are what a countedBranch was asked for: the Forks, Joins
// and Closes, and the kernels the weight gradients use on it (Gemm,
// SumRows, Copy). device.Counts cannot tell a branch's calls from the
// compute stream's.
type branchCounts struct {
	forks, joins, closed   int
	gemms, sumRows, copies int
}

// countedBranch is a device's branch that counts what it is asked for.
// (A wrapped device could not count them: the buffers it allocates would
// belong to the device it wraps, which the layers refuse.)
type countedBranch struct {
	device.Branch
	n branchCounts
	// unjoined is the number of kernel calls since the last Join.
	unjoined int
	// products are the outputs of the Gemms queued on it since the last
	// clearing, for checkTwin.
	products []device.Buffer
	// inputRows are the rows of its input projections (TransB Gemms) by
	// the width of what they project (K), TestProjectionRunningRows's.
	inputRows map[int]int
}

func (b *countedBranch) Kernels() device.Kernels {
	return countedKernels{Kernels: b.Branch.Kernels(), b: b}
}
func (b *countedBranch) Fork() error  { b.n.forks++; return b.Branch.Fork() }
func (b *countedBranch) Join() error  { b.n.joins++; b.unjoined = 0; return b.Branch.Join() }
func (b *countedBranch) Close() error { b.n.closed++; return b.Branch.Close() }

type countedKernels struct {
	device.Kernels
	b *countedBranch
}

func (k countedKernels) Gemm(a device.Gemm) error {
	k.b.n.gemms++
	k.b.unjoined++
	k.b.products = append(k.b.products, a.C)
	if a.TransB && k.b.inputRows != nil {
		k.b.inputRows[a.K] += a.M
	}
	return k.Kernels.Gemm(a)
}

func (k countedKernels) SumRows(a device.SumRows) error {
	k.b.n.sumRows++
	k.b.unjoined++
	return k.Kernels.SumRows(a)
}

func (k countedKernels) Copy(a device.Copy) error {
	k.b.n.copies++
	k.b.unjoined++
	return k.Kernels.Copy(a)
}

// branchCase is one stack and batch of TestBranchSameBits.
type branchCase struct {
	layers    int
	dropout   float64
	noBias    bool
	bidir     bool
	lengths   []int32
	recompute int
	tied      bool
	// branched says the case's Backward runs its weight gradients on the
	// branch (branch.go: not with bidirectional Recompute).
	branched bool
	// wave is the stack's WaveWindows (0: 4), and eval adds a NoGrad
	// forward after the training steps (TestWaveSameBits).
	wave int
	eval bool
	// chunk is the steps of a chunk of the products over steps (0: 1).
	chunk int
	// stepwise runs the stack's steps without walks (TestWalksSameBits).
	stepwise bool
}

// The shapes of TestBranchSameBits: the stack's chunk is lowered to one
// row, so every step is a chunk of the weight gradients (several calls a
// walk on the branch) and Recompute 2 means segments of 2 steps.
const brT, brB, brI, brH = 5, 3, 3, 4

// TestBranchSameBits checks the stack's weight and bias gradients on a
// branch (branch.go) against the same stack with Config.NoBranches: two
// training steps (the state and the dropout offsets carried from the
// first to the second) give the same bits of the output, final state,
// input gradient, every parameter's gradient and value and the initial
// state's gradients, for LSTM and GRU stacks of 1 to 3 layers, with and
// without dropout, bias, a tied state, bidirectional, with lengths and
// with Recompute. The branch is the device's, counting what it is asked
// for: where the Backward branches, the Gemms, row sums and shared-bias
// copies of the weight gradients, one Fork and one Join per walk (a
// layer's direction over a segment); where it does not (lengths,
// bidirectional Recompute), nothing; it is closed with the stack; and
// with NoBranches none is opened. NotifyLayers's notices come top first,
// and the gradients a notice reads after a synchronisation are the final
// ones: a notice before the Join of its layer's gradients reads them half
// done (or races, under -race). On the CPU device the branch is a stream
// with its own worker, so a missing Fork or Join is a race under go test
// -race, or wrong bits.
func TestBranchSameBits(t *testing.T) {
	cases := []branchCase{
		{layers: 1, branched: true},
		{layers: 2, dropout: 0.3, tied: true, branched: true},
		{layers: 3, noBias: true, branched: true},
		{layers: 2, bidir: true, tied: true, branched: true},
		{layers: 3, dropout: 0.3, recompute: 2, tied: true, branched: true},
		{layers: 2, bidir: true, dropout: 0.3, recompute: 2, tied: true},
		{layers: 2, lengths: []int32{3, 5, 1}, tied: true, branched: true},
		{layers: 2, bidir: true, lengths: []int32{3, 5, 1}, tied: true, branched: true},
	}
	d := testdevice.Open(t)
	if _, ok := d.(device.Brancher); !ok {
		t.Skipf("%s has no branches (device.Brancher)", d.Name())
	}
	for _, lstm := range []bool{true, false} {
		for _, c := range cases {
			name := fmt.Sprintf("lstm=%v/layers%d/dropout%v/bias=%v/bidirectional=%v/lengths=%v/recompute%d/tied=%v",
				lstm, c.layers, c.dropout, !c.noBias, c.bidir, c.lengths, c.recompute, c.tied)
			t.Run(name, func(t *testing.T) {
				want, _ := branchSteps(t, d, lstm, c, true)
				got, n := branchSteps(t, d, lstm, c, false)
				sameBits(t, got, want)
				if w := expectedBranch(lstm, c); n != w {
					t.Errorf("the branch was asked for %+v, want %+v", n, w)
				}
			})
		}
	}
}

// metaStep returns a two-layer LSTM stack on a meta device of cfg and a
// training step of it (a Forward and a Backward), closed with the test.
func metaStep(t *testing.T, cfg meta.Config) (*meta.Device, *stack, func() error) {
	d, err := meta.Open(cfg)
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	s, err := newStack(context.Background(), d, Config{Input: brI, Hidden: brH, Layers: 2}, lstmCell{})
	must(t, err)
	t.Cleanup(func() { _ = s.Close() })
	x, err := d.Alloc(brT*brB*brI*4, device.Activations)
	must(t, err)
	dy, err := d.Alloc(brT*brB*brH*4, device.Activations)
	must(t, err)
	return d, s, func() error {
		if _, err := s.Forward(Train, x, brT, brB, nil); err != nil {
			return err
		}
		_, err := s.Backward(dy)
		return err
	}
}

// TestBranchRefused: a device that fails to open a branch (a meta device
// whose branch's workspace does not fit) leaves the stack without one,
// asked once (one out-of-memory failure over two Backwards), and its
// Backwards succeed.
func TestBranchRefused(t *testing.T) {
	const ws = 600 << 20 // the device's own workspace fits, a branch's next to it not
	d, s, step := metaStep(t, meta.Config{Name: "meta", Capacity: 1 << 30, Workspace: ws})
	for range 2 {
		must(t, step())
	}
	if s.branch != nil || !s.branchTried || s.Branched() {
		t.Errorf("branch %v, tried %v, Branched %v: want none, tried, false", s.branch, s.branchTried, s.Branched())
	}
	if n := d.MemStats().OOMs; n != 1 {
		t.Errorf("%d out-of-memory failures, want 1 (the branch's workspace, asked for once)", n)
	}
}

// TestBranchOpenedAfterCapture: a first Backward recorded into a graph,
// where a device may refuse to open a branch (CUDA and the meta device
// do: device.ErrNotCapturable), runs without one and leaves the next
// Backward to open it, rather than doing without for good.
func TestBranchOpenedAfterCapture(t *testing.T) {
	d, s, step := metaStep(t, meta.Config{Name: "meta"})
	g, err := d.Capture(step)
	must(t, err)
	defer g.Close()
	if s.branch != nil || s.branchTried {
		t.Errorf("after a captured Backward: branch %v, tried %v; want none, not tried", s.branch, s.branchTried)
	}
	if s.Branched() {
		t.Error("Branched after a captured Backward that opened none")
	}
	must(t, step())
	if s.branch == nil || !s.Branched() {
		t.Errorf("the Backward after the capture opened no branch (Branched %v)", s.Branched())
	}
}

// expectedBranch is what two training steps of case c (and its NoGrad
// forward) ask of the branch: with the wavefront, waveForward's and
// waveBackwards'; else in each Backward, per walk of a layer's
// direction over a window (all steps, or with Recompute each segment), a
// Fork and a Join, and per step (one chunk: brT steps, all running without
// lengths) the input weight's products (one per part of the layer's
// input), the recurrent one and the bias row sums (the LSTM's input-side
// one; the GRU's two); and per Backward the LSTM's shared-bias copies, one
// per layer and direction. Each forward that runs as a wavefront, or with
// a bidirectional layer's reverse direction on the branch, adds its own
// (waveForward, dirsForward).
func expectedBranch(lstm bool, c branchCase) branchCounts {
	n := expectedBackwards(lstm, c)
	if waveForward(lstm, c, true) != (branchCounts{}) {
		n = waveBackwards(lstm, c)
	}
	forward := waveForward
	if c.bidir {
		forward = dirsForward
		if c.branched && c.recompute == 0 {
			n = dirsBackwards(lstm, c)
		}
	}
	for train := range 2 {
		if train == 0 && !c.eval {
			continue
		}
		f := forward(lstm, c, train == 1)
		copies := 1
		if train == 1 {
			copies = 2 // training steps
		}
		n.forks += copies * f.forks
		n.joins += copies * f.joins
		n.gemms += copies * f.gemms
		n.copies += copies * f.copies
	}
	return n
}

// waveForward is what one forward of case c (a training one with train)
// asks of the branch, when it runs as a wavefront (wave.go: a
// unidirectional stack of two layers or more, without lengths nor
// Recompute, and WaveWindows not 1): for each pair of layers with an
// upper one, a Fork before each of the upper layer's windows (⌈brT/W⌉ of
// W = ⌈brT/n⌉ steps, chunks being one step), one Join after them, and on
// the branch the upper layer's input projection, one product per step;
// with a state, copying the state into the walk's initial state and the
// final one out (h, and c for the LSTM) in training, the final h alone
// without grad (which reads and writes the state in place). With lengths
// the state is gathered in and out (GatherSeq, Embedding: not counted).
func waveForward(lstm bool, c branchCase, train bool) branchCounts {
	if c.layers < 2 || c.bidir || (train && c.recompute > 0) || c.wave == 1 {
		return branchCounts{}
	}
	n := c.wave
	if n == 0 {
		n = 4
	}
	W := (brT + n - 1) / n
	var f branchCounts
	for range c.layers / 2 {
		f.forks += (brT + W - 1) / W
		f.joins++
		f.gemms += brT
		switch {
		case !c.tied, c.lengths != nil:
		case !train:
			f.copies++
		case lstm:
			f.copies += 4
		default:
			f.copies += 2
		}
	}
	return f
}

// dirsForward is what one forward of a bidirectional case c (a training
// one with train) asks of the branch (stack.forwardLayers: without
// Recompute, keepSteps or NoGrad): per layer a Fork and a Join, and on the
// branch the reverse direction's input projection, one product per step
// and part of the layer's input (one, or the two directions of the layer
// below), and its copies: with a state and no lengths, the state into the
// walk's initial state and the final one out (h, and c for the LSTM) in
// training, the final h alone without grad (which works in the state in
// place); without lengths nor a state and without grad, the LSTM's
// initial c into the slot the first step reads. With lengths the state's
// values are put at every position of the walk's states, and gathered out
// (Embedding, GatherSeq: not counted; without a state, Fills zero the
// walk's states instead).
func dirsForward(lstm bool, c branchCase, train bool) branchCounts {
	if train && c.recompute > 0 {
		return branchCounts{}
	}
	states := 1
	if lstm {
		states = 2
	}
	var f branchCounts
	for l := range c.layers {
		f.forks++
		f.joins++
		parts := 1
		if l > 0 {
			parts = 2
		}
		f.gemms += brT * parts
		if c.lengths == nil && lstm && !train && !c.tied {
			f.copies++
		}
		switch {
		case c.lengths != nil || !c.tied:
		case !train:
			f.copies++
		default:
			f.copies += 2 * states
		}
	}
	return f
}

// running is the number of sequences of case c still running at step t.
func running(c branchCase, t int) int {
	if c.lengths == nil {
		return brB
	}
	n := 0
	for _, L := range c.lengths {
		if int(L) > t {
			n++
		}
	}
	return n
}

// dirsBackwards is what the Backwards of two training steps of a
// bidirectional case c ask of the branch when they walk the two
// directions side by side (stack.backwardDirs: after forwards that ran
// them so), and its Close: per layer a Fork and, on the branch, the
// reverse direction's walk (with a state, its product into the initial
// state's gradient when it walks the last step; with lengths, the other
// sequences' gradients are gathered from where their walks entered,
// Embedding, not counted); then a Join, a Fork and its weight gradients
// (two products and the bias row sums a step or chunk, the LSTM's
// shared-bias copy; with lengths over the running rows packed, by
// gathers the branch does not count); and one Join as Backward returns.
func dirsBackwards(lstm bool, c branchCase) branchCounts {
	var b branchCounts
	for l := range c.layers {
		parts := 1
		if l > 0 {
			parts = 2
		}
		b.forks += 2
		b.joins++
		b.gemms += brT * (parts + 1)
		if c.tied && running(c, brT-1) > 0 {
			b.gemms++
		}
		addBiasGrads(&b, lstm, c)
	}
	b.joins++
	return twoBackwards(b)
}

// addBiasGrads adds to b what one walk's bias gradients over all brT
// steps ask of the branch: the row sums, one a step (the LSTM's
// input-side one; the GRU's two), and the LSTM's shared-bias copy.
func addBiasGrads(b *branchCounts, lstm bool, c branchCase) {
	switch {
	case c.noBias:
	case lstm:
		b.sumRows += brT
		b.copies++
	default:
		b.sumRows += 2 * brT
	}
}

// twoBackwards is what two Backwards ask of the branch, each b, and its
// Close.
func twoBackwards(b branchCounts) branchCounts {
	const backwards = 2
	b.forks, b.joins, b.gemms, b.sumRows, b.copies = backwards*b.forks, backwards*b.joins, backwards*b.gemms, backwards*b.sumRows, backwards*b.copies
	b.closed = 1
	return b
}

// waveBackwards is what the Backwards of two training steps of case c ask
// of the branch when they run as a wavefront (after a training forward
// that did, wave.go), and its Close: per pair of layers, a Fork before
// each of the lower layer's windows (K of them, as waveForward), and on
// the branch the lower layer's input gradient over each window and its
// product into the initial state's gradient with a state; one Join per
// pair, then a Fork and the lower layer's weight gradients over every
// step (two products and the bias row sums a step, the LSTM's shared-bias
// copy); and one Join as Backward returns. The edges between windows are
// the steps' own buffers, not copies. With lengths the input gradient of
// a window is a product per chunk (one step) up to the longest sequence,
// on its running rows packed (packedWindowGrads).
func waveBackwards(lstm bool, c branchCase) branchCounts {
	n := c.wave
	if n == 0 {
		n = 4
	}
	W := (brT + n - 1) / n
	K := (brT + W - 1) / W
	inputs := K
	if c.lengths != nil {
		inputs = int(slices.Max(c.lengths))
	}
	var b branchCounts
	for range c.layers / 2 {
		b.forks += K + 1
		b.joins++
		b.gemms += inputs + 2*brT
		if c.tied {
			b.gemms++
		}
		addBiasGrads(&b, lstm, c)
	}
	b.joins++
	return twoBackwards(b)
}

// expectedBackwards is what the Backwards of two training steps of case c
// ask of the branch (expectedBranch), and its Close.
func expectedBackwards(lstm bool, c branchCase) branchCounts {
	if !c.branched {
		return branchCounts{closed: 1}
	}
	D := 1
	if c.bidir {
		D = 2
	}
	windows := []int{brT}
	if c.recompute > 0 {
		windows = nil
		for t0 := 0; t0 < brT; t0 += c.recompute {
			windows = append(windows, min(c.recompute, brT-t0))
		}
	}
	var n branchCounts
	for _, steps := range windows {
		for l := range c.layers {
			parts := 1
			if l > 0 {
				parts = D
			}
			for range D {
				n.forks++
				n.joins++
				n.gemms += steps * (parts + 1)
				switch {
				case c.noBias:
				case lstm:
					n.sumRows += steps
				default:
					n.sumRows += 2 * steps
				}
			}
		}
	}
	if lstm && !c.noBias {
		n.copies = c.layers * D
	}
	return twoBackwards(n)
}

// branchResult is what branchSteps gives back: named float64 values.
type branchResult struct {
	names []string
	vals  [][]float64
}

func (r *branchResult) add(name string, v []float64) {
	r.names = append(r.names, name)
	r.vals = append(r.vals, v)
}

// branchSteps runs two training steps of a new float64 stack of case c on
// d (with NoBranches as given), the state carried (detached) from the
// first to the second, and returns what they gave back, and what its
// branch was asked for; every input comes from one seed. Each Backward's
// notices are checked: top layer first, and the layer's gradient range
// read in the notice (after a synchronisation) is the one Backward
// returns. The stack's branch is opened here, wrapped to count, as the
// stack would open it at its first Backward.
func branchSteps(t *testing.T, d device.Device, lstm bool, c branchCase, noBranches bool) (_ branchResult, n branchCounts) {
	t.Helper()
	s, err := newStack(context.Background(), d, Config{Input: brI, Hidden: brH, Layers: c.layers, Dropout: c.dropout, NoBias: c.noBias,
		Bidirectional: c.bidir, DType: device.Float64, Seed: 5, Recompute: c.recompute, NoBranches: noBranches, WaveWindows: c.wave}, cellFor(lstm))
	must(t, err)
	s.chunkRows = max(c.chunk*brB, 1)
	s.stepwise = c.stepwise
	counted := &countedBranch{}
	if !noBranches {
		b, err := device.NewBranch(d)
		must(t, err)
		counted.Branch = b
		s.branch, s.branchTried = counted, true
	}
	defer func() {
		if noBranches && (s.branch != nil || s.branchTried) {
			t.Errorf("with NoBranches the stack opened a branch (%v) or tried to (%v)", s.branch, s.branchTried)
		}
		must(t, s.Close())
		n = counted.n
	}()
	D := s.dirs()
	LD, T, B, H := c.layers*D, brT, brB, brH
	r := rand.New(rand.NewPCG(5, 6))
	var st *State
	if c.tied {
		st, err = s.NewState(B)
		must(t, err)
		defer st.Free()
		up(t, d, st.H(), randoms(r, LD*B*H))
		if lstm {
			up(t, d, st.C(), randoms(r, LD*B*H))
		}
	}
	_, flat := s.params.Flat()
	var res branchResult
	// forward runs a forward in mode over x, and checks where its
	// products on the branch went.
	forward := func(mode Mode, x device.Buffer) device.Buffer {
		counted.products = nil
		y, err := s.ForwardLengths(mode, x, T, B, c.lengths, st)
		must(t, err)
		checkTwin(t, s, counted, lstm, c, mode == Train)
		return y
	}
	for step := range 2 {
		x := newBuf(t, d, randoms(r, T*B*brI))
		dy := newBuf(t, d, randoms(r, T*B*D*H))
		if step == 1 {
			// What the first Backward left in its buffers, made
			// something no result may depend on: every element Backward
			// reads must be one it wrote (zeros at padded rows and past
			// the longest sequence among them).
			for _, b := range []device.Buffer{s.grads.buf, s.dx.buf} {
				up(t, d, b, slices.Repeat([]float64{7.5}, int(b.Len()/8)))
			}
		}
		must(t, s.params.ZeroGrad())
		if st != nil {
			st.Detach()
		}
		y := forward(Train, x)
		res.add("output", down(t, d, y, T*B*D*H))
		if st != nil {
			res.add("h_n", down(t, d, st.H(), LD*B*H))
			up(t, d, st.GradH(), randoms(r, LD*B*H))
			if lstm {
				res.add("c_n", down(t, d, st.C(), LD*B*H))
				up(t, d, st.GradC(), randoms(r, LD*B*H))
			}
		}
		var order []int
		atNotice := map[int][]float64{}
		s.NotifyLayers(func(l int) error {
			order = append(order, l)
			if counted.unjoined > 0 {
				t.Errorf("layer %d's notice came with %d calls on the branch not joined", l, counted.unjoined)
			}
			// Download waits for the compute stream only (Synchronize
			// would wait for the branch too).
			off, n := s.LayerGrads(l)
			atNotice[l] = down(t, d, flat.Elems(device.Float64, off, n), n)
			return nil
		})
		dx, err := s.Backward(dy)
		must(t, err)
		s.NotifyLayers(nil)
		res.add("dx", down(t, d, dx, T*B*brI))
		for p := range s.params.All() {
			res.add("grad "+p.Name, down(t, d, p.Grad, p.Len()))
			res.add("value "+p.Name, down(t, d, p.Value, p.Len()))
		}
		if st != nil {
			res.add("dh_0", down(t, d, st.GradH(), LD*B*H))
			if lstm {
				res.add("dc_0", down(t, d, st.GradC(), LD*B*H))
			}
		}
		var want []int
		for l := c.layers - 1; l >= 0; l-- {
			want = append(want, l)
			off, n := s.LayerGrads(l)
			final := down(t, d, flat.Elems(device.Float64, off, n), n)
			if i := firstDiff(atNotice[l], final); i >= 0 {
				t.Errorf("layer %d's gradient read at its notice differs from Backward's at element %d: its notice came before its gradients were complete", l, i)
			}
		}
		if !slices.Equal(order, want) {
			t.Errorf("notices for layers %v, want %v", order, want)
		}
		must(t, d.Free(x))
		must(t, d.Free(dy))
	}
	if c.eval {
		x := newBuf(t, d, randoms(r, T*B*brI))
		y := forward(NoGrad, x)
		res.add("NoGrad output", down(t, d, y, T*B*D*H))
		if st != nil {
			res.add("NoGrad h_n", down(t, d, st.H(), LD*B*H))
			if lstm {
				res.add("NoGrad c_n", down(t, d, st.C(), LD*B*H))
			}
		}
		must(t, d.Free(x))
	}
	return res, n
}

// checkTwin fails t where a product the forward (a training one with
// train) of case c queued on the stack's branch wrote into the first set
// of the pass temporaries, the compute stream's: the input projection
// (and the GRU's recurrent product) of the layers that run on the
// compute stream meanwhile. The walks on the branch have their own set
// (pass.twin); sharing the compute stream's gives wrong bits only when
// the two streams' steps happen to interleave, which the bits of
// TestWaveSameBits may miss, so the products' place is checked. The
// first set lies at the start of the stack's work buffer (stack.plan:
// without lengths, the pass temporaries come first), for windows of the
// wavefront's steps, or all of them with a bidirectional layer's
// directions on two streams; an LSTM's training forward has none (its
// projections go to each layer's saved gates).
func checkTwin(t *testing.T, s *stack, b *countedBranch, lstm bool, c branchCase, train bool) {
	t.Helper()
	if (lstm && train) || c.lengths != nil || len(b.products) == 0 {
		return
	}
	steps := brT
	if !c.bidir {
		n := c.wave
		if n == 0 {
			n = 4
		}
		steps = (brT + n - 1) / n
	}
	// The GRU's projection, then its recurrent product of one step; the
	// LSTM's projection.
	n := steps*brB*3*brH + brB*3*brH
	if lstm {
		n = steps * brB * 4 * brH
	}
	first := s.work.buf.Elems(device.Float64, 0, n)
	lo, hi := first.Addr(), first.Addr()+alloc.Ptr(first.Len())
	for _, p := range b.products {
		if p.Addr() < hi && p.Addr()+alloc.Ptr(p.Len()) > lo {
			t.Errorf("a product on the branch wrote [%#x, %#x), inside the compute stream's pass temporaries [%#x, %#x)",
				p.Addr(), p.Addr()+alloc.Ptr(p.Len()), lo, hi)
			return
		}
	}
}

// sameBits fails t where got and want differ in any bit.
func sameBits(t *testing.T, got, want branchResult) {
	t.Helper()
	if !slices.Equal(got.names, want.names) {
		t.Fatalf("values %v, want %v", got.names, want.names)
	}
	for i, name := range want.names {
		if j := firstDiff(got.vals[i], want.vals[i]); j >= 0 {
			t.Errorf("%s (value %d): [%d] = %v with the branch, want %v (NoBranches)", name, i, j, got.vals[i][j], want.vals[i][j])
		}
	}
}

// firstDiff is the first index where a and b differ in their bits, -1
// for none (a length mismatch differs at the shorter length).
func firstDiff(a, b []float64) int {
	for i := range min(len(a), len(b)) {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
