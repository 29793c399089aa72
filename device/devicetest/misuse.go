package devicetest

import (
	"errors"
	"math"
	"reflect"
	"regexp"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// misuseCase is a kernel's valid arguments, with buffers of exactly the
// size the shape needs, and what may be changed about them.
type misuseCase struct {
	name string // the subtest's name; the kernel's if empty
	args any
	// optional are the buffer fields that may be the zero Buffer.
	optional []string
	// longEnough are the buffer fields that may be shorter (Copy's Src).
	longEnough []string
	// together are buffer fields given both or neither (a cell's
	// recurrent product): one of them alone is an error matching
	// device.ErrShape.
	together []string
	// shapes are invalid variations of args, each naming the argument the
	// error must name.
	shapes []shapeCase
}

type shapeCase struct {
	field string
	args  any
}

// with returns a copy of the argument struct a with its field set to v.
func with(a any, field string, v any) any {
	rv := reflect.New(reflect.TypeOf(a)).Elem()
	rv.Set(reflect.ValueOf(a))
	f := rv.FieldByName(field)
	if !f.IsValid() {
		panic("devicetest: " + reflect.TypeOf(a).Name() + " has no field " + field)
	}
	f.Set(reflect.ValueOf(v).Convert(f.Type()))
	return rv.Interface()
}

// shapes lists invalid variations of a: field, value, field, value...
func shapes(a any, fieldValues ...any) []shapeCase {
	var cs []shapeCase
	for i := 0; i < len(fieldValues); i += 2 {
		f := fieldValues[i].(string)
		cs = append(cs, shapeCase{field: f, args: with(a, f, fieldValues[i+1])})
	}
	return cs
}

func (e *env) misuseCases() []misuseCase {
	f32 := device.Float32
	z := func(n int) device.Buffer { return e.vecOfExact(f32, n) }
	zi := func(n int) device.Buffer { return e.vecOfExact(device.Int32, n) }
	var cs []misuseCase
	add := func(c misuseCase) { cs = append(cs, c) }

	g := device.Gemm{DType: f32, M: 2, N: 3, K: 4, Alpha: 1, A: z(8), B: z(12), C: z(6)}
	add(misuseCase{args: g, shapes: append(shapes(g,
		"M", 0, "N", -1, "K", 0, "Batch", -1, "LdA", 3, "LdB", 2, "LdC", 2, "StrideA", -1, "StrideC", -1,
		"DType", device.Int32, "DType", device.DType(0), "DType", device.DType(99)),
		// Buffers too small for the strides or the batch.
		shapeCase{"A", with(g, "Batch", 2)},
		shapeCase{"A", with(g, "LdA", 5)},
		shapeCase{"B", with(g, "LdB", 4)},
		shapeCase{"C", with(g, "LdC", 4)},
		// Sizes whose products overflow int (issue 46: a hidden size of
		// 2^62 reached Gemm as N = 0): a product that wrapped would pass
		// the buffers' checks.
		shapeCase{"A", with(g, "M", 1<<62)},
		shapeCase{"B", with(g, "N", math.MaxInt)},
		shapeCase{"A", with(with(g, "Batch", 2), "StrideA", math.MaxInt)},
	)})

	lstm := device.LSTMCell{DType: f32, Batch: 2, Hidden: 3, Pre: z(24), BiasIH: z(12), BiasHH: z(12), CPrev: z(6), C: z(6), H: z(6), Act: z(24)}
	add(misuseCase{args: lstm, optional: []string{"BiasIH", "BiasHH", "Act"},
		shapes: append(shapes(lstm, "Batch", 0, "Hidden", -1, "DType", device.Int32),
			shapeCase{"Pre", with(lstm, "Hidden", 4)},
			shapeCase{"Pre", with(lstm, "Batch", 1<<62)},
			shapeCase{"Pre", with(lstm, "Hidden", 1<<62)})})

	lg := device.LSTMCellGrad{DType: f32, Batch: 2, Hidden: 3, Act: z(24), CPrev: z(6), C: z(6), DH: z(6), DC: z(6), DPre: z(24), DCPrev: z(6)}
	add(misuseCase{args: lg, shapes: shapes(lg, "Batch", 0, "Hidden", 0, "DType", device.Int32)})

	// The fused form: W_hh is [4·Hidden, Hidden].
	lstmFused := with(with(lstm, "HPrev", z(6)), "W", z(36))
	add(misuseCase{name: "LSTMCell/Fused", args: lstmFused, optional: []string{"BiasIH", "BiasHH", "Act"},
		together: []string{"HPrev", "W"}})

	gru := device.GRUCell{DType: f32, Batch: 2, Hidden: 3, XPre: z(18), HPre: z(18), BiasIH: z(9), BiasHH: z(9), HPrev: z(6), H: z(6), Act: z(24)}
	add(misuseCase{args: gru, optional: []string{"BiasIH", "BiasHH", "Act"},
		shapes: append(shapes(gru, "Batch", -1, "Hidden", 0, "DType", device.Int32),
			shapeCase{"XPre", with(gru, "Hidden", 1<<61)})})

	// The fused form: W_hh is [3·Hidden, Hidden]; without it the call is
	// the plain cell.
	add(misuseCase{name: "GRUCell/Fused", args: with(gru, "W", z(27)), optional: []string{"BiasIH", "BiasHH", "Act", "W"}})

	gg := device.GRUCellGrad{DType: f32, Batch: 2, Hidden: 3, Act: z(24), HPrev: z(6), DH: z(6), DXPre: z(18), DHPre: z(18), DHPrev: z(6)}
	add(misuseCase{args: gg, shapes: shapes(gg, "Batch", 0, "Hidden", -2, "DType", device.Int32, "NextBatch", 3)})

	// The gradients' fused form: the next step's recurrent pre-activation
	// gradient [NextBatch, G·Hidden] and W_hh [G·Hidden, Hidden], DH of
	// max(Batch, NextBatch) rows; a NextBatch past Batch needs a longer DH
	// and a longer DPreNext, one below it neither.
	lgFused := with(with(with(with(lg, "DPreNext", z(36)), "W", z(36)), "NextBatch", 3), "DH", z(9))
	add(misuseCase{name: "LSTMCellGrad/Fused", args: lgFused, together: []string{"DPreNext", "W"},
		shapes: append(shapes(lgFused, "NextBatch", -1),
			shapeCase{"DH", with(with(lgFused, "NextBatch", 4), "DPreNext", z(48))},
			shapeCase{"DPreNext", with(with(lgFused, "NextBatch", 4), "DH", z(12))})})
	add(misuseCase{name: "LSTMCellGrad/FusedFewerNext", args: with(with(with(lgFused, "NextBatch", 1), "DH", z(6)), "DPreNext", z(12)),
		together: []string{"DPreNext", "W"}})
	ggFused := with(with(gg, "DHPreNext", z(18)), "W", z(27))
	add(misuseCase{name: "GRUCellGrad/Fused", args: ggFused, together: []string{"DHPreNext", "W"},
		shapes: shapes(ggFused, "NextBatch", -1)})

	// Strides past Cols: a check that ignored them would take X and Y
	// one element short.
	gs := device.GatherSeq{DType: f32, T: 3, B: 2, Cols: 4, LdX: 5, LdY: 6,
		Index: zi(2), Lengths: zi(2), X: z((3*2-1)*5 + 4), Y: z((3*2-1)*6 + 4)}
	add(misuseCase{args: gs, optional: []string{"Index", "Lengths"}, shapes: append(shapes(gs,
		"T", -1, "B", -1, "Cols", 0, "LdX", 3, "LdY", -1, "DType", device.Int32),
		// The strides are checked when there is nothing to copy, too.
		shapeCase{"LdX", with(with(gs, "T", 0), "LdX", 3)},
		shapeCase{"X", with(gs, "T", 1<<62)})})

	// Strides past Cols, as GatherSeq's.
	sp := device.SeqPool{DType: f32, T: 3, B: 2, Cols: 4, Max: true, LdY: 5, LdOut: 6,
		Lengths: zi(2), Y: z((3*2-1)*5 + 4), Out: z(6 + 4), ArgMax: zi(8)}
	add(misuseCase{args: sp, optional: []string{"Lengths", "ArgMax"}, shapes: append(shapes(sp,
		"T", -1, "B", -1, "Cols", 0, "LdY", 3, "LdOut", -1, "DType", device.Int32),
		shapeCase{"LdOut", with(with(sp, "B", 0), "LdOut", 3)},
		// T = 0 needs no Y, but Out all the same.
		shapeCase{"Out", with(with(with(sp, "T", 0), "Y", device.Buffer{}), "Out", z(9))})})
	spMean := with(with(sp, "Max", false), "ArgMax", device.Buffer{})
	add(misuseCase{name: "SeqPool/Mean", args: spMean, optional: []string{"Lengths"}})

	spg := device.SeqPoolGrad{DType: f32, T: 3, B: 2, Cols: 4, Max: true, LdDOut: 5, LdDY: 6,
		Lengths: zi(2), DOut: z(5 + 4), ArgMax: zi(8), DY: z((3*2-1)*6 + 4)}
	add(misuseCase{args: spg, optional: []string{"Lengths"}, shapes: append(shapes(spg,
		"T", -1, "B", -1, "Cols", 0, "LdDOut", 3, "LdDY", -1, "DType", device.Int32),
		shapeCase{"LdDY", with(with(spg, "T", 0), "LdDY", 3)})})
	spgMean := with(with(spg, "Max", false), "ArgMax", device.Buffer{})
	add(misuseCase{name: "SeqPoolGrad/Mean", args: spgMean, optional: []string{"Lengths"}})

	emb := device.Embedding{DType: f32, N: 4, Dim: 3, Vocab: 5, Table: z(15), IDs: zi(4), Out: z(12)}
	add(misuseCase{args: emb, shapes: append(shapes(emb, "N", -1, "Dim", 0, "Vocab", 0, "DType", device.Int32),
		shapeCase{"Table", with(emb, "Vocab", 1<<62)}, shapeCase{"IDs", with(emb, "N", 1<<62)})})

	eg := device.EmbeddingGrad{DType: f32, N: 4, Dim: 3, Vocab: 5, IDs: zi(4), DOut: z(12), DTable: z(15)}
	add(misuseCase{args: eg, shapes: shapes(eg, "N", -1, "Dim", 0, "Vocab", -1, "DType", device.Int32)})

	ce := device.SoftmaxCrossEntropy{DType: f32, N: 2, Classes: 3, Logits: z(6), Targets: zi(2), Scale: 1, Loss: z(1), DLogits: z(6), Weights: z(3)}
	add(misuseCase{args: ce, optional: []string{"DLogits", "Weights"}, shapes: append(shapes(ce, "N", 0, "Classes", 0, "DType", device.Int32),
		shapeCase{"Logits", with(ce, "Classes", 1<<62)})})

	sm := device.Softmax{DType: f32, N: 2, Classes: 3, Logits: z(6), Probs: z(6)}
	add(misuseCase{args: sm, shapes: shapes(sm, "N", 0, "Classes", -1, "Temperature", -1.0, "DType", device.Int32)})

	// CounterAt is a uint64, 8-byte aligned.
	smp := device.Sample{DType: f32, N: 2, Classes: 3, Logits: z(6), Temperature: 1, TopK: 2, IDs: zi(2), Tokens: zi(2), CounterAt: zi(2)}
	add(misuseCase{args: smp, optional: []string{"Tokens", "CounterAt"}, shapes: append(shapes(smp, "N", 0, "Classes", 0, "Classes", 1<<31,
		"TopK", -1, "Temperature", -1.0, "Temperature", math.NaN(), "Temperature", math.Inf(1), "DType", device.Int32),
		shapeCase{"CounterAt", with(smp, "CounterAt", zi(4).Slice(4, 8))})})

	// StateAt is two uint64, 8-byte aligned.
	do := device.Dropout{DType: f32, N: 5, P: 0.5, StateAt: zi(4), X: z(5), Y: z(5), Mask: z(5)}
	add(misuseCase{args: do, optional: []string{"StateAt"}, shapes: append(shapes(do, "N", -1, "P", 1.0, "P", -0.1, "P", math.NaN(), "DType", device.Int32),
		shapeCase{"StateAt", with(do, "StateAt", zi(6).Slice(4, 16))})})

	adv := device.Advance{At: zi(2), Add: 3, Prev: zi(2)}
	add(misuseCase{args: adv, optional: []string{"Prev"}, shapes: []shapeCase{
		{"At", with(adv, "At", zi(4).Slice(4, 8))}, {"Prev", with(adv, "Prev", zi(4).Slice(4, 8))}}})

	ab := device.AddBias{DType: f32, Rows: 2, Cols: 3, Bias: z(3), Y: z(6)}
	add(misuseCase{args: ab, shapes: append(shapes(ab, "Rows", 0, "Cols", 0, "DType", device.Int32),
		shapeCase{"Y", with(ab, "Rows", 1<<62)})})

	sr := device.SumRows{DType: f32, Rows: 2, Cols: 3, X: z(6), Out: z(3)}
	add(misuseCase{args: sr, shapes: shapes(sr, "Rows", -1, "Cols", 0, "DType", device.Int32)})

	fill := device.Fill{DType: f32, N: 5, X: z(5), Value: 1}
	// N = 2^62 float32 are 2^64 bytes, which int64 arithmetic wraps to 0.
	add(misuseCase{args: fill, shapes: append(shapes(fill, "N", -1, "DType", device.DType(0), "X", fill.X.Slice(0, 19)),
		shapeCase{"X", with(fill, "N", 1<<62)})})

	cp := device.Copy{Dst: z(4), Src: z(4)}
	add(misuseCase{args: cp, longEnough: []string{"Src"}})

	ax := device.Axpby{DType: f32, N: 5, Alpha: 1, Beta: 1, X: z(5), Y: z(5)}
	add(misuseCase{args: ax, shapes: shapes(ax, "N", -1, "DType", device.Int32)})

	mul := device.Mul{DType: f32, N: 5, X: z(5), Y: z(5), Z: z(5)}
	add(misuseCase{args: mul, shapes: shapes(mul, "N", -1, "DType", device.Int32)})

	cl := device.Clamp{DType: f32, N: 5, Min: -1, Max: 1, X: z(5)}
	add(misuseCase{args: cl, shapes: shapes(cl, "N", -1, "Min", 2.0, "Max", math.NaN(), "DType", device.Int32)})

	ss := device.SumSquares{DType: f32, N: 5, X: z(5), Out: z(1)}
	add(misuseCase{args: ss, shapes: shapes(ss, "N", -1, "DType", device.Int32)})

	sgd := device.SGD{DType: f32, N: 5, LR: 0.1, Momentum: 0.9, Step: 1, Param: z(5), Grad: z(5), Velocity: z(5)}
	add(misuseCase{args: sgd, shapes: shapes(sgd, "N", -1, "Step", 0, "DType", device.Int32)})
	plain := with(with(sgd, "Momentum", 0), "Velocity", device.Buffer{})
	add(misuseCase{name: "SGD/NoMomentum", args: plain, optional: []string{"Velocity"}})

	adam := device.Adam{DType: f32, N: 5, LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1, Param: z(5), Grad: z(5), M: z(5), V: z(5)}
	add(misuseCase{args: adam, shapes: shapes(adam, "N", -1, "Step", 0, "Beta1", 1.0, "Beta2", -0.5, "Beta2", math.NaN(), "DType", device.Int32)})

	rms := device.RMSprop{DType: f32, N: 5, LR: 0.1, Alpha: 0.99, Eps: 1e-8, Centered: true, Momentum: 0.9,
		Param: z(5), Grad: z(5), SquareAvg: z(5), GradAvg: z(5), Velocity: z(5)}
	add(misuseCase{args: rms, shapes: shapes(rms, "N", -1, "DType", device.Int32)})
	rmsPlain := with(with(with(with(rms, "Centered", false), "Momentum", 0), "GradAvg", device.Buffer{}), "Velocity", device.Buffer{})
	add(misuseCase{name: "RMSprop/Plain", args: rmsPlain, optional: []string{"GradAvg", "Velocity"}})
	return cs
}

// vecOfExact is a zero-filled buffer of exactly n elements of dt.
func (e *env) vecOfExact(dt device.DType, n int) device.Buffer {
	e.t.Helper()
	b := e.alloc(dt, n)
	if err := call(e.t, "Upload", func() error { return upload(e.dev, dt, b, make([]float64, n)) }); err != nil {
		e.t.Fatalf("Upload: %v", err)
	}
	return b
}

// namesField reports whether err's message names field as a word.
func namesField(err error, field string) bool {
	return regexp.MustCompile(`\b` + regexp.QuoteMeta(field) + `\b`).MatchString(err.Error())
}

// elemSize is the size of the elements of the buffer in field of a.
func elemSize(a any, field string) int64 {
	switch {
	case reflect.TypeOf(a) == reflect.TypeOf(device.Copy{}):
		return 1
	case field == "IDs" || field == "Tokens" || field == "Targets" || field == "Index" || field == "Lengths" || field == "ArgMax" ||
		field == "StateAt" || field == "At" || field == "Prev" || field == "CounterAt":
		return device.Int32.Size()
	}
	return reflect.ValueOf(a).FieldByName("DType").Interface().(device.DType).Size()
}

func testMisuse(t *testing.T, open opener) {
	t.Run("Kernels", func(t *testing.T) {
		e := newEnv(t, open, device.Float32)
		other := openDevice(t, open)
		for _, c := range e.misuseCases() {
			name := c.name
			if name == "" {
				name = kernelName(c.args)
			}
			e.run(name, func(e *env) { e.checkMisuse(c, other) })
		}
		e.sync()
	})
	t.Run("Memory", func(t *testing.T) { testMemoryMisuse(newEnv(t, open, device.Float32), openDevice(t, open)) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, open) })
}

func (e *env) checkMisuse(c misuseCase, other device.Device) {
	name := kernelName(c.args)
	try := func(what string, a any) error {
		return call(e.t, name+" with "+what, func() error { return launchKernel(e.k, a) })
	}
	if err := try("valid arguments", c.args); err != nil {
		e.t.Fatalf("%s with valid arguments: %v", name, err)
	}
	rv := reflect.ValueOf(c.args)
	bufType := reflect.TypeOf(device.Buffer{})
	for i := 0; i < rv.NumField(); i++ {
		field := rv.Type().Field(i).Name
		if rv.Field(i).Type() != bufType {
			continue
		}
		b := rv.Field(i).Interface().(device.Buffer)
		if b.IsZero() {
			continue
		}
		optional := contains(c.optional, field)
		if !contains(c.longEnough, field) {
			short := b.Slice(0, b.Len()-elemSize(c.args, field))
			err := try("a short "+field, with(c.args, field, short))
			if !errors.Is(err, device.ErrShape) || !namesField(err, field) {
				e.t.Errorf("%s with %s one element short = %v, want an error matching device.ErrShape that names %s", name, field, err, field)
			}
		}
		err := try("the zero Buffer as "+field, with(c.args, field, device.Buffer{}))
		switch {
		case optional && err != nil:
			e.t.Errorf("%s without the optional %s = %v, want nil", name, field, err)
		case contains(c.together, field):
			if !errors.Is(err, device.ErrShape) || !namesField(err, field) {
				e.t.Errorf("%s without %s but with the rest of its pair = %v, want an error matching device.ErrShape that names %s", name, field, err, field)
			}
		case !optional && (!errors.Is(err, device.ErrForeignBuffer) || !namesField(err, field)):
			e.t.Errorf("%s with the zero Buffer as %s = %v, want an error matching device.ErrForeignBuffer that names %s", name, field, err, field)
		}
		foreign, ferr := other.Alloc(b.Len(), device.Workspace)
		if ferr != nil {
			e.t.Fatalf("Alloc on the second device: %v", ferr)
		}
		err = try("a buffer of another device as "+field, with(c.args, field, foreign.Slice(0, b.Len())))
		if !errors.Is(err, device.ErrForeignBuffer) || !namesField(err, field) {
			e.t.Errorf("%s with a buffer of another device as %s = %v, want an error matching device.ErrForeignBuffer that names %s", name, field, err, field)
		}
	}
	for _, s := range c.shapes {
		err := try("an invalid "+s.field, s.args)
		if !errors.Is(err, device.ErrShape) || !namesField(err, s.field) {
			e.t.Errorf("%s with %s = %v, want an error matching device.ErrShape that names %s", name, describeField(s.args, s.field), err, s.field)
		}
	}
	// Refused calls queue nothing and leave no error behind.
	e.sync()
}

func describeField(a any, field string) string {
	v := reflect.ValueOf(a).FieldByName(field).Interface()
	if b, ok := v.(device.Buffer); ok {
		return describe("%s of %d bytes", field, b.Len())
	}
	return describe("%s = %v", field, v)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func testMemoryMisuse(e *env, other device.Device) {
	b := e.allocWhole(64)
	foreign, err := other.Alloc(64, device.Workspace)
	if err != nil {
		e.t.Fatalf("Alloc on the second device: %v", err)
	}
	foreignStream, err := other.NewStream()
	if err != nil {
		e.t.Fatalf("NewStream on the second device: %v", err)
	}
	foreignStaging, err := other.Staging(64)
	if err != nil {
		e.t.Fatalf("Staging on the second device: %v", err)
	}
	h := e.staging(64)
	var zero device.Buffer
	cases := []struct {
		name string
		want error // nil: any error
		f    func() error
	}{
		{"Upload into a buffer of another device", device.ErrForeignBuffer, func() error { return e.dev.Upload(foreign, make([]byte, 8)) }},
		{"Upload into the zero Buffer", device.ErrForeignBuffer, func() error { return e.dev.Upload(zero, make([]byte, 8)) }},
		{"Download from a buffer of another device", device.ErrForeignBuffer, func() error { return e.dev.Download(make([]byte, 8), foreign.Slice(0, 8)) }},
		{"Download from the zero Buffer", device.ErrForeignBuffer, func() error { return e.dev.Download(make([]byte, 8), zero) }},
		{"Free of a buffer of another device", device.ErrForeignBuffer, func() error { return e.dev.Free(foreign) }},
		{"Free of the zero Buffer", nil, func() error { return e.dev.Free(zero) }},
		{"Upload of more bytes than the buffer", nil, func() error { return e.dev.Upload(b.Slice(0, 16), make([]byte, 17)) }},
		{"Upload of more bytes than Alloc returned", nil, func() error { return e.dev.Upload(b, make([]byte, b.Len()+1)) }},
		{"CopyToDevice from a staging buffer larger than dst", nil, func() error {
			_, err := e.dev.CopyToDevice(b.Slice(0, 16), h.Slice(0, 64), e.dev.Stream())
			return err
		}},
		{"CopyToDevice into a buffer of another device", device.ErrForeignBuffer, func() error {
			_, err := e.dev.CopyToDevice(foreign.Slice(0, 64), h.Slice(0, 64), e.dev.Stream())
			return err
		}},
		{"CopyToHost from a buffer of another device", device.ErrForeignBuffer, func() error {
			_, err := e.dev.CopyToHost(h.Slice(0, 64), foreign.Slice(0, 64), e.dev.Stream())
			return err
		}},
		{"CopyToDevice from a staging buffer of another device", nil, func() error {
			_, err := e.dev.CopyToDevice(b.Slice(0, 64), foreignStaging.Slice(0, 64), e.dev.Stream())
			return err
		}},
		{"CopyToDevice on a stream of another device", nil, func() error {
			_, err := e.dev.CopyToDevice(b.Slice(0, 64), h.Slice(0, 64), foreignStream)
			return err
		}},
		{"FreeStaging of a staging buffer of another device", nil, func() error { return e.dev.FreeStaging(foreignStaging) }},
	}
	for _, c := range cases {
		err := call(e.t, c.name, c.f)
		switch {
		case err == nil:
			e.t.Errorf("%s succeeded, want an error", c.name)
		case c.want != nil && !errors.Is(err, c.want):
			e.t.Errorf("%s = %v, want an error matching %v", c.name, err, c.want)
		}
	}
	// Download into more bytes than the buffer holds is not specified
	// either way: it must only not panic.
	_ = call(e.t, "Download of more bytes than the buffer", func() error { return e.dev.Download(make([]byte, 17), b.Slice(0, 16)) })
	// Whether a nil stream is an error or means the compute stream is not
	// specified either.
	_ = call(e.t, "CopyToDevice on a nil stream", func() error {
		ev, err := e.dev.CopyToDevice(b.Slice(0, 64), h.Slice(0, 64), nil)
		if err == nil {
			err = ev.Wait()
		}
		return err
	})

	// Out of memory is an error carrying the allocator's figures.
	_, err = e.dev.Alloc(1<<60, device.Workspace)
	var oom *alloc.OutOfMemoryError
	if !errors.Is(err, alloc.ErrOutOfMemory) || !errors.As(err, &oom) {
		e.t.Errorf("Alloc(1<<60) = %v, want an *alloc.OutOfMemoryError matching alloc.ErrOutOfMemory", err)
	} else if oom.Requested != 1<<60 {
		e.t.Errorf("out-of-memory error's Requested = %d, want %d", oom.Requested, int64(1<<60))
	}
	// None of it broke the device.
	e.uploadBytes(b, []byte{1, 2, 3})
	if got := e.downloadBytes(b.Slice(0, 3)); string(got) != "\x01\x02\x03" {
		e.t.Errorf("Download after the misuse: got %v, want [1 2 3]", got)
	}
	e.sync()
	e.freeStaging(h)
}

func testClosed(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	d := e.dev
	b := e.allocWhole(64)
	s := e.newStream()
	h := e.staging(64)
	k := d.Kernels()
	if err := call(t, "Close", d.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	cases := []struct {
		name string
		f    func() error
	}{
		{"Alloc", func() error { _, err := d.Alloc(64, device.Workspace); return err }},
		{"Free", func() error { return d.Free(b) }},
		{"Upload", func() error { return d.Upload(b, make([]byte, 8)) }},
		{"Download", func() error { return d.Download(make([]byte, 8), b.Slice(0, 8)) }},
		{"NewStream", func() error { _, err := d.NewStream(); return err }},
		{"Staging", func() error { _, err := d.Staging(64); return err }},
		{"FreeStaging", func() error { return d.FreeStaging(h) }},
		{"CopyToDevice", func() error { _, err := d.CopyToDevice(b.Slice(0, 64), h.Slice(0, 64), d.Stream()); return err }},
		{"CopyToHost", func() error { _, err := d.CopyToHost(h.Slice(0, 64), b.Slice(0, 64), d.Stream()); return err }},
		{"Synchronize", d.Synchronize},
		{"Kernels().Fill", func() error { return d.Kernels().Fill(device.Fill{DType: device.Float32, N: 4, X: b, Value: 1}) }},
		{"Fill of Kernels taken before Close", func() error { return k.Fill(device.Fill{DType: device.Float32, N: 4, X: b, Value: 1}) }},
		{"Gemm", func() error {
			return k.Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 2, Alpha: 1, A: b, B: b.Slice(16, 16), C: b.Slice(32, 16)})
		}},
		{"Stream().Record", func() error { _, err := d.Stream().Record(); return err }},
		{"Stream().Synchronize", func() error { return d.Stream().Synchronize() }},
		{"Record of a stream from NewStream", func() error { _, err := s.Record(); return err }},
		{"CopyToDevice on a stream from NewStream", func() error { _, err := d.CopyToDevice(b.Slice(0, 64), h.Slice(0, 64), s); return err }},
	}
	// The optional capabilities that queue work or open objects.
	if g, ok := d.(device.Grapher); ok {
		cases = append(cases, struct {
			name string
			f    func() error
		}{"Capture", func() error { _, err := g.Capture(func() error { return nil }); return err }})
	}
	if hc, ok := d.(device.HostCaller); ok {
		cases = append(cases, struct {
			name string
			f    func() error
		}{"CallHost", func() error { return hc.CallHost(d.Stream(), func([][]byte) error { return nil }) }})
	}
	for _, c := range cases {
		if err := call(t, c.name, c.f); !errors.Is(err, device.ErrClosed) {
			t.Errorf("%s after Close = %v, want an error matching device.ErrClosed", c.name, err)
		}
	}
	// Figures of a closed device may be asked for: no panic.
	if a, ok := d.(device.Allocator); ok {
		_ = call(t, "Memory().Stats", func() error { a.Memory().Stats(); return nil })
	}
	if c, ok := d.(device.Counter); ok {
		_ = call(t, "Counts", func() error { c.Counts(); return nil })
	}
	_ = call(t, "MemStats", func() error { d.MemStats(); return nil })
	_ = call(t, "Name", func() error { d.Name(); return nil })
	if err := call(t, "second Close", d.Close); err != nil && !errors.Is(err, device.ErrClosed) {
		t.Errorf("second Close = %v, want nil or device.ErrClosed", err)
	}
}
