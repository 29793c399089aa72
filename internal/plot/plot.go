package plot

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"

	"github.com/gocurrent/gocurrent/train"
)

// Curve is one line: points (X[i], Y[i]) drawn in order.
//
// A NaN or infinite coordinate is skipped and breaks the line there; a point
// with no finite neighbour is drawn as a small filled square. Name labels the
// curve in the legend; a curve with an empty Name has no legend entry.
type Curve struct {
	Name string
	X, Y []float64
}

// Chart is what is drawn.
//
// Curves are coloured in order: blue, orange, green, red, purple, brown, pink,
// grey, olive, cyan, then the same again. Width and Height are in pixels; 0
// means the default of 800 and 500 respectively, and otherwise the width must
// be in [200, 10000] and the height in [150, 10000].
type Chart struct {
	Title, XLabel, YLabel string
	Curves                []Curve
	Width, Height         int // pixels; 0 means 800 x 500
}

// Size limits and defaults, in pixels.
const (
	defaultWidth  = 800
	defaultHeight = 500
	minWidth      = 200
	minHeight     = 150
	maxSide       = 10000
)

// palette is the curve colours, in order (matplotlib's "tab10").
var palette = [...]color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
	{0xbc, 0xbd, 0x22, 0xff}, // olive
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
}

var (
	white = color.RGBA{0xff, 0xff, 0xff, 0xff}
	black = color.RGBA{0x00, 0x00, 0x00, 0xff}
	grid  = color.RGBA{0xe6, 0xe6, 0xe6, 0xff}
)

// curveColor is the colour of the i-th curve.
func curveColor(i int) color.RGBA { return palette[i%len(palette)] }

// Encode draws c and writes it to w as a PNG.
//
// It returns an error, and writes nothing, when c has no curves, when no curve
// has any point, when a curve's X and Y differ in length, when the size is out
// of range, or when the finite data span a range too wide for float64 (about
// 1e308). A chart whose points are all NaN or infinite is drawn with empty
// axes over 0..1.
func Encode(w io.Writer, c Chart) error {
	if w == nil {
		return errors.New("plot: nil writer")
	}
	img, err := render(c)
	if err != nil {
		return err
	}
	if err := png.Encode(w, img); err != nil {
		return fmt.Errorf("plot: encoding PNG: %w", err)
	}
	return nil
}

// WriteFile writes the PNG to path as train.WriteFile writes a checkpoint:
// atomically (a temporary file in the same directory, synced, renamed; on
// error an existing file at path is untouched and nothing is left
// behind), a regular file only (never over a directory or a device),
// through a symbolic link, with the usual mode (0666 under the umask, or
// the replaced file's).
//
// The chart is drawn and encoded in memory before any file is created, so an
// invalid chart never touches the file system.
func WriteFile(path string, c Chart) error {
	var buf bytes.Buffer
	if err := Encode(&buf, c); err != nil {
		return err
	}
	if err := train.WriteFile(path, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// validate checks c and returns its size in pixels.
func validate(c Chart) (width, height int, err error) {
	width, height = c.Width, c.Height
	if width == 0 {
		width = defaultWidth
	}
	if height == 0 {
		height = defaultHeight
	}
	if width < minWidth || width > maxSide || height < minHeight || height > maxSide {
		return 0, 0, fmt.Errorf("plot: size %dx%d out of range: width must be in [%d, %d] and height in [%d, %d] (0 means %dx%d)",
			c.Width, c.Height, minWidth, maxSide, minHeight, maxSide, defaultWidth, defaultHeight)
	}
	if len(c.Curves) == 0 {
		return 0, 0, errors.New("plot: chart has no curves")
	}
	points := 0
	for i, cv := range c.Curves {
		if len(cv.X) != len(cv.Y) {
			return 0, 0, fmt.Errorf("plot: curve %d (%q) has len(X) = %d but len(Y) = %d; they must match",
				i, cv.Name, len(cv.X), len(cv.Y))
		}
		points += len(cv.X)
	}
	if points == 0 {
		return 0, 0, fmt.Errorf("plot: none of the %d curves has any points", len(c.Curves))
	}
	return width, height, nil
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// dataRange is the smallest box holding every finite point of c; ok is false
// when there is none.
func dataRange(c Chart) (xlo, xhi, ylo, yhi float64, ok bool) {
	xlo, ylo = math.Inf(1), math.Inf(1)
	xhi, yhi = math.Inf(-1), math.Inf(-1)
	for _, cv := range c.Curves {
		for i := range cv.X {
			x, y := cv.X[i], cv.Y[i]
			if !finite(x) || !finite(y) {
				continue
			}
			xlo, xhi = math.Min(xlo, x), math.Max(xhi, x)
			ylo, yhi = math.Min(ylo, y), math.Max(yhi, y)
			ok = true
		}
	}
	return xlo, xhi, ylo, yhi, ok
}

// axisRange widens [lo, hi] by the fraction margin of its span on each side,
// or, when lo == hi, by a tenth of the value (1 for zero). It fails when the
// result is not a finite range with lo < hi.
func axisRange(lo, hi, margin float64) (float64, float64, error) {
	if lo == hi {
		pad := math.Abs(lo) / 10
		if pad == 0 || lo-pad == lo || lo+pad == lo {
			pad = 1
		}
		lo, hi = lo-pad, hi+pad
	} else {
		pad := (hi - lo) * margin
		lo, hi = lo-pad, hi+pad
	}
	if !finite(lo) || !finite(hi) || !finite(hi-lo) || !(lo < hi) {
		return 0, 0, fmt.Errorf("plot: data range cannot be drawn: %g .. %g", lo, hi)
	}
	return lo, hi, nil
}

// layout is where each part of the chart goes.
type layout struct {
	width, height int
	plot          image.Rectangle // the data area; axes lie just outside it
	xlo, xhi      float64         // data values at plot's left and right edges
	ylo, yhi      float64         // data values at plot's bottom and top edges
	xticks        axisTicks
	yticks        axisTicks
	titleScale    int
	titleY        int
	legendY       int           // top of the first legend row
	legend        [][]legendRow // legend entries, row by row
	legendMore    int           // entries left out for lack of room
}

// legendRow is one legend entry.
type legendRow struct {
	curve int // index into Chart.Curves
	x     int // left edge of its swatch
}

// Spacing, in pixels.
const (
	pad          = 8  // around the image edge and between blocks
	tickLen      = 4  // length of a tick mark
	swatchWidth  = 16 // length of a legend swatch line
	legendGap    = 16 // between legend entries
	legendRowH   = 12 // height of a legend row
	minPlotSide  = 40 // below this the legend is cut back
	pointSquare  = 2  // a lone point is a square of side 2*pointSquare+1
	tickTarget   = 5  // tick values wanted per axis
	xMargin      = 0.02
	yMargin      = 0.05
	textGap      = 4 // between a tick mark and its label
	labelSpacing = 6 // minimum gap between neighbouring x tick labels
)

// computeLayout validates c and places every part of it.
func computeLayout(c Chart) (layout, error) {
	w, h, err := validate(c)
	if err != nil {
		return layout{}, err
	}
	l := layout{width: w, height: h}
	xlo, xhi, ylo, yhi, ok := dataRange(c)
	if !ok {
		xlo, xhi, ylo, yhi = 0, 1, 0, 1
	}
	if l.xlo, l.xhi, err = axisRange(xlo, xhi, xMargin); err != nil {
		return layout{}, err
	}
	if l.ylo, l.yhi, err = axisRange(ylo, yhi, yMargin); err != nil {
		return layout{}, err
	}
	l.xticks = niceTicks(l.xlo, l.xhi, tickTarget)
	l.yticks = niceTicks(l.ylo, l.yhi, tickTarget)

	// Left: y label (turned), y tick labels, tick marks.
	left := pad
	if c.YLabel != "" {
		left += textHeight(1) + pad
	}
	labelW := 0
	for _, s := range l.yticks.labels {
		labelW = max(labelW, textWidth(s, 1))
	}
	left += min(labelW, w/3) + textGap + tickLen + 1
	// Right: room for half of the last x tick label.
	right := pad * 2
	if n := len(l.xticks.labels); n > 0 {
		right = max(right, textWidth(l.xticks.labels[n-1], 1)/2+pad)
	}
	// Bottom: tick marks, x tick labels, x label.
	bottom := pad + tickLen + textGap + textHeight(1) + 1
	if c.XLabel != "" {
		bottom += textHeight(1) + textGap
	}
	// Top: title, legend.
	l.titleScale = 1
	if w >= 400 {
		l.titleScale = 2
	}
	top := pad
	if c.Title != "" {
		l.titleY = top
		top += textHeight(l.titleScale) + textGap
	}
	l.legendY = top
	plotW := w - left - right
	l.legend = layoutLegend(c, left, plotW)
	for len(l.legend) > 1 && h-bottom-(top+len(l.legend)*legendRowH+pad) < max(minPlotSide, h/2) {
		last := l.legend[len(l.legend)-1]
		l.legend = l.legend[:len(l.legend)-1]
		l.legendMore += len(last)
	}
	if len(l.legend) > 0 {
		top += len(l.legend)*legendRowH + pad
	} else {
		top += pad
	}
	l.plot = image.Rect(left, top, w-right, h-bottom)
	if l.plot.Dx() < minPlotSide || l.plot.Dy() < minPlotSide {
		return layout{}, fmt.Errorf("plot: a %dx%d image leaves only %dx%d pixels for the data; make it larger or the labels shorter",
			w, h, l.plot.Dx(), l.plot.Dy())
	}
	return l, nil
}

// layoutLegend places the named curves' entries in rows no wider than width,
// starting at x = left; an entry wider than a row gets a row of its own.
func layoutLegend(c Chart, left, width int) (rows [][]legendRow) {
	var row []legendRow
	x := left
	for i, cv := range c.Curves {
		if cv.Name == "" {
			continue
		}
		entryW := swatchWidth + textGap + textWidth(cv.Name, 1)
		if x > left && x+entryW > left+width {
			rows = append(rows, row)
			row, x = nil, left
		}
		row = append(row, legendRow{curve: i, x: x})
		x += entryW + legendGap
	}
	if len(row) > 0 {
		rows = append(rows, row)
	}
	return rows
}

// toPixel maps a data point to image coordinates inside l.plot.
func (l *layout) toPixel(x, y float64) (int, int) {
	fx := (x - l.xlo) / (l.xhi - l.xlo)
	fy := (y - l.ylo) / (l.yhi - l.ylo)
	px := l.plot.Min.X + int(math.Round(fx*float64(l.plot.Dx()-1)))
	py := l.plot.Max.Y - 1 - int(math.Round(fy*float64(l.plot.Dy()-1)))
	return px, py
}

// render draws c.
func render(c Chart) (*image.RGBA, error) {
	l, err := computeLayout(c)
	if err != nil {
		return nil, err
	}
	img := image.NewRGBA(image.Rect(0, 0, l.width, l.height))
	fill(img, img.Rect, white)

	// Grid lines under the data.
	for _, v := range l.xticks.values {
		x, _ := l.toPixel(v, l.ylo)
		fill(img, image.Rect(x, l.plot.Min.Y, x+1, l.plot.Max.Y), grid)
	}
	for _, v := range l.yticks.values {
		_, y := l.toPixel(l.xlo, v)
		fill(img, image.Rect(l.plot.Min.X, y, l.plot.Max.X, y+1), grid)
	}

	for i, cv := range c.Curves {
		drawCurve(img, &l, cv, curveColor(i))
	}

	// Axes, just outside the data area, with ticks and labels.
	fill(img, image.Rect(l.plot.Min.X-1, l.plot.Min.Y, l.plot.Min.X, l.plot.Max.Y+1), black)
	fill(img, image.Rect(l.plot.Min.X-1, l.plot.Max.Y, l.plot.Max.X, l.plot.Max.Y+1), black)
	labelTop := l.plot.Max.Y + 1 + tickLen + textGap
	prevRight := math.MinInt
	for i, v := range l.xticks.values {
		x, _ := l.toPixel(v, l.ylo)
		fill(img, image.Rect(x, l.plot.Max.Y+1, x+1, l.plot.Max.Y+1+tickLen), black)
		s := l.xticks.labels[i]
		lx := x - textWidth(s, 1)/2
		if lx < prevRight+labelSpacing {
			continue // would overlap its neighbour
		}
		drawText(img, lx, labelTop, s, 1, black, false)
		prevRight = lx + textWidth(s, 1)
	}
	for i, v := range l.yticks.values {
		_, y := l.toPixel(l.xlo, v)
		fill(img, image.Rect(l.plot.Min.X-1-tickLen, y, l.plot.Min.X-1, y+1), black)
		s := l.yticks.labels[i]
		lx := l.plot.Min.X - 1 - tickLen - textGap - textWidth(s, 1)
		drawText(img, lx, y-3, s, 1, black, false) // 3: half a capital's height
	}

	if c.Title != "" {
		tw := textWidth(c.Title, l.titleScale)
		drawText(img, (l.width-tw)/2, l.titleY, c.Title, l.titleScale, black, false)
	}
	if c.XLabel != "" {
		tw := textWidth(c.XLabel, 1)
		x := l.plot.Min.X + (l.plot.Dx()-tw)/2
		drawText(img, x, labelTop+textHeight(1)+textGap, c.XLabel, 1, black, false)
	}
	if c.YLabel != "" {
		tw := textWidth(c.YLabel, 1)
		y := l.plot.Min.Y + (l.plot.Dy()+tw)/2
		drawText(img, pad, y, c.YLabel, 1, black, true)
	}

	for r, row := range l.legend {
		y := l.legendY + r*legendRowH
		for _, e := range row {
			col := curveColor(e.curve)
			fill(img, image.Rect(e.x, y+2, e.x+swatchWidth, y+4), col)
			drawText(img, e.x+swatchWidth+textGap, y, c.Curves[e.curve].Name, 1, col, false)
		}
	}
	if l.legendMore > 0 && len(l.legend) > 0 {
		last := l.legend[len(l.legend)-1]
		e := last[len(last)-1]
		x := e.x + swatchWidth + textGap + textWidth(c.Curves[e.curve].Name, 1) + legendGap
		y := l.legendY + (len(l.legend)-1)*legendRowH
		drawText(img, x, y, fmt.Sprintf("+%d more", l.legendMore), 1, black, false)
	}
	return img, nil
}

// drawCurve draws cv's finite points joined by 2-pixel lines, each run of
// finite points separately; a run of one point is a small square.
func drawCurve(img *image.RGBA, l *layout, cv Curve, col color.RGBA) {
	clip := l.plot
	var run [][2]int
	flush := func() {
		switch len(run) {
		case 0:
		case 1:
			p := run[0]
			fill(img, image.Rect(p[0]-pointSquare, p[1]-pointSquare, p[0]+pointSquare+1, p[1]+pointSquare+1).Intersect(clip), col)
		default:
			for i := 1; i < len(run); i++ {
				line(img, clip, run[i-1][0], run[i-1][1], run[i][0], run[i][1], col)
			}
		}
		run = run[:0]
	}
	for i := range cv.X {
		x, y := cv.X[i], cv.Y[i]
		if !finite(x) || !finite(y) {
			flush()
			continue
		}
		px, py := l.toPixel(x, y)
		run = append(run, [2]int{px, py})
	}
	flush()
}

// line draws a 2-pixel-wide line from (x0, y0) to (x1, y1) with Bresenham's
// algorithm, each step setting a 2x2 block, clipped to clip.
func line(img *image.RGBA, clip image.Rectangle, x0, y0, x1, y1 int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		fill(img, image.Rect(x0, y0, x0+2, y0+2).Intersect(clip), col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// fill paints r, clipped to img, with col.
func fill(img *image.RGBA, r image.Rectangle, col color.RGBA) {
	r = r.Intersect(img.Rect)
	if r.Empty() {
		return
	}
	// Paint the first row pixel by pixel, then copy it to the others.
	first := img.Pix[img.PixOffset(r.Min.X, r.Min.Y) : img.PixOffset(r.Max.X-1, r.Min.Y)+4]
	for i := 0; i < len(first); i += 4 {
		first[i], first[i+1], first[i+2], first[i+3] = col.R, col.G, col.B, col.A
	}
	for y := r.Min.Y + 1; y < r.Max.Y; y++ {
		copy(img.Pix[img.PixOffset(r.Min.X, y):], first)
	}
}
