// Package progress shows how far a long job, such as training, has got: a
// bar redrawn in place on a terminal, or plain log lines when the output is a
// file or a pipe.
//
// A [Bar] is told how many units are done out of a total, together with a
// short status text, and renders a line such as
//
//	[=========>              ]  45%  450/1000  loss 1.234  12345 tok/s  ETA 1m02s
//
// or, when the total is unknown (0), just the count and the status:
//
//	450  loss 1.234  12345 tok/s
//
// The bar is 24 characters wide. Of its cells, floor(24*done/total) are
// filled: '=' for each but the last, which is '>' until the bar is full. The
// percentage is floor(100*done/total), and both are capped at 100 when done
// passes total. The ETA is the time so far scaled by the work left,
// elapsed*(total-done)/done; it is shown once done > 0 and until done reaches
// total, as "45s", "1m02s" or "1h01m".
//
// # Live and plain output
//
// With live output the line is redrawn in place: each redraw writes "\r",
// the line and "\x1b[K" (clear to end of line), at most every 100ms, and no
// newline until [Bar.Finish]. A live line is kept within 120 characters
// (runes, so a double-width character counts as one) by shortening the
// status, or leaving it out when not even a few characters of it fit. Use
// [IsTerminal] to decide: live output written to a file fills it with
// carriage returns. Without live output each render is a whole line ending
// in "\n", at most every 10s. In both modes the first update is always
// drawn, so is the first update that reaches the total, and Finish draws the
// final state unless it was the last one drawn; updates in between that come
// sooner than the interval are dropped, not queued.
//
// Control characters in the status (newlines, tabs, escapes) are replaced by
// spaces so that they cannot break the line.
//
// # Concurrency
//
// A Bar's methods are safe for concurrent use; each render is a single Write
// call made while holding the Bar's lock, so lines from several goroutines
// never interleave.
//
// # Errors
//
// A Bar does not stop the job it reports on when its writer fails: the first
// write error is kept, no further output is attempted, and [Bar.Err]
// returns it.
//
// # Example
//
//	bar := progress.New(os.Stderr, int64(steps), progress.IsTerminal(os.Stderr))
//	for step := range steps {
//		loss := trainer.Step(ctx)
//		bar.Update(int64(step+1), fmt.Sprintf("loss %.3f", loss))
//	}
//	bar.Finish()
package progress
