package progress

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// liveLines splits live output into the lines drawn: each "\r" starts one,
// and each must end with "\x1b[K" (the last one possibly followed by "\n").
func liveLines(t *testing.T, out string) []string {
	t.Helper()
	if out == "" {
		return nil
	}
	if !strings.HasPrefix(out, "\r") {
		t.Fatalf("live output %q does not start with \\r", out)
	}
	var lines []string
	for _, seg := range strings.Split(out[1:], "\r") {
		line, ok := strings.CutSuffix(strings.TrimSuffix(seg, "\n"), "\x1b[K")
		if !ok {
			t.Fatalf("live segment %q does not end with \\x1b[K", seg)
		}
		lines = append(lines, line)
	}
	return lines
}

func TestLiveOutput(t *testing.T) {
	clk := newClock()
	var buf bytes.Buffer
	b := newBar(&buf, 1000, true, clk.now)
	b.SetInterval(0)
	b.Update(100, "loss 2.5")
	clk.advance(time.Second)
	b.Update(450, "loss 1.234")
	out := buf.String()
	if got := strings.Count(out, "\r"); got != 2 {
		t.Errorf("carriage returns before Finish: got %d, want 2 in %q", got, out)
	}
	if got := strings.Count(out, "\x1b[K"); got != 2 {
		t.Errorf("clear-to-end-of-line before Finish: got %d, want 2 in %q", got, out)
	}
	if strings.Contains(out, "\n") {
		t.Errorf("live output before Finish contains a newline: %q", out)
	}
	b.Finish()
	out = buf.String()
	if got := strings.Count(out, "\n"); got != 1 || !strings.HasSuffix(out, "\x1b[K\n") {
		t.Errorf("after Finish: got %q, want exactly one newline, at the end after \\x1b[K", out)
	}
	lines := liveLines(t, out)
	if len(lines) != 2 {
		t.Fatalf("got %d lines drawn, want 2 (Finish repeats nothing): %q", len(lines), lines)
	}
	if !strings.Contains(lines[1], " 45%  450/1000  loss 1.234") {
		t.Errorf("last line: got %q, want it to show 45%% and 450/1000", lines[1])
	}
}

func TestPlainOutput(t *testing.T) {
	clk := newClock()
	var buf bytes.Buffer
	b := newBar(&buf, 1000, false, clk.now)
	b.SetInterval(0)
	b.Update(100, "a")
	b.Update(200, "b")
	b.Finish()
	out := buf.String()
	if strings.ContainsAny(out, "\r\x1b") {
		t.Errorf("plain output contains \\r or an escape: %q", out)
	}
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("plain output %q does not end with a newline", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2: %q", len(lines), lines)
	}
	for i, want := range []string{"100/1000  a", "200/1000  b"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: got %q, want it to contain %q", i, lines[i], want)
		}
	}
}

func TestFormatLine(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name    string
		total   int64
		done    int64
		status  string
		elapsed time.Duration
		limit   bool
		want    string
	}{
		// 24*450/1000 = 10.8: 10 cells filled, the tenth is the head.
		// ETA: 45s * 550/450 = 55s.
		{"45 percent", 1000, 450, "loss 1.234", 45 * time.Second, true,
			"[=========>              ]  45%  450/1000  loss 1.234  ETA 55s"},
		// ETA 62s * 500/500 = 62s.
		{"half", 1000, 500, "", 62 * time.Second, true,
			"[===========>            ]  50%  500/1000  ETA 1m02s"},
		{"nothing done yet", 1000, 0, "warming up", time.Minute, true,
			"[                        ]   0%  0/1000  warming up"},
		// 24*41/1000 = 0.984 and 24*42/1000 = 1.008.
		{"just below one cell", 1000, 41, "", 0, true,
			"[                        ]   4%  41/1000  ETA 0s"},
		{"one cell", 1000, 42, "", 0, true,
			"[>                       ]   4%  42/1000  ETA 0s"},
		{"done", 1000, 1000, "loss 1.1", time.Hour, true,
			"[========================] 100%  1000/1000  loss 1.1"},
		{"overshoot", 1000, 1500, "", time.Hour, true,
			"[========================] 100%  1500/1000"},
		{"unknown total", 0, 450, "loss 1.234  12,345 tok/s", time.Minute, true,
			"450  loss 1.234  12,345 tok/s"},
		{"unknown total, no status", 0, 7, "", time.Minute, true, "7"},
		// 120 = 41 (bar to count) + 2 + 65 + 3 ("...") + 2 + 7 ("ETA 10s").
		{"long status shortened", 1000, 500, long, 10 * time.Second, true,
			"[===========>            ]  50%  500/1000  " + strings.Repeat("x", 65) + "...  ETA 10s"},
		{"long status kept when not live", 0, 5, long, 0, false, "5  " + long},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := formatLine(tt.total, tt.done, tt.status, tt.elapsed, tt.limit)
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if tt.limit && utf8.RuneCountInString(got) > maxLiveWidth {
				t.Errorf("live line is %d characters, want at most %d", utf8.RuneCountInString(got), maxLiveWidth)
			}
		})
	}
}

func TestBarFill(t *testing.T) {
	const total = 1000
	for done := int64(0); done <= total; done++ {
		b := bar(done, total)
		if len(b) != barWidth+2 || b[0] != '[' || b[len(b)-1] != ']' {
			t.Fatalf("bar(%d, %d) = %q: want %d cells in brackets", done, total, b, barWidth)
		}
		cells := b[1 : len(b)-1]
		want := int(done * barWidth / total)
		if got := len(strings.TrimRight(cells, " ")); got != want {
			t.Fatalf("bar(%d, %d) = %q: got %d cells filled, want %d", done, total, b, got, want)
		}
		wantHead := want > 0 && want < barWidth
		if got := strings.Contains(cells, ">"); got != wantHead {
			t.Fatalf("bar(%d, %d) = %q: head '>' shown %v, want %v", done, total, b, got, wantHead)
		}
		if got := percent(done, total); got != int(done*100/total) {
			t.Fatalf("percent(%d, %d) = %d, want %d", done, total, got, done*100/total)
		}
	}
	// Near the int64 limit the arithmetic must neither overflow nor panic.
	const big = int64(1) << 62
	if got := filled(big/2, big); got != barWidth/2 {
		t.Errorf("filled(2^61, 2^62): got %d, want %d", got, barWidth/2)
	}
	if got := percent(big/2, big); got != 50 {
		t.Errorf("percent(2^61, 2^62): got %d, want 50", got)
	}
}

func TestThrottle(t *testing.T) {
	tests := []struct {
		name     string
		live     bool
		interval time.Duration // the default for the mode
	}{
		{"live", true, 100 * time.Millisecond},
		{"plain", false, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			var buf bytes.Buffer
			b := newBar(&buf, 100, tt.live, clk.now)
			step := tt.interval / 4
			// Updates at 0, 1/4, 2/4, ... of the interval: 0, 4 and 8 are
			// due, the rest are dropped; 9 is drawn by Finish.
			for i := int64(0); i <= 9; i++ {
				b.Update(i, fmt.Sprintf("s%d", i))
				clk.advance(step)
			}
			b.Finish()
			var lines []string
			if tt.live {
				lines = liveLines(t, buf.String())
			} else {
				lines = strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			}
			var got []string
			for _, l := range lines {
				f := strings.Fields(l)
				got = append(got, f[len(f)-1])
				if strings.Contains(l, "ETA") {
					got[len(got)-1] = f[len(f)-3]
				}
			}
			want := []string{"s0", "s4", "s8", "s9"}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("statuses drawn: got %q, want %q (lines %q)", got, want, lines)
			}
		})
	}
}

func TestReachingTotalIsDrawn(t *testing.T) {
	clk := newClock()
	var buf bytes.Buffer
	b := newBar(&buf, 10, false, clk.now)
	b.Update(1, "")
	b.Update(5, "")   // dropped: too soon
	b.Update(10, "")  // drawn: reaches the total
	b.Update(11, "")  // dropped: too soon, total already shown
	b.Update(11, "")  // dropped
	b.Update(10, "x") // dropped
	b.Update(10, "")  // dropped; the state is again what was drawn
	b.Finish()        // nothing new to draw
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " 1/10") || !strings.Contains(lines[1], "10/10") {
		t.Errorf("got lines %q, want the 1/10 and 10/10 lines only", lines)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-5 * time.Second, "0s"},
		{1400 * time.Millisecond, "1s"},
		{59 * time.Second, "59s"},
		{59600 * time.Millisecond, "1m00s"},
		{62 * time.Second, "1m02s"},
		{3599 * time.Second, "59m59s"},
		{3600 * time.Second, "1h00m"},
		{3700 * time.Second, "1h01m"},
		{50 * time.Hour, "50h00m"},
		{maxETA, "9999h00m"},
	}
	for _, tt := range tests {
		if got := formatDuration(tt.d); got != tt.want {
			t.Errorf("formatDuration(%v): got %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestETA(t *testing.T) {
	tests := []struct {
		elapsed     time.Duration
		done, total int64
		want        time.Duration
	}{
		{10 * time.Second, 1, 2, 10 * time.Second},
		{10 * time.Second, 1, 11, 100 * time.Second},
		{62 * time.Second, 500, 1000, 62 * time.Second},
		{time.Hour, 1, 1 << 62, maxETA}, // capped, no overflow
	}
	for _, tt := range tests {
		if got := eta(tt.elapsed, tt.done, tt.total); got != tt.want {
			t.Errorf("eta(%v, %d, %d): got %v, want %v", tt.elapsed, tt.done, tt.total, got, tt.want)
		}
	}
}

func TestETAFromClock(t *testing.T) {
	clk := newClock()
	var buf bytes.Buffer
	b := newBar(&buf, 1000, false, clk.now)
	clk.advance(62 * time.Second)
	b.Update(500, "")
	if got, want := buf.String(), "[===========>            ]  50%  500/1000  ETA 1m02s\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestUnknownTotal(t *testing.T) {
	var buf bytes.Buffer
	b := newBar(&buf, 0, true, newClock().now)
	b.Update(450, "loss 1.234")
	b.Finish()
	out := buf.String()
	if want := "\r450  loss 1.234\x1b[K\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	for _, l := range liveLines(t, out) {
		for _, bad := range []string{"%", "ETA", "["} {
			if strings.Contains(l, bad) {
				t.Errorf("line %q contains %q, want no bar, percentage or ETA", l, bad)
			}
		}
	}
	// A negative total is unknown too.
	buf.Reset()
	b = newBar(&buf, -5, false, newClock().now)
	b.Update(3, "")
	if got, want := buf.String(), "3\n"; got != want {
		t.Errorf("negative total: got %q, want %q", got, want)
	}
}

func TestLiveWidth(t *testing.T) {
	var buf bytes.Buffer
	b := newBar(&buf, 1000, true, newClock().now)
	b.SetInterval(0)
	statuses := []string{
		strings.Repeat("é", 500),
		strings.Repeat("loss 1.234 ", 30),
		"short",
	}
	for i, s := range statuses {
		b.Update(int64(100*(i+1)), s)
	}
	for _, l := range liveLines(t, buf.String()) {
		if n := utf8.RuneCountInString(l); n > maxLiveWidth {
			t.Errorf("live line %q is %d characters, want at most %d", l, n, maxLiveWidth)
		}
		if !utf8.ValidString(l) {
			t.Errorf("live line %q is not valid UTF-8: a rune was cut", l)
		}
	}
}

func TestSanitize(t *testing.T) {
	var buf bytes.Buffer
	b := newBar(&buf, 0, false, newClock().now)
	b.Update(1, "a\nb\rc\x1b[2Jd\te")
	if got, want := buf.String(), "1  a b c [2Jd e\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestShorten(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello", 10, "hello"},
		{"hello world", 8, "hello..."},
		{"héllo world", 8, "héllo..."},
		{"hello", 4, "h..."},
		{"hello", 3, ""},
		{"hello", -10, ""},
	}
	for _, tt := range tests {
		if got := shorten(tt.s, tt.n); got != tt.want {
			t.Errorf("shorten(%q, %d): got %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

func TestFinish(t *testing.T) {
	for _, live := range []bool{true, false} {
		t.Run(fmt.Sprintf("live=%v", live), func(t *testing.T) {
			var buf bytes.Buffer
			b := newBar(&buf, 10, live, newClock().now)
			b.Update(3, "x")
			b.Update(4, "y") // dropped by the interval; Finish must draw it
			b.Finish()
			after := buf.Len()
			b.Finish()
			b.Update(5, "z")
			if buf.Len() != after {
				t.Errorf("second Finish or later Update wrote %q, want nothing", buf.String()[after:])
			}
			out := buf.String()
			if !strings.Contains(out, "4/10  y") {
				t.Errorf("output %q lacks the final state 4/10 y", out)
			}
			if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != map[bool]int{true: 1, false: 2}[live] {
				t.Errorf("output %q: want it to end in a newline, with one line per render when plain", out)
			}
		})
	}
	t.Run("finish without updates", func(t *testing.T) {
		var buf bytes.Buffer
		b := newBar(&buf, 10, true, newClock().now)
		b.Finish()
		if got, want := buf.String(), "\r[                        ]   0%  0/10\x1b[K\n"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}

func TestConcurrentUpdate(t *testing.T) {
	const goroutines, updates = 8, 500
	var buf bytes.Buffer
	b := New(&buf, goroutines*updates, true)
	b.SetInterval(0)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range updates {
				b.Update(int64(g*updates+i), fmt.Sprintf("goroutine %d", g))
			}
		})
	}
	wg.Wait()
	b.Finish()
	lines := liveLines(t, buf.String())
	// With a zero interval every update is drawn; Finish adds nothing, the
	// state being the last drawn.
	if len(lines) != goroutines*updates {
		t.Errorf("got %d lines, want %d", len(lines), goroutines*updates)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "[") || !strings.Contains(l, "goroutine ") {
			t.Fatalf("malformed line %q", l)
		}
	}
	if err := b.Err(); err != nil {
		t.Errorf("Err: got %v, want nil", err)
	}
}

// failWriter fails every write and counts the calls.
type failWriter struct{ calls int }

var errDiskFull = errors.New("disk full")

func (w *failWriter) Write(p []byte) (int, error) {
	w.calls++
	return 0, errDiskFull
}

func TestWriteError(t *testing.T) {
	w := &failWriter{}
	b := newBar(w, 10, false, newClock().now)
	b.SetInterval(0)
	b.Update(1, "")
	b.Update(2, "")
	b.Finish()
	if err := b.Err(); !errors.Is(err, errDiskFull) {
		t.Errorf("Err: got %v, want one wrapping %v", err, errDiskFull)
	}
	if w.calls != 1 {
		t.Errorf("writes attempted: got %d, want 1 (none after the first failure)", w.calls)
	}
}

func TestNilWriter(t *testing.T) {
	b := New(nil, 10, true)
	b.Update(5, "x")
	b.Finish()
	if err := b.Err(); err != nil {
		t.Errorf("Err: got %v, want nil", err)
	}
}

func TestIsTerminal(t *testing.T) {
	if IsTerminal(nil) {
		t.Errorf("IsTerminal(nil): got true, want false")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	if IsTerminal(f) {
		t.Errorf("IsTerminal(regular file): got true, want false")
	}
	f.Close()
	if IsTerminal(f) {
		t.Errorf("IsTerminal(closed file): got true, want false")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(w) {
		t.Errorf("IsTerminal(pipe): got true, want false")
	}
	if null, err := os.Open(os.DevNull); err == nil {
		defer null.Close()
		if fi, err := null.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && !IsTerminal(null) {
			t.Errorf("IsTerminal(%s), a character device: got false, want true", os.DevNull)
		}
	}
}
