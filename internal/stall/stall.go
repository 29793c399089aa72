// Package stall is, for gocurrent's tests, data that stops coming: a
// Reader serves its bytes through io.ReaderAt until Stall, after which
// every read blocks until Release, as a read of a pipe whose writer went
// quiet or of a stalled network filesystem does. Tests of cancellation and
// Close use it to show that nothing waits on such a read.
package stall

import (
	"bytes"
	"sync"
	"sync/atomic"
)

// Reader is an io.ReaderAt over a byte slice whose reads can be made to
// block. It is safe for concurrent use.
type Reader struct {
	data     *bytes.Reader
	stalled  atomic.Bool
	blocked  chan struct{}
	released chan struct{}
	once     sync.Once
}

// New returns a Reader of data, not stalled.
func New(data []byte) *Reader {
	return &Reader{data: bytes.NewReader(data), blocked: make(chan struct{}, 1), released: make(chan struct{})}
}

// Size is the number of bytes.
func (r *Reader) Size() int64 { return r.data.Size() }

// Stall makes every later read block until Release.
func (r *Reader) Stall() { r.stalled.Store(true) }

// Blocked receives once a read has blocked since Stall.
func (r *Reader) Blocked() <-chan struct{} { return r.blocked }

// Release ends the reads blocked and the stall: every read is served
// after it. It may be called more than once.
func (r *Reader) Release() {
	r.once.Do(func() {
		r.stalled.Store(false)
		close(r.released)
	})
}

// ReadAt reads as bytes.Reader does, after Stall only once Release came.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if r.stalled.Load() {
		select {
		case r.blocked <- struct{}{}:
		default:
		}
		<-r.released
	}
	return r.data.ReadAt(p, off)
}
