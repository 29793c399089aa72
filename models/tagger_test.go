package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/charrnntest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// taggerTol: float64 on both sides, the same operations in other orders
// (PyTorch's packed batches, our sorted prefixes): rounding of a few
// hundred terms, ≲ 1e-13 relative; 1e-12 is rnn's torchTol, far below any
// wrong row, gate or ignored position.
const taggerTol = 1e-12

type taggerCase struct {
	Cell          string  `json:"cell"`
	Embed         int     `json:"embed"`
	Hidden        int     `json:"hidden"`
	Layers        int     `json:"layers"`
	Bidirectional bool    `json:"bidirectional"`
	Vocab         int     `json:"vocab"`
	Tags          int     `json:"tags"`
	Seq           int     `json:"seq"`
	Batch         int     `json:"batch"`
	Lengths       []int32 `json:"lengths"`
	Tokens        []int32 `json:"tokens"`
	Labels        []int32 `json:"labels"`
	Params        map[string]struct {
		Shape []int     `json:"shape"`
		Data  []float64 `json:"data"`
	} `json:"params"`
	Loss       float64 `json:"loss"`
	Accuracy   float64 `json:"accuracy"`
	GradParams map[string]struct {
		Data []float64 `json:"data"`
	} `json:"grad_params"`
	// With character features: their sizes, the character vocabulary's,
	// and the batch's words' characters as loader.HostBatch lays them out.
	CharEmbed   int     `json:"char_embed"`
	CharHidden  int     `json:"char_hidden"`
	CharVocab   int     `json:"char_vocab"`
	WordLen     int     `json:"word_len"`
	Chars       []int32 `json:"chars"`
	CharLengths []int32 `json:"char_lengths"`
}

// TestTaggerAgreesWithTorch loads a PyTorch tagger with our names
// (testdata/torch_tagger.py: embedding, with character features beside
// it or not, packed uni- or bidirectional LSTM or GRU, linear per token)
// into models.Tagger, in float64, and finds PyTorch's loss (cross-entropy
// with ignore_index -100, the mean over the real tokens), accuracy and
// every parameter's gradient. A tagger with character features runs
// ForwardBatch on the batch as a loader.SeqBatch holds it.
func TestTaggerAgreesWithTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_tagger.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct{ Cases []taggerCase }
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) != 7 {
		t.Fatalf("%d cases, want 7", len(fx.Cases))
	}
	d := testdevice.Open(t)
	for _, c := range fx.Cases {
		t.Run(fmt.Sprintf("%s/layers%d/bidirectional=%v/chars=%d,%d", c.Cell, c.Layers, c.Bidirectional, c.CharEmbed, c.CharHidden), func(t *testing.T) {
			words, tags := fixtureVocabs(t, c.Vocab, []string{"A", "B", "C", "D"}[:c.Tags])
			var chars *loader.Words
			if c.CharEmbed > 0 {
				chars = fixtureChars(t, c.CharVocab)
			}
			m, err := models.NewTaggerChars(context.Background(), d, models.TaggerConfig{Cell: c.Cell, Embed: c.Embed, Hidden: c.Hidden, Layers: c.Layers,
				Bidirectional: c.Bidirectional, CharEmbed: c.CharEmbed, CharHidden: c.CharHidden, DType: device.Float64}, words, chars, tags, 1)
			check(t, err)
			defer m.Close()
			setParams(t, m.Groups(), c)
			T, B := c.Seq, c.Batch
			ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: c.Tags, DType: device.Float64, Ignore: true, IgnoreIndex: loader.IgnoreLabel})
			check(t, err)
			defer ce.Close()
			var logits device.Buffer
			labels := upInt32(t, d, c.Labels)
			if c.CharEmbed > 0 {
				logits, err = m.ForwardBatch(rnn.Train, upBatch(t, d, c.hostBatch()))
			} else {
				logits, err = m.Forward(rnn.Train, upInt32(t, d, c.Tokens), T, B, c.Lengths)
			}
			check(t, err)
			real := 0
			for _, n := range c.Lengths {
				real += int(n)
			}
			check(t, ce.ForwardSum(rnn.Train, logits, labels, T*B, 1/float64(real)))
			lg := make([]float64, T*B*c.Tags)
			check(t, device.DownloadSlice(d, lg, logits))
			loss, err := ce.Loss()
			check(t, err)
			if e := math.Abs(loss-c.Loss) / math.Abs(c.Loss); !(e <= taggerTol) {
				t.Errorf("loss %v, PyTorch %v (relative error %.3g)", loss, c.Loss, e)
			}
			if acc := argmaxAccuracy(lg, c.Tags, c.Labels); acc != c.Accuracy {
				t.Errorf("accuracy %v, PyTorch %v", acc, c.Accuracy)
			}
			dl, err := ce.Backward()
			check(t, err)
			check(t, m.Backward(dl))
			checkGrads(t, m.Groups(), c)
			meta := m.Metadata()
			if meta["format"] != models.TaggerFormat || !strings.Contains(meta["config"], `"bidirectional":`+fmt.Sprint(c.Bidirectional)) ||
				!strings.Contains(meta["config"], fmt.Sprintf(`"char_embed":%d,"char_hidden":%d`, c.CharEmbed, c.CharHidden)) {
				t.Errorf("metadata %v", meta)
			}
			if _, ok := meta["chars"]; ok != (c.CharEmbed > 0) {
				t.Errorf("chars metadata %q with char_embed %d", meta["chars"], c.CharEmbed)
			}
		})
	}
}

func upInt32(t *testing.T, d device.Device, v []int32) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(v))*4, device.Workspace)
	check(t, err)
	t.Cleanup(func() { d.Free(b) })
	check(t, device.UploadSlice(d, b, v))
	return b
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A tagger saved with its metadata loads back with the same shape,
// vocabularies (the characters' too) and weights, under PyTorch's names
// (char_emb.weight, char_rnn.weight_ih_l0_reverse, ...); a char-RNN
// checkpoint is not a tagger.
func TestTaggerSaveLoad(t *testing.T) {
	d := testdevice.Open(t)
	words, err := loader.NewWords([]string{"<pad>", "<unk>", "the", "cat"})
	check(t, err)
	tags, err := loader.NewLabels([]string{"DET", "NOUN"})
	check(t, err)
	chars, err := loader.NewWords([]string{"<pad>", "<unk>", "t", "h", "e", "c", "a"})
	check(t, err)
	for _, c := range []struct {
		cfg   models.TaggerConfig
		chars *loader.Words
		names []string
	}{
		{models.TaggerConfig{Cell: "gru", Embed: 4, Hidden: 3, Layers: 2, Bidirectional: true}, nil, nil},
		{models.TaggerConfig{Cell: "lstm", Embed: 4, Hidden: 3, Layers: 1, CharEmbed: 3, CharHidden: 2}, chars,
			[]string{"char_emb.weight", "char_rnn.weight_ih_l0", "char_rnn.weight_hh_l0", "char_rnn.bias_ih_l0", "char_rnn.bias_hh_l0",
				"char_rnn.weight_ih_l0_reverse", "char_rnn.weight_hh_l0_reverse", "char_rnn.bias_ih_l0_reverse", "char_rnn.bias_hh_l0_reverse"}},
	} {
		t.Run(fmt.Sprintf("chars=%d,%d", c.cfg.CharEmbed, c.cfg.CharHidden), func(t *testing.T) {
			m, err := models.NewTaggerChars(context.Background(), d, c.cfg, words, c.chars, tags, 7)
			check(t, err)
			defer m.Close()
			path := filepath.Join(t.TempDir(), "tagger.safetensors")
			check(t, train.SaveWeights(path, d, m.Groups(), m.Metadata()))
			back, _, err := models.LoadTagger(context.Background(), d, path)
			check(t, err)
			defer back.Close()
			if back.Config() != m.Config() || !slices.Equal(back.Words().Items(), words.Items()) || !slices.Equal(back.Tags().Items(), tags.Items()) {
				t.Errorf("loaded %+v %v %v, saved %+v %v %v", back.Config(), back.Words().Items(), back.Tags().Items(), c.cfg, words.Items(), tags.Items())
			}
			if (back.Chars() == nil) != (c.chars == nil) || c.chars != nil && !slices.Equal(back.Chars().Items(), c.chars.Items()) {
				t.Errorf("loaded characters %v, saved %v", back.Chars(), c.chars)
			}
			if len(back.Groups()) != len(m.Groups()) {
				t.Fatalf("loaded %d groups, saved %d", len(back.Groups()), len(m.Groups()))
			}
			for i, g := range m.Groups() {
				for q := range g.Params.All() {
					a, err := g.Params.Value(q.Name)
					check(t, err)
					b, err := back.Groups()[i].Params.Value(q.Name)
					check(t, err)
					if !slices.Equal(a.Data().([]float32), b.Data().([]float32)) {
						t.Errorf("%s.%s differs after the round trip", g.Name, q.Name)
					}
				}
			}
			tensors, _ := charrnntest.ReadSafetensors(t, path)
			for _, name := range c.names {
				if _, ok := tensors[name]; !ok {
					t.Errorf("no tensor %s in the checkpoint", name)
				}
			}
			if c.chars != nil {
				// PyTorch's shapes: char_emb [C, CE]; the stack reads E + 2·CH.
				cfg := c.cfg
				if got, want := tensors["char_emb.weight"].Shape, []int{c.chars.Len(), cfg.CharEmbed}; !slices.Equal(got, want) {
					t.Errorf("char_emb.weight of shape %v, want %v", got, want)
				}
				if got, want := tensors["rnn.weight_ih_l0"].Shape, []int{4 * cfg.Hidden, cfg.Embed + 2*cfg.CharHidden}; !slices.Equal(got, want) {
					t.Errorf("rnn.weight_ih_l0 of shape %v, want %v", got, want)
				}
			}
		})
	}
	if _, _, err := models.LoadTagger(context.Background(), d, "testdata/torch_lstm.safetensors"); !errors.Is(err, train.ErrMismatch) {
		t.Errorf("loading a char-RNN checkpoint as a tagger: %v, want ErrMismatch", err)
	}
}

// The loss of a step is the mean over all its real tokens, so two
// micro-batches, each summed at 1/(the step's real tokens), give the
// gradients of the one batch that holds both (the accumulation contract
// for variable-length batches: -batch 8 -accum 4 as -batch 32), within the
// rounding of sums grouped differently (float64: aloneTol's budget).
func TestTaggerAccumulation(t *testing.T) {
	d := testdevice.Open(t)
	items := []string{"<pad>", "<unk>"}
	for i := range 10 {
		items = append(items, fmt.Sprint("w", i))
	}
	words, err := loader.NewWords(items)
	check(t, err)
	tags, err := loader.NewLabels([]string{"A", "B", "C"})
	check(t, err)
	m, err := models.NewTagger(context.Background(), d, models.TaggerConfig{Cell: "lstm", Embed: 4, Hidden: 5, Layers: 2, Bidirectional: true, DType: device.Float64}, words, tags, 3)
	check(t, err)
	defer m.Close()
	ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: 3, DType: device.Float64, Ignore: true, IgnoreIndex: loader.IgnoreLabel})
	check(t, err)
	defer ce.Close()
	// Four sentences of lengths 5, 2, 4, 1, padded to 5, time-major.
	lengths := []int32{5, 2, 4, 1}
	const T = 5
	tok := func(rows []int) ([]int32, []int32, []int32) {
		var ids, labs, lens []int32
		for t := range T {
			for _, r := range rows {
				if t < int(lengths[r]) {
					ids, labs = append(ids, int32(2+(3*r+t)%10)), append(labs, int32((r+t)%3))
				} else {
					ids, labs = append(ids, loader.PadID), append(labs, loader.IgnoreLabel)
				}
			}
		}
		for _, r := range rows {
			lens = append(lens, lengths[r])
		}
		return ids, labs, lens
	}
	real := 5 + 2 + 4 + 1
	grads := func(parts [][]int) []float64 {
		for _, g := range m.Groups() {
			check(t, g.Params.ZeroGrad())
		}
		for _, rows := range parts {
			ids, labs, lens := tok(rows)
			logits, err := m.Forward(rnn.Train, upInt32(t, d, ids), T, len(rows), lens)
			check(t, err)
			check(t, ce.ForwardSum(rnn.Train, logits, upInt32(t, d, labs), T*len(rows), 1/float64(real)))
			dl, err := ce.Backward()
			check(t, err)
			check(t, m.Backward(dl))
		}
		var all []float64
		for _, g := range m.Groups() {
			_, gb := g.Params.Flat()
			v := make([]float64, g.Params.Len())
			check(t, device.DownloadSlice(d, v, gb))
			all = append(all, v...)
		}
		return all
	}
	one, two := grads([][]int{{0, 1, 2, 3}}), grads([][]int{{0, 1}, {2, 3}})
	worst := 0.0
	for i := range one {
		worst = math.Max(worst, math.Abs(one[i]-two[i])/math.Max(1, math.Abs(one[i])))
	}
	if !(worst <= 1e-12) {
		t.Errorf("two micro-batches' gradients differ from the whole batch's by %.3g", worst)
	}
}

// fixtureVocabs are the vocabularies of a PyTorch fixture: words "<pad>",
// "<unk>", then w2, w3, ... up to n ids, and the labels given.
func fixtureVocabs(t *testing.T, n int, labels []string) (*loader.Words, *loader.Labels) {
	t.Helper()
	items := []string{"<pad>", "<unk>"}
	for i := 2; i < n; i++ {
		items = append(items, fmt.Sprintf("w%d", i))
	}
	words, err := loader.NewWords(items)
	check(t, err)
	l, err := loader.NewLabels(labels)
	check(t, err)
	return words, l
}
