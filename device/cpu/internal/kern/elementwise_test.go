package kern

import (
	"math"
	"testing"
)

func TestAddBias(t *testing.T) {
	const rows, cols = 4, 7
	rng := newRand(30)
	y0, bias := uniform(rng, rows*cols, 1), uniform(rng, cols, 1)
	want := make([]float64, len(y0))
	for i := range want {
		want[i] = y0[i] + bias[i%cols]
	}
	y := append([]float64(nil), y0...)
	AddBias(cols, bias, y)
	checkEqual(t, "y", y, want)

	y32, b32 := to[float32](y0), to[float32](bias)
	want32 := make([]float64, len(y0))
	for i := range want32 {
		want32[i] = float64(y32[i]) + float64(b32[i%cols])
	}
	AddBias(cols, b32, y32)
	// A float32 sum is the exact sum rounded once.
	checkEqual(t, "y float32", y32, to[float32](want32))
}

func TestSumRows(t *testing.T) {
	t.Run("float64", testSumRows[float64])
	t.Run("float32", testSumRows[float32])
}

func testSumRows[T Float](t *testing.T) {
	// 150 columns: two full blocks of 64 and a remainder.
	const rows, cols = 7, 150
	rng := newRand(31)
	x := to[T](uniform(rng, rows*cols, 1))
	old := to[T](uniform(rng, cols, 1))
	// Reference: float64 sums in row order, (+ old), rounded once.
	want, wantAcc := make([]T, cols), make([]T, cols)
	for k := range cols {
		var s float64
		for r := range rows {
			s += float64(x[r*cols+k])
		}
		want[k] = T(s)
		wantAcc[k] = T(s + float64(old[k]))
	}

	out := make([]T, cols)
	for i := range out {
		out[i] = T(math.NaN()) // not read without accumulate
	}
	SumRows(cols, 0, cols, x, out, false)
	checkEqual(t, "out", out, want)

	// Column parts as the CPU device splits them give the same result.
	acc := append([]T(nil), old...)
	for _, p := range [][2]int{{0, 10}, {10, 100}, {100, 150}, {150, 150}} {
		SumRows(cols, p[0], p[1], x, acc, true)
	}
	checkEqual(t, "out (accumulate, parts)", acc, wantAcc)
}

func TestFill(t *testing.T) {
	f32 := make([]float32, 5)
	Fill(f32, 2.5)
	checkEqual(t, "float32", f32, []float32{2.5, 2.5, 2.5, 2.5, 2.5})
	f64 := []float64{1, 2, 3}
	Fill(f64, math.Inf(-1))
	checkEqual(t, "float64", f64, []float64{math.Inf(-1), math.Inf(-1), math.Inf(-1)})
	i32 := []int32{1, 2, 3}
	Fill(i32, -7)
	for i, v := range i32 {
		if v != -7 {
			t.Errorf("int32[%d]: got %d, want -7", i, v)
		}
	}
}

func TestAxpby(t *testing.T) {
	x := []float64{1, -2, 3, 0.5}
	nan := math.NaN()
	tests := []struct {
		name        string
		alpha, beta float64
		y, want     []float64
	}{
		{"general", 2, -3, []float64{1, 1, 1, 1}, []float64{2 - 3, -4 - 3, 6 - 3, 1 - 3}},
		// beta = 0: y is not read, so its NaNs disappear.
		{"beta=0", 0.5, 0, []float64{nan, nan, nan, nan}, []float64{0.5, -1, 1.5, 0.25}},
		{"add", 1, 1, []float64{1, 2, 3, 4}, []float64{2, 0, 6, 4.5}},
		// beta ≠ 0 reads y, so a NaN propagates.
		{"beta=1 NaN", 2, 1, []float64{nan, 0, 0, 0}, []float64{nan, -4, 6, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := append([]float64(nil), tt.y...)
			Axpby(tt.alpha, tt.beta, x, y)
			checkClose(t, "y", y, tt.want, 0, 0)
			y32 := to[float32](tt.y)
			Axpby(float32(tt.alpha), float32(tt.beta), to[float32](x), y32)
			checkClose(t, "y float32", from(y32), tt.want, 0, 0)
		})
	}
	t.Run("y=x", func(t *testing.T) {
		xy := append([]float64(nil), x...)
		Axpby(2, 3, xy, xy)
		checkEqual(t, "y", xy, []float64{5, -10, 15, 2.5})
	})
}

func TestMul(t *testing.T) {
	x, y := []float64{1, -2, 3, math.NaN()}, []float64{4, 5, -0.5, 1}
	want := []float64{4, -10, -1.5, math.NaN()}
	z := make([]float64, 4)
	Mul(x, y, z)
	checkClose(t, "z", z, want, 0, 0)
	zx := append([]float64(nil), x...)
	Mul(zx, y, zx)
	checkClose(t, "z=x", zx, want, 0, 0)
	zy := append([]float64(nil), y...)
	Mul(x, zy, zy)
	checkClose(t, "z=y", zy, want, 0, 0)
	z32 := make([]float32, 4)
	Mul(to[float32](x), to[float32](y), z32)
	checkClose(t, "z float32", from(z32), want, 0, 0)
}

func TestClamp(t *testing.T) {
	inf := math.Inf(1)
	x := []float64{-5, -1, 0, 0.5, 1, 7, inf, -inf, math.NaN()}
	want := []float64{-1, -1, 0, 0.5, 1, 1, 1, -1, math.NaN()}
	x64 := append([]float64(nil), x...)
	Clamp(-1, 1, x64)
	checkClose(t, "float64", x64, want, 0, 0)
	x32 := to[float32](x)
	Clamp(-1, 1, x32)
	checkClose(t, "float32", from(x32), want, 0, 0)
}

func TestSumSquares(t *testing.T) {
	rng := newRand(32)
	for _, n := range []int{0, 1, 3, 4, 7, 1001} {
		x := uniform(rng, n, 3)
		var want float64
		for _, v := range x {
			want += v * v
		}
		// Four partial sums instead of one: a few float64 roundings.
		checkClose(t, "float64", []float64{SumSquares(x)}, []float64{want}, 0, 1e-14)
		x32 := to[float32](x)
		want = 0
		for _, v := range x32 {
			want += float64(v) * float64(v)
		}
		checkClose(t, "float32", []float64{SumSquares(x32)}, []float64{want}, 0, 1e-14)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		x := []float64{1, 2, bad, 3, 4}
		if s := SumSquares(x); !math.IsNaN(s) && !math.IsInf(s, 0) {
			t.Errorf("SumSquares with %v: got %v, want non-finite", bad, s)
		}
	}
	// 1e20² = 1e40 overflows float32 but not the float64 accumulator.
	big := float32(1e20)
	if s, want := SumSquares([]float32{big, 1}), float64(big)*float64(big)+1; s != want {
		t.Errorf("SumSquares([1e20, 1] float32): got %v, want %v (accumulated in float64)", s, want)
	}
}
