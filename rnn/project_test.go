package rnn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// TestProjectionRunningRows checks that a forward with lengths projects
// the input of the running rows alone (stack.project), by the rows of the
// products the stack's branch is asked for: those of a bidirectional
// layer's reverse direction, and of a unidirectional stack's second layer
// (the wavefront's upper layer, windows of 2 steps), each as many as the
// lengths add up to, 9 of the batch's 15 (before 2026-11-29, every padded
// row: 15). Chunks of 1 step (each a product over its running rows, the
// first of the step), of 2 (the first a product over its first 5 rows,
// the second packed: its first step runs 2 sequences of 3, its second 1;
// the wavefront's windows are then whole chunks) and of all 5 steps
// (packed; the wavefront's windows are then pieces of the chunk, packed
// apart), for training and NoGrad forwards of LSTM and GRU stacks. The
// values are checked elsewhere (every lengths test: TestPackedEqualsAlone,
// the agreement with PyTorch, TestBranchSameBits and TestWaveSameBits
// against the stack without branches, to the bit).
func TestProjectionRunningRows(t *testing.T) {
	d := testdevice.Open(t)
	if _, ok := d.(device.Brancher); !ok {
		t.Skipf("%s has no branches (device.Brancher)", d.Name())
	}
	lengths := []int32{3, 5, 1}
	for _, lstm := range []bool{true, false} {
		for _, bidir := range []bool{true, false} {
			for _, chunk := range []int{1, 2, brT} {
				for _, mode := range []Mode{Train, NoGrad} {
					t.Run(fmt.Sprintf("lstm=%v/bidirectional=%v/chunk%d/%v", lstm, bidir, chunk, mode), func(t *testing.T) {
						cfg := Config{Input: brI, Hidden: brH, Layers: 1, Bidirectional: bidir, DType: device.Float64}
						width := brI // what the branch projects: the reverse direction's input
						if !bidir {
							cfg.Layers, width = 2, brH // the upper layer's input, the lower's output
						}
						s, err := newStack(context.Background(), d, cfg, cellFor(lstm))
						must(t, err)
						defer func() { must(t, s.Close()) }()
						s.chunkRows = chunk * brB
						b, err := device.NewBranch(d)
						must(t, err)
						counted := &countedBranch{Branch: b, inputRows: map[int]int{}}
						s.branch, s.branchTried = counted, true
						x := newBuf(t, d, randoms(rand.New(rand.NewPCG(1, 2)), brT*brB*brI))
						_, err = s.ForwardLengths(mode, x, brT, brB, lengths, nil)
						must(t, err)
						must(t, d.Synchronize())
						if got := counted.inputRows[width]; got != 9 {
							t.Errorf("the branch projected %d rows of an input of %d features (%v), want the 9 that run", got, width, counted.inputRows)
						}
					})
				}
			}
		}
	}
}

// TestNoGradPackRoom checks the room a NoGrad forward with lengths takes
// for its projection's packed operands (plan: pass.pkIn and pkPre, one
// stream's here, a unidirectional layer): the rows of its largest chunk,
// at most T steps of the batch, each of the input's and the gates' width,
// and nothing when no chunk is packed. It is the difference between the
// workspace of a forward over lengths {3, 5, 1}, whose last chunk packs,
// and one over {5, 5, 4}, whose every chunk is a product over its first
// rows (every step but the last runs the whole batch): the rest of their
// plans is the same shape's. Chunks of 2 steps (the second packed), and
// of 334 (1,000 rows: T = 5 steps of 3 rows, 15, and not the 1,002 of a
// chunk, as before 2026-11-29c).
func TestNoGradPackRoom(t *testing.T) {
	d := testdevice.Open(t)
	for _, lstm := range []bool{true, false} {
		for _, c := range []struct{ chunkRows, room int }{{2 * brB, 2 * brB}, {1000, brT * brB}} {
			t.Run(fmt.Sprintf("lstm=%v/chunkRows=%d", lstm, c.chunkRows), func(t *testing.T) {
				cfg := Config{Input: brI, Hidden: brH, Layers: 1, DType: device.Float64}
				x := newBuf(t, d, randoms(rand.New(rand.NewPCG(1, 2)), brT*brB*brI))
				work := func(lengths []int32) (int64, int) {
					s, err := newStack(context.Background(), d, cfg, cellFor(lstm))
					must(t, err)
					defer func() { must(t, s.Close()) }()
					s.chunkRows = c.chunkRows
					_, err = s.ForwardLengths(NoGrad, x, brT, brB, lengths, nil)
					must(t, err)
					must(t, d.Synchronize())
					return s.work.buf.Len(), s.cell.gates() * brH
				}
				packs, GH := work([]int32{3, 5, 1})
				plain, _ := work([]int32{5, 5, 4})
				aligned := func(n int) int64 { return int64((n+arenaAlign-1)/arenaAlign*arenaAlign) * 8 }
				if got, want := packs-plain, aligned(c.room*brI)+aligned(c.room*GH); got != want {
					t.Errorf("the packed forward's workspace is %d bytes larger, want %d: %d rows of the input's %d and the gates' %d float64s",
						got, want, c.room, brI, GH)
				}
			})
		}
	}
}
