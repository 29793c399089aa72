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
	if m.emb, err = rnn.NewEmbedding(d, rnn.EmbeddingConfig{Vocab: vocab, Dim: 8, Seed: 1}); err != nil {
		return err
	}
	if m.lstm, err = rnn.NewLSTM(d, rnn.Config{Input: 8, Hidden: 16, Layers: 2, Seed: 1}); err != nil {
		return err
	}
	if m.head, err = rnn.NewLinear(d, rnn.LinearConfig{In: 16, Out: vocab, Seed: 1}); err != nil {
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

	ids, err := d.Alloc(seq * batch * 4)
	if err != nil {
		return err
	}
	targets, err := d.Alloc(seq * batch * 4)
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
