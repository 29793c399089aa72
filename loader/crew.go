package loader

import "sync"

// crew counts the goroutines of an iteration so that its end can wait for
// them, all but those blocked in a read of the data: a read that never
// returns (a reader waiting for data that does not come, a stalled network
// filesystem) must not hold a cancelled or closed iteration, and with it
// the training run that consumes it.
//
// A goroutine reads the data into memory of its own, between read and
// resume. Once the iteration has ended, resume returns false and the
// goroutine returns at once: it touches nothing of the loader's ring,
// which may have been freed or be in use by a later iteration, so it is
// left behind only as long as its read blocks.
type crew struct {
	mu      sync.Mutex
	changed sync.Cond // signalled when a goroutine ends or begins a read
	alive   int       // goroutines started and not done
	reading int       // of them, in a read of the data
	ended   bool
}

// start counts n goroutines about to start; each calls done when it
// returns.
func (c *crew) start(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changed.L = &c.mu
	c.alive += n
}

func (c *crew) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alive--
	c.changed.Broadcast()
}

// read marks the start of a read of the data.
func (c *crew) read() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading++
	c.changed.Broadcast()
}

// resume marks the end of a read; false says the iteration has ended and
// the goroutine must return without touching the ring.
func (c *crew) resume() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading--
	return !c.ended
}

// end waits until every goroutine has returned or is in a read, and makes
// every resume after it return false. The caller has stopped the
// iteration (cancelled its context) first, so the goroutines not reading
// are on their way out.
func (c *crew) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	for c.alive > c.reading {
		c.changed.Wait()
	}
}
