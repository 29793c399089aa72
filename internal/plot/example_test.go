package plot_test

import (
	"bytes"
	"fmt"
	"image/png"

	"github.com/gocurrent/gocurrent/internal/plot"
)

func ExampleEncode() {
	var buf bytes.Buffer
	err := plot.Encode(&buf, plot.Chart{
		Title:  "char-RNN loss",
		XLabel: "step",
		YLabel: "loss",
		Curves: []plot.Curve{
			{Name: "train", X: []float64{0, 100, 200, 300}, Y: []float64{4.2, 2.9, 2.1, 1.8}},
			{Name: "validation", X: []float64{0, 300}, Y: []float64{4.2, 1.9}},
		},
		Width:  400,
		Height: 250,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	img, err := png.Decode(&buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(img.Bounds().Size())

	err = plot.Encode(&buf, plot.Chart{Curves: []plot.Curve{{X: []float64{1, 2}, Y: []float64{1}}}})
	fmt.Println(err)
	// Output:
	// (400,250)
	// plot: curve 0 ("") has len(X) = 2 but len(Y) = 1; they must match
}
