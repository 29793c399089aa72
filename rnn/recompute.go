package rnn

import (
	"math"
	"slices"

	"github.com/gocurrent/gocurrent/device"
)

// A stack's chunkRows is how many rows (steps × batch) a product over
// steps covers at a time: the input projection, the weight gradients and
// the bias sums run one chunk of ⌈chunkRows/B⌉ steps after the other, in
// the same order whether or not the stack recomputes (segments are whole
// chunks), so that the two sum the same values in the same order. It is
// the device's device.ProductRows: 256 on the CPU device, one block of its
// matrix product along the inner dimension, where cutting the weight
// gradients costs nothing; 2048 on a GPU, where each product is a launch.
// (The package's own tests may lower it.)

// chunkSteps is the number of steps of a chunk for a batch of B.
func (s *stack) chunkSteps(B int) int { return (s.chunkRows + B - 1) / B }

// span is a window of steps [t0, t1).
type span struct{ t0, t1 int }

// schedule decides what a forward over T steps of B sequences keeps for
// Backward, and the length of its segments: nothing without grad; every
// step's activations without Recompute or when one segment would hold
// every step; with Recompute, what starts each segment of seg steps (k
// rounded up to whole chunks), as keepBoundaries in a unidirectional
// stack and keepOutputs in a bidirectional one.
func (s *stack) schedule(train bool, T, B int) (keep, int) {
	k := s.cfg.Recompute
	switch {
	case !train:
		return keepNothing, T
	case k == 0:
		return keepSteps, T
	case k == RecomputeAuto:
		k = ceilSqrt(T)
	}
	c := s.chunkSteps(B)
	if k = (k + c - 1) / c * c; k >= T {
		return keepSteps, T
	}
	if s.dirs() == 2 {
		return keepOutputs, k
	}
	return keepBoundaries, k
}

// ceilSqrt is ⌈√n⌉ for n ≥ 1.
func ceilSqrt(n int) int {
	k := int(math.Sqrt(float64(n)))
	for k*k < n {
		k++
	}
	for k > 1 && (k-1)*(k-1) >= n {
		k--
	}
	return k
}

// windows are the windows the walks of a forward that keeps kp go over:
// all T steps in one, or segments of seg steps, the last shorter. Segments
// where no sequence runs are left out, but for keepOutputs the one
// starting at the longest length (below T): its first step is where the
// reverse walk of the sequences of that length gathers the gradient with
// respect to their initial state.
func (s *stack) windows(sh *batchShape, kp keep, seg int) []span {
	if kp != keepOutputs && kp != keepBoundaries {
		return []span{{0, sh.T}}
	}
	var ws []span
	for t0 := 0; t0 < sh.T; t0 += seg {
		if t0 > sh.maxLen || t0 == sh.maxLen && kp == keepBoundaries {
			break
		}
		ws = append(ws, span{t0, min(t0+seg, sh.T)})
	}
	return ws
}

// reversed returns a reversed copy of s.
func reversed[E any](s []E) []E {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// A unidirectional stack with Recompute keeps the states at the segment
// boundaries (keepBoundaries) and runs time-major: the training forward
// goes segment by segment, every layer of a segment before the next
// segment, and keeps each layer's state entering every segment; Backward
// goes over the segments from the last, running the segment's forward
// again (all layers, dropout masks drawn again from their offsets) into
// one segment's buffers, then walking it back from the top layer down.
// The gradient crossing a segment boundary backwards waits as the layer's
// edge until the gradient flowing from the layer above into the step
// before the boundary is there (the next segment's walk back), so that the
// two are added in the order the plain walk adds them. The bidirectional
// stack, whose walks each need the whole output of the layer below, runs
// layer by layer with keepOutputs (forwardLayers, backwardLayers).

// forwardBoundaries queues the training forward of a stack that keeps
// the states at the segment boundaries, and returns its output, [T, B, H]
// in the caller's order.
func (s *stack) forwardBoundaries(q *queue, p *pass, sh *batchShape, seg int, x device.Buffer, st *State) device.Buffer {
	dt, T, B, H, L := s.cfg.DType, sh.T, sh.B, s.cfg.Hidden, s.cfg.Layers
	k := s.dev.Kernels()
	in := s.input(q, p, sh, true, x)
	wins := s.windows(sh, keepBoundaries, seg)
	for i, w := range wins {
		top := s.forwardSegment(q, p, sh, seg, i, len(wins)-1, w, in, st, true)[L-1].output()
		out := p.out.Elems(dt, w.t0*B*H, (w.t1-w.t0)*B*H)
		if sh.varlen {
			q.add(k.GatherSeq(sh.segmentFromSorted(dt, i, w, H, top, out)))
		} else {
			q.add(k.Copy(device.Copy{Dst: out, Src: top}))
		}
	}
	if end := wins[len(wins)-1].t1; end < T {
		// No sequence runs past end: the output there is padding.
		q.add(k.Fill(device.Fill{DType: dt, N: (T - end) * B * H, X: p.out.Elems(dt, end*B*H, (T-end)*B*H)}))
	}
	return p.out.Elems(dt, 0, T*B*H)
}

// forwardSegment queues the forward of every layer over w, the i-th
// segment of a forward that keeps the boundaries (last the last one's
// index), each layer starting from its checkpoint, and returns the
// layers' walks. in is the stack's input. The training forward (fresh) also writes the
// initial states in the first segment, keeps the states leaving every
// segment, and copies the final states into st in the last one.
func (s *stack) forwardSegment(q *queue, p *pass, sh *batchShape, seg, i, last int, w span, in device.Buffer, st *State, fresh bool) []*layerPass {
	dt, B, H, I, L := s.cfg.DType, sh.B, s.cfg.Hidden, s.cfg.Input, s.cfg.Layers
	parts := []inPart{{buf: in.Elems(dt, w.t0*B*I, (w.t1-w.t0)*B*I), width: I}}
	lps := make([]*layerPass, L)
	for l := range L {
		lp := s.layerPass(p, sh, keepBoundaries, seg, l, 0, w)
		lp.in = parts
		if fresh && i == 0 {
			s.initial(q, lp, st, l)
		}
		s.forwardWindow(q, lp, fresh && st != nil)
		if fresh {
			s.saveExit(q, lp)
			if i == last {
				s.final(q, lp, st, l)
			}
		}
		out := s.dropWindow(q, lp, s.maskOffset(l, 0, sh.T, B), lp.output(), lp.b.drop, lp.b.mask)
		parts = []inPart{{buf: out, width: H}}
		lps[l] = lp
	}
	return lps
}

// backwardBoundaries differentiates a forward that kept the states at the
// segment boundaries: segment by segment from the last, the segment's
// forward again, then its walk back from the top layer down, each layer's
// gradient with respect to its input being the next layer's dh.
func (s *stack) backwardBoundaries(q *queue, p *pass, rec *record, dy device.Buffer, gb gradBufs, sd *side) {
	dt, sh := s.cfg.DType, &rec.sh
	T, B, H, I, L := sh.T, sh.B, s.cfg.Hidden, s.cfg.Input, s.cfg.Layers
	k := s.dev.Kernels()
	st := rec.state
	tied := st != nil && st.tie == rec
	if tied && sh.varlen {
		s.sortStateGrads(q, sh, st, gb, true)
	}
	lgs, edges := make([]layerGrads, L), make([]int, L)
	for l := range L {
		lgs[l], edges[l] = s.layerGrads(gb, st, tied, sh, l, 0), -1
	}
	wins := s.windows(sh, keepBoundaries, rec.seg)
	last := len(wins) - 1
	for i := last; i >= 0; i-- {
		w := wins[i]
		n := (w.t1 - w.t0) * B
		// The forward again rewrites every layer's segment buffers, which
		// the branch's gradients of the segment after read.
		sd.join(q)
		lps := s.forwardSegment(q, p, sh, rec.seg, i, last, w, p.x, nil, false)
		top, src := gb.dh[(L-1)%2][0].Elems(dt, 0, n*H), dy.Elems(dt, w.t0*B*H, n*H)
		if sh.varlen {
			q.add(k.GatherSeq(sh.segmentToSorted(dt, i, w, H, src, top)))
		} else {
			q.add(k.Copy(device.Copy{Dst: top, Src: src}))
		}
		for l := L - 1; l >= 0; l-- {
			lp, lg := lps[l], &lgs[l]
			lg.dh = gb.dh[l%2][0]
			var dst device.Buffer
			switch {
			case l > 0:
				dst = gb.dh[(l-1)%2][0].Elems(dt, 0, n*H)
			case sh.varlen:
				dst = gb.dxs.Elems(dt, w.t0*B*I, n*I)
			default:
				dst = s.dx.buf.Elems(dt, w.t0*B*I, n*I)
			}
			edges[l] = s.backwardWindow(q, lp, lg, i == last, i == 0, edges[l])
			s.paramGrads(q, lp, lg, []device.Buffer{dst}, false, sd)
			if m := lps[max(l-1, 0)].b.mask; l > 0 && !m.IsZero() {
				q.add(k.Mul(device.Mul{DType: dt, N: n * H, X: dst, Y: m, Z: dst}))
			}
		}
	}
	for l := range L {
		s.sharedBiasGrad(q, sd.k, &lgs[l], l, 0)
	}
	for l := L - 1; l >= 0; l-- {
		sd.notify(q, l)
	}
	if tied && sh.varlen {
		s.sortStateGrads(q, sh, st, gb, false)
	}
	if sh.varlen {
		q.add(k.GatherSeq(sh.fromSorted(dt, T, I, gb.dxs, s.dx.buf)))
	}
}
