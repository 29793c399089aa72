package models_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/closedtest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// randomBatch is a batch of rows sequences of up to seq ids in [2, vocab)
// collated as loader.Collate lays one out (time-major, PadID past each
// length), with each word's characters in [2, chars) when chars > 0.
func randomBatch(r *rand.Rand, seq, rows, vocab, chars int) loader.HostBatch {
	hb := loader.HostBatch{Seq: seq, Rows: rows, Lengths: make([]int32, rows)}
	for i := range hb.Lengths {
		hb.Lengths[i] = int32(1 + r.IntN(seq))
	}
	hb.Lengths[r.IntN(rows)] = int32(seq) // the longest is Seq, as Collate's
	var spell [][]int32
	for t := range seq {
		for row := range rows {
			if t >= int(hb.Lengths[row]) {
				hb.Tokens = append(hb.Tokens, loader.PadID)
				continue
			}
			hb.Tokens = append(hb.Tokens, int32(2+r.IntN(vocab-2)))
			hb.Real++
			if chars > 0 {
				w := make([]int32, 1+r.IntN(3))
				for i := range w {
					w[i] = int32(2 + r.IntN(chars-2))
				}
				spell = append(spell, w)
				hb.CharLengths = append(hb.CharLengths, int32(len(w)))
				hb.WordLen = max(hb.WordLen, len(w))
			}
		}
	}
	hb.Labels = make([]int32, seq*rows) // what upBatch uploads; Predict reads none
	if chars > 0 {
		hb.Chars = make([]int32, hb.WordLen*hb.Real)
		for j, w := range spell {
			for i, ch := range w {
				hb.Chars[i*hb.Real+j] = ch
			}
		}
		hb.WordIndex, hb.WordPositions = wordOrder(seq, rows, hb.Lengths)
	}
	return hb
}

// predictor is what the three models' Predict have in common once their
// arguments are bound: a batch's logits.
type predictor func(hb loader.HostBatch) ([]float64, error)

// servedModel is one model of the concurrency tests, its Predict, its
// shares' and its Close.
type servedModel struct {
	name    string
	predict predictor
	share   func() (predictor, func() error, error)
	close   func() error
	batch   func(r *rand.Rand) loader.HostBatch
}

// servedModels builds a classifier (a bidirectional GRU, mean pooling), a
// tagger with character features (a bidirectional LSTM) and a char-RNN
// (a 2-layer LSTM), small, on d.
func servedModels(t *testing.T, d device.Device) []servedModel {
	t.Helper()
	const V, C = 9, 7
	words, labels := fixtureVocabs(t, V, []string{"A", "B", "C"})
	chars := fixtureChars(t, C)
	cl, err := models.NewClassifier(context.Background(), d, models.ClassifierConfig{Cell: "gru", Embed: 4, Hidden: 5, Layers: 2, Bidirectional: true,
		Pool: models.PoolMean}, words, labels, 3)
	check(t, err)
	tg, err := models.NewTaggerChars(context.Background(), d, models.TaggerConfig{Cell: "lstm", Embed: 3, Hidden: 4, Layers: 1, Bidirectional: true,
		CharEmbed: 2, CharHidden: 3}, words, chars, labels, 5)
	check(t, err)
	vocab, err := loader.NewVocab(strings.Split("abcdefg", ""))
	check(t, err)
	cr, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: "lstm", Embed: 4, Hidden: 6, Layers: 2}, vocab, 7)
	check(t, err)
	charPredict := func(m *models.CharRNN) predictor {
		return func(hb loader.HostBatch) ([]float64, error) { return m.Predict(hb.Tokens, hb.Seq, hb.Rows) }
	}
	return []servedModel{
		{
			name: "Classifier", predict: cl.Predict, close: cl.Close,
			share: func() (predictor, func() error, error) {
				s, err := cl.Share()
				if err != nil {
					return nil, nil, err
				}
				return s.Predict, s.Close, nil
			},
			batch: func(r *rand.Rand) loader.HostBatch { return randomBatch(r, 1+r.IntN(5), 1+r.IntN(4), V, 0) },
		},
		{
			name: "Tagger", predict: tg.Predict, close: tg.Close,
			share: func() (predictor, func() error, error) {
				s, err := tg.Share()
				if err != nil {
					return nil, nil, err
				}
				return s.Predict, s.Close, nil
			},
			batch: func(r *rand.Rand) loader.HostBatch { return randomBatch(r, 1+r.IntN(5), 1+r.IntN(4), V, C) },
		},
		{
			name: "CharRNN", predict: charPredict(cr), close: cr.Close,
			share: func() (predictor, func() error, error) {
				s, err := cr.Share()
				if err != nil {
					return nil, nil, err
				}
				return charPredict(s), s.Close, nil
			},
			// A char-RNN's windows are whole: every row seq long, ids in
			// the vocabulary of 7.
			batch: func(r *rand.Rand) loader.HostBatch {
				hb := randomBatch(r, 1+r.IntN(5), 1+r.IntN(4), vocab.Len()+2, 0)
				for i := range hb.Tokens {
					hb.Tokens[i] = int32(r.IntN(vocab.Len()))
				}
				return hb
			},
		},
	}
}

func paramBytes(d device.Device) int64 { return d.MemStats().CategoryBytes[alloc.Parameters].Current }

// TestSharesPredictAsSerial is the service case: one loaded model, 8
// goroutines each with a share of it (Share) making 100 Predict calls over
// 100 inputs of varied shapes, and every answer the model's own serial
// answer to the bit (a share makes the model's calls on its own buffers,
// and every device gives the same bits for the same calls); the shares
// add nothing to the device's parameter memory, refuse to train, and keep
// answering after the model's Close, until the last share's Close frees
// the parameters. For the classifier (mean pooling over lengths), the
// tagger with character features and the char-RNN.
func TestSharesPredictAsSerial(t *testing.T) {
	const goroutines, calls, inputs = 8, 100, 100
	d := testdevice.Open(t)
	before := paramBytes(d)
	served := servedModels(t, d)
	defer func() {
		for _, m := range served {
			m.close() // closed already, unless the test stopped early: then nil or the first Close
		}
	}()
	for _, m := range served {
		t.Run(m.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(46, 4))
			in := make([]loader.HostBatch, inputs)
			want := make([][]float64, inputs)
			for i := range in {
				in[i] = m.batch(r)
				var err error
				want[i], err = m.predict(in[i])
				check(t, err)
			}
			withParams := paramBytes(d) // this model's and those of the models after it
			shares := make([]predictor, goroutines)
			closes := make([]func() error, goroutines)
			for g := range shares {
				var err error
				shares[g], closes[g], err = m.share()
				check(t, err)
			}
			if got := paramBytes(d); got != withParams {
				t.Errorf("parameter bytes with %d shares = %d, want %d as with none: a share copies no weight", goroutines, got, withParams)
			}
			run := func(stage string) {
				var wg sync.WaitGroup
				errs := make(chan error, goroutines)
				for g := range goroutines {
					wg.Go(func() {
						for k := range calls {
							i := (g*calls + k*7) % inputs
							got, err := shares[g](in[i])
							if err != nil {
								errs <- fmt.Errorf("%s: goroutine %d, call %d: %w", stage, g, k, err)
								return
							}
							if !slices.Equal(got, want[i]) {
								errs <- fmt.Errorf("%s: goroutine %d, call %d, input %d: logits %v, want %v as serial", stage, g, k, i, got, want[i])
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			}
			run("shares")
			check(t, m.close())
			if got := paramBytes(d); got != withParams {
				t.Errorf("parameter bytes after the model's Close with its shares alive = %d, want %d", got, withParams)
			}
			run("shares after the model's Close")
			for _, c := range closes {
				check(t, c())
			}
			if got := paramBytes(d); got >= withParams {
				t.Errorf("parameter bytes after the last share's Close = %d, want less than the %d with the model's", got, withParams)
			}
		})
	}
	if got := paramBytes(d); got != before {
		t.Errorf("parameter bytes after the last shares' Close = %d, want %d as before the models", got, before)
	}
}

// TestOneModelFromManyGoroutines: 8 goroutines make 100 Predict calls
// each on one model with no share: every call either answers what the
// model answers alone, to the bit, or is refused with an error matching
// rnn.ErrBusy; none panics, fails otherwise or answers wrongly. Predict
// holds the model from the upload to the download, which a Forward
// cannot (its result is the model's buffer until its next call), so
// this is the check that a guard makes sharing safe or refused.
func TestOneModelFromManyGoroutines(t *testing.T) {
	const goroutines, calls, inputs = 8, 100, 20
	d := testdevice.Open(t)
	for _, m := range servedModels(t, d) {
		t.Run(m.name, func(t *testing.T) {
			defer func() { check(t, m.close()) }()
			r := rand.New(rand.NewPCG(46, 8))
			in := make([]loader.HostBatch, inputs)
			want := make([][]float64, inputs)
			for i := range in {
				in[i] = m.batch(r)
				var err error
				want[i], err = m.predict(in[i])
				check(t, err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			answered, busy := 0, 0
			for g := range goroutines {
				wg.Go(func() {
					for k := range calls {
						i := (g + k) % inputs
						got, err := m.predict(in[i])
						mu.Lock()
						switch {
						case errors.Is(err, rnn.ErrBusy):
							busy++
						case err != nil:
							t.Errorf("goroutine %d, call %d: %v, want an answer or an error matching rnn.ErrBusy", g, k, err)
						case !slices.Equal(got, want[i]):
							t.Errorf("goroutine %d, call %d, input %d: logits %v, want %v as alone", g, k, i, got, want[i])
						default:
							answered++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if answered == 0 {
				t.Errorf("no call of %d answered (%d busy), want at least the first", goroutines*calls, busy)
			}
			t.Logf("%d calls answered, %d refused as busy", answered, busy)
		})
	}
}

// TestPredictIsForward: Predict's logits are those of ForwardBatch over
// the same batch on the device, downloaded; ids out of range are refused
// on the host with device.ErrIndex, and a batch whose parts do not fit
// with device.ErrShape, before anything is queued.
func TestPredictIsForward(t *testing.T) {
	d := testdevice.Open(t)
	words, labels := fixtureVocabs(t, 9, []string{"A", "B", "C"})
	m, err := models.NewTaggerChars(context.Background(), d, models.TaggerConfig{Cell: "gru", Embed: 3, Hidden: 4, Layers: 2,
		CharEmbed: 2, CharHidden: 3}, words, fixtureChars(t, 7), labels, 5)
	check(t, err)
	defer m.Close()
	hb := randomBatch(rand.New(rand.NewPCG(1, 2)), 4, 3, 9, 7)
	got, err := m.Predict(hb)
	check(t, err)
	y, err := m.ForwardBatch(rnn.NoGrad, upBatch(t, d, hb))
	check(t, err)
	want := make([]float32, hb.Seq*hb.Rows*labels.Len())
	check(t, device.DownloadSlice(d, want, y))
	for i := range want {
		if got[i] != float64(want[i]) {
			t.Fatalf("Predict's logit %d = %v, ForwardBatch's %v", i, got[i], want[i])
		}
	}
	for _, c := range []struct {
		name string
		hb   func(h loader.HostBatch) loader.HostBatch
		want error
	}{
		{"token past the vocabulary", func(h loader.HostBatch) loader.HostBatch {
			h.Tokens = slices.Clone(h.Tokens)
			h.Tokens[5] = 9
			return h
		}, device.ErrIndex},
		{"negative character", func(h loader.HostBatch) loader.HostBatch {
			h.Chars = slices.Clone(h.Chars)
			h.Chars[0] = -1
			return h
		}, device.ErrIndex},
		{"word index past the positions", func(h loader.HostBatch) loader.HostBatch {
			h.WordIndex = slices.Clone(h.WordIndex)
			h.WordIndex[0] = int32(h.Seq * h.Rows)
			return h
		}, device.ErrIndex},
		{"tokens short of Seq·Rows", func(h loader.HostBatch) loader.HostBatch { h.Tokens = h.Tokens[1:]; return h }, device.ErrShape},
		{"no characters", func(h loader.HostBatch) loader.HostBatch { h.Chars, h.WordLen = nil, 0; return h }, device.ErrShape},
		{"no rows", func(h loader.HostBatch) loader.HostBatch { h.Rows = 0; return h }, device.ErrShape},
	} {
		if _, err := m.Predict(c.hb(hb)); !errors.Is(err, c.want) {
			t.Errorf("Predict with a %s = %v, want an error matching %v", c.name, err, c.want)
		}
	}
	check(t, d.Synchronize()) // nothing was queued that fails
}

// TestClosedModels closes each model and calls every exported method
// (the table must name them all): each that runs layers or touches
// device memory returns an error matching rnn.ErrClosed that names the
// model and method, the getters of the configuration still answer, the
// parameters are closed, nothing panics and a second Close returns nil.
func TestClosedModels(t *testing.T) {
	d := testdevice.Open(t)
	words, labels := fixtureVocabs(t, 9, []string{"A", "B", "C"})
	hb := randomBatch(rand.New(rand.NewPCG(3, 4)), 3, 2, 9, 0)
	b := upBatch(t, d, hb)
	logits := upFloat32(t, d, 64)
	closed := func(f func() error) closedtest.Call { return closedtest.Call{Closed: true, F: f} }
	getter := func(f func() error) closedtest.Call { return closedtest.Call{F: f} }
	noPanic := func(f func()) closedtest.Call { return getter(func() error { f(); return nil }) }
	groupsFreed := func(groups []train.Group) closedtest.Call {
		return getter(func() error {
			for _, g := range groups {
				for p := range g.Params.All() {
					if _, err := g.Params.Value(p.Name); !errors.Is(err, rnn.ErrClosed) {
						return fmt.Errorf("group %s's %s.Value = %v, want an error matching rnn.ErrClosed", g.Name, p.Name, err)
					}
					break
				}
			}
			return nil
		})
	}
	setRandom := func(m interface{ SetRandomState([]uint64) error }) closedtest.Call {
		return closed(func() error { return m.SetRandomState([]uint64{1, 2}) })
	}

	t.Run("Classifier", func(t *testing.T) {
		m, err := models.NewClassifier(context.Background(), d, models.ClassifierConfig{Cell: "lstm", Embed: 3, Hidden: 4, Layers: 1}, words, labels, 1)
		check(t, err)
		_, err = m.Forward(rnn.Train, b.Tokens, hb.Seq, hb.Rows, hb.Lengths)
		check(t, err)
		check(t, m.Close())
		closedtest.Check(t, "Classifier", m, rnn.ErrClosed, map[string]closedtest.Call{
			"Config":         noPanic(func() { m.Config() }),
			"Vocab":          getter(func() error { return same(m.Vocab().Len(), words.Len(), "Vocab().Len()") }),
			"Labels":         getter(func() error { return same(m.Labels().Len(), labels.Len(), "Labels().Len()") }),
			"Classes":        getter(func() error { return same(m.Classes(), labels.Len(), "Classes()") }),
			"Metadata":       getter(func() error { return same(m.Metadata()["format"], models.ClassifierFormat, "Metadata format") }),
			"RandomState":    noPanic(func() { m.RandomState() }),
			"Groups":         groupsFreed(m.Groups()),
			"Forward":        closed(func() error { return second(m.Forward(rnn.NoGrad, b.Tokens, hb.Seq, hb.Rows, hb.Lengths)) }),
			"ForwardBatch":   closed(func() error { return second(m.ForwardBatch(rnn.NoGrad, b)) }),
			"Backward":       closed(func() error { return m.Backward(logits) }),
			"Predict":        closed(func() error { return second(m.Predict(hb)) }),
			"Share":          closed(func() error { return second(m.Share()) }),
			"SetRandomState": setRandom(m),
			"SetRecompute":   closed(func() error { return m.SetRecompute(2) }),
			"Close":          getter(m.Close),
		})
	})

	t.Run("Tagger", func(t *testing.T) {
		m, err := models.NewTaggerChars(context.Background(), d, models.TaggerConfig{Cell: "gru", Embed: 3, Hidden: 4, Layers: 1, CharEmbed: 2, CharHidden: 2},
			words, fixtureChars(t, 7), labels, 1)
		check(t, err)
		check(t, m.Close())
		closedtest.Check(t, "Tagger", m, rnn.ErrClosed, map[string]closedtest.Call{
			"Config":         noPanic(func() { m.Config() }),
			"Words":          getter(func() error { return same(m.Words().Len(), words.Len(), "Words().Len()") }),
			"Tags":           getter(func() error { return same(m.Tags().Len(), labels.Len(), "Tags().Len()") }),
			"Chars":          getter(func() error { return same(m.Chars().Len(), 7, "Chars().Len()") }),
			"Classes":        getter(func() error { return same(m.Classes(), labels.Len(), "Classes()") }),
			"Metadata":       getter(func() error { return same(m.Metadata()["format"], models.TaggerFormat, "Metadata format") }),
			"RandomState":    noPanic(func() { m.RandomState() }),
			"Groups":         groupsFreed(m.Groups()),
			"Forward":        closed(func() error { return second(m.Forward(rnn.NoGrad, b.Tokens, hb.Seq, hb.Rows, hb.Lengths)) }),
			"ForwardBatch":   closed(func() error { return second(m.ForwardBatch(rnn.NoGrad, b)) }),
			"Backward":       closed(func() error { return m.Backward(logits) }),
			"Predict":        closed(func() error { return second(m.Predict(hb)) }),
			"Share":          closed(func() error { return second(m.Share()) }),
			"SetRandomState": setRandom(m),
			"SetRecompute":   closed(func() error { return m.SetRecompute(2) }),
			"Close":          getter(m.Close),
		})
	})

	t.Run("CharRNN", func(t *testing.T) {
		vocab, err := loader.NewVocab(strings.Split("abcdefghi", ""))
		check(t, err)
		m, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: "lstm", Embed: 3, Hidden: 4, Layers: 2, Dropout: 0.5}, vocab, 1)
		check(t, err)
		st, err := m.NewState(hb.Rows)
		check(t, err)
		defer st.Free()
		check(t, m.Close())
		closedtest.Check(t, "CharRNN", m, rnn.ErrClosed, map[string]closedtest.Call{
			"Config":         noPanic(func() { m.Config() }),
			"Vocab":          getter(func() error { return same(m.Vocab().Len(), vocab.Len(), "Vocab().Len()") }),
			"Classes":        getter(func() error { return same(m.Classes(), vocab.Len(), "Classes()") }),
			"Metadata":       getter(func() error { return same(m.Metadata()["format"], models.CharRNNFormat, "Metadata format") }),
			"RandomState":    noPanic(func() { m.RandomState() }),
			"Replayable":     noPanic(func() { m.Replayable(rnn.Train) }),
			"Replayed":       noPanic(func() { m.Replayed(rnn.Train, hb.Seq, hb.Rows) }),
			"Branched":       noPanic(func() { m.Branched() }),
			"WaveWindows":    noPanic(func() { m.WaveWindows() }),
			"NotifyGrads":    noPanic(func() { m.NotifyGrads(nil) }),
			"Groups":         groupsFreed(m.Groups()),
			"NewState":       closed(func() error { return second(m.NewState(hb.Rows)) }),
			"Forward":        closed(func() error { return second(m.Forward(rnn.NoGrad, b.Tokens, hb.Seq, hb.Rows, st)) }),
			"Backward":       closed(func() error { return m.Backward(logits) }),
			"Predict":        closed(func() error { return second(m.Predict(hb.Tokens, hb.Seq, hb.Rows)) }),
			"Share":          closed(func() error { return second(m.Share()) }),
			"SetRandomState": setRandom(m),
			"SetRecompute":   closed(func() error { return m.SetRecompute(2) }),
			"Close":          getter(m.Close),
		})
	})
}

// TestSharesRefuseToTrain: a share's training forward, Backward and
// dropout state are rnn.ErrShared, and its Forward without grad is the
// model's.
func TestSharesRefuseToTrain(t *testing.T) {
	d := testdevice.Open(t)
	words, labels := fixtureVocabs(t, 9, []string{"A", "B", "C"})
	m, err := models.NewClassifier(context.Background(), d, models.ClassifierConfig{Cell: "lstm", Embed: 3, Hidden: 4, Layers: 2, Dropout: 0.5}, words, labels, 1)
	check(t, err)
	defer m.Close()
	s, err := m.Share()
	check(t, err)
	defer s.Close()
	hb := randomBatch(rand.New(rand.NewPCG(5, 6)), 3, 2, 9, 0)
	b := upBatch(t, d, hb)
	for what, err := range map[string]error{
		"Forward(Train)":      second(s.Forward(rnn.Train, b.Tokens, hb.Seq, hb.Rows, hb.Lengths)),
		"ForwardBatch(Train)": second(s.ForwardBatch(rnn.Train, b)),
		"Backward":            s.Backward(upFloat32(t, d, 64)),
		"SetRandomState":      s.SetRandomState([]uint64{1, 2}),
	} {
		if !errors.Is(err, rnn.ErrShared) {
			t.Errorf("a share's %s = %v, want an error matching rnn.ErrShared", what, err)
		}
	}
	read := func(m *models.Classifier) []float32 {
		y, err := m.Forward(rnn.NoGrad, b.Tokens, hb.Seq, hb.Rows, hb.Lengths)
		check(t, err)
		v := make([]float32, hb.Rows*labels.Len())
		check(t, device.DownloadSlice(d, v, y))
		return v
	}
	if a, b := read(m), read(s); !slices.Equal(a, b) {
		t.Errorf("a share's logits %v, the model's %v", b, a)
	}
}

func upFloat32(t *testing.T, d device.Device, n int) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(n)*4, device.Workspace)
	check(t, err)
	t.Cleanup(func() { d.Free(b) })
	check(t, d.Kernels().Fill(device.Fill{DType: device.Float32, N: n, X: b}))
	return b
}

func same[T comparable](got, want T, what string) error {
	if got != want {
		return fmt.Errorf("%s = %v, want %v", what, got, want)
	}
	return nil
}

func second[T any](_ T, err error) error { return err }
