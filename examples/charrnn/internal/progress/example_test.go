package progress_test

import (
	"os"

	"github.com/gocurrent/gocurrent/examples/charrnn/internal/progress"
)

func ExampleBar() {
	// Plain lines, as written to a log file; live output would redraw one
	// line in place instead.
	bar := progress.New(os.Stdout, 1000, false)
	bar.Update(0, "warming up")
	bar.Update(250, "loss 2.345") // dropped: within 10s of the last line
	bar.Update(1000, "loss 1.234")
	bar.Finish() // the final state is already shown
	// Output:
	// [                        ]   0%  0/1000  warming up
	// [========================] 100%  1000/1000  loss 1.234
}

func ExampleBar_unknownTotal() {
	bar := progress.New(os.Stdout, 0, false)
	bar.Update(450, "loss 1.234  12,345 tok/s")
	bar.Finish()
	// Output:
	// 450  loss 1.234  12,345 tok/s
}
