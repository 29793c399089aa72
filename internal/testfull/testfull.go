// Package testfull says whether the tests run their exhaustive suites:
// the emulated CUDA device's conformance on a scope and with capped grids,
// the walk variants, the random-shape grids, the emulator's barrier
// mutations, the long memory grids. They run when GOCURRENT_TEST_FULL is
// set to a true value, as .ci/run and the GPU kit set it; without it, `go
// test ./...` is a newcomer's check of every kernel, layer and command, on
// the CPU device and once over the emulator, in about a minute and a half
// on two cores (issue 47).
//
// Only tests import this package.
package testfull

import (
	"os"
	"strconv"
	"testing"
)

// Env is the variable that turns the full suites on.
const Env = "GOCURRENT_TEST_FULL"

// On reports whether the full suites run.
func On() bool {
	v, err := strconv.ParseBool(os.Getenv(Env))
	return err == nil && v
}

// Skip skips t unless the full suites run; what says what the test checks
// that the quick run's other tests do not.
func Skip(t testing.TB, what string) {
	t.Helper()
	if !On() {
		t.Skipf("%s; %s=1 runs it (.ci/run does)", what, Env)
	}
}

// Cases returns cases whole when the full suites run, and otherwise the
// first n of them: a grid's sample for the quick run, the rest of it CI's.
func Cases[T any](cases []T, n int) []T {
	if On() || n >= len(cases) {
		return cases
	}
	return cases[:n]
}

// Count returns full when the full suites run, and quick otherwise: how
// many random draws a test makes.
func Count(full, quick int) int {
	if On() {
		return full
	}
	return quick
}
