package rnn_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/rnn"
)

// A training step over two windows of a 2-layer LSTM, carrying the state
// from one window to the next and detaching it in between.
func Example() {
	if err := twoWindows(); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// window 0: loss 2.27
	// window 1: loss 2.27
	// Backward again is ErrNoForward: true
}

// model is the layers of a small language model and their loss.
type model struct {
	emb  *rnn.Embedding
	lstm *rnn.LSTM
	head *rnn.Linear
	loss *rnn.CrossEntropy
}

func twoWindows() (err error) {
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	const seq, batch, vocab = 4, 2, 10
	var m model
	if m.emb, err = rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: vocab, Dim: 8, Seed: 1}); err != nil {
		return err
	}
	if m.lstm, err = rnn.NewLSTM(context.Background(), d, rnn.Config{Input: 8, Hidden: 16, Layers: 2, Seed: 1}); err != nil {
		return err
	}
	if m.head, err = rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: 16, Out: vocab, Seed: 1}); err != nil {
		return err
	}
	if m.loss, err = rnn.NewCrossEntropy(d, vocab, device.Float32); err != nil {
		return err
	}
	state, err := m.lstm.NewState(batch)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, state.Free()) }()

	ids, err := d.Alloc(seq*batch*4, device.Workspace)
	if err != nil {
		return err
	}
	targets, err := d.Alloc(seq*batch*4, device.Workspace)
	if err != nil {
		return err
	}
	in := []int32{1, 2, 3, 4, 5, 6, 7, 8} // [seq, batch], time-major
	if err := device.UploadSlice(d, ids, in); err != nil {
		return err
	}
	if err := device.UploadSlice(d, targets, append(in[1:], 9)); err != nil {
		return err
	}
	var y device.Buffer
	for window := range 2 {
		if y, err = m.step(ids, targets, seq, batch, state); err != nil {
			return err
		}
		state.Detach() // the next window starts from this one's end
		l, err := m.loss.Loss()
		if err != nil {
			return err
		}
		fmt.Printf("window %d: loss %.2f\n", window, l)
	}
	// The step's Backward consumed what the forward saved.
	_, err = m.lstm.Backward(y)
	fmt.Println("Backward again is ErrNoForward:", errors.Is(err, rnn.ErrNoForward))
	return errors.Join(d.Free(ids), d.Free(targets), m.emb.Close(), m.lstm.Close(), m.head.Close(), m.loss.Close())
}

// step runs the forward and backward of one window and returns the LSTM's
// output.
func (m *model) step(ids, targets device.Buffer, seq, batch int, state *rnn.State) (device.Buffer, error) {
	x, err := m.emb.Forward(rnn.Train, ids, seq*batch)
	if err != nil {
		return device.Buffer{}, err
	}
	y, err := m.lstm.Forward(rnn.Train, x, seq, batch, state)
	if err != nil {
		return device.Buffer{}, err
	}
	logits, err := m.head.Forward(rnn.Train, y, seq*batch)
	if err != nil {
		return device.Buffer{}, err
	}
	if err := m.loss.ResetLoss(); err != nil {
		return device.Buffer{}, err
	}
	if err := m.loss.Forward(rnn.Train, logits, targets, seq*batch, 1); err != nil {
		return device.Buffer{}, err
	}
	dLogits, err := m.loss.Backward()
	if err != nil {
		return device.Buffer{}, err
	}
	dy, err := m.head.Backward(dLogits)
	if err != nil {
		return device.Buffer{}, err
	}
	dx, err := m.lstm.Backward(dy)
	if err != nil {
		return device.Buffer{}, err
	}
	return y, m.emb.Backward(dx)
}

// A bidirectional GRU over three sequences of lengths 2, 4 and 1 padded to
// 4 steps, as a tagger reads sentences: the output has both directions'
// features, zeros at padded positions, and the final states hold each
// sequence's own last step (forward) and first position (reverse).
func ExampleGRU_ForwardLengths() {
	if err := packedBatch(); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// output [4 steps, 3 sequences, 6 features]
	// step 0: nonzero true true true
	// step 1: nonzero true true false
	// step 2: nonzero false true false
	// step 3: nonzero false true false
	// h_n[0] (forward) of sequence 0 is its output at step 1: true
	// h_n[1] (reverse) of sequence 0 is its output at step 0: true
}

func packedBatch() (err error) {
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	const T, B, I, H = 4, 3, 2, 3
	gru, err := rnn.NewGRU(context.Background(), d, rnn.Config{Input: I, Hidden: H, Bidirectional: true, DType: device.Float64, Seed: 1})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, gru.Close()) }()
	x, err := d.Alloc(T*B*I*8, device.Workspace)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Free(x)) }()
	in := make([]float64, T*B*I)
	for i := range in {
		in[i] = float64(i%7) / 7
	}
	if err := device.UploadSlice(d, x, in); err != nil {
		return err
	}
	st, err := gru.NewState(B)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Free()) }()
	y, err := gru.ForwardLengths(rnn.NoGrad, x, T, B, []int32{2, 4, 1}, st)
	if err != nil {
		return err
	}
	out, hn := make([]float64, T*B*2*H), make([]float64, 2*B*H)
	if err := device.DownloadSlice(d, out, y); err != nil {
		return err
	}
	if err := device.DownloadSlice(d, hn, st.H()); err != nil {
		return err
	}
	row := func(t, b int) []float64 { return out[(t*B+b)*2*H : (t*B+b+1)*2*H] }
	fmt.Printf("output [%d steps, %d sequences, %d features]\n", T, B, 2*H)
	for t := range T {
		fmt.Printf("step %d: nonzero", t)
		for b := range B {
			fmt.Printf(" %v", slices.ContainsFunc(row(t, b), func(v float64) bool { return v != 0 }))
		}
		fmt.Println()
	}
	fmt.Println("h_n[0] (forward) of sequence 0 is its output at step 1:", slices.Equal(hn[0:H], row(1, 0)[:H]))
	fmt.Println("h_n[1] (reverse) of sequence 0 is its output at step 0:", slices.Equal(hn[B*H:B*H+H], row(0, 0)[H:]))
	return nil
}
