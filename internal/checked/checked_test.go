package checked

import (
	"math"
	"testing"
)

func TestMul(t *testing.T) {
	tests := []struct {
		xs   []int
		want int
		ok   bool
	}{
		{nil, 1, true},
		{[]int{3, 4}, 12, true},
		{[]int{0, math.MaxInt, 2}, 0, true},
		{[]int{math.MaxInt, 1}, math.MaxInt, true},
		// The reproduction: batch 2^40, accum 2^24 is 2^64.
		{[]int{1 << 40, 1 << 24}, 0, false},
		{[]int{1 << 32, 1 << 32}, 0, false},
		{[]int{1 << 62, 4}, 0, false},
		{[]int{1 << 31, 1 << 31}, 1 << 62, true},
		{[]int{math.MaxInt/2 + 1, 2}, 0, false},
		{[]int{-1, 2}, 0, false},
		// An overflowing factor is an error even when a zero follows.
		{[]int{1 << 62, 4, 0}, 0, false},
	}
	for _, tt := range tests {
		got, ok := Mul(tt.xs...)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Mul(%v) = %d, %v; want %d, %v", tt.xs, got, ok, tt.want, tt.ok)
		}
		xs := make([]int64, len(tt.xs))
		for i, x := range tt.xs {
			xs[i] = int64(x)
		}
		if got, ok := Mul64(xs...); got != int64(tt.want) || ok != tt.ok {
			t.Errorf("Mul64(%v) = %d, %v; want %d, %v", xs, got, ok, tt.want, tt.ok)
		}
	}
}

func TestAdd(t *testing.T) {
	tests := []struct {
		xs   []int
		want int
		ok   bool
	}{
		{nil, 0, true},
		{[]int{1, 2, 3}, 6, true},
		{[]int{math.MaxInt, 0}, math.MaxInt, true},
		// seq 2^63-1 and its target: seq+1 overflows.
		{[]int{math.MaxInt, 1}, 0, false},
		{[]int{math.MaxInt - 1, 1}, math.MaxInt, true},
		{[]int{3, -1}, 0, false},
	}
	for _, tt := range tests {
		got, ok := Add(tt.xs...)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Add(%v) = %d, %v; want %d, %v", tt.xs, got, ok, tt.want, tt.ok)
		}
		xs := make([]int64, len(tt.xs))
		for i, x := range tt.xs {
			xs[i] = int64(x)
		}
		if got, ok := Add64(xs...); got != int64(tt.want) || ok != tt.ok {
			t.Errorf("Add64(%v) = %d, %v; want %d, %v", xs, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSum(t *testing.T) {
	var s Sum
	s.AddMul(4, 256, 64)
	s.AddMul(4, 256, 256)
	s.Add(2 * 4 * 256)
	if n, ok := s.Total(); n != 4*256*64+4*256*256+2048 || !ok {
		t.Errorf("Total = %d, %v; want %d, true", n, ok, 4*256*64+4*256*256+2048)
	}
	s.AddMul(4, 1<<62)
	if _, ok := s.Total(); ok {
		t.Error("Total after an overflowing product is ok, want not")
	}
	// Once overflowed, it stays so.
	s.Add(1)
	if _, ok := s.Total(); ok {
		t.Error("Total after an overflow and a small term is ok, want not")
	}
	var u Sum
	u.Add(math.MaxInt)
	u.Add(1)
	if _, ok := u.Total(); ok {
		t.Error("MaxInt + 1 is ok, want not")
	}
}
