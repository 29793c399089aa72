package cpu

import "sync"

// pool is the device's team of worker goroutines for the pointwise
// kernels. A stream's worker splits a kernel's rows into parts, hands all
// but one to the pool and runs the last itself. Tasks are plain values sent
// on a channel and the part functions are top-level functions, so running a
// kernel in parallel allocates nothing.
type pool struct {
	threads int
	tasks   chan task
	stopped sync.WaitGroup
}

type task struct {
	fn           partFunc
	c            *cmd
	part, lo, hi int
	wg           *sync.WaitGroup
}

// partFunc runs part number part, rows (or columns) [lo, hi), of command c.
// Parts that reduce write their partial result at c.partial[part].
type partFunc func(c *cmd, part, lo, hi int)

// maxThreads bounds the parts of one kernel (and the size of the partial
// results a command carries).
const maxThreads = 64

func newPool(threads int) *pool {
	p := &pool{threads: threads, tasks: make(chan task, threads)}
	for range threads - 1 {
		p.stopped.Add(1)
		go func() {
			defer p.stopped.Done()
			for {
				t, ok := p.next()
				if !ok {
					return
				}
				t.fn(t.c, t.part, t.lo, t.hi)
				t.wg.Done()
			}
		}()
	}
	return p
}

// next returns the next task, polling for a while before it parks (see
// spin); false when the pool is stopped.
func (p *pool) next() (t task, ok bool) {
	got := spin(func() bool {
		select {
		case t, ok = <-p.tasks:
			return true
		default:
			return false
		}
	})
	if !got {
		t, ok = <-p.tasks
	}
	return t, ok
}

func (p *pool) stop() {
	close(p.tasks)
	p.stopped.Wait()
}

// minWork is the least work, in elements touched, worth a part of its own:
// below it the hand-off to another goroutine (a few microseconds) costs more
// than it saves.
const minWork = 8 << 10

// split runs fn over [0, n) in up to p.threads parts of at least minWork
// elements, where one unit of n touches perUnit elements, and returns when
// all parts are done. wg belongs to the calling stream.
// The number of parts is also left in c.parts.
func (p *pool) split(wg *sync.WaitGroup, c *cmd, n, perUnit int, fn partFunc) {
	parts := max(min(p.threads, n*max(perUnit, 1)/minWork, n), 1)
	c.parts = parts
	if parts == 1 {
		fn(c, 0, 0, n)
		return
	}
	wg.Add(parts - 1)
	for i := range parts - 1 {
		p.tasks <- task{fn: fn, c: c, part: i, lo: i * n / parts, hi: (i + 1) * n / parts, wg: wg}
	}
	fn(c, parts-1, (parts-1)*n/parts, n)
	wg.Wait()
}
