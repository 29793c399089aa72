package train_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// charModel is the smallest train.Model: Embedding, one LSTM layer and
// Linear, carrying the LSTM's state between windows.
type charModel struct {
	emb  *rnn.Embedding
	lstm *rnn.LSTM
	out  *rnn.Linear
}

func newCharModel(d device.Device, vocab, hidden int) (*charModel, error) {
	emb, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: vocab, Dim: 8, Seed: 1})
	if err != nil {
		return nil, err
	}
	m := &charModel{emb: emb}
	if m.lstm, err = rnn.NewLSTM(context.Background(), d, rnn.Config{Input: 8, Hidden: hidden, Seed: 2}); err == nil {
		m.out, err = rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: hidden, Out: vocab, Seed: 3})
	}
	if err != nil {
		return nil, errors.Join(err, m.Close())
	}
	return m, nil
}

func (m *charModel) Groups() []train.Group {
	return []train.Group{{Name: "emb", Params: m.emb.Params()}, {Name: "rnn", Params: m.lstm.Params()}, {Name: "out", Params: m.out.Params()}}
}

func (m *charModel) Classes() int { return m.emb.Config().Vocab }

func (m *charModel) NewState(rows int) (train.State, error) {
	s, err := m.lstm.NewState(rows)
	if err != nil {
		return nil, err
	}
	return train.RecurrentState{State: s}, nil
}

func (m *charModel) Forward(mode rnn.Mode, ids device.Buffer, seq, rows int, st train.State) (device.Buffer, error) {
	var s *rnn.State
	if st != nil {
		s = st.(train.RecurrentState).State
	}
	x, err := m.emb.Forward(mode, ids, seq*rows)
	if err != nil {
		return device.Buffer{}, err
	}
	h, err := m.lstm.Forward(mode, x, seq, rows, s)
	if err != nil {
		return device.Buffer{}, err
	}
	return m.out.Forward(mode, h, seq*rows)
}

func (m *charModel) Backward(dLogits device.Buffer) error {
	dh, err := m.out.Backward(dLogits)
	if err != nil {
		return err
	}
	dx, err := m.lstm.Backward(dh)
	if err != nil {
		return err
	}
	return m.emb.Backward(dx)
}

func (m *charModel) Close() error {
	var errs []error
	for _, l := range []interface{ Close() error }{m.emb, m.lstm, m.out} {
		if l != nil {
			errs = append(errs, l.Close())
		}
	}
	return errors.Join(errs...)
}

// Training a character model for a few steps on a short text, then
// sampling from it greedily.
func Example() {
	if err := trainAndSample(); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// step 1: loss 1.08 nats/char
	// step 2: loss 1.02 nats/char
	// step 3: loss 0.92 nats/char
	// step 4: loss 0.84 nats/char
	// step 5: loss 0.74 nats/char
	// step 6: loss 0.63 nats/char
	// sample: "ab ab ab ab"
}

func trainAndSample() (err error) {
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()

	const s = "ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab "
	text, err := loader.Tokenize(context.Background(), loader.NewCorpus(strings.NewReader(s), int64(len(s)), "ab"), loader.TokenizeConfig{})
	if err != nil {
		return err
	}
	data, err := loader.New(d, text, loader.Config{Batch: 4, Seq: 8})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, data.Close()) }()
	m, err := newCharModel(d, text.Vocab().Len(), 16)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.Close()) }()

	opt, err := train.NewOptimizer(train.Adam, 0.02)
	if err != nil {
		return err
	}
	tr, err := train.New(d, m, data, train.Config{Optimizer: opt, Steps: 6, ClipNorm: 5,
		OnStep: func(p train.Progress) { fmt.Printf("step %d: loss %.2f nats/char\n", p.Step, p.Loss) }})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tr.Close()) }()
	if _, err := tr.Run(context.Background()); err != nil {
		return err
	}

	prime, err := text.Vocab().Encode("a")
	if err != nil {
		return err
	}
	var out []int32
	err = train.Sample(context.Background(), d, m, train.SampleConfig{N: 10, Prime: prime}, func(id int32) error {
		out = append(out, id)
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("sample: %q\n", "a"+text.Vocab().Decode(out))
	return nil
}
