package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// fixtureChars is the character vocabulary of a PyTorch fixture: "<pad>",
// "<unk>", then c2, c3, ... up to n ids.
func fixtureChars(t *testing.T, n int) *loader.Words {
	t.Helper()
	items := []string{"<pad>", "<unk>"}
	for i := 2; i < n; i++ {
		items = append(items, fmt.Sprintf("c%d", i))
	}
	w, err := loader.NewWords(items)
	check(t, err)
	return w
}

// hostBatch is the case's batch as loader.Collate lays it out, with its
// words' characters when it has them.
func (c taggerCase) hostBatch() loader.HostBatch {
	hb := loader.HostBatch{Seq: c.Seq, Rows: c.Batch, Lengths: c.Lengths, Tokens: c.Tokens, Labels: c.Labels,
		WordLen: c.WordLen, Chars: c.Chars, CharLengths: c.CharLengths}
	for _, n := range c.Lengths {
		hb.Real += int(n)
	}
	return hb
}

// wordOrder is the permutation between a batch's positions and its words
// that loader.HostBatch documents, worked out here on its own: the real
// positions in time-major order are words 0, 1, ..., the padded ones come
// after them in order; positions is the inverse.
func wordOrder(seq, rows int, lengths []int32) (index, positions []int32) {
	var real, pad []int32
	for t := range seq {
		for r := range rows {
			p := int32(t*rows + r)
			if t < int(lengths[r]) {
				real = append(real, p)
			} else {
				pad = append(pad, p)
			}
		}
	}
	positions = append(real, pad...)
	index = make([]int32, len(positions))
	for j, p := range positions {
		index[p] = int32(j)
	}
	return index, positions
}

// upBatch puts hb on d as a loader.SeqBatch holds it; a batch with
// characters gets its WordIndex and WordPositions from wordOrder. The
// buffers are freed when the test ends.
func upBatch(t *testing.T, d device.Device, hb loader.HostBatch) loader.SeqBatch {
	t.Helper()
	b := loader.SeqBatch{Host: hb, Tokens: upInt32(t, d, hb.Tokens), Labels: upInt32(t, d, hb.Labels), Lengths: upInt32(t, d, hb.Lengths)}
	if hb.Chars != nil {
		if hb.WordIndex == nil {
			b.Host.WordIndex, b.Host.WordPositions = wordOrder(hb.Seq, hb.Rows, hb.Lengths)
		}
		b.Chars, b.CharLengths = upInt32(t, d, hb.Chars), upInt32(t, d, hb.CharLengths)
		b.WordIndex, b.WordPositions = upInt32(t, d, b.Host.WordIndex), upInt32(t, d, b.Host.WordPositions)
	}
	return b
}

type trainCase struct {
	Cell          string  `json:"cell"`
	Embed         int     `json:"embed"`
	Hidden        int     `json:"hidden"`
	Layers        int     `json:"layers"`
	Bidirectional bool    `json:"bidirectional"`
	CharEmbed     int     `json:"char_embed"`
	CharHidden    int     `json:"char_hidden"`
	Clip          float64 `json:"clip"`
	Initial       map[string]struct {
		Shape []int     `json:"shape"`
		Data  []float64 `json:"data"`
	} `json:"initial"`
	Losses    []float64 `json:"losses"`
	GradNorms []float64 `json:"grad_norms"`
	Final     map[string]struct {
		Data []float64 `json:"data"`
	} `json:"final"`
}

type trainFixture struct {
	Vocab     int          `json:"vocab"`
	Tags      int          `json:"tags"`
	CharVocab int          `json:"char_vocab"`
	Optimizer string       `json:"optimizer"`
	LR        float64      `json:"lr"`
	Betas     [2]float64   `json:"betas"`
	Eps       float64      `json:"eps"`
	Batches   []taggerCase `json:"batches"`
	Cases     []trainCase  `json:"cases"`
}

// adamState is PyTorch's Adam (torch.optim.Adam, 1.13, no weight decay,
// no amsgrad) for one parameter, in float64 on the host.
type adamState struct{ m, v []float64 }

func (s *adamState) step(p, g []float64, k int, lr, b1, b2, eps float64) {
	if s.m == nil {
		s.m, s.v = make([]float64, len(p)), make([]float64, len(p))
	}
	bc1, bc2 := 1-math.Pow(b1, float64(k)), 1-math.Pow(b2, float64(k))
	for i := range p {
		s.m[i] = b1*s.m[i] + (1-b1)*g[i]
		s.v[i] = b2*s.v[i] + (1-b2)*g[i]*g[i]
		p[i] -= lr / bc1 * s.m[i] / (math.Sqrt(s.v[i])/math.Sqrt(bc2) + eps)
	}
}

// download reads a parameter's buffer as float64, whatever its type.
func download(t *testing.T, d device.Device, dt device.DType, b device.Buffer, n int) []float64 {
	t.Helper()
	out := make([]float64, n)
	if dt == device.Float64 {
		check(t, device.DownloadSlice(d, out, b.Elems(dt, 0, n)))
		return out
	}
	v := make([]float32, n)
	check(t, device.DownloadSlice(d, v, b.Elems(dt, 0, n)))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func upload(t *testing.T, d device.Device, dt device.DType, b device.Buffer, v []float64) {
	t.Helper()
	if dt == device.Float64 {
		check(t, device.UploadSlice(d, b.Elems(dt, 0, len(v)), v))
		return
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	check(t, device.UploadSlice(d, b.Elems(dt, 0, len(v)), f))
}

// TestTaggerTrainsAsTorch replays testdata/torch_tagger.py's training
// steps (its "train" section: a bidirectional-LSTM tagger without and
// with character features, Adam at lr 1e-2 and gradient clipping by
// global norm, three fixed batches) with our layers: from PyTorch's
// initial weights, each step zeroes the gradients, runs ForwardBatch on
// the batch as a loader.SeqBatch holds it, the cross-entropy over its real
// tokens (the mean: each summed at 1/real), Backward, clips as PyTorch's
// clip_grad_norm_ does (clip/(norm + 1e-6) when below 1) and takes
// PyTorch's Adam step, by hand in float64 on the host (the trainer's
// optimizer is internal to train.Trainer). Every step's loss and gradient
// norm and every weight after the last step agree with PyTorch's: in
// float64 within 1e-9 (relative for the loss and norm, absolute for the
// weights, which are of order 1), where rounding in other orders carried
// through three steps leaves ~1e-15; in float32 within 1e-4, where
// float32 rounding (~6e-8 per operation, a few hundred terms deep) leaves
// ~1e-6 relative in the gradients, and Adam's normalisation, which divides
// each element's gradient error by that element's own gradient size (see
// adamBound), moves a weight by ~lr·1e-6·steps unless its gradient is
// within its rounding of zero; the measured largest differences (logged)
// are ~3e-7.
func TestTaggerTrainsAsTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_tagger.json")
	check(t, err)
	var fx struct{ Train trainFixture }
	check(t, json.Unmarshal(raw, &fx))
	tr := fx.Train
	if len(tr.Cases) != 3 || len(tr.Batches) != 3 || tr.Optimizer != "adam" {
		t.Fatalf("%d cases, %d batches, optimizer %q; want 3, 3, adam", len(tr.Cases), len(tr.Batches), tr.Optimizer)
	}
	d := testdevice.Open(t)
	for _, dt := range []device.DType{device.Float64, device.Float32} {
		for _, c := range tr.Cases {
			t.Run(fmt.Sprintf("%v/chars=%d,%d/clip=%v", dt, c.CharEmbed, c.CharHidden, c.Clip), func(t *testing.T) {
				replayTraining(t, d, dt, tr, c)
			})
		}
	}
}

func replayTraining(t *testing.T, d device.Device, dt device.DType, tr trainFixture, c trainCase) {
	lossTol, weightTol := 1e-9, 1e-9
	if dt == device.Float32 {
		lossTol, weightTol = 1e-4, 1e-4
	}
	words, tags := fixtureVocabs(t, tr.Vocab, []string{"A", "B", "C", "D"}[:tr.Tags])
	var chars *loader.Words
	if c.CharEmbed > 0 {
		chars = fixtureChars(t, tr.CharVocab)
	}
	m, err := models.NewTaggerChars(context.Background(), d, models.TaggerConfig{Cell: c.Cell, Embed: c.Embed, Hidden: c.Hidden, Layers: c.Layers,
		Bidirectional: c.Bidirectional, CharEmbed: c.CharEmbed, CharHidden: c.CharHidden, DType: dt}, words, chars, tags, 1)
	check(t, err)
	defer m.Close()
	n := 0
	for _, g := range m.Groups() {
		for q := range g.Params.All() {
			v, ok := c.Initial[g.Name+"."+q.Name]
			if !ok {
				t.Fatalf("%s.%s is not in PyTorch's state dict", g.Name, q.Name)
			}
			upload(t, d, dt, q.Value, v.Data)
			n++
		}
	}
	if n != len(c.Initial) {
		t.Fatalf("the model has %d parameters, PyTorch's %d", n, len(c.Initial))
	}
	ce, err := rnn.NewCrossEntropyConfig(d, rnn.CrossEntropyConfig{Classes: tr.Tags, DType: dt, Ignore: true, IgnoreIndex: loader.IgnoreLabel})
	check(t, err)
	defer ce.Close()
	adam := map[string]*adamState{}
	for k, bc := range tr.Batches {
		hb := bc.hostBatch()
		if c.CharEmbed == 0 {
			hb.WordLen, hb.Chars, hb.CharLengths = 0, nil, nil
		}
		b := upBatch(t, d, hb)
		for _, g := range m.Groups() {
			check(t, g.Params.ZeroGrad())
		}
		check(t, ce.ResetLoss())
		logits, err := m.ForwardBatch(rnn.Train, b)
		check(t, err)
		check(t, ce.ForwardSum(rnn.Train, logits, b.Labels, hb.Seq*hb.Rows, 1/float64(hb.Real)))
		loss, err := ce.Loss()
		check(t, err)
		dl, err := ce.Backward()
		check(t, err)
		check(t, m.Backward(dl))
		type pg struct {
			name string
			q    rnn.Param
			g    []float64
		}
		var all []pg
		sq := 0.0
		for _, g := range m.Groups() {
			for q := range g.Params.All() {
				gv := download(t, d, dt, q.Grad, q.Len())
				for _, x := range gv {
					sq += x * x
				}
				all = append(all, pg{g.Name + "." + q.Name, q, gv})
			}
		}
		norm := math.Sqrt(sq)
		if e := math.Abs(loss-c.Losses[k]) / c.Losses[k]; !(e <= lossTol) {
			t.Errorf("step %d: loss %.12g, PyTorch %.12g (relative %.3g)", k+1, loss, c.Losses[k], e)
		}
		if e := math.Abs(norm-c.GradNorms[k]) / c.GradNorms[k]; !(e <= lossTol) {
			t.Errorf("step %d: gradient norm %.12g, PyTorch %.12g (relative %.3g)", k+1, norm, c.GradNorms[k], e)
		}
		coef := 1.0
		if cl := c.Clip / (norm + 1e-6); cl < 1 {
			coef = cl
		}
		for _, p := range all {
			for i := range p.g {
				p.g[i] *= coef
			}
			v := download(t, d, dt, p.q.Value, p.q.Len())
			if adam[p.name] == nil {
				adam[p.name] = &adamState{}
			}
			adam[p.name].step(v, p.g, k+1, tr.LR, tr.Betas[0], tr.Betas[1], tr.Eps)
			upload(t, d, dt, p.q.Value, v)
		}
	}
	worst, where := 0.0, ""
	for _, g := range m.Groups() {
		for q := range g.Params.All() {
			name := g.Name + "." + q.Name
			got, want := download(t, d, dt, q.Value, q.Len()), c.Final[name].Data
			if len(got) != len(want) {
				t.Fatalf("%s: %d elements, PyTorch %d", name, len(got), len(want))
			}
			for i := range got {
				if e := math.Abs(got[i] - want[i]); !(e <= worst) {
					worst, where = e, fmt.Sprintf("%s[%d]", name, i)
				}
			}
		}
	}
	t.Logf("weights after %d steps: largest difference from PyTorch's %.3g (%s)", len(tr.Batches), worst, where)
	if !(worst <= weightTol) {
		t.Errorf("weights after %d steps differ from PyTorch's by up to %.3g at %s, want ≤ %.3g", len(tr.Batches), worst, where, weightTol)
	}
}

// charsTagger is a tiny float64 tagger with character features, and a
// batch for it: four sentences of lengths 3, 1, 4, 2 (padded to 4), words
// of one to four characters (the unknown character among them).
func charsTagger(t *testing.T, d device.Device, cell string, bidir bool) (*models.Tagger, loader.SeqBatch) {
	t.Helper()
	words, tags := fixtureVocabs(t, 6, []string{"A", "B", "C"})
	chars := fixtureChars(t, 5)
	m, err := models.NewTaggerChars(context.Background(), d, models.TaggerConfig{Cell: cell, Embed: 2, Hidden: 2, Layers: 1, Bidirectional: bidir,
		CharEmbed: 2, CharHidden: 2, DType: device.Float64}, words, chars, tags, 11)
	check(t, err)
	t.Cleanup(func() { m.Close() })
	lengths := []int32{3, 1, 4, 2}
	const T, R = 4, 4
	r := rand.New(rand.NewPCG(5, 6))
	hb := loader.HostBatch{Seq: T, Rows: R, Lengths: lengths}
	var spell [][]int32
	for tt := range T {
		for row := range R {
			if tt < int(lengths[row]) {
				hb.Tokens = append(hb.Tokens, int32(1+r.IntN(5)))
				hb.Labels = append(hb.Labels, int32(r.IntN(3)))
				w := make([]int32, 1+len(spell)%4)
				for i := range w {
					w[i] = int32(1 + r.IntN(4))
				}
				spell = append(spell, w)
				hb.CharLengths = append(hb.CharLengths, int32(len(w)))
				hb.WordLen = max(hb.WordLen, len(w))
				hb.Real++
			} else {
				hb.Tokens = append(hb.Tokens, loader.PadID)
				hb.Labels = append(hb.Labels, loader.IgnoreLabel)
			}
		}
	}
	hb.Chars = make([]int32, hb.WordLen*hb.Real)
	for j, w := range spell {
		for i, ch := range w {
			hb.Chars[i*hb.Real+j] = ch
		}
	}
	return m, upBatch(t, d, hb)
}

// The gradient of every parameter through the character path (the
// character embedding, both directions of the character LSTM, the
// features' gather into the sentences and back) agrees with central
// finite differences of the loss, in float64 on tiny shapes. The loss is
// Σ R·logits over the real positions (R fixed random weights, zero at
// padded positions), so that every logit's gradient differs.
func TestTaggerCharsGradient(t *testing.T) {
	d := testdevice.Open(t)
	for _, c := range []struct {
		cell  string
		bidir bool
	}{{"lstm", true}, {"gru", false}} {
		t.Run(fmt.Sprintf("%s/bidirectional=%v", c.cell, c.bidir), func(t *testing.T) {
			m, b := charsTagger(t, d, c.cell, c.bidir)
			hb := b.Host
			classes := m.Classes()
			r := rand.New(rand.NewPCG(7, 8))
			R := make([]float64, hb.Seq*hb.Rows*classes)
			for p := range hb.Seq * hb.Rows {
				if hb.Labels[p] == loader.IgnoreLabel {
					continue
				}
				for k := range classes {
					R[p*classes+k] = r.NormFloat64()
				}
			}
			loss := func() float64 {
				logits, err := m.ForwardBatch(rnn.NoGrad, b)
				check(t, err)
				lg := make([]float64, len(R))
				check(t, device.DownloadSlice(d, lg, logits))
				s := 0.0
				for i := range R {
					s += R[i] * lg[i]
				}
				return s
			}
			for _, g := range m.Groups() {
				check(t, g.Params.ZeroGrad())
			}
			_, err := m.ForwardBatch(rnn.Train, b)
			check(t, err)
			check(t, m.Backward(upFloat64(t, d, R)))
			const h = 1e-6
			checked := 0
			for _, g := range m.Groups() {
				for q := range g.Params.All() {
					name := g.Name + "." + q.Name
					grad := download(t, d, device.Float64, q.Grad, q.Len())
					v := download(t, d, device.Float64, q.Value, q.Len())
					for i := range v {
						x := v[i]
						v[i] = x + h
						upload(t, d, device.Float64, q.Value, v)
						up := loss()
						v[i] = x - h
						upload(t, d, device.Float64, q.Value, v)
						down := loss()
						v[i] = x
						upload(t, d, device.Float64, q.Value, v)
						fd := (up - down) / (2 * h)
						// Central differences err by h²·f'''/6 and by the
						// rounding of the loss (~1e-16·|terms|/h): ~1e-9.
						if e := math.Abs(fd - grad[i]); !(e <= 1e-7*math.Max(1, math.Abs(fd))) {
							t.Errorf("%s[%d]: gradient %.10g, finite differences %.10g", name, i, grad[i], fd)
						}
						checked++
					}
					if strings.HasPrefix(name, "char_") && slices.Max(absAll(grad)) == 0 {
						t.Errorf("%s: gradient all zero; the character path got no gradient", name)
					}
				}
			}
			t.Logf("%d parameters checked", checked)
		})
	}
}

func absAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	return out
}

func upFloat64(t *testing.T, d device.Device, v []float64) device.Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(v))*8, device.Workspace)
	check(t, err)
	t.Cleanup(func() { d.Free(b) })
	check(t, device.UploadSlice(d, b, v))
	return b
}

// A tagger with character features says what it lacks: a configuration
// with one of the two sizes, no character vocabulary (or one without the
// features), Forward (which has no characters), a batch without
// characters, a checkpoint without its chars metadata.
func TestTaggerCharsErrors(t *testing.T) {
	d := testdevice.Open(t)
	words, tags := fixtureVocabs(t, 6, []string{"A", "B"})
	chars := fixtureChars(t, 5)
	base := models.TaggerConfig{Cell: "lstm", Embed: 3, Hidden: 2, Layers: 1}
	for _, c := range []struct {
		name       string
		embed, hid int
		chars      *loader.Words
	}{
		{"char_embed alone", 3, 0, chars},
		{"char_hidden alone", 0, 3, chars},
		{"negative", -1, -1, chars},
		{"no vocabulary", 3, 2, nil},
		{"a vocabulary without features", 0, 0, chars},
	} {
		cfg := base
		cfg.CharEmbed, cfg.CharHidden = c.embed, c.hid
		if m, err := models.NewTaggerChars(context.Background(), d, cfg, words, c.chars, tags, 1); err == nil {
			m.Close()
			t.Errorf("%s: no error", c.name)
		}
	}
	cfg := base
	cfg.CharEmbed, cfg.CharHidden = 3, 2
	if m, err := models.NewTagger(context.Background(), d, cfg, words, tags, 1); err == nil {
		m.Close()
		t.Error("NewTagger with character features: no error")
	}
	m, b := charsTagger(t, d, "lstm", true)
	if _, err := m.Forward(rnn.Train, b.Tokens, b.Host.Seq, b.Host.Rows, b.Host.Lengths); err == nil || !strings.Contains(err.Error(), "ForwardBatch") {
		t.Errorf("Forward with character features: %v, want an error naming ForwardBatch", err)
	}
	bare := b
	bare.Chars, bare.WordIndex, bare.WordPositions, bare.Host.WordLen = device.Buffer{}, device.Buffer{}, device.Buffer{}, 0
	if _, err := m.ForwardBatch(rnn.Train, bare); err == nil || !strings.Contains(err.Error(), "Chars") {
		t.Errorf("ForwardBatch without characters: %v, want an error naming the loader's Chars", err)
	}
	short := b
	short.Host.CharLengths = short.Host.CharLengths[1:]
	if _, err := m.ForwardBatch(rnn.Train, short); !errors.Is(err, device.ErrShape) {
		t.Errorf("ForwardBatch with a word's lengths missing: %v, want ErrShape", err)
	}
	// A checkpoint with character features and no chars metadata.
	meta := m.Metadata()
	delete(meta, "chars")
	path := filepath.Join(t.TempDir(), "nochars.safetensors")
	check(t, train.SaveWeights(path, d, m.Groups(), meta))
	if _, _, err := models.LoadTagger(context.Background(), d, path); !errors.Is(err, train.ErrMismatch) || !strings.Contains(err.Error(), "chars") {
		t.Errorf("loading without chars metadata: %v, want ErrMismatch naming chars", err)
	}
	// And after all that, the model still trains.
	_, err := m.ForwardBatch(rnn.Train, b)
	check(t, err)
}
