package rnn_test

import (
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// TestStateCallsPerLength checks that a forward and Backward with lengths
// and a state ask the device for as many calls whatever the number of
// distinct lengths: the states of the sequences ending (and, in the
// reverse direction, starting) at each step are gathered and put in one
// call each, with their gradients (stack.initial, gatherEnds, finalGrads,
// initialGrads), not copied per length as the walks reach them. Two
// batches of 42 sequences over 9 steps, both with sequences of lengths 1,
// 4 and 9 (so the same branches run, and sequences end in each of the
// wavefront's 3 windows, whose Backward adds the final states' gradients
// window by window): one of these 3 distinct lengths, one of 9.
// Before 2026-11-29 the second made 2 copies more per length and
// direction in the forward (h and c), and a copy and an Axpby more in
// Backward; a bidirectional LSTM layer over 800 words of 15 distinct
// lengths then made 59 copies a forward. Training and NoGrad,
// unidirectional and bidirectional, LSTM and GRU; and a unidirectional
// stack's Recompute in segments of 3 steps (its states hold a segment:
// the final states are gathered segment by segment, and sequences end in
// each of the 3), and a bidirectional stack's (its reverse walks find their
// initial h where it was put at every position once, and their c where it
// is put at every position of each segment; until later on 2026-11-29 they
// copied both per length: the LSTM's training step made 523 calls at 9
// distinct lengths, 101 of them copies, against 475 at 3; now 463, 33
// copies, at both).
func TestStateCallsPerLength(t *testing.T) {
	d := testdevice.Open(t)
	counter, counts := d.(device.Counter)
	if !counts {
		t.Skipf("%s counts nothing (device.Counter)", d.Name())
	}
	const T, B, I, H = 9, 42, 3, 4
	few, many := make([]int32, B), make([]int32, B)
	for i := range B {
		few[i] = []int32{1, 4, 9}[i%3]
		many[i] = int32(1 + i%T)
	}
	for _, cell := range []string{"lstm", "gru"} {
		for _, c := range []struct {
			bidir     bool
			recompute int
		}{{false, 0}, {true, 0}, {false, 3}, {true, 3}} {
			bidir := c.bidir
			t.Run(fmt.Sprintf("%s/bidirectional=%v/recompute%d", cell, bidir, c.recompute), func(t *testing.T) {
				m := newRecurrent(t, d, cell, rnn.Config{Input: I, Hidden: H, Layers: 2, Bidirectional: bidir, Recompute: c.recompute})
				D := 1
				if bidir {
					D = 2
				}
				st, err := m.NewState(B)
				ok(t, err)
				defer st.Free()
				x := fill32(t, d, T*B*I, 0.1)
				dy := fill32(t, d, T*B*D*H, 0.01)
				step := func(mode rnn.Mode, lengths []int32) device.Counts {
					ok(t, st.Reset())
					c0 := counter.Counts()
					_, err := m.ForwardLengths(mode, x, T, B, lengths, st)
					ok(t, err)
					if mode == rnn.Train {
						_, err = m.Backward(dy)
						ok(t, err)
					}
					ok(t, d.Synchronize())
					return counter.Counts().Sub(c0)
				}
				for _, mode := range []rnn.Mode{rnn.Train, rnn.NoGrad} {
					step(mode, many) // the buffers, once
					a, b := step(mode, few), step(mode, many)
					if a != b {
						t.Errorf("%v: %+v with 3 distinct lengths, %+v with %d", mode, a, b, T)
					}
				}
			})
		}
	}
}
