// Package leak is for gocurrent's tests: it checks that what a test ran
// left no goroutine behind. Goroutines that live as long as the process
// once something starts them (the CPU GEMM's workers, os/signal's loop)
// are not counted, so a baseline can be taken before the first product or
// signal.Notify.
//
//	func TestX(t *testing.T) {
//		leak.Check(t) // fails t if goroutines started during the test outlive it
//		...
//	}
package leak

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Limit is how long Check and Expect wait for goroutines that are ending
// to go: a hang check, not a timing.
const Limit = 30 * time.Second

// lifelong marks the goroutines that, once started, live as long as the
// process: they are not leaks.
var lifelong = []string{
	"gemm.(*worker).loop", // device/cpu/gemm's workers, started by the first large product
	"os/signal.loop",      // started by the first signal.Notify
}

// Count is the number of goroutines, less the lifelong ones.
func Count() int {
	n := 0
	for _, g := range strings.Split(Stacks(), "\n\n") {
		if !isLifelong(g) {
			n++
		}
	}
	return n
}

func isLifelong(stack string) bool {
	for _, s := range lifelong {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// Stacks is every goroutine's stack, as runtime.Stack writes them.
func Stacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Expect waits up to Limit for Count to fall to want, and fails t with
// the stacks of the goroutines left otherwise; what says after what.
func Expect(t testing.TB, want int, what string) {
	t.Helper()
	expect(t, want, what, Limit)
}

func expect(t testing.TB, want int, what string, within time.Duration) {
	t.Helper()
	n := Count()
	for deadline := time.Now().Add(within); n > want && time.Now().Before(deadline); n = Count() {
		time.Sleep(5 * time.Millisecond)
	}
	if n > want {
		t.Errorf("%s: %d goroutines left, want at most %d:\n%s", what, n, want, Stacks())
	}
}

// Check counts the goroutines now and, when t ends (after the cleanups
// registered later, which run first), expects no more.
func Check(t testing.TB) {
	t.Helper()
	before := Count()
	t.Cleanup(func() { Expect(t, before, "after the test") })
}

// Await returns the value c delivers, waiting up to Limit; past it, it
// fails t with every goroutine's stack: what did not return is a hang,
// and what says what hung.
func Await[T any](t testing.TB, c <-chan T, what string) T {
	t.Helper()
	return await(t, c, what, Limit)
}

func await[T any](t testing.TB, c <-chan T, what string, within time.Duration) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(within):
		t.Fatalf("%s did not return within %v:\n%s", what, within, Stacks())
		var zero T
		return zero
	}
}
