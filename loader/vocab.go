package loader

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// vocabDenseLimit bounds the runes whose ids a Vocab keeps in a table
// indexed by rune (the Basic Multilingual Plane: 256 KiB at most); ids of
// runes above it are looked up in a map.
const vocabDenseLimit = 1 << 16

// Vocab is the vocabulary of a character-level model: id i is the i-th
// character. A Vocab is immutable and safe for concurrent use.
type Vocab struct {
	runes []rune
	// dense[r] is the id of rune r, or -1, for r < len(dense); len(dense) is
	// at least 128 (so every ASCII lookup is one table load) and at most
	// vocabDenseLimit.
	dense  []int32
	sparse map[rune]int32 // ids of runes >= len(dense)
}

// NewVocab returns the vocabulary whose id i is the character chars[i]. Each
// element must be exactly one valid UTF-8 encoded character (U+FFFD itself
// is allowed), the elements must be distinct, and there must be at least one;
// the error otherwise names the offending element.
func NewVocab(chars []string) (*Vocab, error) {
	if len(chars) == 0 {
		return nil, fmt.Errorf("loader: vocabulary is empty")
	}
	runes := make([]rune, len(chars))
	first := make(map[rune]int, len(chars))
	for i, s := range chars {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size <= 1 && len(s) > 0:
			return nil, fmt.Errorf("loader: vocabulary element %d (%q) is not valid UTF-8", i, s)
		case len(s) == 0 || size != len(s):
			return nil, fmt.Errorf("loader: vocabulary element %d (%q) is not exactly one character", i, s)
		}
		if j, dup := first[r]; dup {
			return nil, fmt.Errorf("loader: vocabulary elements %d and %d are both %q", j, i, s)
		}
		first[r] = i
		runes[i] = r
	}
	return newVocabRunes(runes), nil
}

// newVocabRunes returns the vocabulary of runes, which must be valid and
// distinct; it keeps runes.
func newVocabRunes(runes []rune) *Vocab {
	top := rune(utf8.RuneSelf)
	for _, r := range runes {
		if r < vocabDenseLimit && r+1 > top {
			top = r + 1
		}
	}
	v := &Vocab{runes: runes, dense: make([]int32, top)}
	for i := range v.dense {
		v.dense[i] = -1
	}
	for i, r := range runes {
		if int(r) < len(v.dense) {
			v.dense[r] = int32(i)
			continue
		}
		if v.sparse == nil {
			v.sparse = make(map[rune]int32)
		}
		v.sparse[r] = int32(i)
	}
	return v
}

// Len returns the number of characters.
func (v *Vocab) Len() int { return len(v.runes) }

// ID returns the id of r and whether r is in the vocabulary.
func (v *Vocab) ID(r rune) (int32, bool) {
	if uint32(r) < uint32(len(v.dense)) {
		id := v.dense[r]
		return id, id >= 0
	}
	id, ok := v.sparse[r]
	return id, ok
}

// Rune returns the character with the given id. It panics unless
// 0 <= id < Len().
func (v *Vocab) Rune(id int32) rune {
	if id < 0 || int(id) >= len(v.runes) {
		panic(fmt.Sprintf("loader: Vocab.Rune: id %d out of range [0, %d)", id, len(v.runes)))
	}
	return v.runes[id]
}

// Strings returns the characters as one-character strings, index = id: the
// form NewVocab takes and checkpoints store. The slice is the caller's.
func (v *Vocab) Strings() []string {
	s := make([]string, len(v.runes))
	for i, r := range v.runes {
		s[i] = string(r)
	}
	return s
}

// Encode returns the ids of the characters of s, for example a prime for
// sampling. Invalid UTF-8 or a character outside the vocabulary is an error
// naming the character and its byte offset in s.
func (v *Vocab) Encode(s string) ([]int32, error) {
	ids := make([]int32, 0, len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return nil, fmt.Errorf("loader: encode: invalid UTF-8 at byte %d", i)
		}
		id, ok := v.ID(r)
		if !ok {
			return nil, fmt.Errorf("loader: encode: byte %d: character %q (%U) is %w", i, string(r), r, ErrNotInVocab)
		}
		ids = append(ids, id)
		i += size
	}
	return ids, nil
}

// Decode returns the characters with the given ids as a string. It panics
// unless every id is in [0, Len()).
func (v *Vocab) Decode(ids []int32) string {
	var b strings.Builder
	b.Grow(len(ids))
	for _, id := range ids {
		b.WriteRune(v.Rune(id))
	}
	return b.String()
}

// notInVocab is the reason given for a character outside the vocabulary.
// ErrNotInVocab is wrapped by Encode's error for a character outside the
// vocabulary.
var ErrNotInVocab = errors.New("not in the vocabulary")

func notInVocab(r rune) string {
	return fmt.Sprintf("character %q (%U) is not in the vocabulary", string(r), r)
}
