package models

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// TestValidateSizes: configurations whose stacks cannot be counted are
// refused by Validate, naming the field (issue 46: embed 2^62 panicked in
// makeslice; layers 2^40 grew the process without end).
func TestValidateSizes(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		word string
	}{
		{"char-RNN embed 2^62", CharRNNConfig{Cell: "lstm", Embed: 1 << 62, Hidden: 256, Layers: 2}.Validate(), "embed 4611686018427387904"},
		{"char-RNN hidden 2^62", CharRNNConfig{Cell: "gru", Embed: 64, Hidden: 1 << 62, Layers: 2}.Validate(), "hidden 4611686018427387904"},
		{"char-RNN layers 2^40", CharRNNConfig{Cell: "lstm", Embed: 64, Hidden: 256, Layers: 1 << 40}.Validate(), "layers 1099511627776, more than rnn.MaxLayers"},
		{"tagger char_hidden 2^62", TaggerConfig{Cell: "lstm", Embed: 4, Hidden: 6, Layers: 1, CharEmbed: 3, CharHidden: 1 << 62}.Validate(), "char_hidden 4611686018427387904"},
		{"tagger char_embed MaxInt", TaggerConfig{Cell: "lstm", Embed: 4, Hidden: 6, Layers: 1, CharEmbed: math.MaxInt, CharHidden: 4}.Validate(), "character"},
		{"classifier hidden 2^40 bidirectional", ClassifierConfig{Cell: "gru", Embed: 4, Hidden: 1 << 40, Layers: 2, Bidirectional: true}.Validate(), "hidden 1099511627776"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.word) {
			t.Errorf("%s: Validate = %v, want an error that says %q", c.name, c.err, c.word)
		}
	}
	if err := (CharRNNConfig{Cell: "lstm", Embed: 64, Hidden: 256, Layers: 2}).Validate(); err != nil {
		t.Errorf("the default char-RNN: Validate = %v", err)
	}
}

// TestMetadataSizes: a checkpoint whose config metadata contradicts its
// tensors, or asks for sizes no device holds, is refused as the file's
// error (train.ErrMismatch) naming the config's value, in milliseconds and
// before anything is allocated (issue 46: "layers": 1099511627776 in a
// few bytes of metadata grew the process past 9 GB and could not be
// stopped).
func TestMetadataSizes(t *testing.T) {
	d, err := cpu.Open(cpu.Config{Capacity: 64 << 20})
	mustNil(t, err)
	defer d.Close()
	ctx := context.Background()
	vocab, err := loader.NewVocab([]string{"a", "c", "e", "h", "s", "t"})
	mustNil(t, err)
	words, err := loader.NewWords([]string{"<pad>", "<unk>", "the", "cat", "sat"})
	mustNil(t, err)
	chars, err := loader.NewWords([]string{"<pad>", "<unk>", "a", "c", "e", "h", "s", "t"})
	mustNil(t, err)
	labels, err := loader.NewLabels([]string{"DET", "NOUN", "VERB"})
	mustNil(t, err)
	dir := t.TempDir()
	save := func(name string, groups []train.Group, meta map[string]string, config func(map[string]any)) string {
		var cfg map[string]any
		mustNil(t, json.Unmarshal([]byte(meta["config"]), &cfg))
		config(cfg)
		b, err := json.Marshal(cfg)
		mustNil(t, err)
		meta["config"] = string(b)
		path := filepath.Join(dir, name+".safetensors")
		mustNil(t, train.SaveWeights(path, d, groups, meta))
		return path
	}
	cr, err := NewCharRNN(ctx, d, CharRNNConfig{Cell: "lstm", Embed: 4, Hidden: 6, Layers: 2}, vocab, 1)
	mustNil(t, err)
	defer cr.Close()
	tg, err := NewTaggerChars(ctx, d, TaggerConfig{Cell: "gru", Embed: 4, Hidden: 6, Layers: 2, Bidirectional: true, CharEmbed: 3, CharHidden: 4}, words, chars, labels, 1)
	mustNil(t, err)
	defer tg.Close()
	cl, err := NewClassifier(ctx, d, ClassifierConfig{Cell: "lstm", Embed: 4, Hidden: 6, Layers: 1, Bidirectional: true}, words, labels, 1)
	mustNil(t, err)
	defer cl.Close()
	loadCharRNN := func(path string) error {
		m, _, err := LoadCharRNN(ctx, d, path)
		if err == nil {
			m.Close()
		}
		return err
	}
	loadTagger := func(path string) error {
		m, _, err := LoadTagger(ctx, d, path)
		if err == nil {
			m.Close()
		}
		return err
	}
	loadClassifier := func(path string) error {
		m, _, err := LoadClassifier(ctx, d, path)
		if err == nil {
			m.Close()
		}
		return err
	}
	set := func(k string, v any) func(map[string]any) { return func(c map[string]any) { c[k] = v } }
	for _, c := range []struct {
		name string
		path string
		load func(string) error
		word string
	}{
		{"char-RNN layers 2^40", save("c1", cr.Groups(), cr.Metadata(), set("layers", 1<<40)), loadCharRNN, "layers 1099511627776"},
		{"char-RNN layers 600", save("c2", cr.Groups(), cr.Metadata(), set("layers", 600)), loadCharRNN, `"rnn.weight_ih_l599"`},
		{"char-RNN layers 1", save("c3", cr.Groups(), cr.Metadata(), set("layers", 1)), loadCharRNN, "rnn.weight_ih_l1, of a deeper stack"},
		{"char-RNN hidden 2^62", save("c4", cr.Groups(), cr.Metadata(), set("hidden", 1<<62)), loadCharRNN, "hidden 4611686018427387904"},
		{"char-RNN hidden 2^20", save("c5", cr.Groups(), cr.Metadata(), set("hidden", 1<<20)), loadCharRNN, `"out.weight" of shape [6 1048576]; the file's is [6 6]`},
		{"char-RNN embed 5", save("c6", cr.Groups(), cr.Metadata(), set("embed", 5)), loadCharRNN, `"emb.weight" of shape [6 5]; the file's is [6 4]`},
		{"char-RNN cell gru", save("c7", cr.Groups(), cr.Metadata(), set("cell", "gru")), loadCharRNN, `"rnn.weight_ih_l0" of shape [18 4]; the file's is [24 4]`},
		{"tagger layers 2^40", save("t1", tg.Groups(), tg.Metadata(), set("layers", 1<<40)), loadTagger, "layers 1099511627776"},
		{"tagger char_hidden 5", save("t2", tg.Groups(), tg.Metadata(), set("char_hidden", 5)), loadTagger, `"rnn.weight_ih_l0" of shape [18 14]; the file's is [18 12]`},
		{"tagger bidirectional false", save("t3", tg.Groups(), tg.Metadata(), set("bidirectional", false)), loadTagger, `"out.weight" of shape [3 6]`},
		{"classifier layers 3", save("k1", cl.Groups(), cl.Metadata(), set("layers", 3)), loadClassifier, `"rnn.weight_ih_l2"`},
		{"classifier hidden 2^30", save("k2", cl.Groups(), cl.Metadata(), set("hidden", 1<<30)), loadClassifier, "hidden 1073741824"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := d.MemStats().AllocatedBytes[alloc.AllPools].Current
			start := time.Now()
			err := c.load(c.path)
			if !errors.Is(err, train.ErrMismatch) || !strings.Contains(err.Error(), c.word) {
				t.Errorf("got %v, want an error matching train.ErrMismatch that says %q", err, c.word)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("refused after %v, want milliseconds", took)
			}
			if now := d.MemStats().AllocatedBytes[alloc.AllPools].Current; now != before {
				t.Errorf("%d bytes allocated before the load, %d after its refusal", before, now)
			}
		})
	}
	// The files as written load.
	for _, c := range []struct {
		m interface {
			Groups() []train.Group
			Metadata() map[string]string
		}
		load func(string) error
	}{{cr, loadCharRNN}, {tg, loadTagger}, {cl, loadClassifier}} {
		path := filepath.Join(dir, "ok.safetensors")
		mustNil(t, train.SaveWeights(path, d, c.m.Groups(), c.m.Metadata()))
		mustNil(t, c.load(path))
	}
}

// TestBuildLayers1e9: building a model of 10^9 layers, with a context
// cancelled 100 ms in, ends within a second with an error naming the
// layers and nothing allocated (issue 46: 10^12 layers grew the process
// past 9 GB, and neither DELETE nor SIGTERM stopped it). The count is
// refused before anything is built; a build that is long for its size
// stops with its context (rnn.TestConstructorCancel).
func TestBuildLayers1e9(t *testing.T) {
	d, err := cpu.Open(cpu.Config{})
	mustNil(t, err)
	defer d.Close()
	vocab, err := loader.NewVocab([]string{"a", "b"})
	mustNil(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	defer cancel()
	start := time.Now()
	m, err := NewCharRNN(ctx, d, CharRNNConfig{Cell: "gru", Embed: 1, Hidden: 1, Layers: 1e9}, vocab, 1)
	if err == nil {
		m.Close()
		t.Fatal("a char-RNN of 10^9 layers was built")
	}
	if took := time.Since(start); took > time.Second || !strings.Contains(err.Error(), "layers 1000000000") {
		t.Errorf("got %v after %v, want an error naming the layers within a second", err, took)
	}
	if n := d.MemStats().AllocatedBytes[alloc.AllPools].Current; n != 0 {
		t.Errorf("%d bytes left allocated", n)
	}
}

// TestPredictSizes: a host batch whose steps × rows overflow is refused by
// Predict before anything is sized from it (2^32 × 2^32 wrapped to the 0
// tokens given).
func TestPredictSizes(t *testing.T) {
	d, err := cpu.Open(cpu.Config{})
	mustNil(t, err)
	defer d.Close()
	words, err := loader.NewWords([]string{"<pad>", "<unk>", "the", "cat"})
	mustNil(t, err)
	labels, err := loader.NewLabels([]string{"A", "B"})
	mustNil(t, err)
	m, err := NewClassifier(context.Background(), d, ClassifierConfig{Cell: "gru", Embed: 3, Hidden: 4, Layers: 1}, words, labels, 1)
	mustNil(t, err)
	defer m.Close()
	_, err = m.Predict(loader.HostBatch{Seq: 1 << 32, Rows: 1 << 32})
	if !errors.Is(err, device.ErrShape) || !strings.Contains(err.Error(), "overflow") {
		t.Errorf("Predict of 2^32 × 2^32 and no tokens: %v, want an overflow matching device.ErrShape", err)
	}
}
