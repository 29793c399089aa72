package gemm

import (
	"runtime"
	"sync"
	"sync/atomic"
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
// recruits claim parts with next until none is left; wg counts the
// recruited workers still at it.
type call struct {
	p      problem
	byRows bool // parts are row ranges of C (else column ranges)
	size   int  // m or n, the dimension split
	unit   int  // part bounds are multiples of unit
	parts  int
	next   atomic.Int64
	wg     sync.WaitGroup
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
	ws := spare.workspace()
	for {
		i := int(c.next.Add(1) - 1)
		if i >= c.parts {
			break
		}
		lo, hi := c.bounds(i)
		q := c.p.sub(c.byRows, lo, hi)
		ws.compute(&q)
	}
	spare.putWorkspace(ws)
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
	return new(call)
}

func (s *spareList) putCall(c *call) {
	c.p = problem{} // drop the caller's slices
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// workers is the package's pool of goroutines that help the caller of a
// large product. It is started on first use with GOMAXPROCS(0)-1 goroutines
// (the caller is the last helper) and lives as long as the process; the
// goroutines sleep in a channel receive between products.
var workers struct {
	once sync.Once
	n    int // goroutines computing one product: the workers and the caller
	work chan *call
}

func startWorkers() {
	workers.n = runtime.GOMAXPROCS(0)
	workers.work = make(chan *call)
	for range workers.n - 1 {
		go func() {
			for c := range workers.work {
				c.work()
				c.wg.Done()
			}
		}()
	}
}

// run computes p, in parts on the worker goroutines when it is large
// enough.
func run(p problem) {
	workers.once.Do(startWorkers)
	parts, byRows, unit := split(&p, workers.n)
	if parts <= 1 {
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
	// Recruit only idle workers: a send on the unbuffered channel succeeds
	// only when a worker waits in its receive. Workers busy with another
	// product leave their share to this goroutine instead of making it wait.
recruit:
	for range parts - 1 {
		c.wg.Add(1)
		select {
		case workers.work <- c:
		default:
			c.wg.Done()
			break recruit
		}
	}
	c.work()
	c.wg.Wait()
	spare.putCall(c)
}

// split decides how p is cut in parts for up to threads goroutines: the
// number of parts, whether they are row ranges of C (else column ranges),
// and the multiple their bounds are rounded to.
//
// Every part repacks the operand it shares with the others (rows of C
// share B, columns share A), so the packed method splits the dimension
// whose shared operand is smaller. The small-m methods split columns.
func split(p *problem, threads int) (parts int, byRows bool, unit int) {
	flops := 2 * float64(p.m) * float64(p.n) * float64(p.k)
	parts = min(threads, int(flops/minPartFlops))
	if parts <= 1 {
		return 1, false, 1
	}
	switch p.method() {
	case dots:
		unit = 8
	case directB:
		unit = nr
	default:
		byRows = p.n <= p.m
		unit = nr
		if byRows {
			unit = mr
		}
	}
	size := p.n
	if byRows {
		size = p.m
	}
	parts = min(parts, (size+unit-1)/unit)
	return parts, byRows, unit
}
