// The trainer's tests run on the device internal/testdevice opens
// (testdevice.Open: the CPU by default, the CUDA device with
// GOCURRENT_TEST_DEVICE=cuda), so one test binary checks the trainer on
// either. They read device memory only through Download and the host
// accessors (Params.Value, Params.Grad), never a buffer's bytes, and they
// compare memory figures as differences on one device. What is exact on
// one device (a resumed run's bits, a sample's tokens for a seed) is held
// exact; what compares different arithmetic says where its tolerance
// comes from.

package train_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
	"gorgonia.org/tensor"
)

// lm is a small language model for the trainer's tests: Embedding, an LSTM
// or GRU stack and Linear, the char model's layers (examples/charrnn holds
// the real one; the trainer may not import it).
type lm struct {
	emb  *rnn.Embedding
	lstm *rnn.LSTM
	gru  *rnn.GRU
	out  *rnn.Linear
	v    int
	// syncs, when set, is the device whose Synchronize ends every
	// Forward: a forward a graph cannot record (the capture refuses it).
	syncs device.Device
}

type lmConfig struct {
	vocab, embed, hidden, layers int
	gru                          bool
	dropout                      float64
	dtype                        device.DType
	seed                         uint64
}

func newLM(t testing.TB, d device.Device, c lmConfig) *lm {
	t.Helper()
	m := &lm{v: c.vocab}
	var err error
	m.emb, err = rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: c.vocab, Dim: c.embed, DType: c.dtype, Seed: c.seed})
	check(t, err)
	rc := rnn.Config{Input: c.embed, Hidden: c.hidden, Layers: c.layers, Dropout: c.dropout, DType: c.dtype, Seed: c.seed + 1}
	if c.gru {
		m.gru, err = rnn.NewGRU(context.Background(), d, rc)
	} else {
		m.lstm, err = rnn.NewLSTM(context.Background(), d, rc)
	}
	check(t, err)
	m.out, err = rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: c.hidden, Out: c.vocab, DType: c.dtype, Seed: c.seed + 2})
	check(t, err)
	t.Cleanup(func() { m.close() })
	return m
}

// close frees the layers' memory (again: newLM's cleanup calls it too).
func (m *lm) close() error {
	errs := []error{m.emb.Close(), m.out.Close()}
	if m.gru != nil {
		errs = append(errs, m.gru.Close())
	} else {
		errs = append(errs, m.lstm.Close())
	}
	return errors.Join(errs...)
}

func (m *lm) stackParams() *rnn.Params {
	if m.gru != nil {
		return m.gru.Params()
	}
	return m.lstm.Params()
}

func (m *lm) Groups() []train.Group {
	return []train.Group{{Name: "emb", Params: m.emb.Params()}, {Name: "rnn", Params: m.stackParams()}, {Name: "out", Params: m.out.Params()}}
}

func (m *lm) Classes() int { return m.v }

// Replayable implements train.Replayable: the layers queue the same calls
// on the same buffers for the same shapes, and the stack's dropout masks
// start where the device says (Replayed).
func (m *lm) Replayable(rnn.Mode) bool { return true }

// Replayed implements train.ReplayTracker.
func (m *lm) Replayed(mode rnn.Mode, seq, rows int) {
	if m.gru != nil {
		m.gru.Replayed(mode, seq, rows)
	} else {
		m.lstm.Replayed(mode, seq, rows)
	}
}

var _ train.ReplayTracker = (*lm)(nil)

func (m *lm) NewState(rows int) (train.State, error) {
	var s *rnn.State
	var err error
	if m.gru != nil {
		s, err = m.gru.NewState(rows)
	} else {
		s, err = m.lstm.NewState(rows)
	}
	if err != nil {
		return nil, err
	}
	return train.RecurrentState{State: s}, nil
}

func (m *lm) Forward(mode rnn.Mode, ids device.Buffer, seq, rows int, st train.State) (device.Buffer, error) {
	var rs *rnn.State
	if st != nil {
		rs = st.(train.RecurrentState).State
	}
	x, err := m.emb.Forward(mode, ids, seq*rows)
	if err != nil {
		return x, err
	}
	var y device.Buffer
	if m.gru != nil {
		y, err = m.gru.Forward(mode, x, seq, rows, rs)
	} else {
		y, err = m.lstm.Forward(mode, x, seq, rows, rs)
	}
	if err != nil {
		return y, err
	}
	if y, err = m.out.Forward(mode, y, seq*rows); err != nil || m.syncs == nil {
		return y, err
	}
	return y, m.syncs.Synchronize()
}

func (m *lm) Backward(dl device.Buffer) error {
	dy, err := m.out.Backward(dl)
	if err != nil {
		return err
	}
	var dx device.Buffer
	if m.gru != nil {
		dx, err = m.gru.Backward(dy)
	} else {
		dx, err = m.lstm.Backward(dy)
	}
	if err != nil {
		return err
	}
	return m.emb.Backward(dx)
}

type dropoutStack interface {
	DropoutState() (seed, offset uint64)
	SetDropoutState(seed, offset uint64) error
}

func (m *lm) stack() dropoutStack {
	if m.gru != nil {
		return m.gru
	}
	return m.lstm
}

func (m *lm) RandomState() []uint64 {
	seed, off := m.stack().DropoutState()
	return []uint64{seed, off}
}

func (m *lm) SetRandomState(v []uint64) error {
	if len(v) != 2 {
		return errors.New("want seed and offset")
	}
	return m.stack().SetDropoutState(v[0], v[1])
}

var _ train.RandomModel = (*lm)(nil)

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// text is a tokenized text of n characters drawn from the first v
// letters, with some structure (a character often repeats the one two
// before it) so that training has something to learn.
func text(t testing.TB, n, v int, seed uint64) *loader.Text {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	chars := make([]string, v)
	for i := range chars {
		chars[i] = string(rune('a' + i))
	}
	for i := range b {
		if i >= 2 && r.IntN(3) > 0 {
			b[i] = b[i-2]
		} else {
			b[i] = byte('a' + r.IntN(v))
		}
	}
	vocab, err := loader.NewVocab(chars)
	check(t, err)
	txt, err := loader.Tokenize(context.Background(), loader.NewCorpus(bytes.NewReader(b), int64(n), "test"), loader.TokenizeConfig{Vocab: vocab})
	check(t, err)
	return txt
}

func newLoader(t testing.TB, d device.Device, txt *loader.Text, c loader.Config) *loader.Loader {
	t.Helper()
	l, err := loader.New(d, txt, c)
	check(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func newTrainer(t testing.TB, d device.Device, m train.Model, l *loader.Loader, c train.Config) *train.Trainer {
	t.Helper()
	tr, err := train.New(d, m, l, c)
	check(t, err)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// values downloads every parameter, by checkpoint name, as float64.
func values(t testing.TB, groups []train.Group) map[string][]float64 {
	t.Helper()
	return download(t, groups, (*rnn.Params).Value)
}

// grads downloads every parameter's gradient, by checkpoint name, as
// float64.
func grads(t testing.TB, groups []train.Group) map[string][]float64 {
	t.Helper()
	return download(t, groups, (*rnn.Params).Grad)
}

// download reads every parameter of groups through get (the host
// accessors, which work on any device), by checkpoint name, as float64.
func download(t testing.TB, groups []train.Group, get func(*rnn.Params, string) (*tensor.Dense, error)) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, g := range groups {
		for p := range g.Params.All() {
			v, err := get(g.Params, p.Name)
			check(t, err)
			switch data := v.Data().(type) {
			case []float32:
				f := make([]float64, len(data))
				for i, x := range data {
					f[i] = float64(x)
				}
				out[g.Name+"."+p.Name] = f
			case []float64:
				out[g.Name+"."+p.Name] = append([]float64(nil), data...)
			default:
				t.Fatalf("%s.%s holds %T", g.Name, p.Name, data)
			}
		}
	}
	return out
}
