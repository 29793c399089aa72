package kern

import (
	"math"

	"github.com/gocurrent/gocurrent/device"
)

// Sample is device.Sample over rows = len(ids) rows of logits
// [rows, classes]: row r draws with device.SampleUniform(seed, counter+r)
// (a caller that splits the rows passes the counter of its first row) and
// writes its class to ids[r] and, when tokens is not nil, tokens[r]
// (tokens may be ids). Every step is the documented procedure, in its
// order: the same bits as the CUDA kernel, which sums the 256 chunks on
// 256 threads.
func Sample[T Float](classes int, logits []T, temperature float64, topK int, seed, counter uint64, ids, tokens []int32) {
	for r := range ids {
		id := sampleRow(logits[r*classes:r*classes+classes], temperature, topK, seed, counter+uint64(r))
		ids[r] = id
		if tokens != nil {
			tokens[r] = id
		}
	}
}

// sampleRow draws the class of one row of logits.
func sampleRow[T Float](x []T, temperature float64, topK int, seed, counter uint64) int32 {
	c := len(x)
	m, first := math.Inf(-1), -1
	for i, v := range x {
		if f := float64(v); f == f && (first < 0 || f > m) {
			m, first = f, i
		}
	}
	if first < 0 {
		return 0 // all NaN
	}
	if temperature == 0 {
		return int32(first)
	}
	s := sampler[T]{x: x, m: m, temperature: temperature}
	if topK > 0 && topK < c {
		s.selected = true
		s.vp, s.ip = selectTopK(x, topK)
	}
	size := (c + device.SampleChunks - 1) / device.SampleChunks
	var sums [device.SampleChunks]float64
	var total float64
	for j := range sums {
		var sum float64
		for i := min(j*size, c); i < min(j*size+size, c); i++ {
			sum += s.weight(i)
		}
		sums[j] = sum
		total += sum
	}
	t := float64(device.SampleUniform(seed, counter) * total)
	var before float64
	for j, sum := range sums {
		after := before + sum
		if t < after {
			last := -1
			run := before
			for i := j * size; i < min(j*size+size, c); i++ {
				w := s.weight(i)
				if w > 0 {
					last = i
				}
				if run += w; t < run {
					return int32(i)
				}
			}
			return int32(last)
		}
		before = after
	}
	// u·W rounded up to W: the last class of positive weight.
	for j := device.SampleChunks - 1; j >= 0; j-- {
		if sums[j] > 0 {
			for i := min(j*size+size, c) - 1; i >= j*size; i-- {
				if s.weight(i) > 0 {
					return int32(i)
				}
			}
		}
	}
	return int32(first) // not reached: the first largest class weighs 1
}

// sampler holds what a row's weights depend on.
type sampler[T Float] struct {
	x           []T
	m           float64 // the largest logit that is not NaN
	temperature float64
	// With selected, the candidates are the classes whose keys are at
	// least (vp, ip), the TopK-th class's (selectTopK).
	selected bool
	vp, ip   uint64
}

// weight is class i's weight (device.Sample, step 2).
func (s *sampler[T]) weight(i int) float64 {
	v := float64(s.x[i])
	if v != v {
		return 0
	}
	if s.selected {
		vk, ik := valueKey(s.x[i]), uint64(len(s.x)-1-i)
		if vk < s.vp || vk == s.vp && ik < s.ip {
			return 0
		}
	}
	if math.IsInf(s.m, 0) {
		if v == s.m {
			return 1
		}
		return 0
	}
	return device.SampleExp((v - s.m) / s.temperature)
}

// valueKey orders logits as device.Sample ranks them, the larger key
// ranking first: NaN lowest (0), -0 as +0, otherwise the float's bits
// made to compare as unsigned integers.
func valueKey[T Float](v T) uint64 {
	switch {
	case v != v:
		return 0
	case v == 0:
		v = 0 // -0 ranks as +0
	}
	if single[T]() {
		b := math.Float32bits(float32(v))
		if b>>31 != 0 {
			return uint64(^b)
		}
		return uint64(b | 1<<31)
	}
	b := math.Float64bits(float64(v))
	if b>>63 != 0 {
		return ^b
	}
	return b | 1<<63
}

// selectTopK returns the keys of the k-th class in rank order (0 < k <
// len(x)): its value key and its index key, len(x)-1 minus its index, so
// that a class ranks before another when its (value key, index key) pair
// is larger. Every pair is distinct, so the candidates are exactly the
// classes whose pair is at least the returned one. It is a radix select,
// a byte at a time from the value key's most significant byte to the
// index key's least, as the CUDA kernel's block runs it.
func selectTopK[T Float](x []T, k int) (vp, ip uint64) {
	c := len(x)
	vbytes := 8
	if single[T]() {
		vbytes = 4
	}
	ibytes := 0
	for uint64(c-1)>>(8*ibytes) != 0 {
		ibytes++
	}
	var vmask, imask uint64
	rest := k // the rank, among the classes that match so far, still to find
	for p := range vbytes + ibytes {
		value := p < vbytes
		shift := 8 * (vbytes - 1 - p)
		if !value {
			shift = 8 * (ibytes - 1 - (p - vbytes))
		}
		var hist [256]int
		for i, v := range x {
			vk, ik := valueKey(v), uint64(c-1-i)
			if vk&vmask != vp || !value && ik&imask != ip {
				continue
			}
			key := vk
			if !value {
				key = ik
			}
			hist[key>>shift&255]++
		}
		above, d := 0, 255
		for ; d > 0 && above+hist[d] < rest; d-- {
			above += hist[d]
		}
		rest -= above
		if value {
			vp |= uint64(d) << shift
			vmask |= 255 << shift
		} else {
			ip |= uint64(d) << shift
			imask |= 255 << shift
		}
	}
	return vp, ip
}
