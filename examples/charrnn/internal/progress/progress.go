package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults and limits of the rendered line.
const (
	// defaultLiveInterval is the default time between redraws of a live line.
	defaultLiveInterval = 100 * time.Millisecond
	// defaultPlainInterval is the default time between plain log lines.
	defaultPlainInterval = 10 * time.Second
	// barWidth is the number of cells between the brackets.
	barWidth = 24
	// maxLiveWidth is the most characters (runes; a wide character
	// counts as one) a live line may take.
	maxLiveWidth = 120
	// ellipsis ends a status shortened to fit a live line.
	ellipsis = "..."
)

// IsTerminal reports whether f is a character device (a terminal), using f.Stat() and os.ModeCharDevice; false on error.
//
// A nil f is not a terminal. Other character devices, such as /dev/null,
// also report true; that only means progress written there is drawn live and
// discarded.
func IsTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	return fi.Mode()&os.ModeCharDevice != 0
}

// Bar renders progress to w. With live true it redraws one line in place ("\r" + line + clear-to-end-of-line "\x1b[K"), at most every Interval (default 100ms) except the first and the final update; with live false it writes a plain line (ending in "\n") at most every Interval (default 10s for non-live) plus the final one.
//
// The zero Bar is not usable; create one with [New]. The package
// documentation describes the line and when it is drawn.
type Bar struct {
	w     io.Writer
	total int64 // 0 when unknown
	live  bool
	now   func() time.Time // the clock; tests replace it
	start time.Time        // when the Bar was created

	mu         sync.Mutex
	interval   time.Duration
	done       int64  // latest reported units done
	status     string // latest reported status, sanitised
	drawn      bool   // whether anything has been rendered
	lastDraw   time.Time
	drawnDone  int64  // done at the last render
	drawnState string // status at the last render
	finished   bool
	err        error // first write error
}

// New returns a Bar reporting to w on progress towards total units; a total
// of 0 or less means the total is unknown. live selects in-place redrawing
// for a terminal (see [IsTerminal]) over plain log lines. A nil w discards
// the output. The ETA counts from the call to New.
func New(w io.Writer, total int64, live bool) *Bar {
	return newBar(w, total, live, time.Now)
}

// newBar is New with the clock given.
func newBar(w io.Writer, total int64, live bool, now func() time.Time) *Bar {
	if w == nil {
		w = io.Discard
	}
	interval := defaultPlainInterval
	if live {
		interval = defaultLiveInterval
	}
	return &Bar{
		w:        w,
		total:    max(total, 0),
		live:     live,
		now:      now,
		start:    now(),
		interval: interval,
	}
}

// SetInterval overrides the redraw interval (tests use 0 to render every update).
//
// A negative d counts as 0.
func (b *Bar) SetInterval(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.interval = max(d, 0)
}

// Update reports done units out of total (total 0 means unknown: no bar, no percentage, no ETA) and a status text shown after the bar (e.g. "loss 1.234  12,345 tok/s"). It is safe for concurrent use.
//
// A negative done counts as 0. Updates after [Bar.Finish] are ignored.
func (b *Bar) Update(done int64, status string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.done = max(done, 0)
	b.status = sanitize(status)
	now := b.now()
	// Reaching the total is drawn at once, but only the first time, so a
	// caller that overshoots does not get a line per update.
	reached := b.total > 0 && b.done >= b.total && b.drawnDone < b.total
	if b.drawn && !reached && now.Sub(b.lastDraw) < b.interval {
		return
	}
	b.render(now, false)
}

// Finish draws the final state and, when live, ends the line with "\n". Calling it twice is harmless.
//
// The final state is not drawn again when it is what was last drawn, so a
// plain log does not repeat its last line.
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.finished = true
	if !b.drawn || b.done != b.drawnDone || b.status != b.drawnState {
		b.render(b.now(), true)
		return
	}
	if b.live {
		b.write("\n")
	}
}

// Err returns the first error from writing to the Bar's writer, or nil.
// After an error the Bar writes nothing more.
func (b *Bar) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// render draws the current state at time now; final ends a live line. The
// caller holds b.mu.
func (b *Bar) render(now time.Time, final bool) {
	b.drawn = true
	b.lastDraw = now
	b.drawnDone, b.drawnState = b.done, b.status
	line := formatLine(b.total, b.done, b.status, now.Sub(b.start), b.live)
	if !b.live {
		b.write(line + "\n")
		return
	}
	s := "\r" + line + "\x1b[K"
	if final {
		s += "\n"
	}
	b.write(s)
}

// write writes s unless an earlier write failed. The caller holds b.mu.
func (b *Bar) write(s string) {
	if b.err != nil {
		return
	}
	if _, err := io.WriteString(b.w, s); err != nil {
		b.err = fmt.Errorf("progress: writing: %w", err)
	}
}

// formatLine renders one progress line, without "\r", escapes or newline.
// When limit is true the line is kept within maxLiveWidth characters by
// shortening the status.
func formatLine(total, done int64, status string, elapsed time.Duration, limit bool) string {
	var head, tail string
	if total > 0 {
		head = fmt.Sprintf("%s %3d%%  %d/%d", bar(done, total), percent(done, total), done, total)
		if done > 0 && done < total {
			tail = "ETA " + formatDuration(eta(elapsed, done, total))
		}
	} else {
		head = fmt.Sprintf("%d", done)
	}
	if limit && status != "" {
		room := maxLiveWidth - utf8.RuneCountInString(head) - 2 // "  " before the status
		if tail != "" {
			room -= 2 + utf8.RuneCountInString(tail)
		}
		status = shorten(status, room)
	}
	parts := []string{head}
	if status != "" {
		parts = append(parts, status)
	}
	if tail != "" {
		parts = append(parts, tail)
	}
	return strings.Join(parts, "  ")
}

// filled is the number of bar cells filled for done out of total > 0.
func filled(done, total int64) int {
	if done >= total {
		return barWidth
	}
	// done < total, so done*barWidth cannot overflow unless done is near
	// the int64 limit; float64 keeps that case approximate instead.
	if done > (1<<62)/barWidth {
		return int(float64(done) / float64(total) * barWidth)
	}
	return int(done * barWidth / total)
}

// bar renders the bracketed bar for done out of total > 0.
func bar(done, total int64) string {
	n := filled(done, total)
	var sb strings.Builder
	sb.WriteByte('[')
	switch {
	case n == barWidth:
		sb.WriteString(strings.Repeat("=", barWidth))
	case n > 0:
		sb.WriteString(strings.Repeat("=", n-1))
		sb.WriteByte('>')
		sb.WriteString(strings.Repeat(" ", barWidth-n))
	default:
		sb.WriteString(strings.Repeat(" ", barWidth))
	}
	sb.WriteByte(']')
	return sb.String()
}

// percent is floor(100*done/total), capped at 100, for total > 0.
func percent(done, total int64) int {
	if done >= total {
		return 100
	}
	if done > (1<<62)/100 {
		return int(float64(done) / float64(total) * 100)
	}
	return int(done * 100 / total)
}

// maxETA caps the estimate; anything longer prints as this.
const maxETA = 9999 * time.Hour

// eta estimates the time left from the average rate so far, for
// 0 < done < total.
func eta(elapsed time.Duration, done, total int64) time.Duration {
	left := float64(elapsed) * float64(total-done) / float64(done)
	if left >= float64(maxETA) {
		return maxETA
	}
	return time.Duration(left)
}

// formatDuration renders d rounded to the second as "45s", "1m02s" or
// "1h01m" (hours and minutes, seconds dropped); negative d counts as 0.
func formatDuration(d time.Duration) string {
	s := int64(max(d, 0).Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
}

// sanitize replaces control characters, which would break the line, with
// spaces.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// shorten cuts s to at most n characters, ending it with an ellipsis when
// cut; when n leaves no room for any of s, it returns "".
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= len(ellipsis) {
		return ""
	}
	keep := n - len(ellipsis)
	for i := range s {
		if keep == 0 {
			return s[:i] + ellipsis
		}
		keep--
	}
	return s
}
