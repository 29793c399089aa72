package rnn_test

import (
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/rnn"
)

// A training step over two windows of a 2-layer LSTM, carrying the state
// from one window to the next and detaching it in between.
func Example() {
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	const seq, batch, vocab = 4, 2, 10
	emb, _ := rnn.NewEmbedding(d, rnn.EmbeddingConfig{Vocab: vocab, Dim: 8, Seed: 1})
	lstm, _ := rnn.NewLSTM(d, rnn.Config{Input: 8, Hidden: 16, Layers: 2, Seed: 1})
	head, _ := rnn.NewLinear(d, rnn.LinearConfig{In: 16, Out: vocab, Seed: 1})
	loss, _ := rnn.NewCrossEntropy(d, vocab, device.Float32)
	state, _ := lstm.NewState(batch)

	ids, _ := d.Alloc(seq * batch * 4)
	targets, _ := d.Alloc(seq * batch * 4)
	var y device.Buffer
	for window := range 2 {
		in := []int32{1, 2, 3, 4, 5, 6, 7, 8}
		device.UploadSlice(d, ids, in)
		device.UploadSlice(d, targets, append(in[1:], 9))

		x, _ := emb.Forward(rnn.Train, ids, seq*batch)
		y, _ = lstm.Forward(rnn.Train, x, seq, batch, state)
		logits, _ := head.Forward(rnn.Train, y, seq*batch)
		loss.ResetLoss()
		loss.Forward(rnn.Train, logits, targets, seq*batch, 1)

		dLogits, _ := loss.Backward()
		dy, _ := head.Backward(dLogits)
		dx, _ := lstm.Backward(dy)
		if err := emb.Backward(dx); err != nil {
			panic(err)
		}
		state.Detach() // the next window starts from this one's end

		l, err := loss.Loss()
		fmt.Printf("window %d: loss finite %v, error %v\n", window, l > 0 && l < 10, err)
	}
	// The step's Backward consumed what the forward saved.
	_, err = lstm.Backward(y)
	fmt.Println(errors.Is(err, rnn.ErrNoForward))
	// Output:
	// window 0: loss finite true, error <nil>
	// window 1: loss finite true, error <nil>
	// true
}
