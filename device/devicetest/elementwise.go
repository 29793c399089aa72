package devicetest

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

func testAddBias(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		for _, s := range [][2]int{{1, 1}, {7, 13}, {4096, 65}} {
			e.run(fmt.Sprintf("%dx%d", s[0], s[1]), func(e *env) {
				rows, cols := s[0], s[1]
				bias, y := e.uniform(cols, -1, 1), e.uniform(rows*cols, -1, 1)
				vB, vY := e.vec(bias), e.vec(y)
				e.launch(device.AddBias{DType: e.dt, Rows: rows, Cols: cols, Bias: vB.buf, Y: vY.buf})
				want, mag := make([]float64, len(y)), make([]float64, len(y))
				for i := range y {
					want[i] = y[i] + bias[i%cols]
					mag[i] = math.Abs(y[i]) + math.Abs(bias[i%cols])
				}
				checkClose(e.t, "Y", e.get("Y", vY), want, mag, PointwiseTolerance(e.dt))
				checkExact(e.t, "Bias (an input)", e.get("Bias", vB), bias)
			})
		}
	})
}

func testSumRows(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		// {3, 20011}: wide, a prime number of columns: 626 column blocks
		// of 32 on a GPU, uneven column parts on the CPU. On the CUDA
		// device (launch.go's rowSlices), {4096, 65} is 64 slices of 64
		// rows; {700, 33} 11 slices, the last 60 rows; {1000, 2100} 15
		// slices of 67 rows (1024 blocks over 66 column blocks), the last
		// 62; {7, 13}, {512, 33} and {3, 20011} one pass.
		for _, s := range [][2]int{{1, 1}, {7, 13}, {4096, 65}, {512, 33}, {700, 33}, {1000, 2100}, {3, 20011}} {
			for _, acc := range []bool{false, true} {
				name := fmt.Sprintf("%dx%d", s[0], s[1])
				if acc {
					name += "/Accumulate"
				}
				e.run(name, func(e *env) {
					rows, cols := s[0], s[1]
					x := e.uniform(rows*cols, -1, 1)
					out := nans(cols) // not read without Accumulate
					if acc {
						out = e.uniform(cols, -1, 1)
					}
					vX, vO := e.vec(x), e.vec(out)
					e.launch(device.SumRows{DType: e.dt, Rows: rows, Cols: cols, X: vX.buf, Out: vO.buf, Accumulate: acc})
					want, mag := make([]float64, cols), make([]float64, cols)
					if acc {
						for j := range want {
							want[j], mag[j] = out[j], math.Abs(out[j])
						}
					}
					for i := 0; i < rows; i++ {
						for j := 0; j < cols; j++ {
							want[j] += x[i*cols+j]
							mag[j] += math.Abs(x[i*cols+j])
						}
					}
					checkClose(e.t, "Out", e.get("Out", vO), want, mag, SumTolerance(e.dt, rows+1))
				})
			}
		}
		e.run("Deterministic", func(e *env) {
			const rows, cols = 1000, 300
			vX := e.vec(e.uniform(rows*cols, -1, 1))
			e.checkDeterministic(device.SumRows{DType: e.dt, Rows: rows, Cols: cols, X: vX.buf, Accumulate: true}, e.uniform(cols, -1, 1))
		})
	})
}

func testFill(t *testing.T, open opener) {
	for _, dt := range []device.DType{device.Float32, device.Float64, device.Int32} {
		t.Run(dt.String(), func(t *testing.T) {
			e := newEnv(t, open, dt)
			value := -7.0 // exact in every DType
			if dt != device.Int32 {
				value = 0.1 // rounded to DType
			}
			for _, n := range []int{1, 1000, 1<<20 + 1} {
				e.run(fmt.Sprintf("N=%d", n), func(e *env) {
					v := e.vecOf(dt, constant(n, 3))
					e.launch(device.Fill{DType: dt, N: n, X: v.buf, Value: value})
					checkExact(e.t, "X", e.get("X", v), constant(n, round(dt, value)))
				})
			}
			e.run("Part", func(e *env) {
				// Fill writes N elements and leaves the rest of a larger
				// buffer alone.
				v := e.vecOf(dt, constant(10, 3))
				e.launch(device.Fill{DType: dt, N: 6, X: v.buf, Value: value})
				want := append(constant(6, round(dt, value)), constant(4, 3)...)
				checkExact(e.t, "X", e.get("X", v), want)
			})
			e.run("Elems", func(e *env) {
				v := e.vecOf(dt, constant(10, 3))
				e.launch(device.Fill{DType: dt, N: 4, X: v.buf.Elems(dt, 3, 5), Value: value})
				want := constant(10, 3)
				for i := 3; i < 7; i++ {
					want[i] = round(dt, value)
				}
				checkExact(e.t, "X", e.get("X", v), want)
			})
			e.run("N=0", func(e *env) {
				e.launch(device.Fill{DType: dt, N: 0, Value: value})
				e.sync()
			})
			if dt == device.Int32 {
				// Converted as Go converts a float64: toward zero.
				for _, v := range []float64{3.9, -2.7, -0.5, 1e3} {
					e.run(fmt.Sprintf("Value=%v", v), func(e *env) {
						x := e.vecOf(dt, constant(1000, 3))
						e.launch(device.Fill{DType: dt, N: 1000, X: x.buf, Value: v})
						checkExact(e.t, "X", e.get("X", x), constant(1000, float64(int32(v))))
					})
				}
			}
		})
	}
}

func testCopy(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	// bytesOf uploads b into a fresh buffer of exactly len(b) bytes.
	bytesOf := func(e *env, b []byte) device.Buffer {
		buf := e.alloc(device.Int32, (len(b)+3)/4).Slice(0, int64(len(b)))
		if err := call(e.t, "Upload", func() error { return e.dev.Upload(buf, b) }); err != nil {
			e.t.Fatalf("Upload: %v", err)
		}
		return buf
	}
	readBytes := func(e *env, buf device.Buffer) []byte {
		b := make([]byte, buf.Len())
		if err := call(e.t, "Download", func() error { return e.dev.Download(b, buf) }); err != nil {
			e.t.Fatalf("Download: %v", err)
		}
		return b
	}
	randomBytes := func(e *env, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(e.rng.Uint32())
		}
		return b
	}
	for _, n := range []int{1, 7, 4096, 1<<20 + 3} {
		e.run(fmt.Sprintf("%dBytes", n), func(e *env) {
			src := randomBytes(e, n)
			// Dst is larger than Src: the bytes past Src.Len() stay.
			dst := bytes.Repeat([]byte{0xAB}, n+13)
			bs, bd := bytesOf(e, src), bytesOf(e, dst)
			e.launch(device.Copy{Dst: bd, Src: bs})
			want := append(append([]byte(nil), src...), dst[n:]...)
			if got := readBytes(e, bd); !bytes.Equal(got, want) {
				e.t.Errorf("Dst after Copy: %s", firstByteDiff(got, want))
			}
			if got := readBytes(e, bs); !bytes.Equal(got, src) {
				e.t.Errorf("Src after Copy: %s", firstByteDiff(got, src))
			}
		})
	}
	e.run("Views", func(e *env) {
		// Elements 5..14 of one buffer to elements 3..22 of another, views
		// taken with Elems and Slice.
		src := e.uniform(20, -1, 1)
		dst := e.uniform(30, -1, 1)
		vS, vD := e.vec(src), e.vec(dst)
		e.launch(device.Copy{Dst: vD.buf.Elems(device.Float32, 3, 20), Src: vS.buf.Slice(5*4, 10*4)})
		want := clone(dst)
		copy(want[3:], src[5:15])
		checkExact(e.t, "Dst", e.get("Dst", vD), want)
	})
	e.run("WithinOneBuffer", func(e *env) {
		// Two disjoint views of one buffer.
		x := e.uniform(16, -1, 1)
		v := e.vec(x)
		e.launch(device.Copy{Dst: v.buf.Elems(device.Float32, 8, 8), Src: v.buf.Elems(device.Float32, 1, 6)})
		want := clone(x)
		copy(want[8:], x[1:7])
		checkExact(e.t, "buffer", e.get("buffer", v), want)
	})
	e.run("Ordered", func(e *env) {
		// Copies run in stream order with kernels: fill, copy, fill again.
		vA, vB := e.vec(constant(1000, 0)), e.vec(constant(1000, 0))
		e.launch(device.Fill{DType: device.Float32, N: 1000, X: vA.buf, Value: 1})
		e.launch(device.Copy{Dst: vB.buf, Src: vA.buf.Elems(device.Float32, 0, 1000)})
		e.launch(device.Fill{DType: device.Float32, N: 1000, X: vA.buf, Value: 2})
		checkExact(e.t, "Dst", e.get("Dst", vB), constant(1000, 1))
		checkExact(e.t, "Src", e.get("Src", vA), constant(1000, 2))
	})
}

func firstByteDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("byte %d: got %#x, want %#x", i, got[i], want[i])
		}
	}
	return "equal"
}

func testAxpby(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		cs := []struct {
			name        string
			n           int
			alpha, beta float64
			nanY        bool
			aliased     bool
		}{
			{"Scale", 17, 2, -0.5, false, false},
			{"Add", 17, 1, 1, false, false},
			{"Beta0NaN", 17, -1.5, 0, true, false},
			{"Alpha0", 17, 0, 3, false, false},
			{"YIsX", 17, 0.75, 0.5, false, true},
			{"YIsX/Beta0", 1001, 2, 0, false, true},
			{"NaNY", 17, 2, 1, true, false}, // Beta ≠ 0 reads Y: NaNs propagate
			{"Big", 1<<20 + 1, 0.3, 0.9, false, false},
			{"Big/Beta0NaN", 1<<20 + 1, 0.3, 0, true, false},
		}
		for _, c := range cs {
			e.run(c.name, func(e *env) {
				x := e.uniform(c.n, -2, 2)
				y := e.uniform(c.n, -2, 2)
				if c.nanY {
					y = nans(c.n)
				}
				if c.nanY && c.beta != 0 {
					y = e.uniform(c.n, -2, 2)
					y[3] = math.NaN()
				}
				if c.aliased {
					y = x
				}
				vX := e.vec(x)
				vY := vX
				if !c.aliased {
					vY = e.vec(y)
				}
				e.launch(device.Axpby{DType: e.dt, N: c.n, Alpha: c.alpha, Beta: c.beta, X: vX.buf, Y: vY.buf})
				a, b := e.r(c.alpha), e.r(c.beta)
				want, mag := make([]float64, c.n), make([]float64, c.n)
				for i := range want {
					want[i], mag[i] = a*x[i], math.Abs(a*x[i])
					if b != 0 {
						want[i] += b * y[i]
						mag[i] += math.Abs(b * y[i])
					}
				}
				checkClose(e.t, "Y", e.get("Y", vY), want, mag, PointwiseTolerance(e.dt))
				if !c.aliased {
					checkExact(e.t, "X (an input)", e.get("X", vX), x)
				}
			})
		}
		e.run("N=0", func(e *env) {
			e.launch(device.Axpby{DType: e.dt, N: 0, Alpha: 1, Beta: 1})
			e.sync()
		})
	})
}

func testMul(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		for _, n := range []int{1, 1001, 1<<20 + 1} {
			for _, alias := range []string{"", "ZIsX", "ZIsY", "XIsY"} {
				name := fmt.Sprintf("N=%d", n)
				if alias != "" {
					name += "/" + alias
				}
				e.run(name, func(e *env) {
					x, y := e.uniform(n, -2, 2), e.uniform(n, -2, 2)
					x[n/2] = math.NaN() // NaN·y is NaN
					vX, vY := e.vec(x), e.vec(y)
					var vZ vec
					switch alias {
					case "ZIsX":
						vZ = vX
					case "ZIsY":
						vZ = vY
					case "XIsY":
						vY, y = vX, x
						vZ = e.vec(nans(n))
					default:
						vZ = e.vec(nans(n))
					}
					e.launch(device.Mul{DType: e.dt, N: n, X: vX.buf, Y: vY.buf, Z: vZ.buf})
					want := make([]float64, n)
					for i := range want {
						want[i] = x[i] * y[i]
					}
					checkClose(e.t, "Z", e.get("Z", vZ), want, nil, PointwiseTolerance(e.dt))
				})
			}
		}
		e.run("N=0", func(e *env) {
			e.launch(device.Mul{DType: e.dt, N: 0})
			e.sync()
		})
	})
}

func testClamp(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		cs := []struct {
			name     string
			n        int
			min, max float64
		}{
			{"Range", 1001, -0.5, 0.75},
			{"Point", 101, 0.25, 0.25},
			{"Big", 1<<20 + 1, -1, 1},
		}
		for _, c := range cs {
			e.run(c.name, func(e *env) {
				x := e.uniform(c.n, -2, 2)
				// Specials at the start: NaN stays NaN, infinities clamp.
				copy(x, []float64{math.NaN(), math.Inf(1), math.Inf(-1), c.min, c.max, 0})
				v := e.vec(x)
				e.launch(device.Clamp{DType: e.dt, N: c.n, Min: c.min, Max: c.max, X: v.buf})
				lo, hi := e.r(c.min), e.r(c.max)
				want := make([]float64, c.n)
				for i, xi := range x {
					want[i] = xi
					if xi < lo {
						want[i] = lo
					} else if xi > hi {
						want[i] = hi
					}
				}
				checkExact(e.t, "X", e.get("X", v), want)
			})
		}
		e.run("N=0", func(e *env) {
			e.launch(device.Clamp{DType: e.dt, N: 0, Min: -1, Max: 1})
			e.sync()
		})
	})
}

// bigReduction is a SumSquares length past what one pass of the CUDA
// launcher's largest grid covers (1,024 blocks of 256 threads: 262,144
// elements), so its stride loop runs twice for some threads and every
// partial sum is used; odd, so no power-of-two split is exact.
const bigReduction = 300_007

func testSumSquares(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		for _, n := range []int{1, 1000, bigReduction} {
			for _, acc := range []bool{false, true} {
				name := fmt.Sprintf("N=%d", n)
				if acc {
					name += "/Accumulate"
				}
				e.run(name, func(e *env) {
					x := e.uniform(n, -1, 1)
					out0 := math.NaN() // not read without Accumulate
					if acc {
						out0 = e.r(2.5)
					}
					vX, vO := e.vec(x), e.vec([]float64{out0})
					e.launch(device.SumSquares{DType: e.dt, N: n, X: vX.buf, Out: vO.buf, Accumulate: acc})
					var want float64
					if acc {
						want = out0
					}
					for _, v := range x {
						want += v * v
					}
					// All terms are non-negative: the magnitude is the sum.
					checkScalar(e.t, "Out", e.get("Out", vO)[0], want, want, SumTolerance(e.dt, n+1))
				})
			}
		}
		e.run("Deterministic", func(e *env) {
			// Enough elements for a device to split the sum.
			const n = 100_000
			vX := e.vec(e.uniform(n, -1, 1))
			e.checkDeterministic(device.SumSquares{DType: e.dt, N: n, X: vX.buf, Accumulate: true}, []float64{e.r(2.5)})
		})
		e.run("N=0", func(e *env) {
			vO := e.vec([]float64{math.NaN()})
			e.launch(device.SumSquares{DType: e.dt, N: 0, Out: vO.buf})
			checkExact(e.t, "Out of an empty sum", e.get("Out", vO), []float64{0})
			vO = e.vec([]float64{1.5})
			e.launch(device.SumSquares{DType: e.dt, N: 0, Out: vO.buf, Accumulate: true})
			checkExact(e.t, "Out of an empty sum, accumulated", e.get("Out", vO), []float64{1.5})
		})
		for _, special := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			for _, n := range []int{1000, bigReduction} {
				e.run(fmt.Sprintf("%v/N=%d", special, n), func(e *env) {
					// A non-finite gradient must make the norm non-finite,
					// wherever it sits.
					x := e.uniform(n, -1, 1)
					x[n-n/3] = special
					vX, vO := e.vec(x), e.vec([]float64{0})
					e.launch(device.SumSquares{DType: e.dt, N: n, X: vX.buf, Out: vO.buf, Accumulate: true})
					if got := e.get("Out", vO)[0]; !math.IsNaN(got) && !math.IsInf(got, 0) {
						e.t.Errorf("Out with a %v in X: got %v, want NaN or infinity", special, got)
					}
				})
			}
		}
	})
}

// checkDeterministic launches a twice, each time on a fresh copy of out
// (as a's field Out), and checks that the two results have the same bits:
// a reduction's order of summation depends on its shape only.
func (e *env) checkDeterministic(a any, out []float64) {
	e.t.Helper()
	var got [2][]float64
	for i := range got {
		v := e.vec(out)
		e.launch(with(a, "Out", v.buf))
		got[i] = e.get("Out", v)
	}
	checkExact(e.t, "Out of a second, identical call", got[1], got[0])
}
