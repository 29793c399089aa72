// Package sizetest is what the fuzz targets over sizes share (the three
// commands' size flags, the service's spec, issue 46): the values they
// draw every size from, and the check that a plan of what the flag checks
// accept stops with its context.
package sizetest

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// Values are the sizes a fuzz target draws each number from: the
// boundaries of int32 and int64 arithmetic issue 46 asks for (0, -1,
// 2^31, 2^32, 2^62, 2^63-1), 2^40 and 2^24 (batch 2^40 × accum 2^24 is
// 2^64, which wrapped to 0), rnn.MaxLayers (1,024) and one past it, and
// small sizes that run.
var Values = []int64{0, -1, 1, 2, 3, 64, 1 << 10, 1<<10 + 1, 1 << 24, 1 << 31, 1 << 32, 1 << 40, 1 << 62, math.MaxInt64}

// Pick is the i-th number of a fuzz input: Values at picks[i], or def
// past the input's end.
func Pick(picks []byte, i int, def int64) int64 {
	if i >= len(picks) {
		return def
	}
	return Values[int(picks[i])%len(Values)]
}

// Names reports whether msg names one of names (each as it is, or with
// prefix before it: "-" for flags).
func Names(msg, prefix string, names []string) bool {
	for _, n := range names {
		if strings.Contains(msg, prefix+n) {
			return true
		}
	}
	return false
}

// Deadline is how long PlanStops lets a plan run before its context ends,
// and Grace how soon after that it must have returned.
const (
	Deadline = 2 * time.Second
	Grace    = time.Second
)

// PlanStops runs plan with a context that ends after Deadline and fails t
// when plan returns more than Grace after that: whatever sizes the checks
// accept, the library neither crashes (the fuzz engine sees a panic) nor
// runs on after it was told to stop. what names the input.
func PlanStops(t *testing.T, what string, plan func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	defer cancel()
	start := time.Now()
	err := plan(ctx)
	if took := time.Since(start); took > Deadline+Grace {
		t.Errorf("%s: planning returned %v after its start, its deadline %v (%v)", what, took, Deadline, err)
	}
}
