package plot

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// decode draws c and decodes the PNG back, failing the test on any error.
func decode(t *testing.T, c Chart) image.Image {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, c); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("png.Decode: %v", err)
	}
	return img
}

// plotArea is the data area Encode uses for c.
func plotArea(t *testing.T, c Chart) image.Rectangle {
	t.Helper()
	l, err := computeLayout(c)
	if err != nil {
		t.Fatalf("computeLayout: %v", err)
	}
	return l.plot
}

// count is how many pixels of img inside r have exactly the colour col.
func count(img image.Image, r image.Rectangle, col color.RGBA) int {
	n := 0
	r = r.Intersect(img.Bounds())
	if rgba, ok := img.(*image.RGBA); ok { // what png.Decode gives for an opaque image
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				if rgba.RGBAAt(x, y) == col {
					n++
				}
			}
		}
		return n
	}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == col {
				n++
			}
		}
	}
	return n
}

// corners splits r into its four corner regions, each frac of its width and
// height, and a centre region of the same size.
func corners(r image.Rectangle, frac float64) (lowerLeft, lowerRight, upperLeft, upperRight, centre image.Rectangle) {
	w := int(float64(r.Dx()) * frac)
	h := int(float64(r.Dy()) * frac)
	lowerLeft = image.Rect(r.Min.X, r.Max.Y-h, r.Min.X+w, r.Max.Y)
	lowerRight = image.Rect(r.Max.X-w, r.Max.Y-h, r.Max.X, r.Max.Y)
	upperLeft = image.Rect(r.Min.X, r.Min.Y, r.Min.X+w, r.Min.Y+h)
	upperRight = image.Rect(r.Max.X-w, r.Min.Y, r.Max.X, r.Min.Y+h)
	cx, cy := (r.Min.X+r.Max.X)/2, (r.Min.Y+r.Max.Y)/2
	centre = image.Rect(cx-w/2, cy-h/2, cx+w/2, cy+h/2)
	return
}

func ramp(n int, from, to float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = from + (to-from)*float64(i)/float64(n-1)
	}
	return v
}

func TestEncodeSize(t *testing.T) {
	curve := []Curve{{Name: "train", X: []float64{0, 1, 2}, Y: []float64{3, 2, 1.5}}}
	tests := []struct {
		name          string
		width, height int
		wantW, wantH  int
	}{
		{"default", 0, 0, 800, 500},
		{"minimum", 200, 150, 200, 150},
		{"custom", 1024, 768, 1024, 768},
		{"default width only", 0, 300, 800, 300},
		{"default height only", 640, 0, 640, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := decode(t, Chart{Title: "loss", XLabel: "step", YLabel: "loss", Curves: curve, Width: tt.width, Height: tt.height})
			if got := img.Bounds().Size(); got != image.Pt(tt.wantW, tt.wantH) {
				t.Errorf("size: got %v, want %dx%d", got, tt.wantW, tt.wantH)
			}
			if got := count(img, image.Rect(0, 0, 1, 1), white); got != 1 {
				t.Errorf("top-left pixel is not white")
			}
		})
	}
}

func TestCurvePlacement(t *testing.T) {
	x := ramp(50, 0, 1000)
	tests := []struct {
		name                  string
		y                     []float64
		wantLL, wantUR        bool // colour expected in lower-left, upper-right
		wantUL, wantLR        bool // colour expected in upper-left, lower-right
		wantCentre            bool
		width, height         int
		title, xlabel, ylabel string
	}{
		{name: "increasing", y: ramp(50, 0.5, 4), wantLL: true, wantUR: true, wantCentre: true},
		{name: "decreasing", y: ramp(50, 4, 0.5), wantUL: true, wantLR: true, wantCentre: true},
		{name: "increasing small", y: ramp(50, -3, 3), wantLL: true, wantUR: true, wantCentre: true, width: 200, height: 150},
		{name: "increasing labelled", y: ramp(50, 1e6, 5e6), wantLL: true, wantUR: true, wantCentre: true, title: "Loss", xlabel: "step", ylabel: "loss (nats)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Chart{Title: tt.title, XLabel: tt.xlabel, YLabel: tt.ylabel, Width: tt.width, Height: tt.height,
				Curves: []Curve{{Name: "train", X: x, Y: tt.y}}}
			img := decode(t, c)
			area := plotArea(t, c)
			blue := curveColor(0)
			if n := count(img, area, blue); n == 0 {
				t.Fatalf("no pixel of the curve colour %v in the plot area %v", blue, area)
			}
			ll, lr, ul, ur, centre := corners(area, 0.15)
			for _, r := range []struct {
				name string
				rect image.Rectangle
				want bool
			}{
				{"lower-left", ll, tt.wantLL}, {"lower-right", lr, tt.wantLR},
				{"upper-left", ul, tt.wantUL}, {"upper-right", ur, tt.wantUR},
				{"centre", centre, tt.wantCentre},
			} {
				if got := count(img, r.rect, blue) > 0; got != r.want {
					t.Errorf("curve colour in the %s region %v: got %v, want %v", r.name, r.rect, got, r.want)
				}
			}
		})
	}
}

func TestTwoCurves(t *testing.T) {
	c := Chart{Curves: []Curve{
		{Name: "train", X: ramp(20, 0, 100), Y: ramp(20, 4, 1)},
		{Name: "validation", X: ramp(5, 0, 100), Y: ramp(5, 4.2, 1.4)},
	}}
	img := decode(t, c)
	area := plotArea(t, c)
	blue, orange := curveColor(0), curveColor(1)
	if blue == orange {
		t.Fatalf("first two curve colours are both %v", blue)
	}
	if want := (color.RGBA{0x1f, 0x77, 0xb4, 0xff}); blue != want {
		t.Errorf("first colour: got %v, want blue %v", blue, want)
	}
	if want := (color.RGBA{0xff, 0x7f, 0x0e, 0xff}); orange != want {
		t.Errorf("second colour: got %v, want orange %v", orange, want)
	}
	for _, col := range []color.RGBA{blue, orange} {
		if count(img, area, col) == 0 {
			t.Errorf("no pixel of colour %v in the plot area", col)
		}
		outside := count(img, img.Bounds(), col) - count(img, area, col)
		if outside == 0 {
			t.Errorf("no pixel of colour %v outside the plot area: legend missing", col)
		}
	}
}

func TestNonFinitePoints(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	t.Run("NaN breaks the line", func(t *testing.T) {
		c := Chart{Curves: []Curve{{Name: "a", X: []float64{0, 1, 2}, Y: []float64{0, nan, 1}}}}
		img := decode(t, c)
		area := plotArea(t, c)
		ll, _, _, ur, centre := corners(area, 0.1)
		blue := curveColor(0)
		if count(img, ll, blue) == 0 || count(img, ur, blue) == 0 {
			t.Errorf("the two finite points are not drawn in the lower-left and upper-right corners")
		}
		if n := count(img, centre, blue); n != 0 {
			t.Errorf("got %d curve pixels in the centre, want 0: the NaN should break the line", n)
		}
		if got, want := count(img, area, blue), 2*(2*pointSquare+1)*(2*pointSquare+1); got > want {
			t.Errorf("got %d curve pixels, want at most %d (two squares)", got, want)
		}
	})
	t.Run("single point is a square", func(t *testing.T) {
		c := Chart{Curves: []Curve{{Name: "a", X: []float64{7}, Y: []float64{2.5}}}}
		img := decode(t, c)
		area := plotArea(t, c)
		side := 2*pointSquare + 1
		if got := count(img, area, curveColor(0)); got != side*side {
			t.Errorf("got %d curve pixels, want a %dx%d square", got, side, side)
		}
		_, _, _, _, centre := corners(area, 0.1)
		if count(img, centre, curveColor(0)) == 0 {
			t.Errorf("the lone point is not at the centre of the plot area")
		}
	})
	t.Run("curve with no finite point stays in the legend", func(t *testing.T) {
		c := Chart{Curves: []Curve{
			{Name: "train", X: ramp(10, 0, 9), Y: ramp(10, 3, 1)},
			{Name: "diverged", X: []float64{0, 1, inf}, Y: []float64{nan, inf, 2}},
		}}
		img := decode(t, c)
		area := plotArea(t, c)
		orange := curveColor(1)
		if n := count(img, area, orange); n != 0 {
			t.Errorf("got %d pixels of the non-finite curve in the plot area, want 0", n)
		}
		if count(img, img.Bounds(), orange) == 0 {
			t.Errorf("the non-finite curve has no legend entry")
		}
	})
	t.Run("all points non-finite", func(t *testing.T) {
		c := Chart{Curves: []Curve{{Name: "a", X: []float64{nan}, Y: []float64{1}}}}
		img := decode(t, c)
		if n := count(img, plotArea(t, c), curveColor(0)); n != 0 {
			t.Errorf("got %d curve pixels in the plot area, want 0", n)
		}
	})
}

func TestEncodeErrors(t *testing.T) {
	good := []Curve{{Name: "a", X: []float64{0, 1}, Y: []float64{1, 0}}}
	tests := []struct {
		name string
		c    Chart
		want string // in the error message
	}{
		{"no curves", Chart{}, "no curves"},
		{"empty curves slice", Chart{Curves: []Curve{}}, "no curves"},
		{"no points", Chart{Curves: []Curve{{Name: "a"}, {Name: "b", X: []float64{}, Y: []float64{}}}}, "has any points"},
		{"mismatched lengths", Chart{Curves: []Curve{good[0], {Name: "b", X: []float64{1, 2, 3}, Y: []float64{1, 2}}}}, "len(X) = 3 but len(Y) = 2"},
		{"too narrow", Chart{Curves: good, Width: 199, Height: 300}, "out of range"},
		{"too short", Chart{Curves: good, Width: 300, Height: 149}, "out of range"},
		{"too wide", Chart{Curves: good, Width: 10001, Height: 300}, "out of range"},
		{"too tall", Chart{Curves: good, Width: 300, Height: 10001}, "out of range"},
		{"negative", Chart{Curves: good, Width: -800, Height: 500}, "out of range"},
		{"range overflows", Chart{Curves: []Curve{{X: []float64{0, 1}, Y: []float64{-1e308, 1e308}}}}, "cannot be drawn"},
		{"single huge value", Chart{Curves: []Curve{{X: []float64{0}, Y: []float64{math.MaxFloat64}}}}, "cannot be drawn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Encode(&buf, tt.c)
			if err == nil {
				t.Fatalf("Encode: got nil error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "plot: ") {
				t.Errorf("Encode error: got %q, want it to start with \"plot: \" and contain %q", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("Encode wrote %d bytes before failing, want 0", buf.Len())
			}
		})
	}
	if err := Encode(nil, Chart{Curves: good}); err == nil {
		t.Errorf("Encode(nil writer): got nil error, want one")
	}
}

// TestEncodeExtremes checks that awkward but finite data is drawn (or refused
// with an error) without panicking.
func TestEncodeExtremes(t *testing.T) {
	tests := []struct {
		name string
		x, y []float64
	}{
		{"tiny range at large magnitude", []float64{0, 1}, []float64{1e16, 1e16 + 2}},
		{"subnormal", []float64{0, 1}, []float64{5e-324, 1e-323}},
		{"single subnormal", []float64{5e-324}, []float64{5e-324}},
		{"huge x", []float64{-1e300, 1e300}, []float64{1, 2}},
		{"constant", []float64{0, 1, 2}, []float64{1.5, 1.5, 1.5}},
		{"constant zero", []float64{0, 1, 2}, []float64{0, 0, 0}},
		{"negative", []float64{-5, -1}, []float64{-0.001, -0.002}},
		{"tiny step", []float64{0, 1}, []float64{1e-7, 2e-7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Chart{Title: "ü ∑ \n", Curves: []Curve{{Name: "é", X: tt.x, Y: tt.y}}}
			var buf bytes.Buffer
			if err := Encode(&buf, c); err != nil {
				t.Logf("Encode refused: %v", err)
				return
			}
			img, err := png.Decode(&buf)
			if err != nil {
				t.Fatalf("png.Decode: %v", err)
			}
			if count(img, plotArea(t, c), curveColor(0)) == 0 {
				t.Errorf("curve not drawn")
			}
		})
	}
}

func TestManyCurvesLegend(t *testing.T) {
	var curves []Curve
	for i := range 40 {
		curves = append(curves, Curve{Name: strings.Repeat("curve", 3), X: []float64{0, 1}, Y: []float64{float64(i), float64(i + 1)}})
	}
	c := Chart{Curves: curves, Width: 200, Height: 150}
	img := decode(t, c)
	area := plotArea(t, c)
	if area.Dy() < minPlotSide {
		t.Errorf("plot area height: got %d, want at least %d", area.Dy(), minPlotSide)
	}
	if count(img, area, curveColor(0)) == 0 {
		t.Errorf("first curve not drawn")
	}
}

// listDir returns the names in dir.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFile(t *testing.T) {
	good := Chart{Title: "loss", Curves: []Curve{{Name: "train", X: []float64{0, 1, 2}, Y: []float64{3, 2, 1}}}}
	bad := Chart{Curves: []Curve{{Name: "train", X: []float64{0, 1}, Y: []float64{3}}}}

	t.Run("success", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "loss.png")
		for range 2 { // the second call replaces the first file
			if err := WriteFile(path, good); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
		}
		if got := listDir(t, dir); len(got) != 1 || got[0] != "loss.png" {
			t.Errorf("directory holds %q, want only loss.png", got)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatalf("png.Decode: %v", err)
		}
		if got := img.Bounds().Size(); got != image.Pt(defaultWidth, defaultHeight) {
			t.Errorf("size: got %v, want %dx%d", got, defaultWidth, defaultHeight)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o644 {
			t.Errorf("mode: got %v, want 0644", got)
		}
	})

	t.Run("missing directory", func(t *testing.T) {
		dir := t.TempDir()
		err := WriteFile(filepath.Join(dir, "nope", "loss.png"), good)
		if err == nil {
			t.Fatalf("WriteFile: got nil error, want one")
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("WriteFile error: got %v, want one matching fs.ErrNotExist", err)
		}
		if got := listDir(t, dir); len(got) != 0 {
			t.Errorf("directory holds %q, want nothing", got)
		}
	})

	t.Run("invalid chart keeps the old file", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "loss.png")
		old := []byte("previous plot")
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(path, bad); err == nil {
			t.Fatalf("WriteFile: got nil error for a bad chart, want one")
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, old) {
			t.Errorf("file content: got %q, want the old %q", got, old)
		}
		if names := listDir(t, dir); len(names) != 1 {
			t.Errorf("directory holds %q, want only loss.png", names)
		}
	})

	t.Run("rename fails", func(t *testing.T) {
		// The target is a non-empty directory, so the temporary file is
		// written and then the rename fails: it must be removed.
		dir := t.TempDir()
		path := filepath.Join(dir, "loss.png")
		if err := os.MkdirAll(filepath.Join(path, "inside"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(path, good); err == nil {
			t.Fatalf("WriteFile over a directory: got nil error, want one")
		}
		if names := listDir(t, dir); len(names) != 1 || names[0] != "loss.png" {
			t.Errorf("directory holds %q, want only loss.png", names)
		}
		if names := listDir(t, path); len(names) != 1 || names[0] != "inside" {
			t.Errorf("target directory holds %q, want only inside", names)
		}
	})
}

// closeTo reports whether a and b agree to a relative 1e-9.
func closeTo(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{0, 10, []float64{0, 2, 4, 6, 8, 10}},
		{0, 1000, []float64{0, 200, 400, 600, 800, 1000}},
		{1.2, 4.9, []float64{2, 3, 4}}, // span 3.7: step 1 gives 3.7 intervals, 0.5 gives 7.4
		{-0.05, 1.05, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{-3, 3, []float64{-3, -2, -1, 0, 1, 2, 3}},
	}
	for _, tt := range tests {
		got := niceTicks(tt.lo, tt.hi, 5).values
		ok := len(got) == len(tt.want)
		for i := 0; ok && i < len(got); i++ {
			ok = closeTo(got[i], tt.want[i])
		}
		if !ok {
			t.Errorf("niceTicks(%g, %g): got %v, want %v", tt.lo, tt.hi, got, tt.want)
		}
	}
}

// TestNiceTicksProperties checks what niceTicks promises on random ranges:
// a step of 1, 2 or 5 times a power of ten, between 2 and 8 ticks that are
// multiples of the step inside the range, none missing at either end.
func TestNiceTicksProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		scale := math.Pow(10, float64(r.IntN(20)-10))
		lo := (r.Float64()*2 - 1) * scale * 10
		hi := lo + r.Float64()*scale + scale*1e-3
		tk := niceTicks(lo, hi, 5)
		step := tk.step
		if step == 0 {
			t.Fatalf("niceTicks(%g, %g): fell back to end ticks", lo, hi)
		}
		mant := step / math.Pow10(int(math.Floor(math.Log10(step))))
		if !closeTo(mant, 1) && !closeTo(mant, 2) && !closeTo(mant, 5) {
			t.Fatalf("niceTicks(%g, %g): step %g is not 1, 2 or 5 times a power of ten", lo, hi, step)
		}
		n := len(tk.values)
		if n < 2 || n > 8 {
			t.Fatalf("niceTicks(%g, %g): got %d ticks %v, want 2..8", lo, hi, n, tk.values)
		}
		if len(tk.labels) != n {
			t.Fatalf("niceTicks(%g, %g): got %d labels for %d ticks", lo, hi, len(tk.labels), n)
		}
		eps := step * 1e-6
		if tk.values[0] < lo-eps || tk.values[n-1] > hi+eps {
			t.Fatalf("niceTicks(%g, %g): ticks %v leave the range", lo, hi, tk.values)
		}
		if tk.values[0]-lo >= step+eps || hi-tk.values[n-1] >= step+eps {
			t.Fatalf("niceTicks(%g, %g): ticks %v miss a multiple of %g at an end", lo, hi, tk.values, step)
		}
		for i, v := range tk.values {
			if q := v / step; !(math.Abs(q-math.Round(q)) <= 1e-6) {
				t.Fatalf("niceTicks(%g, %g): tick %g is not a multiple of %g", lo, hi, v, step)
			}
			if i > 0 && !closeTo(v-tk.values[i-1], step) {
				t.Fatalf("niceTicks(%g, %g): ticks %v not evenly spaced by %g", lo, hi, tk.values, step)
			}
		}
	}
}

func TestNiceTicksFallback(t *testing.T) {
	tk := niceTicks(1e16, 1e16+2, 5)
	if len(tk.values) < 2 || len(tk.values) > maxTicks {
		t.Errorf("got %d ticks, want 2..%d", len(tk.values), maxTicks)
	}
	for _, v := range tk.values {
		if v < 1e16 || v > 1e16+2 {
			t.Errorf("tick %g outside the range", v)
		}
	}
}

func TestTickLabels(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []string
	}{
		{0, 1, []string{"0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{0, 1000, []string{"0", "200", "400", "600", "800", "1000"}},
		{-3, 3, []string{"-3", "-2", "-1", "0", "1", "2", "3"}},
		{0, 5e6, []string{"0", "1e+06", "2e+06", "3e+06", "4e+06", "5e+06"}},
		{0, 5e-5, []string{"0", "1e-05", "2e-05", "3e-05", "4e-05", "5e-05"}},
		{1.5, 1.6, []string{"1.50", "1.52", "1.54", "1.56", "1.58", "1.60"}},
	}
	for _, tt := range tests {
		got := niceTicks(tt.lo, tt.hi, 5).labels
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("labels for %g..%g: got %q, want %q", tt.lo, tt.hi, got, tt.want)
		}
	}
}

func TestGlyphs(t *testing.T) {
	for r, rows := range glyphRows {
		if len(rows) < 7 || len(rows) > glyphHeight {
			t.Errorf("glyph %q: got %d rows, want 7..%d", r, len(rows), glyphHeight)
		}
		for _, row := range rows {
			if len(row) != glyphWidth || strings.Trim(row, "#.") != "" {
				t.Errorf("glyph %q: row %q is not %d of '#' and '.'", r, row, glyphWidth)
			}
		}
		if r != ' ' && !strings.Contains(strings.Join(rows, ""), "#") {
			t.Errorf("glyph %q is blank", r)
		}
	}
	for r := rune(' '); r <= '~'; r++ {
		if _, ok := glyphRows[r]; !ok {
			t.Errorf("no glyph for printable ASCII %q", r)
		}
	}
}

func TestDrawText(t *testing.T) {
	tests := []struct {
		name     string
		s        string
		scale    int
		vertical bool
		want     image.Rectangle // bounding box of the ink
	}{
		// 'I' is ".###." over 7 rows: ink in columns 1..3.
		{"I", "I", 1, false, image.Rect(11, 10, 14, 17)},
		{"I scaled", "I", 2, false, image.Rect(12, 10, 18, 24)},
		// Turned anticlockwise: the top of the glyph faces left, the text
		// runs up from (10, 10).
		{"I vertical", "I", 1, true, image.Rect(10, 7, 17, 10)},
		// An unknown rune draws the 4x5 hollow box.
		{"missing glyph", "é", 1, false, image.Rect(10, 11, 14, 16)},
		{"space", " ", 1, false, image.Rectangle{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := image.NewRGBA(image.Rect(0, 0, 40, 40))
			drawText(img, 10, 10, tt.s, tt.scale, black, tt.vertical)
			var box image.Rectangle
			for y := 0; y < 40; y++ {
				for x := 0; x < 40; x++ {
					if img.RGBAAt(x, y) == black {
						box = box.Union(image.Rect(x, y, x+1, y+1))
					}
				}
			}
			if box != tt.want {
				t.Errorf("ink bounding box: got %v, want %v", box, tt.want)
			}
		})
	}
	// Drawing off the image is clipped, not a panic.
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	drawText(img, -3, -3, "WWW", 3, black, false)
	drawText(img, 5, 2, "WWW", 3, black, true)
}

func TestTextWidth(t *testing.T) {
	tests := []struct {
		s     string
		scale int
		want  int
	}{
		{"", 1, 0},
		{"a", 1, 5},
		{"ab", 1, 11},
		{"ab", 2, 22},
		{"é", 1, 5}, // one rune, not two bytes
	}
	for _, tt := range tests {
		if got := textWidth(tt.s, tt.scale); got != tt.want {
			t.Errorf("textWidth(%q, %d): got %d, want %d", tt.s, tt.scale, got, tt.want)
		}
	}
}
