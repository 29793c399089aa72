package kern

// AddBias adds bias [cols] to every row of y: y[i] += bias for
// rows = len(y)/cols rows (device.AddBias).
func AddBias[T Float](cols int, bias, y []T) {
	bias = bias[:cols]
	for r := range len(y) / cols {
		row := y[r*cols : r*cols+cols]
		row = row[:len(bias)]
		for k, b := range bias {
			row[k] += b
		}
	}
}

// sumRowsBlock is how many columns SumRows keeps float64 sums for at once,
// on the stack: 64 columns is 512 bytes of accumulators and a 256-byte
// (float32) contiguous read per row.
const sumRowsBlock = 64

// SumRows sums columns [c0, c1) of x over its rows = len(x)/cols rows into
// out[c0:c1] (device.SumRows): out[k] = Σ_i x[i][k], plus out[k]'s old
// value with accumulate. The sums are float64, added in row order, and
// rounded once to T (after adding the old value), so the result depends
// only on the data, not on how the caller splits the columns.
func SumRows[T Float](cols, c0, c1 int, x, out []T, accumulate bool) {
	rows := len(x) / cols
	var acc [sumRowsBlock]float64
	for b0 := c0; b0 < c1; b0 += sumRowsBlock {
		b1 := min(b0+sumRowsBlock, c1)
		a := acc[:b1-b0]
		clear(a)
		for r := range rows {
			row := x[r*cols+b0 : r*cols+b1]
			row = row[:len(a)]
			for k, v := range row {
				a[k] += float64(v)
			}
		}
		o := out[b0:b1]
		o = o[:len(a)]
		for k, s := range a {
			if accumulate {
				s += float64(o[k])
			}
			o[k] = T(s)
		}
	}
}

// Fill sets every element of x to v (device.Fill).
func Fill[T float32 | float64 | int32](x []T, v T) {
	for i := range x {
		x[i] = v
	}
}

// Axpby computes y = alpha·x + beta·y over len(y) elements (device.Axpby),
// in T. With beta == 0, y is not read, so a NaN in it does not propagate.
// y may be x.
func Axpby[T Float](alpha, beta T, x, y []T) {
	x = x[:len(y)]
	switch {
	case beta == 0:
		for i, v := range x {
			y[i] = alpha * v
		}
	case beta == 1 && alpha == 1:
		for i, v := range x {
			y[i] += v
		}
	default:
		for i, v := range x {
			y[i] = alpha*v + beta*y[i]
		}
	}
}

// Mul computes z = x·y element-wise over len(z) elements (device.Mul). z
// may be x or y.
func Mul[T Float](x, y, z []T) {
	x = x[:len(z)]
	y = y[:len(z)]
	for i := range z {
		z[i] = x[i] * y[i]
	}
}

// Clamp limits every element of x to [lo, hi] in place (device.Clamp); a
// NaN stays NaN (both comparisons are false).
func Clamp[T Float](lo, hi T, x []T) {
	for i, v := range x {
		if v < lo {
			x[i] = lo
		} else if v > hi {
			x[i] = hi
		}
	}
}

// SumSquares returns Σ x[i]² accumulated in float64 (device.SumSquares).
// Four partial sums (elements i mod 4) are kept and added at the end, a
// fixed order, so the result is deterministic for a given slice. A NaN or
// infinity in x makes the result non-finite.
func SumSquares[T Float](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		a, b, c, d := float64(v[0]), float64(v[1]), float64(v[2]), float64(v[3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(x); i++ {
		a := float64(x[i])
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}
