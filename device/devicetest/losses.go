package devicetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

func testEmbedding(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		for _, s := range []struct{ n, dim, vocab int }{{1, 1, 1}, {200, 17, 50}, {4096, 256, 1000}} {
			e.run(fmt.Sprintf("%dx%d/vocab=%d", s.n, s.dim, s.vocab), func(e *env) {
				table := e.uniform(s.vocab*s.dim, -1, 1)
				ids := e.randomIDs(s.n, s.vocab)
				vT, vI, vO := e.vec(table), e.ids(ids), e.vec(nans(s.n*s.dim))
				e.launch(device.Embedding{DType: e.dt, N: s.n, Dim: s.dim, Vocab: s.vocab, Table: vT.buf, IDs: vI.buf, Out: vO.buf})
				checkExact(e.t, "Out", e.get("Out", vO), refEmbedding(s.dim, s.vocab, table, ids))
			})
		}
		e.run("N=0", func(e *env) {
			// With N = 0 no buffer is needed.
			e.launch(device.Embedding{DType: e.dt, N: 0, Dim: 4, Vocab: 3})
			e.sync()
		})
		e.run("OutOfRange", func(e *env) {
			const n, dim, vocab = 6, 3, 5
			table := e.uniform(vocab*dim, -1, 1)
			ids := []int32{0, -1, 4, vocab, math.MinInt32, 1 << 30}
			vT, vI, vO := e.vec(table), e.ids(ids), e.vec(nans(n*dim))
			a := device.Embedding{DType: e.dt, N: n, Dim: dim, Vocab: vocab, Table: vT.buf, IDs: vI.buf, Out: vO.buf}
			e.checkIndexError(a)
			// Rows of bad ids are zeros, the others gathered.
			checkExact(e.t, "Out", e.get("Out", vO), refEmbedding(dim, vocab, table, ids))
		})
		e.run("OutOfRange/Last", func(e *env) {
			// One bad id, the last of many: found wherever the work for
			// it runs (a device's last thread, or a late pass of a loop).
			const n, dim, vocab = 3000, 5, 40
			table := e.uniform(vocab*dim, -1, 1)
			ids := e.randomIDs(n, vocab)
			ids[n-1] = vocab
			vT, vI, vO := e.vec(table), e.ids(ids), e.vec(nans(n*dim))
			e.launchIndexError(device.Embedding{DType: e.dt, N: n, Dim: dim, Vocab: vocab, Table: vT.buf, IDs: vI.buf, Out: vO.buf})
			checkExact(e.t, "Out", e.get("Out", vO), refEmbedding(dim, vocab, table, ids))
		})
	})
}

func (e *env) randomIDs(n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(e.rng.IntN(vocab))
	}
	return ids
}

// refEmbedding gathers rows; an id out of range gives a row of zeros.
func refEmbedding(dim, vocab int, table []float64, ids []int32) []float64 {
	out := make([]float64, len(ids)*dim)
	for i, id := range ids {
		if id >= 0 && int(id) < vocab {
			copy(out[i*dim:(i+1)*dim], table[int(id)*dim:])
		}
	}
	return out
}

// refEmbeddingGrad scatter-adds DOut into a copy of DTable, skipping ids
// out of range, and returns each element's magnitude.
func refEmbeddingGrad(dim, vocab int, ids []int32, dOut, dTable []float64) (out, mag []float64) {
	out = clone(dTable)
	mag = make([]float64, len(dTable))
	for i := range mag {
		mag[i] = math.Abs(dTable[i])
	}
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			continue
		}
		for j := 0; j < dim; j++ {
			out[int(id)*dim+j] += dOut[i*dim+j]
			mag[int(id)*dim+j] += math.Abs(dOut[i*dim+j])
		}
	}
	return out, mag
}

func testEmbeddingGrad(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		// Few rows and many ids: most rows are hit many times; and a
		// vocabulary past 65535, which a device may handle another way (the
		// CUDA device walks the ids in order instead of scanning per row).
		for _, s := range []struct{ n, dim, vocab int }{{1, 1, 1}, {200, 17, 7}, {4096, 256, 65}, {300, 37, 70000}} {
			e.run(fmt.Sprintf("%dx%d/vocab=%d", s.n, s.dim, s.vocab), func(e *env) {
				ids := e.randomIDs(s.n, s.vocab)
				dOut := e.uniform(s.n*s.dim, -1, 1)
				dTable := e.uniform(s.vocab*s.dim, -1, 1)
				vI, vD := e.ids(ids), e.vec(dOut)
				a := device.EmbeddingGrad{DType: e.dt, N: s.n, Dim: s.dim, Vocab: s.vocab, IDs: vI.buf, DOut: vD.buf}
				v1, v2 := e.vec(dTable), e.vec(dTable)
				a.DTable = v1.buf
				e.launch(a)
				a.DTable = v2.buf
				e.launch(a)
				want, mag := refEmbeddingGrad(s.dim, s.vocab, ids, dOut, dTable)
				maxHits := 0
				hits := make(map[int32]int)
				for _, id := range ids {
					hits[id]++
					maxHits = max(maxHits, hits[id])
				}
				got := e.get("DTable", v1)
				checkClose(e.t, "DTable", got, want, mag, SumTolerance(e.dt, maxHits+1))
				// The scatter-add is deterministic: the same call gives the
				// same bits.
				checkExact(e.t, "DTable of a second, identical call", e.get("DTable", v2), got)
			})
		}
		// Distinct ids (a scatter of rows): each named row gets its one
		// row added, and every other row of DTable keeps its bits, -0
		// included (a kernel that adds zero to it makes it +0).
		for _, s := range []struct{ n, dim, vocab int }{{1, 1, 1}, {60, 17, 61}, {300, 37, 70000}} {
			e.run(fmt.Sprintf("Distinct/%dx%d/vocab=%d", s.n, s.dim, s.vocab), func(e *env) {
				ids := make([]int32, s.n)
				for i, id := range e.rng.Perm(s.vocab)[:s.n] {
					ids[i] = int32(id)
				}
				named := make([]bool, s.vocab)
				for _, id := range ids {
					named[id] = true
				}
				dOut := e.uniform(s.n*s.dim, -1, 1)
				dTable := e.uniform(s.vocab*s.dim, -1, 1)
				for v := range s.vocab {
					if !named[v] && v%2 == 0 {
						for j := range s.dim {
							dTable[v*s.dim+j] = math.Copysign(0, -1)
						}
					}
				}
				vI, vD, vT := e.ids(ids), e.vec(dOut), e.vec(dTable)
				e.launch(device.EmbeddingGrad{DType: e.dt, N: s.n, Dim: s.dim, Vocab: s.vocab, IDs: vI.buf, DOut: vD.buf, DTable: vT.buf, Distinct: true})
				want, mag := refEmbeddingGrad(s.dim, s.vocab, ids, dOut, dTable)
				got := e.get("DTable", vT)
				checkClose(e.t, "DTable", got, want, mag, SumTolerance(e.dt, 2))
				for v := range s.vocab {
					for j := v * s.dim; j < (v+1)*s.dim && !named[v]; j++ {
						if math.Float64bits(got[j]) != math.Float64bits(dTable[j]) {
							e.t.Errorf("DTable[%d] (row %d, named by no id) = %v, want %v as it was", j, v, got[j], dTable[j])
							return
						}
					}
				}
			})
		}
		// An id given as Distinct that appears twice (positions 3 and 39,
		// its bit in the second of three words of a bitmap) is an index
		// error; the same ids without Distinct are a plain scatter-add, and
		// distinct ids after it raise nothing: whatever marks what a check
		// has seen starts from nothing each call.
		e.run("Distinct/Repeated", func(e *env) {
			const n, dim, vocab = 40, 3, 70
			ids := make([]int32, n)
			for i, id := range e.rng.Perm(vocab)[:n] {
				ids[i] = int32(id)
			}
			if j := slices.Index(ids, 45); j >= 0 {
				ids[3], ids[j] = ids[j], ids[3]
			} else {
				ids[3] = 45
			}
			fresh := slices.Clone(ids)
			ids[39] = 45
			dOut := e.uniform(n*dim, -1, 1)
			dTable := e.uniform(vocab*dim, -1, 1)
			vI, vD, vT := e.ids(ids), e.vec(dOut), e.vec(dTable)
			a := device.EmbeddingGrad{DType: e.dt, N: n, Dim: dim, Vocab: vocab, IDs: vI.buf, DOut: vD.buf, DTable: vT.buf, Distinct: true}
			e.checkIndexError(a)
			vT = e.vec(dTable)
			a.DTable, a.Distinct = vT.buf, false
			e.launch(a)
			want, mag := refEmbeddingGrad(dim, vocab, ids, dOut, dTable)
			checkClose(e.t, "DTable (the repeated ids, not Distinct)", e.get("DTable", vT), want, mag, SumTolerance(e.dt, 3))
			vI, vT = e.ids(fresh), e.vec(dTable)
			a.IDs, a.DTable, a.Distinct = vI.buf, vT.buf, true
			for range 3 {
				e.launch(a)
			}
			e.sync()
			want, mag = refEmbeddingGrad(dim, vocab, slices.Concat(fresh, fresh, fresh), slices.Concat(dOut, dOut, dOut), dTable)
			checkClose(e.t, "DTable (distinct ids, three calls)", e.get("DTable", vT), want, mag, SumTolerance(e.dt, 4))
		})
		e.run("N=0", func(e *env) {
			e.launch(device.EmbeddingGrad{DType: e.dt, N: 0, Dim: 4, Vocab: 3})
			e.sync()
		})
		e.run("OutOfRange", func(e *env) {
			const n, dim, vocab = 6, 3, 5
			ids := []int32{0, -1, 4, vocab, 0, math.MaxInt32}
			dOut := e.uniform(n*dim, -1, 1)
			dTable := e.uniform(vocab*dim, -1, 1)
			vI, vD, vT := e.ids(ids), e.vec(dOut), e.vec(dTable)
			a := device.EmbeddingGrad{DType: e.dt, N: n, Dim: dim, Vocab: vocab, IDs: vI.buf, DOut: vD.buf, DTable: vT.buf}
			e.checkIndexError(a)
			// checkIndexError added into DTable several times: once more
			// from the start.
			vT = e.vec(dTable)
			a.DTable = vT.buf
			e.launchIndexError(a)
			want, mag := refEmbeddingGrad(dim, vocab, ids, dOut, dTable)
			checkClose(e.t, "DTable", e.get("DTable", vT), want, mag, SumTolerance(e.dt, 3))
		})
		e.run("OutOfRange/Last", func(e *env) {
			const n, dim, vocab = 3000, 5, 40
			ids := e.randomIDs(n, vocab)
			ids[n-1] = -1
			dOut := e.uniform(n*dim, -1, 1)
			dTable := e.uniform(vocab*dim, -1, 1)
			vI, vD, vT := e.ids(ids), e.vec(dOut), e.vec(dTable)
			e.launchIndexError(device.EmbeddingGrad{DType: e.dt, N: n, Dim: dim, Vocab: vocab, IDs: vI.buf, DOut: vD.buf, DTable: vT.buf})
			want, mag := refEmbeddingGrad(dim, vocab, ids, dOut, dTable)
			checkClose(e.t, "DTable", e.get("DTable", vT), want, mag, SumTolerance(e.dt, n+1))
		})
	})
}

// checkIndexError launches a, whose work meets an index out of range, and
// checks that the call succeeds and the error is reported afterwards, once,
// in each of the documented ways: it leaves the last launch's results in
// place for the caller to check.
func (e *env) checkIndexError(a any) {
	e.t.Helper()
	ways := []struct {
		name   string
		report func() error
	}{
		{"Device.Synchronize", e.dev.Synchronize},
		{"Stream.Synchronize", func() error { return e.dev.Stream().Synchronize() }},
		{"Download", func() error {
			b := e.alloc(device.Float32, 1)
			return e.dev.Download(make([]byte, 4), b)
		}},
		{"Event.Wait", func() error {
			ev, err := e.dev.Stream().Record()
			if err != nil {
				return fmt.Errorf("recording an event: %w", err)
			}
			return ev.Wait()
		}},
	}
	for _, w := range ways {
		if err := call(e.t, kernelName(a), func() error { return launchKernel(e.k, a) }); err != nil {
			e.t.Fatalf("%s with an index out of range returned %v from the call, want nil: the index is found while the work runs", kernelName(a), err)
		}
		err := call(e.t, w.name, w.report)
		if !errors.Is(err, device.ErrIndex) {
			e.t.Errorf("%s after %s with an index out of range = %v, want an error matching device.ErrIndex", w.name, kernelName(a), err)
		}
		if w.name == "Event.Wait" {
			// Whether an event's Wait counts as the report that clears the
			// stream's error is not specified: let Synchronize clear it.
			if err := call(e.t, "Synchronize", e.dev.Synchronize); err != nil && !errors.Is(err, device.ErrIndex) {
				e.t.Errorf("Synchronize after Event.Wait reported the index error = %v, want nil or device.ErrIndex", err)
			}
		}
		// Reported once: the stream works again.
		if err := call(e.t, "Synchronize", e.dev.Synchronize); err != nil {
			e.t.Errorf("Synchronize after the index error was reported by %s = %v, want nil (an error is reported once)", w.name, err)
		}
	}
	v := e.filled(4, 1)
	e.launch(device.Axpby{DType: e.dt, N: 4, Alpha: 2, Beta: 1, X: v.buf, Y: v.buf})
	checkExact(e.t, "Axpby after an index error", e.get("Y", v), constant(4, 3))
}

// ceRow is one row of SoftmaxCrossEntropy in float64: the row's loss (0
// for a target out of range), its magnitude and the row of
// softmax − onehot (zeros for a target out of range).
func ceRow(logits []float64, target int32) (loss, mag float64, d []float64) {
	d = make([]float64, len(logits))
	if target < 0 || int(target) >= len(logits) {
		return 0, 0, d
	}
	m := math.Inf(-1)
	for _, x := range logits {
		m = math.Max(m, x)
	}
	var s float64
	for _, x := range logits {
		s += math.Exp(x - m)
	}
	lse := math.Log(s)
	for j, x := range logits {
		d[j] = math.Exp(x-m) / s
	}
	d[target]--
	xt := logits[target] - m
	return lse - xt, 1 + math.Abs(lse) + math.Abs(xt), d
}

func testSoftmaxCrossEntropy(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		type ceCase struct {
			name       string
			n, classes int
			scale      float64
			dLogits    string // "none", "separate" or "logits"
			accumulate bool
			large      bool // logits of ±1000
		}
		cs := []ceCase{
			{name: "Loss", n: 7, classes: 11, scale: 1.0 / 7, dLogits: "none"},
			{name: "DLogits", n: 7, classes: 11, scale: 1.0 / 7, dLogits: "separate"},
			{name: "DLogitsIsLogits", n: 7, classes: 11, scale: 0.25, dLogits: "logits"},
			{name: "Accumulate", n: 7, classes: 11, scale: 1.0 / 14, dLogits: "separate", accumulate: true},
			{name: "OneClass", n: 3, classes: 1, scale: 1, dLogits: "separate"},
			{name: "LargeLogits", n: 6, classes: 5, scale: 1, dLogits: "separate", large: true},
			{name: "LargeLogits/Aliased", n: 6, classes: 5, scale: 1, dLogits: "logits", large: true},
			// Big: more rows than a 256-thread block sums in one pass (the
			// loss total), over 75 GPU blocks of 8 rows; the char-RNN's 65
			// classes.
			{name: "Big", n: 600, classes: 65, scale: 1.0 / 600, dLogits: "separate"},
			{name: "Big/Accumulate/Aliased", n: 600, classes: 65, scale: 1.0 / 1200, dLogits: "logits", accumulate: true},
			// Rows longer than a device's team of threads per row.
			{name: "ManyClasses", n: 5, classes: 1000, scale: 1.0 / 5, dLogits: "separate"},
		}
		for _, c := range cs {
			e.run(c.name, func(e *env) {
				logits := e.uniform(c.n*c.classes, -3, 3)
				if c.large {
					// Rows mixing 1000, 0 and -1000: exp overflows
					// unless the maximum is subtracted first.
					for i := range logits {
						logits[i] = e.r(1000*float64(e.rng.IntN(3)-1) + logits[i])
					}
				}
				targets := e.randomIDs(c.n, c.classes)
				e.checkCE(c.n, c.classes, logits, targets, c.scale, c.dLogits, c.accumulate, false)
			})
		}
		for _, dLogits := range []string{"separate", "none", "logits"} {
			e.run("BadTarget/"+dLogits, func(e *env) {
				const n, classes = 5, 4
				logits := e.uniform(n*classes, -3, 3)
				targets := []int32{1, -1, 3, classes, math.MinInt32}
				e.checkCE(n, classes, logits, targets, 0.5, dLogits, true, true)
			})
		}
		// Ignored rows (padding of a batch of sequences) and per-class
		// weights, PyTorch's ignore_index and weight.
		for _, c := range []struct {
			name        string
			ignore      bool
			ignoreIndex int32
			weights     bool
			dLogits     string
		}{
			{"Ignore", true, -100, false, "separate"},
			{"Ignore/LossOnly", true, -100, false, "none"},
			{"Ignore/AClass", true, 2, false, "separate"},
			{"Weights", false, 0, true, "separate"},
			{"IgnoreAndWeights/Aliased", true, -100, true, "logits"},
		} {
			e.run("CE/"+c.name, func(e *env) {
				const n, classes = 40, 7
				logits := e.uniform(n*classes, -3, 3)
				targets := e.randomIDs(n, classes)
				for i := range targets {
					if c.ignore && i%3 == 1 {
						targets[i] = c.ignoreIndex
					}
				}
				var weights []float64
				if c.weights {
					weights = e.uniform(classes, 0.1, 2)
				}
				e.checkCEWeighted(n, classes, logits, targets, c.ignore, c.ignoreIndex, weights, c.dLogits)
			})
		}
		e.run("Deterministic", func(e *env) {
			// The row losses are summed in an order that does not vary
			// from call to call: the same call gives the same bits. 600
			// rows: more than one 256-thread block sums in a pass.
			const n, classes = 600, 65
			vL := e.vec(e.uniform(n*classes, -3, 3))
			targets := e.ids(e.randomIDs(n, classes))
			var loss [2]vec
			for i := range loss {
				loss[i] = e.vec([]float64{0})
				e.launch(device.SoftmaxCrossEntropy{DType: e.dt, N: n, Classes: classes, Logits: vL.buf, Targets: targets.buf,
					Scale: 1.0 / n, Loss: loss[i].buf})
			}
			checkExact(e.t, "Loss of a second, identical call", e.get("Loss", loss[1]), e.get("Loss", loss[0]))
		})
		e.run("BadTarget/Last", func(e *env) {
			const n, classes = 300, 7
			logits := e.uniform(n*classes, -3, 3)
			targets := e.randomIDs(n, classes)
			targets[n-1] = classes
			e.checkCE(n, classes, logits, targets, 1.0/n, "separate", false, true)
		})
		e.run("NaNLogit", func(e *env) {
			// A NaN makes its row's loss and gradient NaN, so the loss,
			// and only that row of DLogits.
			const n, classes = 3, 40
			logits := e.uniform(n*classes, -2, 2)
			logits[classes+5] = math.NaN()
			e.checkCE(n, classes, logits, []int32{3, 7, 39}, 0.5, "separate", false, false)
		})
	})
}

// checkCEWeighted checks SoftmaxCrossEntropy with Ignore and Weights at
// PyTorch's mean, Scale = 1/Σ w_i over the rows not ignored: the loss and
// the gradient against ceRow's, each row weighted, ignored rows zero.
func (e *env) checkCEWeighted(n, classes int, logits []float64, targets []int32, ignore bool, ignoreIndex int32, weights []float64, dLogits string) {
	e.t.Helper()
	w := func(t int32) float64 {
		if weights == nil {
			return 1
		}
		return e.r(weights[t])
	}
	total := 0.0
	for _, t := range targets {
		if !(ignore && t == ignoreIndex) {
			total += w(t)
		}
	}
	scale := 1 / total
	vL, vT, vLoss := e.vec(logits), e.ids(targets), e.vec([]float64{math.NaN()})
	a := device.SoftmaxCrossEntropy{DType: e.dt, N: n, Classes: classes, Logits: vL.buf, Targets: vT.buf, Scale: scale, Loss: vLoss.buf,
		Ignore: ignore, IgnoreIndex: ignoreIndex}
	if weights != nil {
		a.Weights = e.vec(weights).buf
	}
	var vD vec
	switch dLogits {
	case "separate":
		vD = e.vec(nans(n * classes))
		a.DLogits = vD.buf
	case "logits":
		vD, a.DLogits = vL, vL.buf
	}
	e.launch(a)
	s := e.r(scale)
	var want, mag float64
	wantD, dMag := make([]float64, n*classes), make([]float64, n*classes)
	for i, t := range targets {
		if ignore && t == ignoreIndex {
			continue // zero loss, zero gradient
		}
		l, m, d := ceRow(logits[i*classes:(i+1)*classes], t)
		sw := s * w(t)
		want += sw * l
		mag += math.Abs(sw) * m
		for j, v := range d {
			wantD[i*classes+j] = sw * v
			dMag[i*classes+j] = math.Abs(sw * v)
			if int32(j) == t {
				dMag[i*classes+j] = math.Abs(sw) * (v + 2)
			}
		}
	}
	sum := SumTolerance(e.dt, n+classes)
	checkScalar(e.t, "Loss", e.get("Loss", vLoss)[0], want, mag, PointwiseTolerance(e.dt).Plus(sum))
	if dLogits != "none" {
		checkClose(e.t, "DLogits", e.get("DLogits", vD), wantD, dMag, Tolerance{Rel: PointwiseTolerance(e.dt).Rel + sum.Rel})
	}
}

func (e *env) checkCE(n, classes int, logits []float64, targets []int32, scale float64, dLogits string, accumulate, bad bool) {
	e.t.Helper()
	loss0 := math.NaN() // overwritten, never read, without Accumulate
	if accumulate {
		loss0 = e.r(1.5)
	}
	vT := e.ids(targets)
	var vL, vD, vLoss vec
	build := func() device.SoftmaxCrossEntropy {
		vL, vLoss = e.vec(logits), e.vec([]float64{loss0})
		a := device.SoftmaxCrossEntropy{DType: e.dt, N: n, Classes: classes, Logits: vL.buf, Targets: vT.buf,
			Scale: scale, Loss: vLoss.buf, Accumulate: accumulate}
		switch dLogits {
		case "separate":
			vD = e.vec(nans(n * classes))
			a.DLogits = vD.buf
		case "logits":
			vD = vL
			a.DLogits = vL.buf
		}
		return a
	}
	if bad {
		e.checkIndexError(build())
		e.launchIndexError(build())
	} else {
		e.launch(build())
	}
	s := e.r(scale)
	var want, mag float64
	wantD := make([]float64, n*classes)
	dMag := make([]float64, n*classes)
	for i := 0; i < n; i++ {
		l, m, d := ceRow(logits[i*classes:(i+1)*classes], targets[i])
		want += s * l
		mag += math.Abs(s) * m
		for j, v := range d {
			wantD[i*classes+j] = s * v
			// The probability, and 1 more at the target, where the
			// subtraction may cancel.
			dMag[i*classes+j] = math.Abs(s * v)
			if int32(j) == targets[i] {
				dMag[i*classes+j] = math.Abs(s) * (v + 2)
			}
		}
	}
	if accumulate {
		want += loss0
		mag += math.Abs(loss0)
	}
	sum := SumTolerance(e.dt, n+classes)
	checkScalar(e.t, "Loss", e.get("Loss", vLoss)[0], want, mag, PointwiseTolerance(e.dt).Plus(sum))
	if dLogits != "none" {
		// Relative to each element's own scale: with Scale = 1/N the
		// elements are far below the pointwise absolute floor.
		tol := Tolerance{Rel: PointwiseTolerance(e.dt).Rel + sum.Rel}
		checkClose(e.t, "DLogits", e.get("DLogits", vD), wantD, dMag, tol)
	} else {
		checkExact(e.t, "Logits (an input)", e.get("Logits", vL), logits)
	}
}

// launchIndexError launches a, whose work meets an index out of range, and
// checks that Synchronize reports it.
func (e *env) launchIndexError(a any) {
	e.t.Helper()
	if err := call(e.t, kernelName(a), func() error { return launchKernel(e.k, a) }); err != nil {
		e.t.Fatalf("%s: %v", kernelName(a), err)
	}
	if err := call(e.t, "Synchronize", e.dev.Synchronize); !errors.Is(err, device.ErrIndex) {
		e.t.Fatalf("Synchronize after %s with an index out of range = %v, want an error matching device.ErrIndex", kernelName(a), err)
	}
}

func refSoftmax(n, classes int, logits []float64, temp float64) []float64 {
	if temp == 0 {
		temp = 1
	}
	out := make([]float64, len(logits))
	for i := 0; i < n; i++ {
		row := logits[i*classes : (i+1)*classes]
		m := math.Inf(-1)
		for _, x := range row {
			m = math.Max(m, x/temp)
		}
		var s float64
		for j, x := range row {
			out[i*classes+j] = math.Exp(x/temp - m)
			s += out[i*classes+j]
		}
		for j := range row {
			out[i*classes+j] /= s
		}
	}
	return out
}

func testSoftmax(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		cs := []struct {
			name       string
			n, classes int
			temp       float64
			aliased    bool
			large      bool
		}{
			{"T=0", 5, 13, 0, false, false},
			{"T=1", 5, 13, 1, false, false},
			{"T=0.5", 5, 13, 0.5, false, false},
			{"T=2/Aliased", 5, 13, 2, true, false},
			{"OneClass", 4, 1, 0, false, false},
			{"LargeLogits", 6, 5, 0, false, true},
			// Big: many GPU blocks of 8 rows, the char-RNN's 65 classes.
			{"Big/T=0.8", 600, 65, 0.8, false, false},
			{"Big/Aliased", 600, 65, 0, true, false},
			{"ManyClasses/T=0.5", 3, 1000, 0.5, false, false},
		}
		for _, c := range cs {
			e.run(c.name, func(e *env) {
				logits := e.uniform(c.n*c.classes, -3, 3)
				if c.large {
					for i := range logits {
						logits[i] = e.r(1000*float64(e.rng.IntN(3)-1) + logits[i])
					}
				}
				vL := e.vec(logits)
				vP := vL
				if !c.aliased {
					vP = e.vec(nans(c.n * c.classes))
				}
				e.launch(device.Softmax{DType: e.dt, N: c.n, Classes: c.classes, Logits: vL.buf, Probs: vP.buf, Temperature: c.temp})
				temp := e.r(c.temp)
				want := refSoftmax(c.n, c.classes, logits, temp)
				got := e.get("Probs", vP)
				// Relative to each probability: most are far below the
				// pointwise absolute floor.
				tol := Tolerance{Rel: PointwiseTolerance(e.dt).Rel + SumTolerance(e.dt, c.classes).Rel}
				checkClose(e.t, "Probs", got, want, nil, tol)
				for i := 0; i < c.n; i++ {
					var s float64
					for _, p := range got[i*c.classes : (i+1)*c.classes] {
						s += p
					}
					if !checkScalar(e.t, describe("sum of row %d of Probs", i), s, 1, 1, tol) {
						break
					}
				}
			})
		}
	})
}

func testDropout(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		cs := []struct {
			name         string
			n            int
			p            float64
			seed, offset uint64
			aliased      bool
			// state, when set, is StateAt's seed and offset, in device
			// memory.
			state []uint64
		}{
			{"P=0.25", 10007, 0.25, 42, 0, false, nil},
			{"P=0.5/Offset", 10007, 0.5, 7, 1<<40 + 5, false, nil},
			{"P=0.3/YIsX", 10007, 0.3, 3, 12345, true, nil},
			{"P=0", 1001, 0, 9, 0, false, nil},
			{"P=0/YIsX", 1001, 0, 9, 0, true, nil},
			{"Big", 1 << 20, 0.1, 1234567, 99, false, nil},
			// The seed and offset in device memory: the seed's words and
			// the offset's both matter (each above 2^32).
			{"StateAt", 10007, 0.5, 0, 0, false, []uint64{0x9E3779B97F4A7C15, 1<<33 + 17}},
			// Both in the argument and in memory: seeds XORed, offsets
			// added, here past 2^64.
			{"StateAt/Relative", 10007, 0.25, 1<<40 + 3, 1 << 63, false, []uint64{5<<32 + 1, 1<<63 + 1<<32 - 2}},
			{"StateAt/YIsX", 1001, 0.3, 0, 7, true, []uint64{42, 1 << 32}},
		}
		for _, c := range cs {
			e.run(c.name, func(e *env) {
				x := e.uniform(c.n, -2, 2)
				x[c.n/2] = math.NaN() // Y = X·Mask: NaN, kept or not
				vX, vM := e.vec(x), e.vec(nans(c.n))
				vY := vX
				if !c.aliased {
					vY = e.vec(nans(c.n))
				}
				a := device.Dropout{DType: e.dt, N: c.n, P: c.p, Seed: c.seed, Offset: c.offset, X: vX.buf, Y: vY.buf, Mask: vM.buf}
				seed, offset := c.seed, c.offset
				var vS vec
				if c.state != nil {
					vS = e.words(c.state...)
					a.StateAt = vS.buf.Slice(0, 16)
					seed, offset = seed^c.state[0], offset+c.state[1]
				}
				e.launch(a)
				mask, y := e.get("Mask", vM), e.get("Y", vY)
				if c.state != nil {
					checkWords(e.t, "StateAt after the kernel (read, never written)", e.getWords("StateAt", vS), c.state)
				}
				scale := 1 / (1 - c.p)
				tol := PointwiseTolerance(e.dt)
				for i := 0; i < c.n; i++ {
					keep := device.DropoutKeep(seed, offset+uint64(i), c.p)
					wantM := 0.0
					if keep {
						wantM = scale
					}
					wantY := x[i] * wantM
					exactY := wantY == 0 || c.p == 0 || math.IsNaN(wantY) // x·0, x·1, NaN
					if !keep && mask[i] != 0 || keep && c.p == 0 && mask[i] != 1 || exactY && !sameFloat(y[i], wantY) {
						e.t.Fatalf("element %d (DropoutKeep = %v): got Mask %v and Y %v, want exactly %v and %v", i, keep, mask[i], y[i], wantM, wantY)
					}
					if excess(mask[i], wantM, tol.Bound(wantM)) > 1 || excess(y[i], wantY, tol.Bound(wantY)) > 1 {
						e.t.Fatalf("element %d (DropoutKeep = %v): got Mask %v and Y %v, want %v and %v", i, keep, mask[i], y[i], wantM, wantY)
					}
				}
			})
		}
		e.run("N=0", func(e *env) {
			e.launch(device.Dropout{DType: e.dt, N: 0, P: 0.5})
			e.sync()
		})
	})
}

// testAdvance checks Advance on counts whose words both matter: the carry
// from the low word into the high one, the sum modulo 2^64, Prev given or
// not, and three calls in stream order.
func testAdvance(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	cs := []struct {
		name string
		at   uint64
		adds []uint64
		prev bool
	}{
		{"Carry", 1<<32 - 1, []uint64{1}, true},
		{"NoPrev", 1<<40 + 5, []uint64{1<<32 + 3}, false},
		{"Wraps", math.MaxUint64 - 1, []uint64{5}, true},
		{"Zero", 77, []uint64{0}, true},
		{"InOrder", 3, []uint64{1 << 33, 7, 1<<32 + 1}, true},
	}
	for _, c := range cs {
		e.run(c.name, func(e *env) {
			// Prev starts as a value no step writes.
			vAt, vPrev := e.words(c.at), e.words(0xDEAD)
			a := device.Advance{At: vAt.buf.Slice(0, 8)}
			if c.prev {
				a.Prev = vPrev.buf.Slice(0, 8)
			}
			want, prev := c.at, uint64(0xDEAD)
			for _, add := range c.adds {
				a.Add = add
				e.launch(a)
				if c.prev {
					prev = want
				}
				want += add
			}
			checkWords(e.t, "At", e.getWords("At", vAt), []uint64{want})
			checkWords(e.t, "Prev", e.getWords("Prev", vPrev), []uint64{prev})
		})
	}
}

// words uploads x as uint64 in device memory (two Int32 words each, the
// low one first), followed by the pad.
func (e *env) words(x ...uint64) vec {
	w := make([]int32, 2*len(x))
	for i, v := range x {
		w[2*i], w[2*i+1] = int32(uint32(v)), int32(uint32(v>>32))
	}
	return e.ids(w)
}

// getWords downloads what words uploaded, checking its pad.
func (e *env) getWords(name string, v vec) []uint64 {
	e.t.Helper()
	w := e.get(name, v)
	x := make([]uint64, len(w)/2)
	for i := range x {
		x[i] = uint64(uint32(int32(w[2*i]))) | uint64(uint32(int32(w[2*i+1])))<<32
	}
	return x
}

// checkWords fails t unless got is want, exactly.
func checkWords(t *testing.T, what string, got, want []uint64) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: word %d is %#x, want %#x", what, i, got[i], want[i])
		}
	}
}

// sameFloat reports whether a and b are equal, or both NaN.
func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// testIndexErrors queues three kernels that each meet an index out of
// range before anything reports it: one report covers all three, and each
// kernel's results are as when it runs alone.
func testIndexErrors(t *testing.T, open opener) {
	forTypes(t, open, func(e *env) {
		const n, dim, vocab = 6, 3, 5
		table := e.uniform(vocab*dim, -1, 1)
		ids := []int32{0, 4, vocab, 2, -1, 1}
		dOut := e.uniform(n*dim, -1, 1)
		dTable := e.uniform(vocab*dim, -1, 1)
		logits := e.uniform(n*vocab, -3, 3)
		vT, vI, vO := e.vec(table), e.ids(ids), e.vec(nans(n*dim))
		vD, vG := e.vec(dOut), e.vec(dTable)
		vL, vDL, vLoss := e.vec(logits), e.vec(nans(n*vocab)), e.vec([]float64{math.NaN()})
		kernels := []any{
			device.Embedding{DType: e.dt, N: n, Dim: dim, Vocab: vocab, Table: vT.buf, IDs: vI.buf, Out: vO.buf},
			device.EmbeddingGrad{DType: e.dt, N: n, Dim: dim, Vocab: vocab, IDs: vI.buf, DOut: vD.buf, DTable: vG.buf},
			device.SoftmaxCrossEntropy{DType: e.dt, N: n, Classes: vocab, Logits: vL.buf, Targets: vI.buf, Scale: 1,
				Loss: vLoss.buf, DLogits: vDL.buf},
		}
		for _, a := range kernels {
			if err := call(e.t, kernelName(a), func() error { return launchKernel(e.k, a) }); err != nil {
				e.t.Fatalf("%s with an index out of range returned %v from the call, want nil", kernelName(a), err)
			}
		}
		if err := call(e.t, "Synchronize", e.dev.Synchronize); !errors.Is(err, device.ErrIndex) {
			e.t.Errorf("Synchronize after three kernels with an index out of range = %v, want an error matching device.ErrIndex", err)
		}
		if err := call(e.t, "Synchronize", e.dev.Synchronize); err != nil {
			e.t.Errorf("second Synchronize = %v, want nil (an error is reported once)", err)
		}
		checkExact(e.t, "Embedding's Out", e.get("Out", vO), refEmbedding(dim, vocab, table, ids))
		want, mag := refEmbeddingGrad(dim, vocab, ids, dOut, dTable)
		checkClose(e.t, "EmbeddingGrad's DTable", e.get("DTable", vG), want, mag, SumTolerance(e.dt, 3))
		var loss, lossMag float64
		wantD, dMag := make([]float64, n*vocab), make([]float64, n*vocab)
		for i := range n {
			l, m, d := ceRow(logits[i*vocab:(i+1)*vocab], ids[i])
			loss, lossMag = loss+l, lossMag+m
			copy(wantD[i*vocab:], d)
			for j, v := range d {
				dMag[i*vocab+j] = math.Abs(v) + 2
			}
		}
		tol := PointwiseTolerance(e.dt).Plus(SumTolerance(e.dt, n+vocab))
		checkScalar(e.t, "SoftmaxCrossEntropy's Loss", e.get("Loss", vLoss)[0], loss, lossMag, tol)
		checkClose(e.t, "SoftmaxCrossEntropy's DLogits", e.get("DLogits", vDL), wantD, dMag, tol)
	})
}
