package rnn_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/rnn"
)

// capped is a CPU device of 64 MiB, so that what does not fit is decided
// by the device's size, not by this machine's.
func capped(t *testing.T) *cpu.Device {
	t.Helper()
	d, err := cpu.Open(cpu.Config{Capacity: 64 << 20})
	ok(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestConstructorSizes: sizes a caller gives a constructor whose products
// overflow, or that no device holds, are errors naming the fields, in
// milliseconds, with nothing left allocated (issue 46: hidden and embed of
// 2^62 panicked in makeslice, 2^40 layers grew the process past 9 GB).
func TestConstructorSizes(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		build func(d device.Device) error
		is    error
		words []string
	}{
		{"hidden 2^62", func(d device.Device) error {
			_, err := rnn.NewLSTM(ctx, d, rnn.Config{Input: 64, Hidden: 1 << 62, Layers: 2})
			return err
		}, device.ErrShape, []string{"NewLSTM", "hidden 4611686018427387904", "overflow"}},
		{"input 2^62", func(d device.Device) error {
			_, err := rnn.NewGRU(ctx, d, rnn.Config{Input: 1 << 62, Hidden: 8})
			return err
		}, device.ErrShape, []string{"NewGRU", "input 4611686018427387904", "overflow"}},
		{"hidden MaxInt", func(d device.Device) error {
			_, err := rnn.NewGRU(ctx, d, rnn.Config{Input: 1, Hidden: math.MaxInt, Bidirectional: true})
			return err
		}, device.ErrShape, []string{"NewGRU", "hidden 9223372036854775807", "overflow"}},
		{"layers 2^40", func(d device.Device) error {
			_, err := rnn.NewLSTM(ctx, d, rnn.Config{Input: 64, Hidden: 256, Layers: 1 << 40})
			return err
		}, device.ErrShape, []string{"NewLSTM", "layers 1099511627776", "MaxLayers (1024)"}},
		{"layers 10^9", func(d device.Device) error {
			_, err := rnn.NewGRU(ctx, d, rnn.Config{Input: 1, Hidden: 1, Layers: 1e9})
			return err
		}, device.ErrShape, []string{"layers 1000000000"}},
		{"embedding 2^62 x 2", func(d device.Device) error {
			_, err := rnn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: 1 << 62, Dim: 2})
			return err
		}, device.ErrShape, []string{"NewEmbedding", "vocab 4611686018427387904 × dim 2 overflows"}},
		{"embedding dim 2^62", func(d device.Device) error {
			_, err := rnn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: 65, Dim: 1 << 62})
			return err
		}, device.ErrShape, []string{"dim 4611686018427387904"}},
		{"linear in MaxInt", func(d device.Device) error {
			_, err := rnn.NewLinear(ctx, d, rnn.LinearConfig{In: math.MaxInt, Out: 1})
			return err
		}, device.ErrShape, []string{"NewLinear", "in 9223372036854775807"}},
		{"linear in 2^62", func(d device.Device) error {
			_, err := rnn.NewLinear(ctx, d, rnn.LinearConfig{In: 1 << 62, Out: 65})
			return err
		}, device.ErrShape, []string{"in 4611686018427387904", "out 65"}},
		// Large, not overflowing: 4·2^20·2^21·2 float32 are 64 TiB, which
		// the device refuses at once (its allocator's figures).
		{"hidden 2^20", func(d device.Device) error {
			_, err := rnn.NewLSTM(ctx, d, rnn.Config{Input: 1 << 20, Hidden: 1 << 20, Layers: 2})
			return err
		}, alloc.ErrOutOfMemory, []string{"rnn: parameters", "out of memory", "total capacity of 64.00 MiB"}},
		// 1024·1024·16 float32 are 64 MiB of values: no room for the
		// gradients beside them.
		{"embedding of the device's size", func(d device.Device) error {
			_, err := rnn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: 1024, Dim: 1024 * 16})
			return err
		}, alloc.ErrOutOfMemory, []string{"gradients", "out of memory"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := capped(t)
			start := time.Now()
			err := c.build(d)
			took := time.Since(start)
			if !errors.Is(err, c.is) {
				t.Fatalf("got %v, want an error matching %v", err, c.is)
			}
			for _, w := range c.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			// A refusal decides from the figures: far below a second
			// (the bound is generous for a loaded machine; the layers of
			// 2^40 took minutes and 9 GB before).
			if took > 2*time.Second {
				t.Errorf("refused after %v, want well under a second", took)
			}
			if st := d.MemStats(); st.AllocatedBytes[alloc.AllPools].Current != 0 {
				t.Errorf("%d bytes left allocated after the refusal, want 0", st.AllocatedBytes[alloc.AllPools].Current)
			}
		})
	}
}

// TestConstructorCancel: building a model of a gigabyte of parameters
// stops when its context is cancelled, within a fraction of the building's
// time, and gives its memory back.
func TestConstructorCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a stack of 268M parameters (1 GiB) for a fraction of a second")
	}
	d, err := cpu.Open(cpu.Config{})
	ok(t, err)
	defer d.Close()
	// 8 layers of hidden 2048: 4·2048·4096 weights a layer, 268M in all,
	// seconds of drawing on one core.
	cfg := rnn.Config{Input: 2048, Hidden: 2048, Layers: 8, NoBias: true}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	l, err := rnn.NewLSTM(ctx, d, cfg)
	took := time.Since(start)
	if err == nil {
		l.Close()
		t.Fatalf("NewLSTM of %d layers of %d built in %v despite its cancelled context; want context.Canceled", cfg.Layers, cfg.Hidden, took)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want an error matching context.Canceled", err)
	}
	if took > time.Second {
		t.Errorf("stopped %v after the start, the cancel 50ms after it; want within a second", took)
	}
	if st := d.MemStats(); st.AllocatedBytes[alloc.AllPools].Current != 0 {
		t.Errorf("%d bytes left allocated after the cancel, want 0", st.AllocatedBytes[alloc.AllPools].Current)
	}
}

// TestInitAcrossChunks: the initialisation draws its values a chunk at a
// time (so that the host holds a chunk, not the layer); the values are
// those of one generator drawn in order, as PyTorch's are, across the
// chunks' boundaries.
func TestInitAcrossChunks(t *testing.T) {
	d, err := cpu.Open(cpu.Config{})
	ok(t, err)
	defer d.Close()
	// 1100·1000 values: one chunk of 2^20 and part of a second.
	const vocab, dim, seed = 1100, 1000, 7
	e, err := rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: vocab, Dim: dim, DType: device.Float64, Seed: seed})
	ok(t, err)
	defer e.Close()
	w, err := e.Params().Value("weight")
	got := hostData(t, w, err)
	// The generator's second word is params.go's ("gocurren").
	rng := rand.New(rand.NewPCG(seed, 0x676f63757272656e))
	for i := range vocab * dim {
		if want := rng.NormFloat64(); got[i] != want {
			t.Fatalf("value %d = %v, want %v (the %dth draw of the seed's generator)", i, got[i], want, i)
		}
	}
}

// TestCallSizes: a call whose sizes overflow is refused, naming them,
// before any buffer is sized from them (a seq of 2^62 over a small x must
// not wrap into a size x holds).
func TestCallSizes(t *testing.T) {
	d := capped(t)
	ctx := context.Background()
	lstm, err := rnn.NewLSTM(ctx, d, rnn.Config{Input: 4, Hidden: 8, Layers: 2})
	ok(t, err)
	defer lstm.Close()
	lin, err := rnn.NewLinear(ctx, d, rnn.LinearConfig{In: 8, Out: 5})
	ok(t, err)
	defer lin.Close()
	emb, err := rnn.NewEmbedding(ctx, d, rnn.EmbeddingConfig{Vocab: 5, Dim: 4})
	ok(t, err)
	defer emb.Close()
	x, err := d.Alloc(4096, device.Workspace)
	ok(t, err)
	defer d.Free(x)
	for _, c := range []struct {
		name  string
		call  func() error
		words string
	}{
		{"seq 2^62", func() error { _, err := lstm.Forward(rnn.NoGrad, x, 1<<62, 4, nil); return err }, "seq·batch"},
		{"seq and batch 2^32", func() error { _, err := lstm.Forward(rnn.Train, x, 1<<32, 1<<32, nil); return err }, "4294967296"},
		{"batch MaxInt", func() error { _, err := lstm.Forward(rnn.NoGrad, x, 1, math.MaxInt, nil); return err }, "9223372036854775807"},
		{"rows 2^62", func() error { _, err := lin.Forward(rnn.NoGrad, x, 1<<62); return err }, "rows·in"},
		{"ids 2^61", func() error { _, err := emb.Forward(rnn.NoGrad, x, 1<<61); return err }, "ids"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !errors.Is(err, device.ErrShape) || !strings.Contains(err.Error(), c.words) {
				t.Errorf("got %v, want an error matching device.ErrShape that says %q", err, c.words)
			}
		})
	}
	ok(t, d.Synchronize())
}

// TestParamCount: the count computed without building a stack is the
// count of the stack built, for each cell, direction and bias.
func TestParamCount(t *testing.T) {
	d := capped(t)
	for _, cell := range []string{"lstm", "gru"} {
		for _, c := range []rnn.Config{
			{Input: 5, Hidden: 3},
			{Input: 5, Hidden: 3, Layers: 3},
			{Input: 2, Hidden: 7, Layers: 2, Bidirectional: true},
			{Input: 4, Hidden: 6, Layers: 3, NoBias: true, Bidirectional: true},
		} {
			s := newRecurrent(t, d, cell, c)
			gates := rnn.LSTMGates
			if cell == "gru" {
				gates = rnn.GRUGates
			}
			n, ok := c.ParamCount(gates)
			if !ok || n != s.Params().Len() {
				t.Errorf("%s %+v: ParamCount = %d, %v; the stack holds %d", cell, c, n, ok, s.Params().Len())
			}
		}
	}
	if _, ok := (rnn.Config{Input: 1, Hidden: 1 << 31, Layers: 2}).ParamCount(rnn.LSTMGates); ok {
		t.Error("ParamCount of hidden 2^31 (4·2^62 weights) is ok, want an overflow")
	}
}
