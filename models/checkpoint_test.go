package models_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// saved is a small model of each kind written with its metadata, and
// each kind's loader.
type saved struct {
	kind, format, path string
	load               func(d device.Device, path string) error
}

func saveEachModel(t *testing.T, d device.Device) []saved {
	t.Helper()
	dir := t.TempDir()
	words, err := loader.NewWords([]string{"<pad>", "<unk>", "the", "cat"})
	check(t, err)
	labels, err := loader.NewLabels([]string{"DET", "NOUN"})
	check(t, err)
	type model interface {
		Groups() []train.Group
		Metadata() map[string]string
		Close() error
	}
	save := func(name string, m model, err error) string {
		t.Helper()
		check(t, err)
		defer m.Close()
		path := filepath.Join(dir, name+".safetensors")
		check(t, train.SaveWeights(path, d, m.Groups(), m.Metadata()))
		return path
	}
	charRNN, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: "gru", Embed: 3, Hidden: 4, Layers: 1}, vocab(t, "abc"), 1)
	tagger, terr := models.NewTagger(context.Background(), d, models.TaggerConfig{Cell: "lstm", Embed: 3, Hidden: 4, Layers: 1}, words, labels, 1)
	classifier, cerr := models.NewClassifier(context.Background(), d, models.ClassifierConfig{Cell: "gru", Embed: 3, Hidden: 4, Layers: 1}, words, labels, 1)
	return []saved{
		{"char-RNN", models.CharRNNFormat, save("charrnn", charRNN, err), func(d device.Device, path string) error {
			m, _, err := models.LoadCharRNN(context.Background(), d, path)
			return closed(m, err)
		}},
		{"tagger", models.TaggerFormat, save("tagger", tagger, terr), func(d device.Device, path string) error {
			m, _, err := models.LoadTagger(context.Background(), d, path)
			return closed(m, err)
		}},
		{"classifier", models.ClassifierFormat, save("classifier", classifier, cerr), func(d device.Device, path string) error {
			m, _, err := models.LoadClassifier(context.Background(), d, path)
			return closed(m, err)
		}},
	}
}

// closed is a load's error, the model it loaded closed.
func closed[M interface{ Close() error }](m M, err error) error {
	if err != nil {
		return err
	}
	return m.Close()
}

// TestLoadOtherFormat: each loader given another kind's checkpoint (the
// six pairings of the char-RNN, the tagger and the classifier) or one of
// a format it does not know says in one line what the file is, an error
// wrapping train.ErrMismatch. The char-RNN's loader used to answer a
// tagger's checkpoint with a paragraph about the metadata a file PyTorch
// wrote must add (issue 46, item 9).
func TestLoadOtherFormat(t *testing.T) {
	d := testdevice.Open(t)
	all := saveEachModel(t, d)
	for _, by := range all {
		for _, file := range all {
			if file.kind == by.kind {
				if err := by.load(d, file.path); err != nil {
					t.Errorf("the %s loader on its own checkpoint: %v", by.kind, err)
				}
				continue
			}
			err := by.load(d, file.path)
			want := fmt.Sprintf("models: %s is a %s checkpoint (format %s), not a %s one (%s)", file.path, file.kind, file.format, by.kind, by.format)
			if !errors.Is(err, train.ErrMismatch) || err.Error() != want {
				t.Errorf("the %s loader on a %s checkpoint: got %v, want ErrMismatch saying %q", by.kind, file.kind, err, want)
			}
		}
	}
	// A format of a later version, which this package does not know.
	path := filepath.Join(t.TempDir(), "later.safetensors")
	m, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: "gru", Embed: 3, Hidden: 4, Layers: 1}, vocab(t, "abc"), 1)
	check(t, err)
	defer m.Close()
	meta := m.Metadata()
	meta["format"] = "gocurrent.charrnn/2"
	check(t, train.SaveWeights(path, d, m.Groups(), meta))
	_, _, err = models.LoadCharRNN(context.Background(), d, path)
	want := fmt.Sprintf(`models: %s is a checkpoint of format "gocurrent.charrnn/2", not a char-RNN one (gocurrent.charrnn/1)`, path)
	if !errors.Is(err, train.ErrMismatch) || err.Error() != want {
		t.Errorf("LoadCharRNN of format gocurrent.charrnn/2: got %v, want ErrMismatch saying %q", err, want)
	}
}

// TestLoadDamaged: a bit flipped in any tensor of a model's checkpoint, in
// its vocabulary or in its config is an error wrapping train.ErrCorrupt
// from each model's loader, naming the tensor or the metadata. Without
// the checksums every one of these loaded: a flipped character made
// another vocabulary, a flipped weight another model.
func TestLoadDamaged(t *testing.T) {
	d := testdevice.Open(t)
	for _, m := range saveEachModel(t, d) {
		t.Run(m.kind, func(t *testing.T) {
			good, err := os.ReadFile(m.path)
			check(t, err)
			n := int(binary.LittleEndian.Uint64(good))
			js := good[8 : 8+n]
			var header map[string]json.RawMessage
			check(t, json.Unmarshal(js, &header))
			type flip struct {
				name string
				at   int
				says string
			}
			// In the metadata: a character of the vocabulary ("a" or
			// "cat", "b" and "bat" after the flip: bit 0) and the hidden
			// size (4 to 5).
			metaAt := func(s string, skip int) int {
				i := bytes.Index(js, []byte(s))
				if i < 0 {
					t.Fatalf("no %s in the header %s", s, js)
				}
				return 8 + i + skip
			}
			first := `\"a\"`
			if m.kind != "char-RNN" {
				first = `\"cat\"`
			}
			flips := []flip{
				{"vocabulary", metaAt(first, 2), "metadata"},
				{"config", metaAt(`\"hidden\":4`, 11), "metadata"},
			}
			for _, name := range slices.Sorted(maps.Keys(header)) {
				if name == "__metadata__" {
					continue
				}
				var e struct {
					DataOffsets [2]int `json:"data_offsets"`
				}
				check(t, json.Unmarshal(header[name], &e))
				flips = append(flips, flip{name, 8 + n + (e.DataOffsets[0]+e.DataOffsets[1])/2, fmt.Sprintf("tensor %q", name)})
			}
			for _, f := range flips {
				b := bytes.Clone(good)
				b[f.at] ^= 1
				path := filepath.Join(t.TempDir(), "damaged.safetensors")
				check(t, os.WriteFile(path, b, 0o644))
				if err := m.load(d, path); !errors.Is(err, train.ErrCorrupt) || !strings.Contains(err.Error(), f.says) {
					t.Errorf("%s flipped (byte %d): got %v, want ErrCorrupt naming %s", f.name, f.at, err, f.says)
				}
			}
		})
	}
}
