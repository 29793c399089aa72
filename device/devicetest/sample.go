package devicetest

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

// refSample is device.Sample's class for one row x (values of the kernel's
// DType) and uniform u, written from the documented procedure. It shares
// SampleExp with the devices (the procedure names it) and nothing else:
// the candidates come from a stable sort, not a radix select.
func refSample(x []float64, temperature float64, topK int, u float64) int32 {
	c := len(x)
	first := -1
	for i, v := range x {
		if !math.IsNaN(v) && (first < 0 || v > x[first]) {
			first = i
		}
	}
	if first < 0 {
		return 0
	}
	if temperature == 0 {
		return int32(first)
	}
	order := make([]int, c)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		xa, xb := x[a], x[b]
		switch {
		case math.IsNaN(xa) && math.IsNaN(xb):
			return 0
		case math.IsNaN(xa):
			return 1
		case math.IsNaN(xb):
			return -1
		case xa > xb:
			return -1
		case xa < xb:
			return 1
		}
		return 0 // equal, -0 and +0 included: index order
	})
	n := topK
	if n == 0 || n > c {
		n = c
	}
	m := x[first]
	w := make([]float64, c)
	for _, i := range order[:n] {
		switch {
		case math.IsNaN(x[i]):
		case math.IsInf(m, 0):
			if x[i] == m {
				w[i] = 1
			}
		default:
			w[i] = device.SampleExp((x[i] - m) / temperature)
		}
	}
	size := (c + device.SampleChunks - 1) / device.SampleChunks
	chunk := func(j int) []float64 { return w[min(j*size, c):min(j*size+size, c)] }
	sums := make([]float64, device.SampleChunks)
	var total float64
	for j := range sums {
		for _, v := range chunk(j) {
			sums[j] += v
		}
		total += sums[j]
	}
	t := u * total
	var p float64
	for j, s := range sums {
		if t < p+s {
			run, last := p, -1
			for k, v := range chunk(j) {
				if v > 0 {
					last = j*size + k
				}
				if run += v; t < run {
					return int32(j*size + k)
				}
			}
			return int32(last)
		}
		p += s
	}
	for i := c - 1; i >= 0; i-- {
		if w[i] > 0 {
			return int32(i)
		}
	}
	return 0
}

// refSampleRows is refSample over n rows, row i drawing with counter
// counter+i.
func refSampleRows(n, classes int, logits []float64, temperature float64, topK int, seed, counter uint64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(refSample(logits[i*classes:(i+1)*classes], temperature, topK, device.SampleUniform(seed, counter+uint64(i))))
	}
	return out
}

func testSample(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		type sampleCase struct {
			name       string
			n, classes int
			temp       float64
			topK       int
			logits     func(n int) []float64 // nil: uniform in [-3, 3)
			counter    uint64
			counterAt  uint64 // > 0: passed in device memory (CounterAt)
			tokens     string // "" none, "own", "ids": aliasing IDs
		}
		// Ties: a few distinct values, so equal logits share every rank
		// boundary, top-k's included.
		ties := func(n int) []float64 {
			x := make([]float64, n)
			for i := range x {
				x[i] = float64(e.rng.IntN(4)) - 1.5
			}
			return x
		}
		special := func(n int) []float64 {
			x := e.uniform(n, -3, 3)
			for i := range x {
				switch e.rng.IntN(8) {
				case 0:
					x[i] = math.NaN()
				case 1:
					x[i] = math.Inf(-1)
				case 2:
					x[i] = math.Copysign(0, -1)
				case 3:
					x[i] = 0
				}
			}
			return x
		}
		withInf := func(n int) []float64 {
			x := special(n)
			for i := 0; i < n; i += 7 {
				x[i] = math.Inf(1)
			}
			return x
		}
		fill := func(v float64) func(int) []float64 { return func(n int) []float64 { return constant(n, v) } }
		var cs []sampleCase
		// The char-RNN's 65 classes, one class, and sizes around the 256
		// chunks: one class per chunk, empty chunks, chunks of 2 and 12.
		// The quick run (internal/testfull) takes the first four sizes
		// and the first three temperatures.
		for _, classes := range testfull.Cases([]int{1, 65, 257, 3000, 2, 256, 300}, 4) {
			for _, temp := range testfull.Cases([]float64{0, 1, 1e-3, 0.5}, 3) {
				seen := map[int]bool{}
				for _, topK := range []int{0, 1, 5, classes - 1, classes, classes + 7} {
					if seen[topK] {
						continue
					}
					seen[topK] = true
					cs = append(cs, sampleCase{name: fmt.Sprintf("C=%d/T=%v/TopK=%d", classes, temp, topK), n: 7, classes: classes, temp: temp, topK: topK, tokens: "own"})
				}
			}
		}
		for _, topK := range []int{0, 1, 2, 3, 7, 100, 129, 200} {
			cs = append(cs, sampleCase{name: fmt.Sprintf("Ties/TopK=%d", topK), n: 40, classes: 200, temp: 0.7, topK: topK, logits: ties, tokens: "own"})
		}
		cs = append(cs,
			sampleCase{name: "Ties/T=0", n: 40, classes: 200, temp: 0, logits: ties, tokens: "own"},
			sampleCase{name: "Special", n: 30, classes: 300, temp: 1, logits: special, tokens: "own"},
			sampleCase{name: "Special/TopK=50", n: 30, classes: 300, temp: 1, topK: 50, logits: special},
			sampleCase{name: "Special/TopK=290", n: 30, classes: 300, temp: 2, topK: 290, logits: special},
			sampleCase{name: "Special/T=0", n: 30, classes: 300, logits: special},
			sampleCase{name: "PlusInf", n: 10, classes: 70, temp: 1, logits: withInf, tokens: "own"},
			sampleCase{name: "PlusInf/TopK=3", n: 10, classes: 70, temp: 1, topK: 3, logits: withInf},
			sampleCase{name: "AllNaN", n: 3, classes: 9, temp: 1, logits: fill(math.NaN()), tokens: "own"},
			sampleCase{name: "AllNaN/T=0", n: 3, classes: 9, logits: fill(math.NaN())},
			sampleCase{name: "AllMinusInf", n: 5, classes: 9, temp: 1, logits: fill(math.Inf(-1))},
			sampleCase{name: "AllMinusInf/TopK=4", n: 5, classes: 600, temp: 1, topK: 4, logits: fill(math.Inf(-1))},
			sampleCase{name: "Equal/TopK=3", n: 50, classes: 10, temp: 1, topK: 3, logits: fill(0.25)},
			sampleCase{name: "LargeLogits", n: 20, classes: 65, temp: 1, logits: func(n int) []float64 {
				x := e.uniform(n, -1, 1)
				for i := range x {
					x[i] = e.r(3e37 * x[i]) // differences beyond float32, fine in float64
				}
				return x
			}},
			// Many rows: many GPU blocks, each row its own counter.
			sampleCase{name: "ManyRows", n: 1000, classes: 65, temp: 0.8, topK: 10, tokens: "own"},
			// The counters wrap past 2^64 within the call.
			sampleCase{name: "CounterWraps", n: 8, classes: 65, temp: 1, counter: math.MaxUint64 - 3, tokens: "ids"},
			sampleCase{name: "TokensAreIDs", n: 8, classes: 65, temp: 1, counter: 12345, tokens: "ids"},
			// A count in device memory, both of its words used, added to
			// Counter (wrapping past 2^64 in the second case).
			sampleCase{name: "CounterAt", n: 8, classes: 65, temp: 1, counter: 5, counterAt: 1<<33 + 7},
			sampleCase{name: "CounterAtWraps", n: 8, classes: 65, temp: 1, topK: 4, counter: math.MaxUint64 - 1, counterAt: 3},
		)
		for _, c := range cs {
			e.run(c.name, func(e *env) {
				var logits []float64
				if c.logits == nil {
					logits = e.uniform(c.n*c.classes, -3, 3)
				} else {
					logits = c.logits(c.n * c.classes)
					for i := range logits {
						logits[i] = e.r(logits[i])
					}
				}
				seed := e.rng.Uint64()
				vL, vI := e.vec(logits), e.ids(constant32(c.n, -1)) // a row left unwritten shows
				a := device.Sample{DType: e.dt, N: c.n, Classes: c.classes, Logits: vL.buf, Temperature: c.temp, TopK: c.topK,
					Seed: seed, Counter: c.counter, IDs: vI.buf}
				var vT vec
				switch c.tokens {
				case "own":
					vT = e.ids(constant32(c.n, -1))
					a.Tokens = vT.buf
				case "ids":
					a.Tokens = vI.buf
				}
				if c.counterAt > 0 {
					a.CounterAt = e.ids([]int32{int32(uint32(c.counterAt)), int32(uint32(c.counterAt >> 32))}).buf.Slice(0, 8)
				}
				e.launch(a)
				want := refSampleRows(c.n, c.classes, logits, c.temp, c.topK, seed, c.counter+c.counterAt)
				checkExact(e.t, "IDs", e.get("IDs", vI), want)
				if c.tokens == "own" {
					checkExact(e.t, "Tokens", e.get("Tokens", vT), want)
				}
				// The logits are read, never written.
				checkExact(e.t, "Logits", e.get("Logits", vL), logits)
			})
		}
		for _, classes := range []int{65, 300} {
			e.run(fmt.Sprintf("Boundaries/C=%d", classes), func(e *env) { e.checkSampleBoundaries(classes) })
		}
		if e.dt == device.Float32 {
			// The DType changes only how the logits round, and the draws
			// are many: float32 alone.
			e.run("Distribution", func(e *env) { e.checkSampleDistribution() })
		}
	})
}

func constant32(n int, v int32) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

// checkSampleDistribution draws one row of logits many times (rows of one
// call, each with its own counter) and compares the classes' counts with
// softmax(logits/T) restricted to the top k, by Pearson's chi-square. The
// seed is fixed, so the statistic is too: the test fails only when the
// draws do not follow the distribution. The bounds are the 0.999
// quantiles of the chi-square distribution with classes − 1 degrees of
// freedom (scipy.stats.chi2.ppf(0.999, df): 20.515 for df 5, 13.816 for
// df 2): a correct sampler stays below them for 999 seeds in 1000, and
// the seed here is one of those (the statistics are logged).
func (e *env) checkSampleDistribution() {
	logits := []float64{0.5, -1, 1.25, 0, -0.4, 0.9} // probabilities 0.08 to 0.35 at T = 1
	const rows = 6000                                // at least 180 expected draws of every class
	for _, c := range []struct {
		temp  float64
		topK  int
		bound float64
	}{
		{1, 0, 20.515},   // 6 classes, df 5
		{1.7, 0, 20.515}, // a temperature flattens the distribution
		{0.8, 3, 13.816}, // the 3 largest (classes 2, 5, 0), df 2
	} {
		x := make([]float64, 0, rows*len(logits))
		for range rows {
			for _, v := range logits {
				x = append(x, e.r(v))
			}
		}
		vL, vI := e.vec(x), e.ids(make([]int32, rows))
		e.launch(device.Sample{DType: e.dt, N: rows, Classes: len(logits), Logits: vL.buf, Temperature: c.temp, TopK: c.topK,
			Seed: 2024, IDs: vI.buf})
		ids := e.get("IDs", vI)
		count := make([]float64, len(logits))
		for _, id := range ids {
			count[int(id)]++
		}
		p := refSoftmax(1, len(logits), x[:len(logits)], c.temp)
		if c.topK > 0 {
			keep := []int{2, 5, 0}
			var s float64
			for _, i := range keep {
				s += p[i]
			}
			q := make([]float64, len(p))
			for _, i := range keep {
				q[i] = p[i] / s
			}
			p = q
		}
		var chi2 float64
		for i, n := range count {
			want := p[i] * rows
			if want == 0 {
				if n != 0 {
					e.t.Errorf("T=%v, top %d: class %d, not a candidate, drawn %v times", c.temp, c.topK, i, n)
				}
				continue
			}
			chi2 += (n - want) * (n - want) / want
		}
		e.t.Logf("T=%v, top %d: counts %v, chi-square %.2f (bound %v)", c.temp, c.topK, count, chi2, c.bound)
		if chi2 > c.bound {
			e.t.Errorf("T=%v, top %d: counts %v against probabilities %v: chi-square %.2f, want at most %v", c.temp, c.topK, count, p, chi2, c.bound)
		}
	}
}

// checkSampleBoundaries draws at temperatures tuned so that the draw falls
// on a boundary between two classes to the last bit: for random logits,
// the two adjacent float64 temperatures between which the reference's
// class changes (bisection on the bits), each drawn once. A device that
// computes a weight, a sum or the target even one unit in the last place
// differently from the documented procedure (another exp, another order
// of addition, a fused multiply-add) draws the other class at one of the
// two, for a good share of the rows; random logits alone would need some
// 10^15 draws to meet such a boundary.
func (e *env) checkSampleBoundaries(classes int) {
	const rows = 24
	flips := 0
	for r := range rows {
		logits := e.uniform(classes, -3, 3)
		seed := e.rng.Uint64()
		u := device.SampleUniform(seed, 0)
		draw := func(temp float64) int32 { return refSample(logits, temp, 0, u) }
		lo, hi := 0.25, 4.0
		if draw(lo) == draw(hi) {
			continue // no boundary between them for this row's u
		}
		for math.Float64bits(hi)-math.Float64bits(lo) > 1 {
			mid := math.Float64frombits((math.Float64bits(lo) + math.Float64bits(hi)) / 2)
			if draw(mid) == draw(lo) {
				lo = mid
			} else {
				hi = mid
			}
		}
		flips++
		vL := e.vec(logits)
		for _, temp := range []float64{lo, hi} {
			vI := e.ids([]int32{-1})
			e.launch(device.Sample{DType: e.dt, N: 1, Classes: classes, Logits: vL.buf, Temperature: temp, Seed: seed, IDs: vI.buf})
			if got, want := e.get("IDs", vI)[0], float64(draw(temp)); got != want {
				e.t.Errorf("row %d at temperature %v (the boundary between classes %v and %v): drew %v, want %v",
					r, temp, draw(lo), draw(hi), got, want)
			}
		}
	}
	if flips < rows/2 {
		e.t.Fatalf("only %d of %d rows had a boundary between temperatures 0.25 and 4: the test checks too little", flips, rows)
	}
}
