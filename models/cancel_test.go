package models_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/leak"
	"github.com/gocurrent/gocurrent/internal/stall"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// randomSeqModel is a SeqModel with dropout, as the tagger is.
type randomSeqModel interface {
	train.SeqModel
	RandomState() []uint64
	SetRandomState([]uint64) error
}

// hookedSeq is a SeqModel that calls hook, when set, at the start of its
// training forwards.
type hookedSeq struct {
	randomSeqModel
	hook func()
}

func (m *hookedSeq) ForwardBatch(mode rnn.Mode, b loader.SeqBatch) (device.Buffer, error) {
	if mode == rnn.Train && m.hook != nil {
		m.hook()
	}
	return m.randomSeqModel.ForwardBatch(mode, b)
}

// TestCancelBlockedSeqLoader: a tagger's run (train.NewSeq over a
// SeqLoader) ends when ctx is cancelled while the loader is blocked
// reading the dataset, with an error matching context.Canceled, in the
// state its last step left, saved byte for byte as the run stopped between
// steps saved it; as does a run cancelled in the first batch of a step of
// two (the step rolled back: the dropout drawn, the loss's sums); and once
// the read returns and everything is closed, no goroutine is left.
// Before, the trainer hid ctx from the loader, which waited for the data
// for ever.
func TestCancelBlockedSeqLoader(t *testing.T) {
	d := testdevice.Open(t)
	rnd := rand.New(rand.NewPCG(8, 1))
	var b strings.Builder
	for range 200 {
		for range 1 + rnd.IntN(10) {
			w := rnd.IntN(12)
			fmt.Fprintf(&b, "w%d\tT%d\n", w, w%3)
		}
		b.WriteString("\n")
	}
	r := stall.New([]byte(b.String()))
	defer r.Release()
	data, err := loader.NewDataset(context.Background(), r, r.Size(), "stall.tsv", loader.DatasetConfig{})
	check(t, err)
	tagger := seqModel(t, d, data, "lstm", 0.3).(*models.Tagger)
	defer tagger.Close()
	m := &hookedSeq{randomSeqModel: tagger}
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 4, Accum: 2, Pool: 3, Shuffle: true, Seed: 5}})
	check(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "run.safetensors")
	tr, err := train.NewSeq(d, m, l, train.Config{Steps: 1000, Checkpoint: path, OnStep: func(p train.Progress) {
		if p.Step == 3 {
			cancel()
		}
	}}, train.SeqOptions{})
	check(t, err)
	if _, err := tr.Run(ctx); !errors.Is(err, context.Canceled) || tr.Step() != 3 {
		t.Fatalf("the first run stopped at step %d with %v, want step 3 and context.Canceled", tr.Step(), err)
	}
	want, err := os.ReadFile(path)
	check(t, err)
	// The run's goroutines have ended; the device's and the loader's
	// copy stream's are running.
	before := leak.Count()

	runUntil := func(what string, ctx context.Context) {
		t.Helper()
		ended := make(chan error, 1)
		go func() {
			_, err := tr.Run(ctx)
			ended <- err
		}()
		err = leak.Await(t, ended, what+": Run, cancelled,")
		if !errors.Is(err, context.Canceled) || tr.Step() != 3 {
			t.Fatalf("%s: Run %v at step %d, want context.Canceled at step 3", what, err, tr.Step())
		}
		got, err := os.ReadFile(path)
		check(t, err)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the checkpoint differs from that of the run stopped between steps 3 and 4", what)
		}
	}
	// Cancelled in step 4's first batch: the step is rolled back.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	m.hook = cancel
	runUntil("cancelled mid-step", ctx)
	m.hook = nil

	// Cancelled while the loader waits for the dataset's bytes.
	r.Stall()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { <-r.Blocked(); cancel() }()
	runUntil("cancelled while blocked reading", ctx)

	r.Release()
	check(t, tr.Close())
	check(t, l.Close())
	leak.Expect(t, before, "after the loader and the trainer closed")
}

// TestCancelBlockedWarmUp: a tagger's first Run, whose warm-up (the
// largest batches, loaded before the first step) is blocked reading the
// dataset, ends when ctx is cancelled, with an error matching
// context.Canceled, before step 1; the next Run, the data flowing again,
// trains. Before, the warm-up's reads did not see ctx.
func TestCancelBlockedWarmUp(t *testing.T) {
	d := testdevice.Open(t)
	b, err := os.ReadFile(writeTagged(t, 60, 3))
	check(t, err)
	r := stall.New(b)
	defer r.Release()
	data, err := loader.NewDataset(context.Background(), r, r.Size(), "stall.tsv", loader.DatasetConfig{})
	check(t, err)
	m := seqModel(t, d, data, "gru", 0)
	defer m.Close()
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 4, MaxTokens: 24}})
	check(t, err)
	defer l.Close()
	tr, err := train.NewSeq(d, m, l, train.Config{Steps: 2}, train.SeqOptions{})
	check(t, err)
	defer tr.Close()
	r.Stall()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-r.Blocked(); cancel() }()
	ended := make(chan error, 1)
	go func() {
		_, err := tr.Run(ctx)
		ended <- err
	}()
	err = leak.Await(t, ended, "Run, cancelled while its warm-up was blocked reading,")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "warming up") || tr.Step() != 0 {
		t.Fatalf("Run: %v at step %d, want context.Canceled while warming up, at step 0", err, tr.Step())
	}
	r.Release()
	if sum, err := tr.Run(context.Background()); err != nil || sum.Steps != 2 {
		t.Errorf("the next Run: %v after %d steps, want 2 steps", err, sum.Steps)
	}
}
