package train_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/leak"
	"github.com/gocurrent/gocurrent/internal/stall"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// cancelConfig is the model and data of the cancellation tests: dropout
// and accumulation on, so the model's random state and the carried
// states are part of what a step changes.
var cancelConfig = lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 2, dropout: 0.3, dtype: device.Float32, seed: 4}

// cancelText is the bytes of the cancellation tests' text.
func cancelText() []byte {
	txt := make([]byte, 6000)
	for i := range txt {
		txt[i] = "abcdefghij"[(i*i+i/7)%10]
	}
	return txt
}

// tokenizeReader tokenizes size bytes of r over the ten letters a-j.
func tokenizeReader(t *testing.T, r interface {
	ReadAt([]byte, int64) (int, error)
}, size int64) *loader.Text {
	t.Helper()
	vocab, err := loader.NewVocab(strings.Split("abcdefghij", ""))
	check(t, err)
	txt, err := loader.Tokenize(context.Background(), loader.NewCorpus(r, size, "cancel"), loader.TokenizeConfig{Vocab: vocab})
	check(t, err)
	return txt
}

// cancelLoader is the cancellation tests' loader: 2 micro-batches a step.
var cancelLoader = loader.Config{Batch: 3, Accum: 2, Seq: 8}

// cancelTrainer is the cancellation tests' trainer config, saving to path.
func cancelTrainer(t *testing.T, path string, onStep func(train.Progress)) train.Config {
	return train.Config{Optimizer: adam(t, 0.01), Steps: 1000, ClipNorm: 1, Checkpoint: path, OnStep: onStep}
}

// stoppedAt is the checkpoint of a run of the cancellation tests' model
// and data stopped between steps by a cancellation in OnStep after step:
// the state a run stopped at that step, any other way, must save.
func stoppedAt(t *testing.T, d device.Device, step int64) []byte {
	t.Helper()
	b := cancelText()
	l := newLoader(t, d, tokenizeReader(t, bytes.NewReader(b), int64(len(b))), cancelLoader)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "reference.safetensors")
	tr := newTrainer(t, d, newLM(t, d, cancelConfig), l, cancelTrainer(t, path, func(p train.Progress) {
		if p.Step == step {
			cancel()
		}
	}))
	if _, err := tr.Run(ctx); !errors.Is(err, context.Canceled) || tr.Step() != step {
		t.Fatalf("the reference run stopped at step %d with %v, want step %d and context.Canceled", tr.Step(), err, step)
	}
	ck, err := os.ReadFile(path)
	check(t, err)
	return ck
}

// TestCancelBlockedLoader: a run whose loader is blocked reading the data
// ends when ctx is cancelled, with an error matching context.Canceled, in
// the state the last step completed left, saved as a run stopped between
// steps there saves it, byte for byte; once the read returns and the
// loader, the trainer and the model are closed, no goroutine is left. The
// trainer stops at step 3 and runs again with the second half of the text
// stalled (the streams of each step's second micro-batch): the
// cancellation comes in step 4's first micro-batch, whose update is then
// rolled back while the loader waits for the second. Before, the trainer
// hid ctx from the loader, which waited for the data for ever.
func TestCancelBlockedLoader(t *testing.T) {
	d := testdevice.Open(t)
	want := stoppedAt(t, d, 3) // and starts what the device starts on its first steps (its GEMM workers)
	before := leak.Count()
	r := stall.New(cancelText())
	defer r.Release()
	l, err := loader.New(d, tokenizeReader(t, r, r.Size()), cancelLoader)
	check(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &interruptLM{lm: newLM(t, d, cancelConfig), n: 7}
	path := filepath.Join(t.TempDir(), "run.safetensors")
	tr, err := train.New(d, m, l, cancelTrainer(t, path, func(p train.Progress) {
		if p.Step == 3 {
			cancel()
		}
	}))
	check(t, err)
	if _, err := tr.Run(ctx); !errors.Is(err, context.Canceled) || tr.Step() != 3 {
		t.Fatalf("the first run stopped at step %d with %v, want step 3 and context.Canceled", tr.Step(), err)
	}

	// 6 streams of 1,000 characters: micro-batch 1 reads streams 3-5.
	r.StallFrom(3000)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	m.hook = cancel
	ended := make(chan error, 1)
	go func() {
		_, err := tr.Run(ctx)
		ended <- err
	}()
	err = leak.Await(t, ended, "Run, cancelled while the loader was blocked reading,")
	if !errors.Is(err, context.Canceled) || tr.Step() != 3 || m.calls != 7 {
		t.Fatalf("Run: %v at step %d after %d forwards, want context.Canceled at step 3 after 7", err, tr.Step(), m.calls)
	}
	r.Release()
	check(t, tr.Close())
	check(t, l.Close())
	// The model's stack holds a stream of its own since its first
	// Backward, the branch its weight gradients run on (on the CPU
	// device a goroutine), until it closes.
	check(t, m.lm.lstm.Close())
	leak.Expect(t, before, "after the loader, the trainer and the model closed")
	got, err := os.ReadFile(path)
	check(t, err)
	if !bytes.Equal(got, want) {
		t.Errorf("the checkpoint of the run cancelled while blocked differs from that of a run stopped at step 3")
	}
}

// interruptLM is the test model, which calls hook at the start of its
// n-th training forward (counting from 1) and fails SetRandomState with
// failRandom set.
type interruptLM struct {
	*lm
	n, calls   int
	hook       func()
	failRandom bool
}

func (m *interruptLM) Forward(mode rnn.Mode, ids device.Buffer, seq, rows int, st train.State) (device.Buffer, error) {
	if mode == rnn.Train {
		if m.calls++; m.calls == m.n {
			m.hook()
		}
	}
	return m.lm.Forward(mode, ids, seq, rows, st)
}

func (m *interruptLM) SetRandomState(v []uint64) error {
	if m.failRandom {
		return errors.New("injected SetRandomState failure")
	}
	return m.lm.SetRandomState(v)
}

// TestCancelMidStep: a cancellation during the first micro-batch of a
// step of two is noticed before the second: the step is rolled back
// (carried states, the dropout drawn) and the run ends at the step before,
// saved as a run stopped between steps there saves it, byte for byte.
// Before, the step under way completed. With the rollback failing, Run
// says so and writes no checkpoint of the state it could not restore.
func TestCancelMidStep(t *testing.T) {
	d := testdevice.Open(t)
	b := cancelText()
	want := stoppedAt(t, d, 3)
	for _, failRandom := range []bool{false, true} {
		l := newLoader(t, d, tokenizeReader(t, bytes.NewReader(b), int64(len(b))), cancelLoader)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Step 4's first micro-batch is the 7th training forward.
		m := &interruptLM{lm: newLM(t, d, cancelConfig), n: 7}
		m.hook = func() { cancel(); m.failRandom = failRandom }
		path := filepath.Join(t.TempDir(), "run.safetensors")
		tr := newTrainer(t, d, m, l, cancelTrainer(t, path, nil))
		_, err := tr.Run(ctx)
		if !errors.Is(err, context.Canceled) || tr.Step() != 3 || m.calls != 7 {
			t.Fatalf("Run: %v at step %d after %d forwards, want context.Canceled at step 3 after 7", err, tr.Step(), m.calls)
		}
		got, rerr := os.ReadFile(path)
		if failRandom {
			if !strings.Contains(err.Error(), "injected SetRandomState failure") || rerr == nil {
				t.Errorf("with the rollback failing: Run %v, checkpoint read %v; want the failure and no checkpoint", err, rerr)
			}
			continue
		}
		check(t, rerr)
		if !bytes.Equal(got, want) {
			t.Errorf("the checkpoint of the run cancelled mid-step differs from that of a run stopped at step 3")
		}
	}
}

// TestCancelEndlessSkipping: a run whose every step is non-finite, skipping
// them without a limit (MaxSkips < 0) over endless data, ends when ctx is
// cancelled from another goroutine; before, a run skipped 28,777 steps
// ignoring the cancellation.
func TestCancelEndlessSkipping(t *testing.T) {
	d := testdevice.Open(t)
	m := divergedLM(t, d)
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan struct{})
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 10, SkipNonFinite: true, MaxSkips: -1,
		OnStep: func(p train.Progress) {
			if p.Skipped == 1 {
				close(first)
			}
		}})
	ended := make(chan error, 1)
	go func() {
		_, err := tr.Run(ctx)
		ended <- err
	}()
	<-first
	cancel()
	if err := leak.Await(t, ended, "a cancelled run skipping every step"); !errors.Is(err, context.Canceled) || tr.Step() != 0 {
		t.Errorf("Run: %v at step %d, want context.Canceled at step 0", err, tr.Step())
	}
}

// TestMaxSkipsDefault: without Config.MaxSkips, a run whose every step is
// non-finite over endless data ends with the last step's *NonFiniteError
// after 100 steps skipped in a row.
func TestMaxSkipsDefault(t *testing.T) {
	d := testdevice.Open(t)
	m := divergedLM(t, d)
	l := newLoader(t, d, text(t, 3000, 10, 3), loader.Config{Batch: 4, Seq: 8})
	tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 10, SkipNonFinite: true})
	sum, err := tr.Run(context.Background())
	var nf *train.NonFiniteError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "100 steps in a row") || nf.Step != 1 {
		t.Errorf("Run: %v, want step 1's *NonFiniteError after 100 steps in a row", err)
	}
	if sum.Skipped != 100 || sum.Steps != 0 {
		t.Errorf("%d steps and %d skipped, want 0 and 100", sum.Steps, sum.Skipped)
	}
}
