package models

import (
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/checked"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/rnn"
)

// shareRecurrent is a share of r (rnn's LSTM.Share or GRU.Share).
func shareRecurrent(r recurrent) (recurrent, error) {
	switch r := r.(type) {
	case *rnn.LSTM:
		s, err := r.Share()
		if err != nil {
			return nil, err
		}
		return s, nil
	case *rnn.GRU:
		s, err := r.Share()
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("models: a recurrent stack of type %T, which has no Share", r)
}

// shareInto makes s, a new model's chain, of shares of c's layers:
// buffers of their own, c's parameters, and a share's guard. On error
// what it made is closed.
func (c *chain) shareInto(s *chain) error {
	s.model, s.shared = c.model, true
	var err error
	if s.emb, err = c.emb.Share(); err == nil {
		if s.rnn, err = shareRecurrent(c.rnn); err == nil {
			s.out, err = c.out.Share()
		}
	}
	if err != nil {
		return fmt.Errorf("models: %s.Share: %w", c.model, errors.Join(err, s.close()))
	}
	return nil
}

// hostInput is Predict's device copy of a batch collated on the host: its
// ids in one Int32 buffer, gathered in host first.
type hostInput struct {
	dev  scratch
	host []int32
}

// upload checks b (a batch of ids below vocab; with chars > 0, its words'
// characters below chars too) on the host and puts its ids on the device
// as the SeqBatch a model's ForwardBatch reads. The ids are checked here
// rather than by the kernels so that Predict meets no index out of range
// on the device: a device error is reported to whichever goroutine
// synchronises next, on a device that serves several.
func (in *hostInput) upload(d device.Device, op string, b loader.HostBatch, vocab, chars int) (loader.SeqBatch, error) {
	n, nOK := checked.Mul(b.Seq, b.Rows)
	charCount, charsOK := checked.Mul(b.WordLen, b.Real)
	bad := func(format string, args ...any) (loader.SeqBatch, error) {
		return loader.SeqBatch{}, fmt.Errorf("models: %s: "+format, append([]any{op}, args...)...)
	}
	switch {
	case !nOK || (chars > 0 && !charsOK):
		return bad("a batch of %d steps of %d rows (words of %d characters, %d real): the sizes overflow int: %w",
			b.Seq, b.Rows, b.WordLen, b.Real, device.ErrShape)
	case b.Seq < 1 || b.Rows < 1:
		return bad("a batch of %d steps and %d rows, want at least 1 of each: %w", b.Seq, b.Rows, device.ErrShape)
	case len(b.Tokens) != n:
		return bad("%d tokens for %d steps of %d rows, want %d: %w", len(b.Tokens), b.Seq, b.Rows, n, device.ErrShape)
	case b.Lengths != nil && len(b.Lengths) != b.Rows:
		return bad("%d lengths for %d rows, want one a row: %w", len(b.Lengths), b.Rows, device.ErrShape)
	}
	if err := idsBelow(op, "token", b.Tokens, vocab); err != nil {
		return loader.SeqBatch{}, err
	}
	size := n
	if chars > 0 {
		switch {
		case b.WordLen < 1 || b.Real < 1 || b.Real > n:
			return bad("words of %d characters at most, %d real tokens of %d positions: the batch carries no characters "+
				"(loader.CollateConfig.Chars): %w", b.WordLen, b.Real, n, device.ErrShape)
		case len(b.Chars) != charCount || len(b.CharLengths) != b.Real:
			return bad("%d characters and %d character lengths for %d words of up to %d characters, want %d and %d: %w",
				len(b.Chars), len(b.CharLengths), b.Real, b.WordLen, charCount, b.Real, device.ErrShape)
		case len(b.WordIndex) != n || len(b.WordPositions) != n:
			return bad("a word index of %d and positions of %d for %d positions: %w", len(b.WordIndex), len(b.WordPositions), n, device.ErrShape)
		}
		for _, c := range []struct {
			what  string
			ids   []int32
			below int
		}{{"character", b.Chars, chars}, {"word index", b.WordIndex, n}, {"word position", b.WordPositions, n}} {
			if err := idsBelow(op, c.what, c.ids, c.below); err != nil {
				return loader.SeqBatch{}, err
			}
		}
		size += len(b.Chars) + 2*n
	}
	buf, err := in.dev.get(d, device.Batches, device.Int32, size, false)
	if err != nil {
		return bad("%w", err)
	}
	in.host = append(append(append(append(in.host[:0], b.Tokens...), b.Chars...), b.WordIndex...), b.WordPositions...)
	if err := device.UploadSlice(d, buf, in.host[:size]); err != nil {
		return bad("%w", err)
	}
	sb := loader.SeqBatch{Tokens: buf.Elems(device.Int32, 0, n), Host: b}
	if chars > 0 {
		c := len(b.Chars)
		sb.Chars = buf.Elems(device.Int32, n, c)
		sb.WordIndex = buf.Elems(device.Int32, n+c, n)
		sb.WordPositions = buf.Elems(device.Int32, 2*n+c, n)
	}
	return sb, nil
}

// idsBelow checks that every id is in [0, below).
func idsBelow(op, what string, ids []int32, below int) error {
	for i, id := range ids {
		if id < 0 || int(id) >= below {
			return fmt.Errorf("models: %s: %s %d at position %d, want [0, %d): %w", op, what, id, i, below, device.ErrIndex)
		}
	}
	return nil
}

// logits downloads n logits of type dt as float64s.
func logits(d device.Device, dt device.DType, b device.Buffer, n int) ([]float64, error) {
	out := make([]float64, n)
	if dt == device.Float64 {
		return out, device.DownloadSlice(d, out, b)
	}
	f := make([]float32, n)
	if err := device.DownloadSlice(d, f, b); err != nil {
		return nil, err
	}
	for i, x := range f {
		out[i] = float64(x)
	}
	return out, nil
}
