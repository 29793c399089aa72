// Package stall is, for gocurrent's tests, data that stops coming: a
// Reader serves its bytes through io.ReaderAt until Stall (or StallFrom an
// offset), after which every read (of the bytes from that offset) blocks
// until Release, as a read of a pipe whose writer went quiet or of a
// stalled network filesystem does. Tests of cancellation and Close use it
// to show that nothing waits on such a read.
package stall

import (
	"bytes"
	"math"
	"sync"
	"sync/atomic"
)

// Reader is an io.ReaderAt over a byte slice whose reads can be made to
// block. It is safe for concurrent use.
type Reader struct {
	data     *bytes.Reader
	from     atomic.Int64 // reads reaching this offset block; MaxInt64: none
	blocked  chan struct{}
	released chan struct{}
	once     sync.Once
}

// New returns a Reader of data, not stalled.
func New(data []byte) *Reader {
	r := &Reader{data: bytes.NewReader(data), blocked: make(chan struct{}, 1), released: make(chan struct{})}
	r.from.Store(math.MaxInt64)
	return r
}

// Size is the number of bytes.
func (r *Reader) Size() int64 { return r.data.Size() }

// Stall makes every later read block until Release.
func (r *Reader) Stall() { r.StallFrom(0) }

// StallFrom makes every later read of a byte at off or past it block
// until Release.
func (r *Reader) StallFrom(off int64) { r.from.Store(off) }

// Blocked receives once a read has blocked since Stall.
func (r *Reader) Blocked() <-chan struct{} { return r.blocked }

// Release ends the reads blocked and the stall: every read is served
// after it. It may be called more than once.
func (r *Reader) Release() {
	r.once.Do(func() {
		r.from.Store(math.MaxInt64)
		close(r.released)
	})
}

// ReadAt reads as bytes.Reader does; a read of stalled bytes only once
// Release came.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if len(p) > 0 && off+int64(len(p)) > r.from.Load() {
		select {
		case r.blocked <- struct{}{}:
		default:
		}
		<-r.released
	}
	return r.data.ReadAt(p, off)
}
