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
// left as it was; before, it loaded silently and sampled nonsense.
func TestLoadWeightsNonFinite(t *testing.T) {
	d := testdevice.Open(t)
	cfg := lmConfig{vocab: 5, embed: 3, hidden: 4, layers: 1, seed: 1}
	path := filepath.Join(t.TempDir(), "diverged.safetensors")
	check(t, train.SaveWeights(path, d, newLM(t, d, cfg).Groups(), nil))
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		poisonTensor(t, path, "out.bias", 2, bad)
		ck, err := train.ReadCheckpoint(path)
		check(t, err)
		cfg.seed = 7
		m := newLM(t, d, cfg)
		before := values(t, m.Groups())
		err = ck.LoadWeights(d, m.Groups())
		if !errors.Is(err, train.ErrNonFiniteWeights) || !strings.Contains(err.Error(), `"out.bias"`) || !strings.Contains(err.Error(), "index 2") {
			t.Errorf("LoadWeights of a checkpoint with %v in out.bias[2]: got %v, want ErrNonFiniteWeights naming the tensor and the index", bad, err)
		}
		if after := values(t, m.Groups()); !reflect.DeepEqual(before, after) {
			t.Errorf("a refused load changed the model's weights")
		}
	}
}

// poisonTensor overwrites element i of the F32 tensor name in the safetensors
// file at path with v.
func poisonTensor(t *testing.T, path, name string, i int, v float32) {
	t.Helper()
	b, err := os.ReadFile(path)
	check(t, err)
	n := binary.LittleEndian.Uint64(b)
	var header map[string]json.RawMessage
	check(t, json.Unmarshal(b[8:8+n], &header))
	var info struct {
		DataOffsets [2]int `json:"data_offsets"`
	}
	check(t, json.Unmarshal(header[name], &info))
	binary.LittleEndian.PutUint32(b[8+int(n)+info.DataOffsets[0]+4*i:], math.Float32bits(v))
	check(t, os.WriteFile(path, b, 0o644))
}
