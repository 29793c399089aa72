package leak

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps the failure instead of failing.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Errorf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

// Fatalf records the failure and ends the goroutine, as testing's does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestExpect counts a goroutine that outlives its expectation as a leak,
// with its stack in the message, and one that ends in time as none.
func TestExpect(t *testing.T) {
	before := Count()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		<-stop
	}()
	if got := Count(); got != before+1 {
		t.Fatalf("Count with one more goroutine: %d, want %d", got, before+1)
	}
	r := &recorder{TB: t}
	expect(r, before, "still blocked", 20*time.Millisecond)
	if want := fmt.Sprintf("still blocked: %d goroutines left, want at most %d", before+1, before); !strings.Contains(r.msg, want) || !strings.Contains(r.msg, "leak.TestExpect.func1") {
		t.Errorf("the failure for a goroutine left running: %q, want the count and its stack", r.msg)
	}
	close(stop)
	<-stopped
	r = &recorder{TB: t}
	expect(r, before, "ended", Limit)
	if r.msg != "" {
		t.Errorf("a goroutine that ended counted as a leak: %s", r.msg)
	}
}

// TestAwait returns what the channel delivers, and fails with the stacks
// when nothing comes in time.
func TestAwait(t *testing.T) {
	c := make(chan int, 1)
	c <- 7
	if got := await(t, c, "a ready value", Limit); got != 7 {
		t.Errorf("await = %d, want 7", got)
	}
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		await(r, make(chan int), "a value never sent", 10*time.Millisecond)
	}()
	<-done
	if !strings.Contains(r.msg, "a value never sent did not return within 10ms") || !strings.Contains(r.msg, "goroutine ") {
		t.Errorf("the failure for a hang: %q, want what hung and the stacks", r.msg)
	}
}
