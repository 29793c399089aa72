package loader

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"unicode/utf8"

	"github.com/gocurrent/gocurrent/internal/checked"
)

// BucketConfig says how the examples of a labelled dataset are grouped
// into batches of similar lengths, to cut padding (the scheme of Hugging
// Face's length-grouped sampler and torchtext's BucketIterator).
type BucketConfig struct {
	// Batch is the most examples a batch holds; Batch·Accum, the examples
	// of a step, at most MaxStepExamples.
	Batch int
	// MaxTokens, when > 0, is a token budget: a batch's padded size (its
	// examples times its longest length) stays within it, so batches of
	// short examples hold more of them, up to Batch. An example longer
	// than the budget makes a batch of its own.
	MaxTokens int
	// Pool is the number of batches whose examples are sorted by length
	// together: a pool of Pool·Batch examples, taken in the epoch's
	// order, is sorted longest first and cut into batches. 0 means 50; 1
	// sorts within each batch only.
	Pool int
	// Accum is the number of batches an optimizer step accumulates (0
	// means 1): the pool holds Pool·Accum batches' examples, cut into runs
	// of Accum batches (a pool's last run shorter when its batches do not
	// divide), and shuffling moves whole runs; each run is a step
	// (SeqBatch.Group, Last). A step's batches are then the cut of what
	// one batch of Batch·Accum examples would hold: without a token
	// budget, batches of 8 accumulated 4 at a time are the batches of 32,
	// split.
	Accum int
	// Shuffle draws each epoch's order of the examples and of the batches
	// from Seed and the epoch, so an epoch's batches are the same on every
	// run and a resumed run continues them exactly; without it the
	// examples are taken in file order and the batches kept in order.
	Shuffle bool
	Seed    uint64
}

// withDefaults checks c and fills in its defaults.
func (c BucketConfig) withDefaults() (BucketConfig, error) {
	switch {
	case c.Batch <= 0:
		return c, fmt.Errorf("loader: bucketing: Batch %d, want > 0", c.Batch)
	case c.MaxTokens < 0 || c.Pool < 0 || c.Accum < 0:
		return c, fmt.Errorf("loader: bucketing: MaxTokens %d, Pool %d, Accum %d; none may be negative", c.MaxTokens, c.Pool, c.Accum)
	}
	if c.Pool == 0 {
		c.Pool = 50
	}
	if c.Accum == 0 {
		c.Accum = 1
	}
	// A pool is Pool·Batch·Accum examples; the sum must not wrap.
	if _, ok := checked.Mul(c.Pool, c.Batch, c.Accum); !ok {
		return c, fmt.Errorf("loader: bucketing: Pool × Batch × Accum = %d × %d × %d overflows int", c.Pool, c.Batch, c.Accum)
	}
	if step, _ := checked.Mul(c.Batch, c.Accum); step > MaxStepExamples {
		return c, fmt.Errorf("loader: bucketing: Batch × Accum = %d × %d examples a step, more than %d", c.Batch, c.Accum, MaxStepExamples)
	}
	return c, nil
}

// MaxStepExamples bounds the examples of a step, BucketConfig's
// Batch·Accum: a million sequences a step is far past what a recurrent
// model trains on, and a plan of a step (models.PlanMemory without data)
// writes every one of them out.
const MaxStepExamples = 1 << 20

// Validate checks the configuration, its defaults filled in, as
// Buckets and NewSeqLoader do: no field negative, a pool whose size does
// not overflow.
func (c BucketConfig) Validate() error {
	_, err := c.withDefaults()
	return err
}

// Buckets returns epoch's batches of the examples whose lengths are given:
// each batch a list of example indices, longest first; every example is in
// exactly one batch. The result depends only on the lengths, c and epoch.
func Buckets(lengths []int32, c BucketConfig, epoch int) ([][]int32, error) {
	runs, err := bucketRuns(lengths, c, epoch)
	if err != nil {
		return nil, err
	}
	return slices.Concat(runs...), nil
}

// bucketRuns is Buckets with the batches in their runs of Accum (the
// steps), a pool's last run shorter when its batches are not a multiple of
// Accum.
func bucketRuns(lengths []int32, c BucketConfig, epoch int) ([][][]int32, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	order := make([]int32, len(lengths))
	for i := range order {
		order[i] = int32(i)
	}
	var r *rand.Rand
	if c.Shuffle {
		r = rand.New(rand.NewPCG(c.Seed, uint64(epoch)))
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	longestFirst := func(a, b int32) int { return cmp.Compare(lengths[b], lengths[a]) }
	var runs [][][]int32
	size := c.Pool * c.Batch * c.Accum
	for start := 0; start < len(order); start += size {
		pool := order[start:min(start+size, len(order))]
		slices.SortStableFunc(pool, longestFirst)
		var batches [][]int32
		for len(pool) > 0 {
			n := 1
			for n < len(pool) && n < c.Batch && (c.MaxTokens == 0 || (n+1)*int(lengths[pool[0]]) <= c.MaxTokens) {
				n++
			}
			batches = append(batches, slices.Clone(pool[:n]))
			pool = pool[n:]
		}
		for k := 0; k < len(batches); k += c.Accum {
			runs = append(runs, batches[k:min(k+c.Accum, len(batches))])
		}
	}
	if r != nil {
		r.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	}
	return runs, nil
}

// Padding is the fraction of padded positions in batches of the examples
// whose lengths are given: 1 - Σ lengths / Σ (batch size · longest).
func Padding(lengths []int32, batches [][]int32) float64 {
	var real, padded int64
	for _, b := range batches {
		longest := int32(0)
		for _, i := range b {
			real += int64(lengths[i])
			longest = max(longest, lengths[i])
		}
		padded += int64(len(b)) * int64(longest)
	}
	if padded == 0 {
		return 0
	}
	return 1 - float64(real)/float64(padded)
}

// IgnoreLabel is the label of padded positions in a collated batch of
// tagged sequences: PyTorch's default ignore_index, which the loss leaves
// out (rnn.CrossEntropyConfig.Ignore).
const IgnoreLabel = -100

// HostBatch is a batch of examples collated on the host, as the device
// will hold it: time-major, padded to the longest example.
type HostBatch struct {
	// Seq is the longest length, Rows the number of examples.
	Seq, Rows int
	// Examples are the dataset's indices of the rows.
	Examples []int32
	// Lengths are the rows' lengths (tokens, or a text's characters).
	Lengths []int32
	// Tokens is [Seq, Rows]: the token of row r at step t at t·Rows + r,
	// word ids (character ids for a text), PadID past a row's length.
	Tokens []int32
	// Labels is [Seq, Rows] for tagging, IgnoreLabel past a row's length;
	// [Rows] for a labelled sequence.
	Labels []int32
	// Real is the number of real tokens, Σ Lengths: the rows a tagging
	// loss counts.
	Real int

	// The characters of the batch's words, for a model's character
	// features (CollateConfig.Chars); empty otherwise. Only the Real words
	// are laid out, not the padded positions: word j is the j-th real
	// position in the time-major order of Tokens (PyTorch's packed order
	// when the rows are longest first, as Buckets makes them).
	//
	// WordLen is the longest word's characters (at most MaxWordChars), the
	// steps of Chars; 0 when the batch carries no characters.
	WordLen int
	// Chars is [WordLen, Real], time-major over the words: character i of
	// word j at i·Real + j, in the dataset's character vocabulary
	// (UnknownID for a character outside it), PadID past the word's
	// length.
	Chars []int32
	// CharLengths is [Real]: each word's characters, in [1, WordLen].
	CharLengths []int32
	// WordIndex is [Seq, Rows], a permutation of the Seq·Rows positions:
	// the word at each real position (0 .. Real-1), then Real, Real+1, ...
	// at the padded positions in order. WordPositions is its inverse: the
	// position of word j for j < Real, then the padded positions. A model
	// gathers its per-word features into the sentences' layout with
	// WordIndex (rows Real and up of the features being zeros), and their
	// gradients back with WordPositions.
	WordIndex, WordPositions []int32
}

// CollateConfig says what a collated batch carries beyond its tokens,
// labels and lengths. The zero value collates the tokens alone.
type CollateConfig struct {
	// Chars adds the characters of the words (HostBatch.Chars and the
	// fields after it) to batches of word sequences (tagging, or labelled
	// token sequences; a text's batch has no words and is an error).
	Chars bool
	// MaxWordChars, when > 0 with Chars, keeps a word's first
	// MaxWordChars characters and drops the rest, so that one long token
	// (a URL, a run of punctuation) does not widen every batch's Chars and
	// the staging ring's slots; 0 keeps every character.
	MaxWordChars int
}

func (c CollateConfig) validate() error {
	if c.MaxWordChars < 0 {
		return fmt.Errorf("loader: MaxWordChars %d, want ≥ 0", c.MaxWordChars)
	}
	return nil
}

// wordLen is the characters a word of n characters keeps.
func (c CollateConfig) wordLen(n int) int {
	if c.MaxWordChars > 0 {
		return min(n, c.MaxWordChars)
	}
	return n
}

// Collate reads the examples of batch from d and lays them out as a
// HostBatch, in the order given, in d's vocabularies (a word or character
// outside them is UnknownID): CollateConfig{}.Collate.
func Collate(d *Dataset, batch []int32) (HostBatch, error) {
	return CollateConfig{}.Collate(d, batch)
}

// Collate reads the examples of batch from d and lays them out as a
// HostBatch, in the order given, in d's vocabularies (a word or character
// outside them is UnknownID), with what c adds.
func (c CollateConfig) Collate(d *Dataset, batch []int32) (HostBatch, error) {
	if err := c.validate(); err != nil {
		return HostBatch{}, err
	}
	hb := HostBatch{Rows: len(batch), Examples: append([]int32(nil), batch...)}
	exs := make([]Example, len(batch))
	for r, i := range batch {
		ex, err := d.Example(int(i))
		if err != nil {
			return hb, err
		}
		exs[r] = ex
		n := int32(len(ex.Tokens))
		if ex.Text != "" {
			n = int32(utf8.RuneCountInString(ex.Text))
		}
		hb.Lengths = append(hb.Lengths, n)
		hb.Seq = max(hb.Seq, int(n))
		hb.Real += int(n)
	}
	R := hb.Rows
	hb.Tokens = make([]int32, hb.Seq*R)
	if d.Tagging {
		hb.Labels = make([]int32, hb.Seq*R)
		for k := range hb.Labels {
			hb.Labels[k] = IgnoreLabel
		}
	} else {
		hb.Labels = make([]int32, R)
	}
	for r, ex := range exs {
		if ex.Text != "" {
			t := 0
			for _, c := range ex.Text {
				hb.Tokens[t*R+r] = d.Chars.ID(string(c))
				t++
			}
		}
		for t, w := range ex.Tokens {
			hb.Tokens[t*R+r] = d.Words.ID(w)
		}
		for t, tag := range ex.Tags {
			id, ok := d.Labels.ID(tag)
			if !ok {
				return hb, &LineError{File: d.path, Line: ex.Line, Reason: fmt.Sprintf("tag %q is not one of the %d known", tag, d.Labels.Len())}
			}
			hb.Labels[t*R+r] = id
		}
		if !d.Tagging {
			id, ok := d.Labels.ID(ex.Label)
			if !ok {
				return hb, &LineError{File: d.path, Line: ex.Line, Reason: fmt.Sprintf("label %q is not one of the %d known", ex.Label, d.Labels.Len())}
			}
			hb.Labels[r] = id
		}
	}
	if c.Chars {
		for _, ex := range exs {
			if ex.Text != "" {
				return hb, fmt.Errorf("loader: %s:%d: the characters of words asked for a text, which has none (its tokens are characters already)", d.path, ex.Line)
			}
		}
		c.addChars(d, &hb, exs)
	}
	return hb, nil
}

// addChars lays out the characters of the words of exs, hb's rows.
func (c CollateConfig) addChars(d *Dataset, hb *HostBatch, exs []Example) {
	n, R := hb.Seq*hb.Rows, hb.Rows
	hb.WordIndex, hb.WordPositions = make([]int32, n), make([]int32, n)
	hb.CharLengths = make([]int32, 0, hb.Real)
	words := make([]string, 0, hb.Real)
	real, pad := 0, hb.Real
	for p := range n {
		t, r := p/R, p%R
		j := pad
		if t < int(hb.Lengths[r]) {
			j = real
			real++
			w := exs[r].Tokens[t]
			words = append(words, w)
			k := c.wordLen(utf8.RuneCountInString(w))
			hb.CharLengths = append(hb.CharLengths, int32(k))
			hb.WordLen = max(hb.WordLen, k)
		} else {
			pad++
		}
		hb.WordIndex[p], hb.WordPositions[j] = int32(j), int32(p)
	}
	W := hb.Real
	hb.Chars = make([]int32, hb.WordLen*W) // PadID
	for j, w := range words {
		i := 0
		for _, ch := range w {
			if i == int(hb.CharLengths[j]) {
				break
			}
			hb.Chars[i*W+j] = d.Chars.ID(string(ch))
			i++
		}
	}
}
