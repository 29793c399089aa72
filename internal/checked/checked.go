// Package checked does the arithmetic of sizes derived from a caller's
// numbers (flags, configuration structs, a service's job specs,
// checkpoint metadata) with overflow reported instead of wrapped: a batch
// of 2^40 sequences accumulated 2^24 times is 2^64 rows, which int64
// arithmetic silently turns into 0, and a divide by zero or a slice of
// negative length follows. Every operand must be non-negative; a
// negative one is reported as an overflow is, since no size is
// negative.
//
// It is a leaf every package of the module may import (internal/
// importgraph), and it is not for users.
package checked

import "math"

// Mul returns the product of xs (1 for none), and false when an operand is
// negative or the product exceeds math.MaxInt.
func Mul(xs ...int) (int, bool) {
	p := 1
	for _, x := range xs {
		if x < 0 {
			return 0, false
		}
		if x != 0 && p > math.MaxInt/x {
			// The product may still come to 0 through a later zero
			// operand, but a size with an overflowing factor is an
			// error whatever follows.
			return 0, false
		}
		p *= x
	}
	return p, true
}

// Add returns the sum of xs, and false when an operand is negative or the
// sum exceeds math.MaxInt.
func Add(xs ...int) (int, bool) {
	s := 0
	for _, x := range xs {
		if x < 0 || s > math.MaxInt-x {
			return 0, false
		}
		s += x
	}
	return s, true
}

// Mul64 is Mul for int64 operands, such as byte counts.
func Mul64(xs ...int64) (int64, bool) {
	p := int64(1)
	for _, x := range xs {
		if x < 0 {
			return 0, false
		}
		if x != 0 && p > math.MaxInt64/x {
			return 0, false
		}
		p *= x
	}
	return p, true
}

// Add64 is Add for int64 operands.
func Add64(xs ...int64) (int64, bool) {
	s := int64(0)
	for _, x := range xs {
		if x < 0 || s > math.MaxInt64-x {
			return 0, false
		}
		s += x
	}
	return s, true
}

// Sum accumulates a size term by term and remembers whether any step
// overflowed, so that a formula of several products reads as one
// expression and is checked once at the end:
//
//	var s checked.Sum
//	s.AddMul(gates, hidden, input) // the input weights
//	s.AddMul(gates, hidden, hidden)
//	n, ok := s.Total()
type Sum struct {
	n   int
	bad bool
}

// AddMul adds the product of xs.
func (s *Sum) AddMul(xs ...int) {
	p, ok := Mul(xs...)
	if !ok {
		s.bad = true
		return
	}
	s.Add(p)
}

// Add adds x.
func (s *Sum) Add(x int) {
	n, ok := Add(s.n, x)
	if !ok {
		s.bad = true
		return
	}
	s.n = n
}

// Total is the sum, and false when any step overflowed.
func (s Sum) Total() (int, bool) { return s.n, !s.bad }
