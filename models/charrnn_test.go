package models_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
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
			m, err := models.NewCharRNN(d, cfg, vocab(t, "abc"), 1)
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
	m, err := models.NewCharRNN(d, cfg, vocab(t, "abc"), 1)
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
	m, ck, err := models.LoadCharRNN(small, path)
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
	m, err := models.NewCharRNN(d, models.CharRNNConfig{Cell: "gru", Embed: 3, Hidden: 4, Layers: 1}, vocab(t, "ab"), 1)
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
		_, _, err := models.LoadCharRNN(d, path)
		if !errors.Is(err, train.ErrMismatch) || !strings.Contains(err.Error(), "no "+c.missing+" metadata") ||
			!strings.Contains(err.Error(), "Models from PyTorch") {
			t.Errorf("LoadCharRNN of a file with metadata %v: got %v, want ErrMismatch naming %s and the documentation", c.meta, err, c.missing)
		}
	}
}
