package models_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// TestCopyCounts pins the device-to-device and host copies (device.Counts'
// Copies) of a char-RNN's training step and sampled token on the test
// device, for an LSTM and a GRU of L = 2 and 3 layers, so that a copy that
// creeps back fails here. The figures follow from the layers' structure:
//
// The model's training forward and backward (Embedding, a unidirectional
// stack with a carried state, Linear, no lengths, no recomputation):
//   - Embedding: 1, its ids, kept for Backward (they are the model's input,
//     which train.Model's caller may reuse);
//   - stack forward: per layer the initial h (and c) copied into the
//     sequence the step GEMMs read (h0 must lie before h1..hT for the
//     weight gradient's GEMM over the steps), and the final h (and c)
//     copied out of it into the state: 4 per LSTM layer, 2 per GRU layer;
//     the input, the Embedding's training output, is kept by reference;
//   - Linear: 0, its input (the stack's training output) kept by
//     reference;
//   - stack backward: 1, the gradient from the Linear into the top layer's
//     gradient sequence (the walk adds into it, and the caller's dy is not
//     written); per LSTM layer 1, the input-side bias gradient into the
//     recurrent one (equal sums); the gradient with respect to the final
//     cell state is carried in the state's own gradient row, not copied.
//
// So 2 + 5L for an LSTM, 2 + 2L for a GRU. The trainer's step adds the
// read-back of the step's record (1 copy to the host, a step at a time
// with Pipeline 0); its backup of the carried state is a GuardedCopy, a
// kernel: 3 + 5L and 3 + 2L. The loader's batches (1 copy to the device
// each) are counted apart and left out: its producers run ahead of the
// steps by as much as the scheduler lets them, so how many of its copies
// fall between two steps varies.
//
// A sampled token (train.Sample, one step with batch 1 and a state, no
// grad): the stack reads the state and writes the new one in place, the
// Linear and Embedding copy nothing, and the token is drawn on the device
// (device.Sample) where the next forward reads it, so a token copies
// nothing; the tokens are read back 64 at a time (1 copy each). A sample
// of 200 tokens then makes ⌈200/64⌉ - ⌈8/64⌉ = 3 copies more than one of
// 8, the same prime.
func TestCopyCounts(t *testing.T) {
	d := testdevice.Open(t)
	counter, ok := d.(device.Counter)
	if !ok {
		t.Skipf("device %s does not count its work", d.Name())
	}
	const T, B, steps = 16, 4, 4
	chars := "abcdefghij"
	v := vocab(t, chars)
	ctx := context.Background()
	for _, cell := range []string{"lstm", "gru"} {
		for _, L := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s-%d", cell, L), func(t *testing.T) {
				model, step, carried := int64(2+5*L), int64(3+5*L), 2
				if cell == "gru" {
					model, step, carried = int64(2+2*L), int64(3+2*L), 1
				}
				m, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: cell, Embed: 8, Hidden: 16, Layers: L}, v, 1)
				check(t, err)
				defer m.Close()

				// The model alone.
				ce, err := rnn.NewCrossEntropy(d, v.Len(), device.Float32)
				check(t, err)
				defer ce.Close()
				ids := make([]int32, T*B)
				for i := range ids {
					ids[i] = int32(i % v.Len())
				}
				x := upInt32(t, d, ids)
				st, err := m.NewState(B)
				check(t, err)
				defer st.Free()
				if n := len(st.Carried()); n != carried {
					t.Fatalf("%d carried buffers, want %d", n, carried)
				}
				c0 := counter.Counts()
				logits, err := m.Forward(rnn.Train, x, T, B, st)
				check(t, err)
				check(t, ce.Forward(rnn.Train, logits, x, T*B, 1))
				dl, err := ce.Backward()
				check(t, err)
				check(t, m.Backward(dl))
				if got := counter.Counts().Sub(c0).Copies; got != model {
					t.Errorf("the model's training forward and backward: %d copies, want %d", got, model)
				}

				// The trainer's steps.
				raw := strings.Repeat(chars, (steps*T*B+1)/len(chars)+2)
				text, err := loader.Tokenize(ctx, loader.NewCorpus(strings.NewReader(raw), int64(len(raw)), "counts"), loader.TokenizeConfig{Vocab: v})
				check(t, err)
				ld := &testdevice.LoaderCopies{Device: d}
				data, err := loader.New(ld, text, loader.Config{Batch: B, Seq: T})
				check(t, err)
				defer data.Close()
				opt, _ := train.NewOptimizer(train.Adam, 1e-3)
				var at [steps + 1]device.Counts
				tr, err := train.New(d, m, data, train.Config{Optimizer: opt, Steps: steps, ClipNorm: 5,
					OnStep: func(p train.Progress) { at[p.Step] = ld.CountsWithout(counter) }})
				check(t, err)
				defer tr.Close()
				_, err = tr.Run(ctx)
				check(t, err)
				// Between the ends of step 1 and of the last: whole steps, the
				// first one's setup left out.
				if got := at[steps].Sub(at[1]).Copies; got != (steps-1)*step {
					t.Errorf("training steps: %d copies over %d steps, want %d a step", got, steps-1, step)
				}

				// Sampling: a long sample against a short one.
				sample := func(n int) int64 {
					c0 := counter.Counts()
					check(t, train.Sample(ctx, d, m, train.SampleConfig{N: n, Temperature: 1, Prime: []int32{0, 1}, Seed: 2},
						func(int32) error { return nil }))
					return counter.Counts().Sub(c0).Copies
				}
				// A read-back per 64 tokens, the last with the tokens after
				// it (200: 3, the third of 72; 8: 1), none a token.
				if got := sample(200) - sample(8); got != 2 {
					t.Errorf("sampling: 200 tokens made %d copies more than 8, want 2 (200/64 read-backs, rounded down, against 1; none a token)", got)
				}
			})
		}
	}
}
