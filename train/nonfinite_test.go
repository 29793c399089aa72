package train_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/train"
)

// TestLoadWeightsNonFinite: a checkpoint whose tensor holds a NaN (a run
// that diverged) is refused at load, naming the tensor, and the model is
// left as it was; before, it loaded silently and sampled nonsense. The
// file is whole, its checksums those of the NaN: the diverged run wrote
// it so. A file without checksums (PyTorch's) is refused the same way.
func TestLoadWeightsNonFinite(t *testing.T) {
	d := testdevice.Open(t)
	cfg := lmConfig{vocab: 5, embed: 3, hidden: 4, layers: 1, seed: 1}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		for _, checksums := range []bool{true, false} {
			path := filepath.Join(t.TempDir(), "diverged.safetensors")
			cfg.seed = 1
			diverged := newLM(t, d, cfg)
			out := diverged.Groups()[2]
			bias, err := out.Params.Value("bias")
			check(t, err)
			bias.Data().([]float32)[2] = bad
			check(t, out.Params.SetValue("bias", bias))
			check(t, train.SaveWeights(path, d, diverged.Groups(), nil))
			if !checksums {
				b, err := os.ReadFile(path)
				check(t, err)
				check(t, os.WriteFile(path, withoutChecksums(t, b), 0o644))
			}
			ck, err := train.ReadCheckpoint(path)
			check(t, err)
			cfg.seed = 7
			m := newLM(t, d, cfg)
			before := values(t, m.Groups())
			err = ck.LoadWeights(d, m.Groups())
			if !errors.Is(err, train.ErrNonFiniteWeights) || !strings.Contains(err.Error(), `"out.bias"`) || !strings.Contains(err.Error(), "index 2") {
				t.Errorf("LoadWeights of a checkpoint (checksums %v) with %v in out.bias[2]: got %v, want ErrNonFiniteWeights naming the tensor and the index", checksums, bad, err)
			}
			if after := values(t, m.Groups()); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused load changed the model's weights")
			}
		}
	}
}

// withoutChecksums is the safetensors file b without its checksum
// metadata: what PyTorch's safetensors writes for the same tensors and
// metadata (the keys' prefix is the contract's, docs/ARCHITECTURE.md).
func withoutChecksums(t *testing.T, b []byte) []byte {
	t.Helper()
	n := binary.LittleEndian.Uint64(b)
	var header map[string]json.RawMessage
	check(t, json.Unmarshal(b[8:8+n], &header))
	var meta map[string]string
	check(t, json.Unmarshal(header["__metadata__"], &meta))
	for k := range meta {
		if strings.HasPrefix(k, "crc32c.") {
			delete(meta, k)
		}
	}
	delete(header, "__metadata__")
	if len(meta) > 0 {
		js, err := json.Marshal(meta)
		check(t, err)
		header["__metadata__"] = js
	}
	js, err := json.Marshal(header)
	check(t, err)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	return append(append(out, js...), b[8+n:]...)
}
