package models_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// openLimited opens the test device with its allocator capped at limit
// bytes (alloc.Config.MemoryLimit, the same on every device) and closes it
// when the test ends. The GPU's cuBLAS workspace is left to cuBLAS, so the
// cap is the model's alone.
func openLimited(t *testing.T, limit int64) device.Device {
	t.Helper()
	cfg := devices.Config{CUDA: testdevice.CUDAConfig(t)}
	cfg.CPU.Memory.MemoryLimit = limit
	cfg.CUDA.Memory.MemoryLimit = limit
	cfg.CUDA.BLASWorkspace = -1
	d, err := devices.Open(testdevice.Spec(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("closing the device: %v", err)
		}
	})
	return d
}

func vocab(t *testing.T, chars string) *loader.Vocab {
	t.Helper()
	v, err := loader.NewVocab(strings.Split(chars, ""))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A device with room for the embedding but not the recurrent stack: the
// model is an error wrapping alloc.ErrOutOfMemory, not a panic, and what
// was built is freed. (A failed rnn.NewLSTM's nil *rnn.LSTM once landed in
// the model's interface field, and freeing the model dereferenced it.)
func TestNewCharRNNOutOfMemory(t *testing.T) {
	// 4 MiB holds the embedding (3 x 16 floats and their gradient, in the
	// allocator's first 2 MiB segment) but not the stack's parameters,
	// 4 x 1024 x (16 + 1024 + 2) + ... floats, over 16 MiB.
	const limit = 4 << 20
	cfg := models.CharRNNConfig{Embed: 16, Hidden: 1024, Layers: 2}
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			d := openLimited(t, limit)
			cfg.Cell = cell
			m, err := models.NewCharRNN(context.Background(), d, cfg, vocab(t, "abc"), 1)
			if m != nil {
				m.Close()
				t.Fatalf("NewCharRNN on %d bytes built a model of %+v", limit, cfg)
			}
			if !errors.Is(err, alloc.ErrOutOfMemory) {
				t.Fatalf("NewCharRNN on %d bytes = %v, want an error wrapping alloc.ErrOutOfMemory", limit, err)
			}
			if stack := strings.ToUpper(cell) + " stack"; !strings.Contains(err.Error(), stack) {
				t.Errorf("error %q, want the %s's (the embedding must have fitted)", err, stack)
			}
			if got := d.MemStats().AllocatedBytes[alloc.AllPools].Current; got != 0 {
				t.Errorf("%d bytes still allocated after the failure, want 0 (the embedding freed)", got)
			}
		})
	}
}

// LoadCharRNN of a checkpoint the device cannot hold is an error too.
func TestLoadCharRNNOutOfMemory(t *testing.T) {
	// 4 x 512 x (16 + 512 + 2) floats, 4.2 MB, of LSTM parameters.
	cfg := models.CharRNNConfig{Cell: "lstm", Embed: 16, Hidden: 512, Layers: 1}
	path := filepath.Join(t.TempDir(), "big.safetensors")
	d := testdevice.Open(t)
	m, err := models.NewCharRNN(context.Background(), d, cfg, vocab(t, "abc"), 1)
	if err != nil {
		t.Fatal(err)
	}
	err = train.SaveWeights(path, d, m.Groups(), m.Metadata())
	if cerr := m.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	const limit = 4 << 20
	small := openLimited(t, limit)
	m, ck, err := models.LoadCharRNN(context.Background(), small, path)
	if m != nil || ck != nil {
		m.Close()
		t.Fatalf("LoadCharRNN on %d bytes built a model of %+v", limit, cfg)
	}
	if !errors.Is(err, alloc.ErrOutOfMemory) || !strings.Contains(err.Error(), "big.safetensors") {
		t.Errorf("LoadCharRNN on %d bytes = %v, want an error naming the file and wrapping alloc.ErrOutOfMemory", limit, err)
	}
}

// A file PyTorch wrote from a state dict alone, without the metadata: the
// error says which keys are missing and where the documentation shows how
// to add them (it used to say only `format "", want ...`).
func TestLoadCharRNNWithoutMetadata(t *testing.T) {
	d := testdevice.Open(t)
	m, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: "gru", Embed: 3, Hidden: 4, Layers: 1}, vocab(t, "ab"), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		meta    map[string]string
		missing string
	}{
		{nil, `"format", "config", "vocab"`},
		{map[string]string{"format": models.CharRNNFormat, "config": m.Metadata()["config"]}, `"vocab"`},
	} {
		path := filepath.Join(t.TempDir(), "torch.safetensors")
		if err := train.SaveWeights(path, d, m.Groups(), c.meta); err != nil {
			t.Fatal(err)
		}
		_, _, err := models.LoadCharRNN(context.Background(), d, path)
		if !errors.Is(err, train.ErrMismatch) || !strings.Contains(err.Error(), "no "+c.missing+" metadata") ||
			!strings.Contains(err.Error(), "Models from PyTorch") {
			t.Errorf("LoadCharRNN of a file with metadata %v: got %v, want ErrMismatch naming %s and the documentation", c.meta, err, c.missing)
		}
	}
}

// TestCharRNNNoGradBetweenTrainAndBackward: no-grad forwards (over a
// window and over one step, as evaluation and sampling run) between a
// training forward and its Backward leave what the training forward
// keeps: the gradients are those without them, bit for bit. The layers
// keep references to their training inputs rather than copies (the stack
// to the embedding's training output, the output layer to the stack's),
// so this holds only while no-grad forwards write other buffers.
func TestCharRNNNoGradBetweenTrainAndBackward(t *testing.T) {
	const T, B = 5, 3
	d := testdevice.Open(t)
	v := vocab(t, "abcdefg")
	for _, cell := range []string{"lstm", "gru"} {
		t.Run(cell, func(t *testing.T) {
			m, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: cell, Embed: 4, Hidden: 6, Layers: 2}, v, 1)
			check(t, err)
			defer m.Close()
			ce, err := rnn.NewCrossEntropy(d, v.Len(), device.Float32)
			check(t, err)
			defer ce.Close()
			ids, other := make([]int32, T*B), make([]int32, T*B)
			for i := range ids {
				ids[i], other[i] = int32(i%v.Len()), int32((3*i+1)%v.Len())
			}
			x, y, x2 := upInt32(t, d, ids), upInt32(t, d, other), upInt32(t, d, other)
			grads := func(between bool) (g []float32) {
				for _, grp := range m.Groups() {
					check(t, grp.Params.ZeroGrad())
				}
				st, err := m.NewState(B)
				check(t, err)
				defer st.Free()
				logits, err := m.Forward(rnn.Train, x, T, B, st)
				check(t, err)
				check(t, ce.Forward(rnn.Train, logits, y, T*B, 1))
				dl, err := ce.Backward()
				check(t, err)
				if between {
					other, err := m.NewState(B)
					check(t, err)
					defer other.Free()
					_, err = m.Forward(rnn.NoGrad, x2, T, B, other)
					check(t, err)
					_, err = m.Forward(rnn.NoGrad, x2, 1, B, other)
					check(t, err)
				}
				check(t, m.Backward(dl))
				for _, grp := range m.Groups() {
					_, gb := grp.Params.Flat()
					h := make([]float32, grp.Params.Len())
					check(t, device.DownloadSlice(d, h, gb))
					g = append(g, h...)
				}
				return g
			}
			want, got := grads(false), grads(true)
			if !slices.Equal(got, want) {
				t.Errorf("gradients with no-grad forwards between the training forward and its Backward differ from those without")
			}
		})
	}
}
