// Package devicetest is the conformance suite every device.Device passes:
// the CPU device (package device/cpu) and the CUDA device (package cuda),
// in the manner of gonum's testblas. It is a test helper: import it from
// _test files only.
//
// Run checks every kernel of device.Kernels in Float32 and Float64 against
// float64 references the suite computes from the equations documented in
// package device (it never calls an implementation), with seeded random
// inputs; streams and events; copies and staging buffers; the allocator's
// figures; and that misuse (foreign or missing buffers, bad shapes, a
// closed device or stream) is an error matching the documented sentinel,
// never a panic.
//
// A device's test file runs it as
//
//	func TestConformance(t *testing.T) {
//		devicetest.Run(t, func(t testing.TB) device.Device {
//			d, err := cpu.Open(cpu.Config{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return d
//		})
//	}
//
// and one group of checks runs alone with -run 'Conformance/Gemm'.
//
// # Tolerances
//
// Inputs are rounded to the kernel's DType before the reference sees them,
// so only the kernel's own rounding is measured. Results are compared as
// |got − want| ≤ Abs + Rel·mag (Tolerance), where mag is the magnitude of
// the computation: |want| for pointwise results, the sum of the absolute
// values of the terms for sums and products. PointwiseTolerance and
// SumTolerance give the figures and say where they come from. Float32 GEMM
// must be computed in float32 or better: TF32 or half-precision tensor-core
// paths do not conform.
package devicetest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// Run runs the conformance suite against the devices open returns. Each
// group of checks opens its own device with open, which must return a
// fresh device or end the test (t.Fatal, t.Skip); the suite closes what it
// opened when the test ends, and tolerates a device it already closed.
func Run(t *testing.T, open func(t testing.TB) device.Device) {
	RunGroups(t, open, nil)
}

// Without is a RunGroups filter that keeps every group of the suite but
// those named, and fails t at its end for a name the suite offered no
// group of (a group renamed, which the filter would then keep).
func Without(t *testing.T, names ...string) func(group string) bool {
	offered := map[string]bool{}
	t.Cleanup(func() {
		for _, n := range names {
			if !offered[n] {
				t.Errorf("the conformance suite has no group %s to leave out", n)
			}
		}
	})
	return func(group string) bool {
		if slices.Contains(names, group) {
			offered[group] = true
			return false
		}
		return true
	}
}

// RunGroups runs the groups of the suite whose names keep accepts ("Gemm",
// "LSTMCell", ..., "Streams", "Misuse": the subtests Run makes), or all of
// them when keep is nil: for a second run of a device in a configuration
// that changes only some of what the suite checks, such as the CUDA
// device with its launch grids capped.
func RunGroups(t *testing.T, open func(t testing.TB) device.Device, keep func(group string) bool) {
	groups := []struct {
		name string
		run  func(t *testing.T, open opener)
	}{
		{"Gemm", testGemm},
		{"LSTMCell", testLSTMCell},
		{"LSTMCellGrad", testLSTMCellGrad},
		{"GRUCell", testGRUCell},
		{"GRUCellGrad", testGRUCellGrad},
		{"LSTMCellFused", testLSTMCellFused},
		{"GRUCellFused", testGRUCellFused},
		{"LSTMCellGradFused", testLSTMCellGradFused},
		{"GRUCellGradFused", testGRUCellGradFused},
		{"Walks", testWalks},
		{"GatherSeq", testGatherSeq},
		{"SeqPool", testSeqPool},
		{"Embedding", testEmbedding},
		{"EmbeddingGrad", testEmbeddingGrad},
		{"SoftmaxCrossEntropy", testSoftmaxCrossEntropy},
		{"IndexErrors", testIndexErrors},
		{"Softmax", testSoftmax},
		{"Sample", testSample},
		{"Dropout", testDropout},
		{"Advance", testAdvance},
		{"AddBias", testAddBias},
		{"SumRows", testSumRows},
		{"Fill", testFill},
		{"Copy", testCopy},
		{"Axpby", testAxpby},
		{"Mul", testMul},
		{"Clamp", testClamp},
		{"SumSquares", testSumSquares},
		{"SGD", testSGD},
		{"Adam", testAdam},
		{"RMSprop", testRMSprop},
		{"StepGuard", testStepGuard},
		{"GuardedSteps", testGuardedSteps},
		{"StepRates", testStepRates},
		{"GuardedCopy", testGuardedCopy},
		{"Streams", testStreams},
		{"Concurrency", testConcurrency},
		{"Copies", testCopies},
		{"Staging", testStaging},
		{"MemStats", testMemStats},
		{"Misuse", testMisuse},
		{"Scopes", testScopes},
		{"Counts", testCounts},
		{"Graphs", testGraphs},
		{"Branches", testBranches},
	}
	for _, g := range groups {
		if keep != nil && !keep(g.name) {
			continue
		}
		t.Run(g.name, func(t *testing.T) { g.run(t, open) })
	}
}

type opener = func(t testing.TB) device.Device

// floatTypes are the DTypes every float kernel is checked in.
var floatTypes = []device.DType{device.Float32, device.Float64}

// openDevice opens a device for t and closes it when t ends.
func openDevice(t testing.TB, open opener) device.Device {
	t.Helper()
	d := open(t)
	if d == nil {
		t.Fatal("open returned a nil device.Device")
	}
	t.Cleanup(func() {
		// The test may have closed it already, and a test that left an
		// error on a stream on purpose may see it here: only a panic
		// counts.
		_ = call(t, d.Name()+".Close", d.Close)
	})
	return d
}

// errPanicked stands for the error of a call that panicked; call has
// already reported the panic.
var errPanicked = errors.New("devicetest: the call panicked")

// call runs f and returns its error, turning a panic into a test failure
// that names the call: misuse must be an error, never a panic.
func call(t testing.TB, what string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
			err = errPanicked
		}
	}()
	return f()
}

// env is one group's device, with the DType its kernels run in and a
// random generator seeded from the test's name, so every failure
// reproduces.
type env struct {
	t   *testing.T
	dev device.Device
	k   device.Kernels
	dt  device.DType
	rng *rand.Rand
}

func newEnv(t *testing.T, open opener, dt device.DType) *env {
	t.Helper()
	d := openDevice(t, open)
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	return &env{t: t, dev: d, k: d.Kernels(), dt: dt, rng: rand.New(rand.NewPCG(0x5eed, h.Sum64()))}
}

// forTypes runs f in a subtest per float DType, each with its own device.
func forTypes(t *testing.T, open opener, f func(e *env)) {
	for _, dt := range floatTypes {
		t.Run(dt.String(), func(t *testing.T) { f(newEnv(t, open, dt)) })
	}
}

// with returns a copy of e for subtest t, sharing the device.
func (e *env) with(t *testing.T) *env {
	c := *e
	c.t = t
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	c.rng = rand.New(rand.NewPCG(0x5eed, h.Sum64()))
	return &c
}

// run runs f in subtest name with e's device.
func (e *env) run(name string, f func(e *env)) {
	e.t.Run(name, func(t *testing.T) { f(e.with(t)) })
}

// launch runs the kernel whose argument struct is a and fails the test if
// it returns an error or panics.
func (e *env) launch(a any) {
	e.t.Helper()
	name := kernelName(a)
	if err := call(e.t, name, func() error { return launchKernel(e.k, a) }); err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
}

func kernelName(a any) string { return reflect.TypeOf(a).Name() }

// launchKernel calls the kernel of k whose argument struct is a.
func launchKernel(k device.Kernels, a any) error {
	switch a := a.(type) {
	case device.Gemm:
		return k.Gemm(a)
	case device.LSTMCell:
		return k.LSTMCell(a)
	case device.LSTMCellGrad:
		return k.LSTMCellGrad(a)
	case device.GRUCell:
		return k.GRUCell(a)
	case device.GRUCellGrad:
		return k.GRUCellGrad(a)
	case device.GatherSeq:
		return k.GatherSeq(a)
	case device.SeqPool:
		return k.SeqPool(a)
	case device.SeqPoolGrad:
		return k.SeqPoolGrad(a)
	case device.Embedding:
		return k.Embedding(a)
	case device.EmbeddingGrad:
		return k.EmbeddingGrad(a)
	case device.SoftmaxCrossEntropy:
		return k.SoftmaxCrossEntropy(a)
	case device.Softmax:
		return k.Softmax(a)
	case device.Sample:
		return k.Sample(a)
	case device.Dropout:
		return k.Dropout(a)
	case device.Advance:
		return k.Advance(a)
	case device.AddBias:
		return k.AddBias(a)
	case device.SumRows:
		return k.SumRows(a)
	case device.Fill:
		return k.Fill(a)
	case device.Copy:
		return k.Copy(a)
	case device.Axpby:
		return k.Axpby(a)
	case device.Mul:
		return k.Mul(a)
	case device.Clamp:
		return k.Clamp(a)
	case device.SumSquares:
		return k.SumSquares(a)
	case device.SGD:
		return k.SGD(a)
	case device.Adam:
		return k.Adam(a)
	case device.RMSprop:
		return k.RMSprop(a)
	case device.StepGuard:
		return k.StepGuard(a)
	case device.GuardedCopy:
		return k.GuardedCopy(a)
	}
	panic(fmt.Sprintf("devicetest: %T is not a kernel's arguments", a))
}

// sync waits for the device and fails the test on an error.
func (e *env) sync() {
	e.t.Helper()
	if err := call(e.t, "Synchronize", e.dev.Synchronize); err != nil {
		e.t.Fatalf("Synchronize: %v", err)
	}
}

// A vec is a buffer the suite uploaded: n elements of dt followed by pad
// elements holding padValue. Kernels get the whole buffer (a buffer may hold
// more than the shape needs); reading it back checks that the pad is intact.
type vec struct {
	buf device.Buffer
	n   int
	dt  device.DType
}

const (
	pad      = 3
	padValue = -7777 // exact in every DType
)

// vec uploads x, rounded to e.dt, into a fresh buffer.
func (e *env) vec(x []float64) vec { return e.vecOf(e.dt, x) }

// ids uploads x as Int32 into a fresh buffer.
func (e *env) ids(x []int32) vec {
	f := make([]float64, len(x))
	for i, v := range x {
		f[i] = float64(v)
	}
	return e.vecOf(device.Int32, f)
}

func (e *env) vecOf(dt device.DType, x []float64) vec {
	e.t.Helper()
	all := make([]float64, len(x)+pad)
	copy(all, x)
	for i := len(x); i < len(all); i++ {
		all[i] = padValue
	}
	b := e.alloc(dt, len(all))
	if err := call(e.t, "Upload", func() error { return upload(e.dev, dt, b, all) }); err != nil {
		e.t.Fatalf("Upload of %d %v: %v", len(all), dt, err)
	}
	return vec{buf: b, n: len(x), dt: dt}
}

// filled is a vec of n elements, all v.
func (e *env) filled(n int, v float64) vec { return e.vec(constant(n, v)) }

// alloc returns a buffer of exactly n elements of dt.
func (e *env) alloc(dt device.DType, n int) device.Buffer {
	e.t.Helper()
	bytes := int64(n) * dt.Size()
	var b device.Buffer
	err := call(e.t, "Alloc", func() (err error) {
		b, err = e.dev.Alloc(max(bytes, 1), device.Workspace)
		return err
	})
	if err != nil {
		e.t.Fatalf("Alloc(%d): %v", bytes, err)
	}
	if b.Len() < bytes {
		e.t.Fatalf("Alloc(%d) returned a buffer of %d bytes, want at least %d", bytes, b.Len(), bytes)
	}
	return b.Slice(0, bytes)
}

// allocWhole returns what Alloc(bytes) returned, for a test that frees it.
func (e *env) allocWhole(bytes int64) device.Buffer {
	e.t.Helper()
	var b device.Buffer
	err := call(e.t, "Alloc", func() (err error) {
		b, err = e.dev.Alloc(bytes, device.Workspace)
		return err
	})
	if err != nil {
		e.t.Fatalf("Alloc(%d): %v", bytes, err)
	}
	if b.Len() < bytes {
		e.t.Fatalf("Alloc(%d) returned a buffer of %d bytes, want at least %d", bytes, b.Len(), bytes)
	}
	return b
}

// get downloads v, checks that its pad is intact and returns its n
// elements; name says which argument v was in messages.
func (e *env) get(name string, v vec) []float64 {
	e.t.Helper()
	var all []float64
	err := call(e.t, "Download", func() (err error) {
		all, err = download(e.dev, v.dt, v.buf, v.n+pad)
		return err
	})
	if err != nil {
		e.t.Fatalf("Download of %s: %v", name, err)
	}
	for i := v.n; i < len(all); i++ {
		if all[i] != padValue {
			e.t.Errorf("%s: element %d, past the %d the kernel was given, was written: got %v, want it untouched (%v)",
				name, i, v.n, all[i], float64(padValue))
			break
		}
	}
	return all[:v.n]
}

// upload writes x into b as n elements of dt.
func upload(d device.Device, dt device.DType, b device.Buffer, x []float64) error {
	switch dt {
	case device.Float32:
		s := make([]float32, len(x))
		for i, v := range x {
			s[i] = float32(v)
		}
		return device.UploadSlice(d, b, s)
	case device.Float64:
		return device.UploadSlice(d, b, x)
	case device.Int32:
		s := make([]int32, len(x))
		for i, v := range x {
			s[i] = int32(v)
		}
		return device.UploadSlice(d, b, s)
	}
	return fmt.Errorf("devicetest: upload of %v", dt)
}

// download reads n elements of dt from b.
func download(d device.Device, dt device.DType, b device.Buffer, n int) ([]float64, error) {
	out := make([]float64, n)
	switch dt {
	case device.Float32:
		s := make([]float32, n)
		if err := device.DownloadSlice(d, s, b); err != nil {
			return nil, err
		}
		for i, v := range s {
			out[i] = float64(v)
		}
	case device.Float64:
		if err := device.DownloadSlice(d, out, b); err != nil {
			return nil, err
		}
	case device.Int32:
		s := make([]int32, n)
		if err := device.DownloadSlice(d, s, b); err != nil {
			return nil, err
		}
		for i, v := range s {
			out[i] = float64(v)
		}
	default:
		return nil, fmt.Errorf("devicetest: download of %v", dt)
	}
	return out, nil
}

// round rounds x to the nearest value of dt, as a device stores it.
func round(dt device.DType, x float64) float64 {
	if dt == device.Float32 {
		return float64(float32(x))
	}
	return x
}

// uniform returns n values uniform in [lo, hi), rounded to e.dt.
func (e *env) uniform(n int, lo, hi float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = round(e.dt, lo+(hi-lo)*e.rng.Float64())
	}
	return x
}

// r rounds a scalar argument to e.dt, as kernels do.
func (e *env) r(x float64) float64 { return round(e.dt, x) }

func constant(n int, v float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = v
	}
	return x
}

func nans(n int) []float64 { return constant(n, math.NaN()) }

func clone(x []float64) []float64 { return append([]float64(nil), x...) }
