package plot

import (
	"math"
	"strconv"
)

// maxTicks bounds how many tick values an axis may carry; a range whose nice
// step would give more (only possible when the step is lost in floating-point
// rounding, e.g. 1e16 .. 1e16+2) falls back to ticks at its two ends.
const maxTicks = 20

// axisTicks is the tick marks of one axis.
type axisTicks struct {
	values []float64 // increasing, within [lo, hi] of the axis
	labels []string  // labels[i] is the text for values[i]
	step   float64   // distance between neighbouring values; 0 for the fallback
}

// niceStep returns the step m×10^k, m in {1, 2, 5}, for which span/step is
// closest to target (the larger step on a tie), together with k. span must be
// finite and positive, target positive.
func niceStep(span float64, target int) (step float64, exp int) {
	raw := span / float64(target)
	k := int(math.Floor(math.Log10(raw)))
	best, bestExp, bestDist := 0.0, 0, math.Inf(1)
	for e := k - 1; e <= k+1; e++ {
		for _, m := range [...]float64{1, 2, 5} {
			s := m * math.Pow10(e)
			if s == 0 || math.IsInf(s, 0) {
				continue
			}
			d := math.Abs(span/s - float64(target))
			if d <= bestDist {
				best, bestExp, bestDist = s, e, d
			}
		}
	}
	return best, bestExp
}

// niceTicks returns about target tick values inside [lo, hi]: every multiple
// of a nice step (1, 2 or 5 times a power of ten) that lies in the range, so
// that the first tick is less than one step above lo and the last less than
// one step below hi. With target 5 there are between 2 and 8 ticks. lo < hi,
// both finite, is required; a range too narrow for its magnitude to hold
// distinct multiples gets ticks at lo and hi only.
func niceTicks(lo, hi float64, target int) axisTicks {
	span := hi - lo
	step, exp := niceStep(span, target)
	first := math.Ceil(lo/step - 1e-9)
	last := math.Floor(hi/step + 1e-9)
	n := last - first
	if step == 0 || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 || n+1 > maxTicks ||
		math.Abs(first) > 1<<52 || math.Abs(last) > 1<<52 {
		return axisTicks{
			values: []float64{lo, hi},
			labels: []string{formatG(lo), formatG(hi)},
		}
	}
	t := axisTicks{step: step}
	for i := first; i <= last; i++ {
		v := i * step
		if v == 0 {
			v = 0 // no negative zero
		}
		t.values = append(t.values, v)
	}
	t.labels = formatTicks(t.values, exp)
	return t
}

// formatTicks labels ticks that are multiples of a step with exponent exp (the
// k in m×10^k): plain decimals with just enough digits, or exponent notation
// when the numbers are large (1e6 and up) or the step tiny (below 1e-4).
func formatTicks(values []float64, exp int) []string {
	maxAbs := 0.0
	for _, v := range values {
		maxAbs = math.Max(maxAbs, math.Abs(v))
	}
	labels := make([]string, len(values))
	useExp := maxAbs >= 1e6 || exp < -4
	for i, v := range values {
		switch {
		case v == 0:
			labels[i] = "0"
		case useExp:
			digits := int(math.Floor(math.Log10(maxAbs))) - exp
			digits = min(max(digits, 0), 8)
			labels[i] = strconv.FormatFloat(v, 'e', digits, 64)
		default:
			labels[i] = strconv.FormatFloat(v, 'f', max(0, -exp), 64)
		}
	}
	return labels
}

// formatG formats v with four significant digits, for the fallback ticks.
func formatG(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
