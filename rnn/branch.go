package rnn

import (
	"errors"

	"github.com/gocurrent/gocurrent/device"
)

// Layer l's weight and bias gradients on a branch (issue 21 item 3, the
// first form of "two layers' independent work as parallel branches").
//
// Backward walks each layer back over its steps (a chain of skinny cell
// gradients, serial, that leaves most of a GPU idle), then queues the
// layer's weight gradient products over chunks of steps and its bias row
// sums, and the product that gives the gradient with respect to the
// layer's input, which the walk of the layer below needs. Nothing needs
// the weight and bias gradients until Backward returns (or NotifyLayers
// reports the layer), so on a device with branches (device.Brancher) the
// stack queues them on a branch of the compute stream: forked after the
// walk that wrote what they read, they run beside the input gradient and
// the next walk back. Each buffer is written by the same calls in the same
// order as without a branch (the branch is one stream, and the chunks,
// row sums and the LSTM's shared bias copy keep their order), so the
// gradients are the same bits.
//
// The joins. The branch's work of one walk (a layer's direction) is
// joined when the next walk has been queued, just before the next walk's
// gradients are forked: so at most one walk's gradients are in flight, and
// those of walk j run beside the input gradient of walk j and the walk
// j+1. That is what lets the buffers they read be reused two walks later:
// the GRU's pre-activation gradients, which every layer's walk writes in
// turn, are two sets used by walks of alternate parity (the LSTM writes
// its gradients over each layer's own saved gates). Backward joins before
// it returns, and a layer's NotifyLayers notice comes after the join that
// covers its gradients: one walk later than without a branch (the top
// layer's after the walk of the layer below has been queued).
//
// Which Backwards branch (after a forward that ran as a wavefront,
// Backward is one too, wave.go, which places the weight gradients
// itself; these are the others):
//   - keepSteps (no Recompute): yes. What the weight gradients read (the
//     layer's input, its states and pre-activation gradients) lies in the
//     saved forward, one region per layer and direction, which Backward
//     does not write but for those gradients themselves.
//   - keepBoundaries (Recompute, unidirectional): yes, with a join before
//     each segment's forward is run again, which rewrites every layer's
//     segment buffers: the top layers' gradients still run beside the
//     walks of the layers below, layer 0's beside its input gradient only.
//   - keepOutputs (Recompute, bidirectional): no. Every window of every
//     layer recomputes its gates into one buffer that all share, so a
//     join before each window's recompute would leave the gradients beside
//     the window's input gradient only: two events a window for little.
//   - Variable lengths: yes. The weight gradients read the running rows
//     of each chunk packed (packedWeightGrads): the branch packs its own
//     operands into a second set of pack buffers (gradBufs.pk[1]), the
//     pre-activation gradients included, which the compute stream packs
//     again for the input gradient (packedInputGrads): one GatherSeq more
//     a chunk, since the compute stream rewrites its pack buffers at its
//     next chunk while the branch may still read. Without a branch one
//     packing serves both.
//
// Memory: a branch costs what the device's branch holds (on CUDA a
// stream, a cuBLAS handle and its workspace; the meta device plans that
// workspace), plus, for a GRU stack of more than one walk (Layers·dirs >
// 1), the second set of pre-activation gradients: 6·W·B·H elements, W the
// steps of a window (T without Recompute, a segment with it). The LSTM's
// costs nothing more, but with lengths, where both cells add the branch's
// pack buffers: R·(G·H + in + H) elements, and G·H more for the GRU's
// recurrent pre-activation gradients, R a chunk's rows (below
// device.ProductRows + B), G the gates, in the widest layer input.

// side is where one Backward queues the layers' weight and bias
// gradients: on the stack's branch, or on the compute stream (b nil).
type side struct {
	s *stack
	// k are the kernels the weight and bias gradients are queued on: the
	// branch's, or the compute stream's.
	k device.Kernels
	b device.Branch
	// forked says work may have been queued on b since its last Join.
	forked bool
	// notices are the layers whose NotifyLayers notice waits for the next
	// Join, in the order they completed.
	notices []int
}

// side returns where rec's Backward queues its weight and bias gradients:
// on the stack's branch (openBranch), unless rec's Backward cannot use it
// (above).
func (s *stack) side(rec *record) *side {
	sd := &side{s: s, k: s.dev.Kernels()}
	if rec.keep == keepOutputs {
		return sd
	}
	if b := s.openBranch(); b != nil {
		sd.b, sd.k = b, b.Kernels()
	}
	return sd
}

// openBranch returns the stack's branch, opened at the first call, nil
// with Config.NoBranches, on a device without branches, or when opening
// it failed (the stack then does without).
func (s *stack) openBranch() device.Branch {
	if s.cfg.NoBranches {
		return nil
	}
	if !s.branchTried {
		b, err := device.NewBranch(s.dev)
		// A forward or Backward recorded into a graph may not open one
		// (CUDA makes no stream inside a capture): it goes without, and a
		// later one asks again.
		s.branchTried = !errors.Is(err, device.ErrNotCapturable)
		if err == nil {
			s.branch = b
		}
	}
	return s.branch
}

// Branched reports whether the stack has a branch to queue its Backwards'
// weight and bias gradients and its forwards' wavefront on: opened at the
// first Forward or Backward that could use one (not with
// Config.NoBranches, nor on a device without branches or that failed to
// open one). Its Backwards use it where the comment above allows (not
// with a bidirectional Recompute), its forwards where wave.go's does.
func (s *stack) Branched() bool { return s.branch != nil }

// branched reports whether the side is a branch.
func (sd *side) branched() bool { return sd.b != nil }

// fork queues, before a walk's weight and bias gradients, the join of the
// gradients of the walk before (and the notices waiting for it), then the
// branch's wait for the compute stream's work so far: the walk that wrote
// what the gradients read.
func (sd *side) fork(q *queue) {
	if sd.b == nil {
		return
	}
	sd.join(q)
	q.add(sd.b.Fork())
	sd.forked = true
}

// join queues the compute stream's wait for the branch's work so far,
// then gives the notices that waited for it. Called before the compute
// stream writes what the branch reads, and before Backward returns, it
// is queued even after an error: the branch's work must not outlive the
// Backward unjoined (its buffers may be freed after it returns, and a
// capture must end joined).
func (sd *side) join(q *queue) {
	if sd.forked {
		q.add(sd.b.Join())
		sd.forked = false
	}
	for _, l := range sd.notices {
		sd.s.notifyLayer(q, l)
	}
	sd.notices = sd.notices[:0]
}

// notify tells NotifyLayers's callback that layer l's gradients are
// queued in full: now on the compute stream, else at the next join.
func (sd *side) notify(q *queue, l int) {
	if !sd.forked {
		sd.s.notifyLayer(q, l)
		return
	}
	sd.notices = append(sd.notices, l)
}
