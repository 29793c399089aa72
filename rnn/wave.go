package rnn

import "github.com/gocurrent/gocurrent/device"

// The wavefront (issue 21 item 3, the second form of "two layers'
// independent work as parallel branches"): the forward's, and Backward's
// after a forward that ran as one (backwardWave).
//
// A forward runs layer after layer: layer l's walk over T steps, a chain
// of T skinny cell steps that leaves most of a GPU idle, then layer l+1's.
// But layer l+1's step t needs only layer l's steps up to t. So on a
// device with branches (device.Brancher), a forward of a unidirectional
// stack of two layers or more cuts the steps into windows (Config's
// WaveWindows n, 4 by default: windows of ⌈T/n⌉ steps, rounded up to whole
// chunks of the products over steps where a chunk is shorter) and runs
// the layers in pairs, (0, 1), (2, 3) and so on: the lower layer of a
// pair on the compute stream, window after window, and the upper one on
// the stack's branch, forked after each of the lower layer's windows, so
// that the upper layer's walk over window c runs beside the lower layer's
// over window c+1. The pair ends with a Join, before the next pair (whose
// lower layer reads the upper one's output); so at most two layers are in
// flight, one on each stream. cuDNN's standard algorithm runs its layers
// so (research/cuda-review.md §4).
//
// Each window of a layer queues what the whole layer queued, over the
// window's steps: the input projection (per chunk of the window's steps),
// the cell steps, and in training the dropout of the window's outputs,
// whose masks are drawn at the window's offset from the layer's, the same
// elements. Every step's cell runs the same call on the same values.
// Where a window is whole chunks, the input projection makes the same
// products too, so the results are the same bits as without the
// wavefront (TestWaveSameBits). Where a chunk is longer than a window (on
// a GPU, whose chunks are ⌈2048/B⌉ steps, a char-RNN step is one chunk),
// the projection's products cover a window's rows: the same bits on a
// device whose products do not depend on how many rows a call has (the
// emulator), within rounding elsewhere (the CPU device's product takes
// another path for 64 rows or fewer; cuBLAS picks its algorithm by shape).
// Either way a given stack and shape always makes the same calls, so
// replays, resumes and accumulation are exact as before.
//
// Buffers. In training every layer has its own (what Backward reads), so
// the two streams share nothing they write but the pass temporaries of
// the cell, the GRU's input projection and recurrent product: the layers
// on the branch use a second set of them (pass.second, pass.twin), and
// both sets hold a window's steps, not T (less memory than one set of T,
// from 2 windows on). Without grad, the LSTM's input projection is such a
// temporary too, and the layers' sequences, which layer l shares with
// layer l-2, are written by the pair after the Join.
//
// Which forwards: training ones without Recompute (keepSteps) and NoGrad
// ones of two steps or more (a sampled step, one step long, has nothing
// to overlap), with lengths or without. Not a bidirectional stack (a
// layer's reverse walk needs the layer below's every step; its two
// directions run side by side instead, the reverse one on the branch:
// stack.forwardLayers, backwardDirs), nor with Recompute (its segments
// are already time-major, every layer of a segment in turn, in one set of
// buffers).
//
// With lengths each window's walk covers the rows running at each of its
// steps, as a layer's does; each layer's final states are gathered from
// their positions after its last window (stack.gatherEnds), on its
// stream, and the top layer's output into the caller's order after the
// last Join.

// branching is how a forward uses the stack's branch: as a wavefront of
// windows of wave steps (0: not), or with the reverse direction of each
// bidirectional layer on it, beside the forward one (dirs).
type branching struct {
	wave int
	dirs bool
}

// branching returns how a forward of shape sh that keeps kp uses the
// stack's branch, opening it if it has none yet: a bidirectional layer's
// two directions side by side (without Recompute: keepSteps or NoGrad),
// or the wavefront.
func (s *stack) branching(kp keep, sh *batchShape) branching {
	if s.dirs() == 2 {
		return branching{dirs: (kp == keepSteps || kp == keepNothing) && s.openBranch() != nil}
	}
	return branching{wave: s.waveSteps(kp, sh)}
}

// waveSteps returns the steps of a window of the wavefront of a forward of
// a unidirectional stack of shape sh that keeps kp, opening the stack's
// branch if it has none yet; 0 for a forward that runs its layers one
// after the other (above).
func (s *stack) waveSteps(kp keep, sh *batchShape) int {
	n := s.cfg.WaveWindows
	if n == 0 {
		n = 4
	}
	if n < 2 || sh.T < 2 || s.cfg.Layers < 2 || (kp != keepSteps && kp != keepNothing) {
		return 0
	}
	// Whole chunks where a chunk is shorter than a window, so that the
	// input projection makes the calls it makes without the wavefront.
	W, c := (sh.T+n-1)/n, s.chunkSteps(sh.B)
	if c <= W {
		W = (W + c - 1) / c * c
	}
	if W >= sh.T || s.openBranch() == nil {
		return 0
	}
	return W
}

// WaveWindows reports how many windows the stack's last training forward
// was cut into: 1 when it ran its layers one after the other (one layer,
// bidirectional, Recompute, no branch, Config.WaveWindows 1), 0
// before the first.
func (s *stack) WaveWindows() int { return s.waved }

// windowBufs returns the view of a layer's buffers b (of a keepSteps or
// NoGrad forward, which hold all T steps) that window w sees: step t of a
// per-step buffer, and position p of hseq and, in training, cseq, at
// t-w.t0 (layerPass.step). Without grad cseq's slots are used in turn by
// every window, and stay as they are.
func windowBufs(b layerBufs, dt device.DType, w span, BH int, train bool) layerBufs {
	steps := w.t1 - w.t0
	view := func(buf device.Buffer, width, n int) device.Buffer {
		if buf.IsZero() {
			return buf
		}
		return buf.Elems(dt, w.t0*width, n*width)
	}
	b.hseq = view(b.hseq, BH, steps+1)
	if train {
		b.cseq = view(b.cseq, BH, steps+1)
		b.gates = view(b.gates, 4*BH, steps)
		b.mask, b.drop = view(b.mask, BH, steps), view(b.drop, BH, steps)
	}
	return b
}

// twin is the pass the walks on the branch see (the wavefront's upper
// layers, a bidirectional layer's reverse direction): p, with the second
// set of the cell's temporaries.
func (p *pass) twin() *pass {
	t := *p
	t.pre, t.xpre, t.hpre, t.pkIn, t.pkPre = p.second.pre, p.second.xpre, p.second.hpre, p.second.pkIn, p.second.pkPre
	return &t
}

// forwardWave queues the layers' forwards over x, [T, B, Input], as a
// wavefront of windows of W steps (above), and returns the top layer's
// output.
func (s *stack) forwardWave(q *queue, p *pass, sh *batchShape, kp keep, W int, x device.Buffer, st *State) device.Buffer {
	T, L := sh.T, s.cfg.Layers
	in := s.input(q, p, sh, kp != keepNothing, x)
	twin := p.twin()
	wins := waveWins(T, W)
	for l0 := 0; l0 < L; l0 += 2 {
		for i, w := range wins {
			for l := l0; l < min(l0+2, L); l++ {
				lp := s.layerPass(p, sh, kp, T, l, 0, w)
				if l > l0 {
					// After the lower layer's window, on the branch.
					q.add(s.branch.Fork())
					lp.k, lp.p = s.branch.Kernels(), twin
				}
				lp.in = s.windowInputs(q, p, sh, kp, T, l, w, in)
				if i == 0 {
					s.initial(q, lp, st, l)
				}
				s.forwardWindow(q, lp, st != nil)
				if i == len(wins)-1 {
					s.final(q, lp, st, l)
				}
				if kp == keepSteps {
					s.dropWindow(q, lp, s.maskOffset(l, 0, T, sh.B), lp.output(), lp.b.drop, lp.b.mask)
				}
			}
		}
		if l0+1 < L {
			// Queued even after an error: the branch's work must not
			// outlive the forward unjoined.
			q.add(s.branch.Join())
		}
	}
	top := s.layerPass(p, sh, kp, T, L-1, 0, span{0, T}).output()
	if !sh.varlen {
		return top
	}
	// In the caller's order, zeros at padded positions.
	dt, n := s.cfg.DType, T*sh.B*s.cfg.Hidden
	q.add(s.dev.Kernels().GatherSeq(sh.fromSorted(dt, T, s.cfg.Hidden, top, p.out.Elems(dt, 0, n))))
	return p.out.Elems(dt, 0, n)
}

// waveWins are the windows of W steps of T.
func waveWins(T, W int) []span {
	var wins []span
	for t0 := 0; t0 < T; t0 += W {
		wins = append(wins, span{t0, min(t0+W, T)})
	}
	return wins
}

// backwardWave differentiates a forward that ran as a wavefront
// (rec.br.wave > 0), itself a wavefront, the forward's mirror: layers in
// pairs from the top, (L-1, L-2), (L-3, L-4) and so on, the last alone when
// L is odd, each pair over the forward's windows from the last. The upper
// layer of a pair walks back its window c on the compute stream, then
// queues its input gradient over the window (the lower layer's dh there)
// and the window's dropout; the lower layer, forked after that, walks back
// its window c on the branch and queues its own input gradient, beside the
// upper layer's walk over window c-1. Each walk hands the gradient crossing
// into the window before it on as an edge (cell.saveEdge, applyEdge, as
// with Recompute, but views of the step's own buffers, layerGrads.kept: no
// copy), applied once the layer above has written that window's dh: no walk
// writes outside its window. The GRU's edge reads the step's dh, so its
// layers' dh take three slots in turn, not two: the lower layer's input
// gradient, written beside the upper layer's walk, goes to the slot of
// neither.
//
// The weight and bias gradients run after the layer's walk, over all its
// steps, in the chunks and the order a Backward without the wavefront adds
// them in (the same calls): the upper layer's on the compute stream, beside
// the lower layer's last window; then the pair's Join (the next pair's
// upper layer reads the lower one's input gradient); then, forked again,
// the lower layer's on the branch, beside the next pair's first window (or
// the layers' callers' work after Backward, the char-RNN's embedding
// gradient). A layer's notice comes after the Join that covers its
// gradients (the side's notices). The GRU's pre-activation gradients of the
// two layers are the two sets (by layer parity), so the next pair's writes
// follow the reads in stream order.
//
// The bits: each step's cell gradient is the same call on the same values,
// the edges add what the walk adds within a window in the same order
// (TestRecomputeMatchesPlain's point), the weight gradients are the same
// calls, and the input gradient's products over a window are row-stable on
// the CPU device and the emulator, so the gradients are those of a Backward
// without the wavefront (TestWaveSameBits; on cuBLAS within rounding, the
// input gradient's products being cut at the windows).
//
// With lengths, dy and the state's gradients are sorted first, and dx and
// the state's gradients given back in the caller's order after the last
// Join, as backwardLayers does; the final states' gradients join dh one
// window at a time, once the layer above has written it (finalGrads).
// Every product over steps runs on the running rows packed, as there: a
// window's input gradient per chunk it holds, or where the windows are
// not whole chunks (a GPU's chunks of 2048 rows, longer than a window) per
// piece, a window's part of a chunk, with packing maps of its own
// (batchShape.piece); the weight gradients per chunk, packing their
// operands again. Each stream packs into its own buffers (gradBufs.pk: the
// compute stream's, and the branch's), zeros at the padded rows and past
// the longest sequence, as there.
//
// Memory: the edges (cell.edgeSize per layer, kept: none for the LSTM;
// 6·B·H for the GRU, what its second cell gradient writes) and the GRU's
// third dh slot, T·B·H; the GRU's two sets of
// pre-activation gradients, which a branched Backward has already. With
// lengths, a second buffer for the packed input gradient (the branch's)
// and 4 Int32 a padded row for the pieces' maps, where there are pieces.
func (s *stack) backwardWave(q *queue, p *pass, rec *record, dy device.Buffer, gb gradBufs, sd *side) {
	dt, sh := s.cfg.DType, &rec.sh
	T, B, H, L := sh.T, sh.B, s.cfg.Hidden, s.cfg.Layers
	k := s.dev.Kernels()
	st := rec.state
	tied := st != nil && st.tie == rec
	// The layers' dh slots: two in turn, three where an edge reads dh
	// (the GRU's), so that the layer two below's input gradient, which
	// the lower layer writes beside the upper one's walk, goes elsewhere.
	slots := 2
	if s.cell.edgeReadsDH() {
		slots = 3
	}
	if sh.varlen {
		// In the stack's order, zeros at padded positions, as the state's
		// gradients.
		q.add(k.GatherSeq(sh.toSorted(dt, T, H, dy.Elems(dt, 0, T*B*H), gb.dh[(L-1)%slots][0])))
		if tied {
			s.sortStateGrads(q, sh, st, gb, true)
		}
	} else {
		q.add(k.Copy(device.Copy{Dst: gb.dh[(L-1)%slots][0], Src: dy.Slice(0, int64(T*B*H)*dt.Size())}))
	}
	dx := s.dx.buf
	if sh.varlen {
		dx = gb.dxs
	}
	wins := reversed(waveWins(T, rec.br.wave))
	all := span{0, T}
	for top := L - 1; top >= 0; top -= 2 {
		group := []int{top}
		if top > 0 {
			group = append(group, top-1)
		}
		lgs := make([]layerGrads, len(group))
		edges := make([]int, len(group))
		for j, l := range group {
			lgs[j], edges[j] = s.layerGrads(gb, st, tied, sh, l, 0), -1
			lgs[j].kept = true
		}
		for i, w := range wins {
			for j, l := range group {
				lp := s.layerPass(p, sh, keepSteps, T, l, 0, w)
				if j == 1 {
					// After the upper layer's input gradient over the window.
					q.add(s.branch.Fork())
					sd.forked = true
					lp.k = s.branch.Kernels()
				}
				lp.in = s.windowInputs(q, p, sh, keepSteps, T, l, w, p.x)
				lg := &lgs[j]
				lg.dh = gb.dh[l%slots][0].Elems(dt, w.t0*B*H, (w.t1-w.t0)*B*H)
				lg.dxp[lg.set], lg.dhp[lg.set] = windowGrads(gb.dxp[lg.set], dt, w, B*H), windowGrads(gb.dhp[lg.set], dt, w, B*H)
				edges[j] = s.backwardWindow(q, lp, lg, i == 0, i == len(wins)-1, edges[j])
				dst := dx
				if l > 0 {
					dst = gb.dh[(l-1)%slots][0]
				}
				dst = windowViews(dt, []device.Buffer{dst}, lp.in, w, B)[0]
				if sh.varlen {
					s.packedWindowGrads(q, lp, lg, dst, &gb.pk[j])
				} else {
					s.inputGrads(q, lp, lg, []device.Buffer{dst}, false)
				}
				if l > 0 && !s.lay[l-1].mask.IsZero() {
					// The window's dropout between the layers.
					n := (w.t1 - w.t0) * B * H
					q.add(lp.k.Mul(device.Mul{DType: dt, N: n, X: dst, Y: s.lay[l-1].mask.Elems(dt, w.t0*B*H, n), Z: dst}))
				}
			}
		}
		for j, l := range group {
			if j == 1 {
				// The lower layer's input gradient is the next pair's;
				// the notices of the layers the Join covers follow it.
				sd.join(q)
			}
			lp := s.layerPass(p, sh, keepSteps, T, l, 0, all)
			lp.in = s.windowInputs(q, p, sh, keepSteps, T, l, all, p.x)
			lg := &lgs[j]
			lg.dxp, lg.dhp = gb.dxp, gb.dhp
			s.cell.gradViews(lp, lg)
			wk := k
			if j == 1 {
				// Forked again: a capture takes a branch's work between a
				// Fork and a Join only.
				q.add(s.branch.Fork())
				wk, sd.forked = s.branch.Kernels(), true
			}
			for _, ch := range s.gradChunks(lp) {
				if sh.varlen {
					s.packedWeightGrads(q, wk, lp, lg, ch, &gb.pk[j], true)
				} else {
					s.weightGrads(q, wk, lp, lg, ch)
				}
			}
			s.sharedBiasGrad(q, wk, lg, l, 0)
			sd.notify(q, l)
		}
	}
	if sh.varlen {
		// After the last Join: the state's gradients and dx in the
		// caller's order.
		if tied {
			s.sortStateGrads(q, sh, st, gb, false)
		}
		q.add(k.GatherSeq(sh.fromSorted(dt, T, s.cfg.Input, gb.dxs, s.dx.buf)))
	}
}

// packedWindowGrads queues, with lengths, the gradient with respect to the
// input of lp's window (one part: the wavefront's stacks are
// unidirectional) into dst, the window's steps, on lp's stream: over the
// running rows of each piece of a chunk the window holds (batchShape's
// piece where the windows are not whole chunks), packed into pk, as
// paramGrads' packedInputGrads over whole chunks; zeros at padded rows and
// past the longest sequence, as there.
func (s *stack) packedWindowGrads(q *queue, lp *layerPass, lg *layerGrads, dst device.Buffer, pk *packBufs) {
	end, c := lp.t0, s.chunkSteps(lp.B)
	for end < lp.walkEnd() {
		p := span{end, min(lp.t1, (end/c+1)*c)}
		if lp.sh.wave > 0 {
			p = lp.sh.piece(end)
		}
		s.packedInputGrads(q, lp, lg, p, []device.Buffer{dst}, false, pk, true)
		end = p.t1
	}
	if end < lp.t1 {
		width := lp.in[0].width
		q.add(lp.k.Fill(device.Fill{DType: lp.dt, N: (lp.t1 - end) * lp.B * width, X: lp.steps(dst, end, lp.t1, width)}))
	}
}

// windowGrads is window w's steps of a GRU's per-step gradients of all
// the steps (3·BH elements a step), none without.
func windowGrads(g device.Buffer, dt device.DType, w span, BH int) device.Buffer {
	if g.IsZero() {
		return g
	}
	return g.Elems(dt, w.t0*3*BH, (w.t1-w.t0)*3*BH)
}

// backwardDirs walks back layer l of a bidirectional forward that ran its
// directions side by side (forwardLayers' dirs: keepSteps here, one window
// of all steps, with or without lengths), the reverse direction on the
// branch beside the forward one, then queues their gradients in the order
// backwardLayers does: the forward direction's weight gradients and input
// gradient (written into dst) on the compute stream, beside the reverse
// walk; the join of the reverse walk (sd's, which gives the notices waiting
// for it); then, forked again, the reverse direction's weight gradients on
// the branch, and its input gradient, added into dst, on the compute
// stream. Each buffer is written by the same calls in the same order as one
// direction after the other (the two walks write their own gradients: the
// rows, dh and, for the GRU, the gradient sets by parity), so the bits are
// the same.
func (s *stack) backwardDirs(q *queue, p *pass, rec *record, gb gradBufs, sd *side, l int, dst []device.Buffer, tied bool) {
	sh, dt := &rec.sh, s.cfg.DType
	all := span{0, sh.T}
	var lps [2]*layerPass
	var lgs [2]layerGrads
	q.add(s.branch.Fork())
	sd.forked = true
	for dir := range 2 {
		lp := s.layerPass(p, sh, keepSteps, rec.seg, l, dir, all)
		lp.in = s.windowInputs(q, p, sh, keepSteps, rec.seg, l, all, p.x)
		lg := s.layerGrads(gb, rec.state, tied, sh, l, dir)
		lg.dh = gb.dh[l%2][dir]
		lg.dhAll = lg.dh
		compute := lp.k
		if dir == 1 {
			lp.k = s.branch.Kernels()
		}
		s.backwardWindow(q, lp, &lg, true, true, -1)
		s.initialGrads(q, lp, &lg)
		lp.k = compute
		lps[dir], lgs[dir] = lp, lg
	}
	onCompute := &side{s: s, k: lps[0].k}
	s.paramGrads(q, lps[0], &lgs[0], windowViews(dt, dst, lps[0].in, all, sh.B), false, onCompute)
	s.sharedBiasGrad(q, onCompute.k, &lgs[0], l, 0)
	s.paramGrads(q, lps[1], &lgs[1], windowViews(dt, dst, lps[1].in, all, sh.B), true, sd)
	s.sharedBiasGrad(q, sd.k, &lgs[1], l, 1)
}
