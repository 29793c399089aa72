package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gorgonia.org/tensor"
)

// gemmCase is one product to check. padA, padB, padC are added to the
// smallest legal leading dimension; the padding is NaN in A and B (a
// product that reads it is wrong everywhere) and must be left untouched
// in C.
type gemmCase struct {
	transA, transB   bool
	m, n, k          int
	alpha, beta      float32
	padA, padB, padC int
}

func (tc gemmCase) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s/m=%d,n=%d,k=%d/alpha=%g,beta=%g/pad=%d,%d,%d",
		t(tc.transA), t(tc.transB), tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.padA, tc.padB, tc.padC)
}

// matrix returns the backing slice of a rows×cols matrix with row stride
// ld, exactly as long as the matrix needs (so reading past the last row
// panics): values uniform in [-1, 1), padding NaN.
func matrix(rng *rand.Rand, rows, cols, ld int) []float32 {
	if rows == 0 || cols == 0 {
		return nil
	}
	s := make([]float32, (rows-1)*ld+cols)
	for i := range s {
		if i%ld < cols {
			s[i] = 2*rng.Float32() - 1
		} else {
			s[i] = float32(math.NaN())
		}
	}
	return s
}

// reference computes alpha·op(A)·op(B) + beta·C in float64 (C not read when
// beta == 0) and, per element, the magnitude sum
// |alpha|·Σ|a||b| + |beta|·|c| that bounds its rounding error.
func reference(tc gemmCase, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) (want, mag []float64) {
	// op(A) row-major and op(B) column-major, so both inner loops are
	// contiguous.
	opA := make([]float64, tc.m*tc.k)
	opB := make([]float64, tc.n*tc.k)
	for i := range tc.m {
		for p := range tc.k {
			if tc.transA {
				opA[i*tc.k+p] = float64(a[p*lda+i])
			} else {
				opA[i*tc.k+p] = float64(a[i*lda+p])
			}
		}
	}
	for j := range tc.n {
		for p := range tc.k {
			if tc.transB {
				opB[j*tc.k+p] = float64(b[j*ldb+p])
			} else {
				opB[j*tc.k+p] = float64(b[p*ldb+j])
			}
		}
	}
	want = make([]float64, tc.m*tc.n)
	mag = make([]float64, tc.m*tc.n)
	alpha, beta := float64(tc.alpha), float64(tc.beta)
	for i := range tc.m {
		ai := opA[i*tc.k : (i+1)*tc.k]
		for j := range tc.n {
			bj := opB[j*tc.k : (j+1)*tc.k]
			var s, sa float64
			for p, x := range ai {
				x *= bj[p]
				s += x
				sa += math.Abs(x)
			}
			w, wa := alpha*s, math.Abs(alpha)*sa
			if beta != 0 {
				cij := float64(c[i*ldc+j])
				w += beta * cij
				wa += math.Abs(beta * cij)
			}
			want[i*tc.n+j], mag[i*tc.n+j] = w, wa
		}
	}
	return want, mag
}

// check runs tc through Sgemm and compares with the float64 reference.
//
// Tolerance: a float32 sum of k products has error at most about
// k·u·Σ|a_p·b_p| (u = 2⁻²⁴, the unit roundoff; Higham, Accuracy and
// Stability of Numerical Algorithms, §3.1); scaling by alpha and adding
// beta·c add a few more roundings. We allow (k+4)·u times the magnitude sum,
// plus a tiny absolute term for results that cancel to zero.
func check(t *testing.T, rng *rand.Rand, tc gemmCase) {
	t.Helper()
	aRows, aCols := tc.m, tc.k
	if tc.transA {
		aRows, aCols = tc.k, tc.m
	}
	bRows, bCols := tc.k, tc.n
	if tc.transB {
		bRows, bCols = tc.n, tc.k
	}
	lda, ldb, ldc := max(1, aCols)+tc.padA, max(1, bCols)+tc.padB, tc.n+tc.padC
	a := matrix(rng, aRows, aCols, lda)
	b := matrix(rng, bRows, bCols, ldb)
	c := matrix(rng, tc.m, tc.n, ldc)
	if tc.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN()) // must not be read
		}
	}
	orig := append([]float32(nil), c...)
	want, mag := reference(tc, a, lda, b, ldb, c, ldc)

	Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)

	const u = 1.0 / (1 << 24)
	bad := 0
	for i := range c {
		row, col := i/ldc, i%ldc
		if col >= tc.n {
			if !sameBits(c[i], orig[i]) {
				t.Errorf("%v: C padding [%d,%d] changed: got %v, want %v", tc, row, col, c[i], orig[i])
				return
			}
			continue
		}
		w, tol := want[row*tc.n+col], float64(tc.k+4)*u*mag[row*tc.n+col]+1e-30
		if got := float64(c[i]); !(math.Abs(got-w) <= tol) {
			if bad++; bad <= 3 {
				t.Errorf("%v: C[%d,%d] = %v, want %v (tolerance %.3g)", tc, row, col, got, w, tol)
			}
		}
	}
	if bad > 3 {
		t.Errorf("%v: %d elements wrong in all", tc, bad)
	}
}

func sameBits(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }

// kernels runs f once with the assembly kernels (when this CPU has them)
// and once with the pure-Go kernels.
func kernels(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useAsm
	t.Cleanup(func() { useAsm = saved })
	if hasAVX2FMA() {
		useAsm = true
		t.Run("asm", f)
	} else {
		t.Log("no AVX2/FMA on this machine: the assembly kernels are not tested")
	}
	useAsm = false
	t.Run("go", f)
	useAsm = saved
}

var trans = [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}}

// TestSgemmSizes covers odd sizes in every dimension and all four
// transpositions, with padded leading dimensions.
func TestSgemmSizes(t *testing.T) {
	sizes := []int{1, 2, 3, 5, 7, 13, 17, 31, 33, 65, 100}
	kernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, tr := range trans {
			for i, m := range sizes {
				for j, n := range sizes {
					k := sizes[(i+2*j)%len(sizes)]
					check(t, rng, gemmCase{transA: tr[0], transB: tr[1], m: m, n: n, k: k,
						alpha: 1, beta: 0, padA: j % 3, padB: i % 2, padC: (i + j) % 4})
				}
			}
		}
	})
}

// TestSgemmAlphaBeta covers the scalar cases: beta 0 (C not read), 1 and
// other values, alpha 0 and negative, and k = 0 (C = beta·C).
func TestSgemmAlphaBeta(t *testing.T) {
	scalars := [][2]float32{{1, 0}, {1, 1}, {-0.5, 1}, {2, -1.5}, {0, 0}, {0, 1}, {0, 0.5}, {1.25, 0.75}}
	shapes := [][3]int{{1, 1, 1}, {7, 13, 5}, {32, 40, 33}, {70, 50, 300}, {1, 37, 20}, {5, 9, 0}, {100, 65, 0}}
	kernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, tr := range trans {
			for _, s := range scalars {
				for _, sh := range shapes {
					check(t, rng, gemmCase{transA: tr[0], transB: tr[1], m: sh[0], n: sh[1], k: sh[2],
						alpha: s[0], beta: s[1], padC: 2})
				}
			}
		}
	})
}

// TestSgemmBlockBoundaries runs sizes on both sides of every blocking
// parameter: the small-m threshold, mc, kc, nc, the dot path's blocks, and
// the register tiles. The blocks are shrunk first so that the boundaries
// fall at sizes a float64 reference checks quickly; a second pass uses the
// tuned blocks at their own boundaries.
func TestSgemmBlockBoundaries(t *testing.T) {
	saved := [...]int{kc, mc, nc, smallM, smallN, kcDot, mcDot}
	restore := func() {
		kc, mc, nc, smallM, smallN, kcDot, mcDot = saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], saved[6]
	}
	t.Cleanup(restore)
	kernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		kc, mc, nc, smallM, smallN, kcDot, mcDot = 24, 12, 32, 8, 20, 16, 6
		for _, tr := range trans {
			for _, m := range []int{5, 6, 7, 8, 9, 11, 12, 13, 23, 25, 36, 37} {
				for _, n := range []int{3, 4, 8, 15, 16, 17, 20, 21, 31, 32, 33, 65} {
					for _, k := range []int{7, 8, 15, 16, 17, 23, 24, 25, 49} {
						check(t, rng, gemmCase{transA: tr[0], transB: tr[1], m: m, n: n, k: k,
							alpha: 1.5, beta: 0.5, padA: 1, padB: 2, padC: 3})
					}
				}
			}
		}
		restore()
		for _, tr := range trans {
			for _, sh := range [][3]int{
				{smallM, 40, kc + 1}, {smallM + 1, 40, kc - 1}, {mc + 1, 17, kc + 1},
				{mc - 1, 33, 2*kc + 3}, {smallM + 2, nc + 5, 9}, {mcDot + 1, 9, kcDot + 5},
				{smallM + 5, smallN, 70}, {smallM + 5, smallN + 1, 70},
			} {
				check(t, rng, gemmCase{transA: tr[0], transB: tr[1], m: sh[0], n: sh[1], k: sh[2],
					alpha: 1, beta: 1, padA: 3, padB: 1})
			}
		}
	})
}

// TestSgemmSplit cuts every product into as many parts as it has register
// tiles, so that the part bounds of every method and split direction meet
// odd sizes; the parts run on the workers when they are free.
func TestSgemmSplit(t *testing.T) {
	saved := minPartFlops
	t.Cleanup(func() { minPartFlops = saved })
	minPartFlops = 1
	sizes := []int{1, 2, 5, 7, 13, 17, 31, 33, 65, 100, 130}
	rng := rand.New(rand.NewPCG(16, 17))
	for _, tr := range trans {
		for i, m := range sizes {
			for j, n := range sizes {
				k := sizes[(2*i+j)%len(sizes)]
				check(t, rng, gemmCase{transA: tr[0], transB: tr[1], m: m, n: n, k: k,
					alpha: -1, beta: 0.25, padA: 1, padC: 1})
			}
		}
	}
}

// TestSplitCountsReads checks the parts split gives products on the dot
// path, whose cost at few rows is reading B: the batch-1 products of the
// char-RNN's sampling (hidden 256, GRU gates 768 wide, LSTM 1024) run on
// both of two goroutines, though their arithmetic alone (0.4 and 0.5
// MFLOP) is under two parts of minPartFlops for the GRU's; a product too
// small to be worth a handoff still runs whole, and one of many rows is
// still sized by its arithmetic.
func TestSplitCountsReads(t *testing.T) {
	for _, c := range []struct {
		m, n, k  int
		min, max int // parts, for 2 goroutines
	}{
		{1, 768, 256, 2, 8},  // GRU sampling's recurrent product
		{1, 1024, 256, 2, 8}, // LSTM's
		{1, 64, 16, 1, 1},    // 1,024 elements of B: one part
		{2, 96, 64, 1, 1},    // dot1x8's rows only, 6,144 elements: one part
		{48, 256, 256, 8, 8}, // 6.3 MFLOP: as many as the dot path allows
	} {
		p := problem{transB: true, m: c.m, n: c.n, k: c.k}
		if p.method() != dots {
			t.Fatalf("%d×%d×%d: method %v, want the dot path", c.m, c.n, c.k, p.method())
		}
		parts, _, _ := split(&p, 2)
		if parts < c.min || parts > c.max {
			t.Errorf("%d×%d×%d: %d parts, want %d to %d", c.m, c.n, c.k, parts, c.min, c.max)
		}
	}
	for _, c := range []struct{ m, want int }{{1, 1}, {2, 1}, {3, 1}, {24, 1}, {25, 2}, {26, 2}, {27, 2}, {48, 2}, {49, 3}} {
		if got := dotPasses(c.m); got != c.want {
			t.Errorf("dotPasses(%d) = %d, want %d", c.m, got, c.want)
		}
	}
}

// shape is a product's size and transpositions.
type shape struct {
	name           string
	transA, transB bool
	m, n, k        int
}

// lstmShapes are the products of the char-RNN benchmark (2-layer LSTM,
// hidden 256, embedding 64, batch 32, sequence 64, vocabulary 65: gates
// 4·256 = 1024 wide, 32·64 = 2048 rows per sequence), also used by the
// benchmarks.
var lstmShapes = []shape{
	{"input-proj-0", false, true, 2048, 1024, 64},
	{"input-proj-1", false, true, 2048, 1024, 256},
	{"recurrent", false, true, 32, 1024, 256},
	{"backward-dX", false, false, 2048, 256, 1024},
	{"backward-dW", true, false, 1024, 256, 2048},
	{"backward-dh", false, false, 32, 256, 1024},
	{"output-head", false, true, 2048, 65, 256},
	{"sampling", false, true, 1, 1024, 256},
}

func TestSgemmLSTMShapes(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("the float64 reference of the full-size products takes seconds (minutes with -race)")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, s := range lstmShapes {
		t.Run(s.name, func(t *testing.T) {
			check(t, rng, gemmCase{transA: s.transA, transB: s.transB, m: s.m, n: s.n, k: s.k, alpha: 1, beta: 1})
		})
	}
}

// TestSgemmConcurrent runs products of several shapes from several
// goroutines at once, large enough to be split across the workers; run it
// with -race.
func TestSgemmConcurrent(t *testing.T) {
	shapes := [][3]int{{200, 150, 120}, {32, 600, 256}, {1, 300, 100}, {150, 64, 300}, {20, 200, 700}}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(9, uint64(g)))
			for r := range 4 {
				sh := shapes[(g+r)%len(shapes)]
				tr := trans[(g+r)%4]
				check(t, rng, gemmCase{transA: tr[0], transB: tr[1], m: sh[0], n: sh[1], k: sh[2],
					alpha: 1, beta: 0.5, padC: g})
			}
		}()
	}
	wg.Wait()
}

// TestSgemmAllocs checks that products allocate nothing once the package's
// workspaces exist, for each path and for split and unsplit products.
func TestSgemmAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, s := range lstmShapes {
		t.Run(s.name, func(t *testing.T) {
			p := benchProblem(s)
			f := func() { Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, p.a, p.lda, p.b, p.ldb, 0, p.c, p.ldc) }
			for range 3 {
				f() // warm up: start the workers, grow their workspaces
			}
			if got := testing.AllocsPerRun(20, f); got != 0 {
				t.Errorf("got %v allocations per product, want 0", got)
			}
		})
	}
}

// TestBLASThroughTensor checks that tensor.MatMul, with BLAS installed by
// tensor.Use, gives what Sgemm gives.
func TestBLASThroughTensor(t *testing.T) {
	prev := tensor.WhichBLAS()
	tensor.Use(BLAS{})
	t.Cleanup(func() { tensor.Use(prev) })

	rng := rand.New(rand.NewPCG(12, 13))
	const m, n, k = 33, 70, 45
	a, b := matrix(rng, m, k, k), matrix(rng, k, n, n)
	x := tensor.New(tensor.WithShape(m, k), tensor.WithBacking(append([]float32(nil), a...)))
	y := tensor.New(tensor.WithShape(k, n), tensor.WithBacking(append([]float32(nil), b...)))
	z, err := tensor.MatMul(x, y)
	if err != nil {
		t.Fatal(err)
	}
	got := z.Data().([]float32)
	want := make([]float32, m*n)
	Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
	for i := range want {
		if !sameBits(got[i], want[i]) {
			t.Fatalf("MatMul[%d,%d] = %v, want %v (Sgemm)", i/n, i%n, got[i], want[i])
		}
	}
}

// TestBLASTranspose checks the blas.Transpose mapping, ConjTrans included.
func TestBLASTranspose(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 15))
	const m, n, k = 5, 7, 3
	a, b := matrix(rng, k, m, m), matrix(rng, n, k, k)
	want := make([]float32, m*n)
	Sgemm(true, true, m, n, k, 1, a, m, b, k, 0, want, n)
	for _, tt := range [][2]blas.Transpose{{blas.Trans, blas.Trans}, {blas.ConjTrans, blas.ConjTrans}} {
		got := make([]float32, m*n)
		BLAS{}.Sgemm(tt[0], tt[1], m, n, k, 1, a, m, b, k, 0, got, n)
		for i := range want {
			if !sameBits(got[i], want[i]) {
				t.Fatalf("%c%c: C[%d] = %v, want %v", tt[0], tt[1], i, got[i], want[i])
			}
		}
	}
}

func TestSgemmPanics(t *testing.T) {
	s := make([]float32, 100)
	cases := []struct {
		name string
		f    func()
		want string
	}{
		{"negative m", func() { Sgemm(false, false, -1, 2, 2, 1, s, 2, s, 2, 0, s, 2) }, "gemm: m < 0"},
		{"negative n", func() { Sgemm(false, false, 2, -1, 2, 1, s, 2, s, 2, 0, s, 2) }, "gemm: n < 0"},
		{"negative k", func() { Sgemm(false, false, 2, 2, -1, 1, s, 2, s, 2, 0, s, 2) }, "gemm: k < 0"},
		{"lda < k", func() { Sgemm(false, false, 2, 2, 3, 1, s, 2, s, 2, 0, s, 2) }, "gemm: bad lda"},
		{"lda < m transposed", func() { Sgemm(true, false, 3, 2, 2, 1, s, 2, s, 2, 0, s, 2) }, "gemm: bad lda"},
		{"ldb < n", func() { Sgemm(false, false, 2, 3, 2, 1, s, 2, s, 2, 0, s, 3) }, "gemm: bad ldb"},
		{"ldb < k transposed", func() { Sgemm(false, true, 2, 2, 3, 1, s, 3, s, 2, 0, s, 2) }, "gemm: bad ldb"},
		{"ldc < n", func() { Sgemm(false, false, 2, 3, 2, 1, s, 2, s, 3, 0, s, 2) }, "gemm: bad ldc"},
		{"short A", func() { Sgemm(false, false, 20, 2, 10, 1, s, 10, s, 2, 0, s, 2) }, "gemm: short A"},
		{"short B", func() { Sgemm(false, true, 2, 20, 10, 1, s, 10, s, 10, 0, s, 20) }, "gemm: short B"},
		{"short C", func() { Sgemm(false, false, 20, 10, 2, 1, s, 2, s, 10, 0, s, 10) }, "gemm: short C"},
		{"bad transpose", func() { BLAS{}.Sgemm('x', blas.NoTrans, 2, 2, 2, 1, s, 2, s, 2, 0, s, 2) }, "gemm: bad transpose"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.HasPrefix(msg, tc.want) {
					t.Errorf("got panic %v, want %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestSgemmEmpty checks that m = 0 or n = 0 is a no-op that accepts nil
// slices, as in gonum.
func TestSgemmEmpty(t *testing.T) {
	Sgemm(false, false, 0, 5, 5, 1, nil, 5, make([]float32, 25), 5, 0, nil, 5)
	Sgemm(true, true, 5, 0, 5, 1, make([]float32, 25), 5, nil, 5, 0, nil, 1)
}
