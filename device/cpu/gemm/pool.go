package gemm

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// workspace holds the buffers one goroutine needs to compute one part of a
// product: the packed A block, the packed B block (or the padded rows of
// the dot path) and a tile for edges. Workspaces are reused through spare;
// they only grow, so steady-state products allocate nothing.
type workspace struct {
	a, b []float32
	tile [mr * nr]float32
}

// grow makes ws.a and ws.b hold at least aSize and bSize values.
func (ws *workspace) grow(aSize, bSize int) {
	if len(ws.a) < aSize {
		ws.a = make([]float32, aSize)
	}
	if len(ws.b) < bSize {
		ws.b = make([]float32, bSize)
	}
}

// call is one product split in parts. The caller and the workers it
// recruits claim parts with next until none is left and count finished
// parts in done; refs counts the goroutines holding c (the caller and each
// recruited worker, who may arrive after all parts are claimed), and the
// last to let go returns c to spare.
type call struct {
	p      problem
	byRows bool // parts are row ranges of C (else column ranges)
	size   int  // m or n, the dimension split
	unit   int  // part bounds are multiples of unit
	parts  int
	next   atomic.Int64
	done   atomic.Int64
	refs   atomic.Int32

	// The caller blocks on finished (buffered, 1) after spinning for
	// spinWait; waiting tells the goroutine finishing the last part to
	// send. Swapping waiting to false decides who consumes the token, so
	// none is left over for the next product.
	waiting  atomic.Bool
	finished chan struct{}
}

// bounds returns the range of rows or columns of part i: parts of nearly
// equal size, whole multiples of unit except at the end.
func (c *call) bounds(i int) (lo, hi int) {
	units := (c.size + c.unit - 1) / c.unit
	lo = i * units / c.parts * c.unit
	hi = min((i+1)*units/c.parts*c.unit, c.size)
	return lo, hi
}

// work computes parts of c until none is left.
func (c *call) work() {
	var ws *workspace
	for {
		i := int(c.next.Add(1) - 1)
		if i >= c.parts {
			break
		}
		if ws == nil {
			ws = spare.workspace()
		}
		lo, hi := c.bounds(i)
		q := c.p.sub(c.byRows, lo, hi)
		ws.compute(&q)
		if int(c.done.Add(1)) == c.parts && c.waiting.Swap(false) {
			c.finished <- struct{}{}
		}
	}
	if ws != nil {
		spare.putWorkspace(ws)
	}
}

// wait returns when every part of c is done: it spins (yielding to other
// goroutines) for spinWait, since parts finish at about the same time, then
// blocks.
func (c *call) wait() {
	start := time.Now()
	for c.done.Load() < int64(c.parts) {
		if time.Since(start) > spinWait {
			c.waiting.Store(true)
			if c.done.Load() < int64(c.parts) || !c.waiting.Swap(false) {
				<-c.finished
			}
			return
		}
		runtime.Gosched()
	}
}

func (c *call) release() {
	if c.refs.Add(-1) == 0 {
		spare.putCall(c)
	}
}

// spare holds the workspaces and calls not in use. A plain free list rather
// than a sync.Pool: a sync.Pool is emptied by the garbage collector, and
// refilling it would reallocate megabytes of packing buffers after every
// other collection. The list holds at most as many of each as there were
// goroutines computing at once.
var spare spareList

type spareList struct {
	mu         sync.Mutex
	workspaces []*workspace
	calls      []*call
}

func (s *spareList) workspace() *workspace {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.workspaces); n > 0 {
		ws := s.workspaces[n-1]
		s.workspaces = s.workspaces[:n-1]
		return ws
	}
	return new(workspace)
}

func (s *spareList) putWorkspace(ws *workspace) {
	s.mu.Lock()
	s.workspaces = append(s.workspaces, ws)
	s.mu.Unlock()
}

func (s *spareList) call() *call {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.calls); n > 0 {
		c := s.calls[n-1]
		s.calls = s.calls[:n-1]
		return c
	}
	return &call{finished: make(chan struct{}, 1)}
}

func (s *spareList) putCall(c *call) {
	c.p = problem{} // drop the caller's slices
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// Handing work to a parked goroutine is slow on the KVM guests this was
// tuned on: in a two-goroutine test, a goroutine woken by a channel send
// while the sender computed for 100 µs started after a median of 100 µs
// (the execution trace showed no idle P taking it until the sender
// blocked), where two C threads hand off in 16 µs. A recurrent-step
// product takes 70 µs. So workers poll a mailbox for spinWait after each
// part before they park, and callers poll as long before they block:
// back-to-back products, the normal case in training, hand parts over in
// well under a microsecond (the recurrent step went from 110 to 215
// GFLOP/s). While polling, a worker yields to any other runnable goroutine.
const spinWait = 200 * time.Microsecond

// worker is one goroutine of the pool. Its state says whether it polls its
// mailbox (idle), sleeps in a receive on wake (parked), or was claimed by a
// caller who is about to (or did) put a call in mail.
type worker struct {
	state atomic.Int32
	mail  atomic.Pointer[call]
	wake  chan struct{} // buffered, 1
}

const (
	idle int32 = iota
	parked
	claimed
)

// workers is the package's pool of goroutines that help the callers of
// large products: GOMAXPROCS(0)-1 of them, started by the first product
// (the caller is the last helper). They live as long as the process, parked
// in a channel receive when there is nothing to do.
var workers struct {
	once sync.Once
	all  []*worker
}

func startWorkers() {
	for range runtime.GOMAXPROCS(0) - 1 {
		w := &worker{wake: make(chan struct{}, 1)}
		workers.all = append(workers.all, w)
		go w.loop()
	}
}

func (w *worker) loop() {
	since := time.Now()
	for {
		if c := w.mail.Swap(nil); c != nil {
			c.work()
			c.release()
			w.state.Store(idle)
			since = time.Now()
			continue
		}
		if w.state.Load() == idle && time.Since(since) > spinWait && w.state.CompareAndSwap(idle, parked) {
			<-w.wake // the claimer put a call in mail before sending
			continue
		}
		runtime.Gosched()
	}
}

// recruit hands c to w if w is not busy with another product.
func (w *worker) recruit(c *call) bool {
	switch {
	case w.state.CompareAndSwap(idle, claimed):
		c.refs.Add(1)
		w.mail.Store(c)
	case w.state.CompareAndSwap(parked, claimed):
		c.refs.Add(1)
		w.mail.Store(c)
		w.wake <- struct{}{}
	default:
		return false
	}
	return true
}

// run computes p, in parts on the worker goroutines when it is large
// enough.
func run(p problem) {
	workers.once.Do(startWorkers)
	parts, byRows, unit := split(&p, len(workers.all)+1)
	if parts <= 1 || len(workers.all) == 0 {
		ws := spare.workspace()
		ws.compute(&p)
		spare.putWorkspace(ws)
		return
	}
	c := spare.call()
	c.p = p
	c.byRows, c.unit, c.parts = byRows, unit, parts
	c.size = p.n
	if byRows {
		c.size = p.m
	}
	c.next.Store(0)
	c.done.Store(0)
	c.refs.Store(1)
	// Recruit idle workers first (they start at once), then parked ones.
	// Workers busy with another caller's product leave their share to this
	// goroutine: parts are claimed, not assigned.
	helpers := 0
	for _, want := range [...]int32{idle, parked} {
		for _, w := range workers.all {
			if helpers < parts-1 && w.state.Load() == want && w.recruit(c) {
				helpers++
			}
		}
	}
	c.work()
	c.wait()
	c.release()
}

// split decides how p is cut in parts for up to threads goroutines: the
// number of parts, whether they are row ranges of C (else column ranges),
// and the multiple their bounds are rounded to (whole register tiles).
//
// Every part reads, and the packed method repacks, the operand it shares
// with the others (rows of C share B, columns share A), so products are
// split along the dimension whose shared operand is smaller.
func split(p *problem, threads int) (parts int, byRows bool, unit int) {
	dot := p.method() == dots
	if dot {
		threads *= dotPartsPerThread
	}
	work := 2 * float64(p.m) * float64(p.n) * float64(p.k)
	if dot {
		// The dot path reads all of B once per block of rows of A
		// (dotPasses): at few rows that, not the arithmetic, is its cost.
		work += dotReadFlops * float64(p.n) * float64(p.k) * float64(dotPasses(p.m))
	}
	parts = min(threads, int(work/minPartFlops))
	if parts <= 1 {
		return 1, false, 1
	}
	byRows = p.n <= p.m
	size, unit := p.n, nr
	if byRows {
		size, unit = p.m, mr
	} else if dot {
		unit = 8 // dot1x8's width; a multiple of dot3x4's
	}
	parts = min(parts, (size+unit-1)/unit)
	return parts, byRows, unit
}
