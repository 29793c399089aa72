// Package plot draws line charts, such as training and validation loss
// against steps, as PNG images, using only the standard library.
//
// A [Chart] holds one or more [Curve] values; [Encode] draws it to any
// io.Writer and [WriteFile] replaces a file atomically, so a chart refreshed
// while training never appears half written to a viewer.
//
// # The picture
//
// The image has a white background, a title on top, a legend under it with
// each named curve's name in the curve's colour, and a plot area with axes,
// light grid lines and about five tick values per axis, each a multiple of
// 1, 2 or 5 times a power of ten. The axes span the finite data with a small
// margin (2% of the x range, 5% of the y range); a range of a single value is
// widened by a tenth of the value, or by 1 around zero. Lines are 2 pixels
// wide and not anti-aliased. Text uses a built-in 5x7 pixel font covering
// printable ASCII; any other character is drawn as a small hollow box.
//
// Points with a NaN or infinite coordinate are skipped and break the line, so
// a diverged run shows as a gap rather than a spike; a point without finite
// neighbours is drawn as a small square. A curve with no finite point is left
// out of the plot area but keeps its legend entry.
//
// # Errors
//
// Encode and WriteFile return an error, never panic, for a chart they cannot
// draw: no curves, no points in any curve, a curve whose X and Y lengths
// differ, a size outside 200..10000 by 150..10000 pixels, or data whose range
// overflows float64. Errors from the writer or the file system are wrapped
// and can be matched with errors.Is, e.g. against fs.ErrNotExist.
//
// # Concurrency
//
// The functions hold no state; concurrent calls are safe as long as each call
// has its own writer and path, and no one changes a Chart's slices while it
// is being drawn.
//
// # Example
//
//	err := plot.WriteFile("loss.png", plot.Chart{
//		Title:  "char-RNN loss",
//		XLabel: "step",
//		YLabel: "loss (nats/char)",
//		Curves: []plot.Curve{
//			{Name: "train", X: steps, Y: trainLoss},
//			{Name: "validation", X: evalSteps, Y: valLoss},
//		},
//	})
package plot
