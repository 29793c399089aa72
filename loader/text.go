package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// ErrEmpty is returned by Tokenize for a corpus with no characters.
var ErrEmpty = errors.New("loader: empty corpus")

// DataError reports a byte of the corpus that cannot be tokenized: invalid
// UTF-8, or a character outside a given vocabulary.
type DataError struct {
	Name         string // the file holding the byte (see Corpus.Where)
	Offset       int64  // byte offset of the byte within that file
	CorpusOffset int64  // byte offset of the byte within the corpus
	Reason       string // e.g. "invalid UTF-8"
}

// Error returns, for example,
// `loader: data/a.txt: byte 1234: invalid UTF-8`.
func (e *DataError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("loader: byte %d: %s", e.Offset, e.Reason)
	}
	return fmt.Sprintf("loader: %s: byte %d: %s", e.Name, e.Offset, e.Reason)
}

// Reasons of DataError.
const (
	reasonInvalidUTF8 = "invalid UTF-8"
	reasonChanged     = " (the corpus changed after Tokenize)"
)

// TokenizeConfig configures Tokenize. The zero value builds the vocabulary
// from the corpus.
type TokenizeConfig struct {
	// Vocab is the vocabulary to use, for example one a checkpoint stored.
	// Nil (the default) builds it: the distinct characters of the corpus in
	// increasing code point order.
	Vocab *Vocab
	// Unknown, with a given Vocab, says what a character outside it becomes:
	// "" (the default) makes it an error (*DataError); otherwise Unknown is
	// one character of Vocab, whose id such characters get. Unknown without
	// Vocab is an error.
	Unknown string
	// OnRead, when set, is called after each chunk (1 MiB) of the pass
	// with the bytes read so far and the corpus's size: progress for a
	// large corpus. It runs on Tokenize's goroutine.
	OnRead func(read, size int64)
}

const (
	// tokenizeChunk is the bytes Tokenize reads at once.
	tokenizeChunk = 1 << 20
	// textReadChunk is the size of the pooled buffers Read decodes from.
	textReadChunk = 64 << 10
	// textIndexShift: the sparse index holds the byte offset of every
	// 1<<textIndexShift-th token, 8 bytes per 1024 tokens.
	textIndexShift = 10
)

// textParams are the buffer sizes of a tokenized corpus; tests shrink them
// to put chunk boundaries inside small inputs.
type textParams struct {
	chunk     int // bytes per read of the tokenizing pass, >= 1
	readChunk int // bytes of Read's buffer, in [utf8.UTFMax, textReadChunk]
}

var textBufPool = sync.Pool{New: func() any {
	b := make([]byte, textReadChunk)
	return &b
}}

// Text is a tokenized corpus, or a contiguous token range of one: random
// access to token ids by index, decoded from the corpus on demand, so that
// the corpus is never held in memory. Slices of one tokenized corpus share
// its sparse index and its BytesRead counter. A Text is safe for concurrent
// use; it reads from its Corpus, which the caller keeps open while the Text
// is in use. The zero Text is empty.
type Text struct {
	src        *textSource
	start, end int64 // token range of src
}

// textSource is what the Texts of one tokenized corpus share; only
// bytesRead changes after Tokenize.
type textSource struct {
	corpus  *Corpus
	vocab   *Vocab
	unknown int32 // id given to characters outside vocab; -1: none
	mapped  int64 // characters of the corpus that became unknown
	tokens  int64
	size    int64 // corpus bytes
	// ascii: every token is one byte, token i is byte i, and byteIDs maps
	// bytes to ids; index is then nil.
	ascii   bool
	byteIDs [256]int32 // id of each ASCII byte (or unknown); -1: none
	// index[k] is the corpus offset of token k<<textIndexShift.
	index         []int64
	bytesPerToken float64 // size/tokens, to size reads
	readChunk     int
	bytesRead     atomic.Int64
	// cycle says the text is Cycle's: token i is id i mod the
	// vocabulary's size, with no corpus behind it.
	cycle bool
}

// Cycle returns a Text of n tokens that repeats vocab's characters in id
// order (token i is id i mod vocab.Len()), with no corpus behind it and
// nothing to tokenize: a text of any length in constant memory, such as
// the one a plan of a run trains on (models.PlanMemory), whose loader on
// the planner's device reads none of it. n must be positive.
func Cycle(vocab *Vocab, n int64) (*Text, error) {
	if vocab == nil || vocab.Len() == 0 || n <= 0 {
		return nil, fmt.Errorf("loader: Cycle: a text of %d tokens of an empty vocabulary, or of none: %w", n, ErrEmpty)
	}
	return &Text{src: &textSource{vocab: vocab, unknown: -1, tokens: n, cycle: true}, end: n}, nil
}

// Tokenize reads c once, in chunks, and returns it as a Text of
// characters. On the way it checks that c is valid UTF-8 (a character may
// span files), builds or checks the vocabulary (see TokenizeConfig) and
// records the byte offset of every 1024th character, about 8 bytes of
// memory per 1024 characters; a corpus that is all ASCII needs no index. A
// byte order mark (U+FEFF) and carriage returns are characters like any
// other.
//
// Invalid UTF-8, or a character outside a given vocabulary with no Unknown,
// is a *DataError naming the file and the offset of the first bad byte. An
// empty corpus gives an error wrapping ErrEmpty; a cancelled ctx, checked
// between chunks, one wrapping ctx.Err(); a failed read the corpus's error.
func Tokenize(ctx context.Context, c *Corpus, cfg TokenizeConfig) (*Text, error) {
	return tokenizeWith(ctx, c, cfg, textParams{chunk: tokenizeChunk, readChunk: textReadChunk})
}

// tokenizeWith is Tokenize with the buffer sizes of p.
func tokenizeWith(ctx context.Context, c *Corpus, cfg TokenizeConfig, p textParams) (*Text, error) {
	if c == nil {
		return nil, errors.New("loader: Tokenize: nil corpus")
	}
	unknown, err := unknownID(cfg)
	if err != nil {
		return nil, err
	}
	if c.Size() == 0 {
		return nil, fmt.Errorf("%w: %s", ErrEmpty, c.name)
	}
	p.chunk = max(p.chunk, 1)
	p.readChunk = min(max(p.readChunk, utf8.UTFMax), textReadChunk)
	tz := newTokenizer(c, cfg.Vocab, unknown)
	tz.onRead = cfg.OnRead
	if err := tz.read(ctx, p.chunk); err != nil {
		return nil, err
	}
	s := newTextSource(c, tz.vocabulary(), unknown, tz.tokens, tz.index, p.readChunk)
	s.mapped = tz.mapped
	return &Text{src: s, start: 0, end: tz.tokens}, nil
}

// unknownID resolves TokenizeConfig.Unknown to its id in the given
// vocabulary: -1 when it is not set.
func unknownID(cfg TokenizeConfig) (int32, error) {
	if cfg.Unknown == "" {
		return -1, nil
	}
	if cfg.Vocab == nil {
		return -1, fmt.Errorf("loader: Tokenize: Unknown %q given without a Vocab", cfg.Unknown)
	}
	r, size := utf8.DecodeRuneInString(cfg.Unknown)
	id, ok := cfg.Vocab.ID(r)
	if size != len(cfg.Unknown) || (r == utf8.RuneError && size == 1) || !ok {
		return -1, fmt.Errorf("loader: Tokenize: Unknown %q is not one character of the vocabulary", cfg.Unknown)
	}
	return id, nil
}

// tokenizer is the state of Tokenize's pass over a corpus: the tokens
// counted, the sparse index, and the characters met (when building the
// vocabulary) or the vocabulary they are checked against.
type tokenizer struct {
	corpus *Corpus
	given  *Vocab // nil: build the vocabulary
	// unknown is the id of characters outside given; -1: they are errors.
	unknown int32
	// okASCII[b]: byte b may appear. mapASCII[b]: byte b is outside the
	// given vocabulary and becomes unknown. seen*: the characters met,
	// when building.
	okASCII, mapASCII, seenASCII [utf8.RuneSelf]bool
	mapped                       int64 // characters that became unknown
	seenBMP                      []uint64
	seenAstral                   map[rune]bool
	tokens                       int64
	index                        []int64 // corpus offset of every 1<<textIndexShift-th token
	onRead                       func(read, size int64)
}

func newTokenizer(c *Corpus, given *Vocab, unknown int32) *tokenizer {
	tz := &tokenizer{corpus: c, given: given, unknown: unknown}
	for b := range tz.okASCII {
		inVocab := given == nil
		if given != nil {
			_, inVocab = given.ID(rune(b))
		}
		tz.okASCII[b] = inVocab || unknown >= 0
		tz.mapASCII[b] = !inVocab && unknown >= 0
	}
	return tz
}

// read reads the corpus in chunks of chunk bytes and scans each; a
// character cut by a chunk's end is carried to the front of the next.
// ctx is checked between chunks.
func (tz *tokenizer) read(ctx context.Context, chunk int) error {
	c := tz.corpus
	size := c.Size()
	buf := make([]byte, utf8.UTFMax+chunk)
	carry := 0      // bytes of an unfinished character at the front of buf
	pos := int64(0) // corpus offset of the next byte to read
	for pos < size {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("loader: tokenize %s: %w", c.name, err)
		}
		m := int(min(int64(chunk), size-pos))
		n, err := c.ReadAt(buf[carry:carry+m], pos)
		if n < m {
			if err == nil || err == io.EOF {
				err = fmt.Errorf("loader: tokenize %s: corpus ended at byte %d of %d: %w",
					c.name, pos+int64(n), size, io.ErrUnexpectedEOF)
			}
			return err
		}
		base := pos - int64(carry) // corpus offset of buf[0]
		pos += int64(m)
		data := buf[:carry+m]
		done, err := tz.scan(data, base, pos < size)
		if err != nil {
			return err
		}
		carry = copy(buf, data[done:])
		if tz.onRead != nil {
			tz.onRead(pos, size)
		}
	}
	return nil
}

// scan tokenizes data, which starts at corpus offset base, and returns how
// many bytes it consumed: all of them, or all but a character cut by the
// end of data when more of the corpus follows.
func (tz *tokenizer) scan(data []byte, base int64, more bool) (int, error) {
	const mask = 1<<textIndexShift - 1
	i := 0
	for i < len(data) {
		if b := data[i]; b < utf8.RuneSelf {
			if tz.tokens&mask == 0 {
				tz.index = append(tz.index, base+int64(i))
			}
			tz.tokens++
			if !tz.okASCII[b] {
				return i, tz.corpus.dataError(base+int64(i), notInVocab(rune(b)))
			}
			if tz.mapASCII[b] {
				tz.mapped++
			}
			tz.seenASCII[b] = true
			i++
			continue
		}
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			if more && !utf8.FullRune(data[i:]) {
				break // the rest of the character is in the next chunk
			}
			return i, tz.corpus.dataError(base+int64(i), reasonInvalidUTF8)
		}
		if tz.tokens&mask == 0 {
			tz.index = append(tz.index, base+int64(i))
		}
		tz.tokens++
		if err := tz.see(r, base+int64(i)); err != nil {
			return i, err
		}
		i += n
	}
	return i, nil
}

// see records the non-ASCII character r at corpus offset off: checks it
// against the given vocabulary, or adds it to the characters met.
func (tz *tokenizer) see(r rune, off int64) error {
	switch {
	case tz.given != nil:
		if _, ok := tz.given.ID(r); !ok {
			if tz.unknown < 0 {
				return tz.corpus.dataError(off, notInVocab(r))
			}
			tz.mapped++
		}
	case r < vocabDenseLimit:
		if tz.seenBMP == nil {
			tz.seenBMP = make([]uint64, vocabDenseLimit/64)
		}
		tz.seenBMP[r>>6] |= 1 << (r & 63)
	default:
		if tz.seenAstral == nil {
			tz.seenAstral = make(map[rune]bool)
		}
		tz.seenAstral[r] = true
	}
	return nil
}

// vocabulary is the given vocabulary, or the characters met in increasing
// code point order.
func (tz *tokenizer) vocabulary() *Vocab {
	if tz.given != nil {
		return tz.given
	}
	var runes []rune
	for b, seen := range tz.seenASCII {
		if seen {
			runes = append(runes, rune(b))
		}
	}
	for w, bits := range tz.seenBMP {
		for b := 0; bits != 0; b, bits = b+1, bits>>1 {
			if bits&1 != 0 {
				runes = append(runes, rune(w*64+b))
			}
		}
	}
	astral := make([]rune, 0, len(tz.seenAstral))
	for r := range tz.seenAstral {
		astral = append(astral, r)
	}
	slices.Sort(astral)
	return newVocabRunes(append(runes, astral...))
}

// newTextSource makes the shared source of a corpus Tokenize read: tokens
// characters, index the offset of every 1<<textIndexShift-th (dropped when
// every character is one byte).
func newTextSource(c *Corpus, vocab *Vocab, unknown int32, tokens int64, index []int64, readChunk int) *textSource {
	size := c.Size()
	s := &textSource{
		corpus:        c,
		vocab:         vocab,
		unknown:       unknown,
		tokens:        tokens,
		size:          size,
		ascii:         tokens == size,
		bytesPerToken: float64(size) / float64(tokens),
		readChunk:     readChunk,
	}
	for b := range s.byteIDs {
		s.byteIDs[b] = -1
		if b < utf8.RuneSelf {
			s.byteIDs[b] = s.runeID(rune(b))
		}
	}
	if !s.ascii {
		s.index = append([]int64(nil), index...) // drop append's spare capacity
	}
	return s
}

// dataError returns a DataError for the byte at corpus offset off.
func (c *Corpus) dataError(off int64, reason string) *DataError {
	name, fileOff := c.Where(off)
	return &DataError{Name: name, Offset: fileOff, CorpusOffset: off, Reason: reason}
}

// runeID returns the id of r, the unknown id for a character outside the
// vocabulary, or -1 when there is none.
func (s *textSource) runeID(r rune) int32 {
	if id, ok := s.vocab.ID(r); ok {
		return id
	}
	return s.unknown
}

// Len returns the number of tokens (characters) of t.
func (t *Text) Len() int64 { return t.end - t.start }

// Mapped is how many characters of the whole tokenized corpus were outside
// the given vocabulary and became TokenizeConfig.Unknown (0 without
// Unknown, where such a character is an error). Slices and splits of the
// text report the corpus's count.
func (t *Text) Mapped() int64 { return t.src.mapped }

// Vocab returns the vocabulary of t's ids.
func (t *Text) Vocab() *Vocab {
	if t.src == nil {
		return nil
	}
	return t.src.vocab
}

// BytesRead returns the corpus bytes Read has read so far, summed over all
// Texts sliced or split from the same Tokenize result. Tokenize's own pass
// is not counted.
func (t *Text) BytesRead() int64 {
	if t.src == nil {
		return 0
	}
	return t.src.bytesRead.Load()
}

// Slice returns tokens [start, end) of t as a Text sharing t's index and
// BytesRead counter. It panics unless 0 <= start <= end <= t.Len().
func (t *Text) Slice(start, end int64) *Text {
	if start < 0 || end < start || end > t.Len() {
		panic(fmt.Sprintf("loader: Text.Slice: range [%d, %d) outside a text of %d tokens", start, end, t.Len()))
	}
	return &Text{src: t.src, start: t.start + start, end: t.start + end}
}

// Split returns t cut in two: val is the last floor(t.Len()*valFrac) tokens
// and train the ones before. valFrac must be in [0, 1); val is empty when
// valFrac is 0 or t too short to give it a token.
func (t *Text) Split(valFrac float64) (train, val *Text, err error) {
	if !(valFrac >= 0 && valFrac < 1) {
		return nil, nil, fmt.Errorf("loader: Text.Split: validation fraction %v outside [0, 1)", valFrac)
	}
	n := t.Len()
	nVal := int64(math.Floor(float64(n) * valFrac))
	nVal = min(max(nVal, 0), n)
	return t.Slice(0, n-nVal), t.Slice(n-nVal, n), nil
}

// Read decodes tokens [start, start+len(dst)) of t into dst. A range outside
// [0, t.Len()] is an error, and so is a corpus that fails to read or no
// longer holds what Tokenize saw (a *DataError). Read is safe for
// concurrent use; each call reads from the nearest indexed token at or
// before start, at most 1023 tokens early, so it costs about
// len(dst)+512 characters of decoding on average.
func (t *Text) Read(start int64, dst []int32) error {
	n := t.Len()
	if start < 0 || start > n || int64(len(dst)) > n-start {
		return fmt.Errorf("loader: Text.Read: tokens [%d, %d) outside a text of %d tokens",
			start, start+int64(len(dst)), n)
	}
	if len(dst) == 0 {
		return nil
	}
	if t.src.cycle {
		v := int64(t.src.vocab.Len())
		for i := range dst {
			dst[i] = int32((t.start + start + int64(i)) % v)
		}
		return nil
	}
	if t.src.ascii {
		return t.src.readASCII(t.start+start, dst)
	}
	return t.src.readRunes(t.start+start, dst)
}

// readASCII reads tokens of an all-ASCII corpus, where token i is byte i.
func (s *textSource) readASCII(off int64, dst []int32) error {
	bp := textBufPool.Get().(*[]byte)
	defer textBufPool.Put(bp)
	buf := (*bp)[:s.readChunk]
	for len(dst) > 0 {
		m := min(len(dst), len(buf))
		n, err := s.corpus.ReadAt(buf[:m], off)
		s.bytesRead.Add(int64(n))
		if n < m {
			return s.readError(off+int64(n), err)
		}
		for i, b := range buf[:m] {
			id := s.byteIDs[b]
			if id < 0 {
				return s.changed(off+int64(i), buf[i:m])
			}
			dst[i] = id
		}
		dst = dst[m:]
		off += int64(m)
	}
	return nil
}

// readRunes reads tokens from token abs on, starting at the nearest indexed
// token and decoding forward.
func (s *textSource) readRunes(abs int64, dst []int32) error {
	k := abs >> textIndexShift
	pos := s.index[k]               // corpus offset of the next byte to read
	skip := abs - k<<textIndexShift // tokens to decode and drop first
	bp := textBufPool.Get().(*[]byte)
	defer textBufPool.Put(bp)
	buf := (*bp)[:s.readChunk]
	n, i, out := 0, 0, 0 // buf[i:n] is read but not yet decoded
	for {
		for out < len(dst) && i < n {
			if b := buf[i]; b < utf8.RuneSelf {
				i++
				if skip > 0 {
					skip--
					continue
				}
				id := s.byteIDs[b]
				if id < 0 {
					return s.changed(pos-int64(n-i+1), buf[i-1:n])
				}
				dst[out] = id
				out++
				continue
			}
			r, size := utf8.DecodeRune(buf[i:n])
			if r == utf8.RuneError && size == 1 {
				if utf8.FullRune(buf[i:n]) || pos >= s.size {
					return s.changed(pos-int64(n-i), buf[i:n])
				}
				break // the rest of the character is not read yet
			}
			i += size
			if skip > 0 {
				skip--
				continue
			}
			id := s.runeID(r)
			if id < 0 {
				return s.changed(pos-int64(n-i+size), buf[i-size:n])
			}
			dst[out] = id
			out++
		}
		if out == len(dst) {
			return nil
		}
		n = copy(buf, buf[i:n])
		i = 0
		// Read about what the tokens still wanted take on average, so that
		// short reads do not fetch a whole buffer.
		want := int64(float64(skip+int64(len(dst)-out))*s.bytesPerToken*1.125) + utf8.UTFMax
		want = min(want, int64(len(buf)-n), s.size-pos)
		if want <= 0 {
			return s.readError(pos, io.EOF)
		}
		got, err := s.corpus.ReadAt(buf[n:n+int(want)], pos)
		s.bytesRead.Add(int64(got))
		if int64(got) < want {
			return s.readError(pos+int64(got), err)
		}
		n += got
		pos += want
	}
}

// readError is the error of a read of the corpus that stopped at corpus
// offset off with err.
func (s *textSource) readError(off int64, err error) error {
	if err == nil || err == io.EOF {
		return fmt.Errorf("loader: read %s: corpus ended at byte %d of %d: %w",
			s.corpus.name, off, s.size, io.ErrUnexpectedEOF)
	}
	return err
}

// changed is the error for bytes p at corpus offset off that Tokenize
// accepted but Read cannot map: the corpus changed under the Text.
func (s *textSource) changed(off int64, p []byte) error {
	r, size := utf8.DecodeRune(p)
	if r == utf8.RuneError && size <= 1 {
		return s.corpus.dataError(off, reasonInvalidUTF8+reasonChanged)
	}
	return s.corpus.dataError(off, notInVocab(r)+reasonChanged)
}
