package cpu_test

import (
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
)

// The shapes are those of bench/torch_charrnn.py's default
// workload: LSTM or GRU, 2 layers of hidden 256, embedding 64, vocabulary
// 65, batch 32, sequence 64 (so 2048 rows for the whole-sequence GEMMs).
const (
	benchBatch  = 32
	benchHidden = 256
	benchEmbed  = 64
	benchVocab  = 65
	benchRows   = 32 * 64
)

func benchDevice(b *testing.B) (*cpu.Device, device.Kernels) {
	b.Helper()
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d, d.Kernels()
}

// buf returns a float32 buffer of n elements filled with v.
func buf(b *testing.B, d *cpu.Device, n int, v float64) device.Buffer {
	b.Helper()
	x, err := d.Alloc(int64(n)*4, device.Workspace)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Kernels().Fill(device.Fill{DType: device.Float32, N: n, X: x, Value: v}); err != nil {
		b.Fatal(err)
	}
	return x
}

// run times launch through the device, synchronising every call so that
// the figure is the kernel's time, not the queuing's.
func run(b *testing.B, d *cpu.Device, launch func() error) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		if err := launch(); err != nil {
			b.Fatal(err)
		}
		if err := d.Stream().Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}

func reportGBs(b *testing.B, bytes int64) {
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

func BenchmarkGemm(b *testing.B) {
	shapes := []struct {
		name           string
		transA, transB bool
		m, n, k        int
	}{
		{"input-proj-l0", false, true, benchRows, 4 * benchHidden, benchEmbed},
		{"input-proj-l1", false, true, benchRows, 4 * benchHidden, benchHidden},
		{"recurrent", false, true, benchBatch, 4 * benchHidden, benchHidden},
		{"bwd-dx", false, false, benchRows, benchHidden, 4 * benchHidden},
		{"bwd-dw", true, false, 4 * benchHidden, benchHidden, benchRows},
		{"bwd-dh", false, false, benchBatch, benchHidden, 4 * benchHidden},
		{"head", false, true, benchRows, benchVocab, benchHidden},
		{"sample-step", false, true, 1, 4 * benchHidden, benchHidden},
	}
	for _, s := range shapes {
		b.Run(s.name, func(b *testing.B) {
			d, k := benchDevice(b)
			A, B, C := buf(b, d, s.m*s.k, 0.01), buf(b, d, s.k*s.n, 0.01), buf(b, d, s.m*s.n, 0)
			g := device.Gemm{DType: device.Float32, TransA: s.transA, TransB: s.transB, M: s.m, N: s.n, K: s.k, Alpha: 1, A: A, B: B, C: C}
			run(b, d, func() error { return k.Gemm(g) })
			b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkLSTMCell(b *testing.B) {
	for _, h := range []int{256, 512} {
		b.Run(name(h), func(b *testing.B) {
			d, k := benchDevice(b)
			bh := benchBatch * h
			pre, act := buf(b, d, 4*bh, 0.1), buf(b, d, 4*bh, 0)
			bi, bb := buf(b, d, 4*h, 0.1), buf(b, d, 4*h, 0.1)
			cp, c, hh := buf(b, d, bh, 0.1), buf(b, d, bh, 0), buf(b, d, bh, 0)
			a := device.LSTMCell{DType: device.Float32, Batch: benchBatch, Hidden: h, Pre: pre, BiasIH: bi, BiasHH: bb, CPrev: cp, C: c, H: hh, Act: act}
			run(b, d, func() error { return k.LSTMCell(a) })
			reportGBs(b, 4*int64(4*bh+bh+2*bh+4*bh)) // pre, cPrev in; c, h, act out
		})
	}
}

func BenchmarkLSTMCellGrad(b *testing.B) {
	for _, h := range []int{256, 512} {
		b.Run(name(h), func(b *testing.B) {
			d, k := benchDevice(b)
			bh := benchBatch * h
			act, dpre := buf(b, d, 4*bh, 0.5), buf(b, d, 4*bh, 0)
			cp, c, dh, dc, dcp := buf(b, d, bh, 0.1), buf(b, d, bh, 0.2), buf(b, d, bh, 0.1), buf(b, d, bh, 0.1), buf(b, d, bh, 0)
			a := device.LSTMCellGrad{DType: device.Float32, Batch: benchBatch, Hidden: h, Act: act, CPrev: cp, C: c, DH: dh, DC: dc, DPre: dpre, DCPrev: dcp}
			run(b, d, func() error { return k.LSTMCellGrad(a) })
			reportGBs(b, 4*int64(4*bh+4*bh+bh+bh+bh+bh+bh))
		})
	}
}

func BenchmarkGRUCell(b *testing.B) {
	for _, h := range []int{256, 512} {
		b.Run(name(h), func(b *testing.B) {
			d, k := benchDevice(b)
			bh := benchBatch * h
			xp, hp, act := buf(b, d, 3*bh, 0.1), buf(b, d, 3*bh, 0.1), buf(b, d, 4*bh, 0)
			bi, bb := buf(b, d, 3*h, 0.1), buf(b, d, 3*h, 0.1)
			hprev, hh := buf(b, d, bh, 0.1), buf(b, d, bh, 0)
			a := device.GRUCell{DType: device.Float32, Batch: benchBatch, Hidden: h, XPre: xp, HPre: hp, BiasIH: bi, BiasHH: bb, HPrev: hprev, H: hh, Act: act}
			run(b, d, func() error { return k.GRUCell(a) })
			reportGBs(b, 4*int64(3*bh+3*bh+bh+bh+4*bh))
		})
	}
}

func BenchmarkGRUCellGrad(b *testing.B) {
	for _, h := range []int{256, 512} {
		b.Run(name(h), func(b *testing.B) {
			d, k := benchDevice(b)
			bh := benchBatch * h
			act, dx, dhp := buf(b, d, 4*bh, 0.5), buf(b, d, 3*bh, 0), buf(b, d, 3*bh, 0)
			hprev, dh, dprev := buf(b, d, bh, 0.1), buf(b, d, bh, 0.1), buf(b, d, bh, 0)
			a := device.GRUCellGrad{DType: device.Float32, Batch: benchBatch, Hidden: h, Act: act, HPrev: hprev, DH: dh, DXPre: dx, DHPre: dhp, DHPrev: dprev}
			run(b, d, func() error { return k.GRUCellGrad(a) })
			reportGBs(b, 4*int64(4*bh+bh+bh+3*bh+3*bh+bh))
		})
	}
}

func BenchmarkSoftmaxCrossEntropy(b *testing.B) {
	d, k := benchDevice(b)
	n := benchRows * benchVocab
	logits, loss := buf(b, d, n, 0.1), buf(b, d, 1, 0)
	tg, err := d.Alloc(benchRows*4, device.Workspace)
	if err != nil {
		b.Fatal(err)
	}
	if err := k.Fill(device.Fill{DType: device.Int32, N: benchRows, X: tg, Value: 7}); err != nil {
		b.Fatal(err)
	}
	a := device.SoftmaxCrossEntropy{DType: device.Float32, N: benchRows, Classes: benchVocab, Logits: logits, Targets: tg, Scale: 1.0 / benchRows, Loss: loss, DLogits: logits}
	run(b, d, func() error { return k.SoftmaxCrossEntropy(a) })
	reportGBs(b, 4*int64(2*n))
}

func BenchmarkEmbedding(b *testing.B) {
	d, k := benchDevice(b)
	table, out := buf(b, d, benchVocab*benchEmbed, 0.1), buf(b, d, benchRows*benchEmbed, 0)
	ids, err := d.Alloc(benchRows*4, device.Workspace)
	if err != nil {
		b.Fatal(err)
	}
	if err := k.Fill(device.Fill{DType: device.Int32, N: benchRows, X: ids, Value: 5}); err != nil {
		b.Fatal(err)
	}
	b.Run("forward", func(b *testing.B) {
		a := device.Embedding{DType: device.Float32, N: benchRows, Dim: benchEmbed, Vocab: benchVocab, Table: table, IDs: ids, Out: out}
		run(b, d, func() error { return k.Embedding(a) })
		reportGBs(b, 4*int64(2*benchRows*benchEmbed))
	})
	b.Run("backward", func(b *testing.B) {
		a := device.EmbeddingGrad{DType: device.Float32, N: benchRows, Dim: benchEmbed, Vocab: benchVocab, IDs: ids, DOut: out, DTable: table}
		run(b, d, func() error { return k.EmbeddingGrad(a) })
		reportGBs(b, 4*int64(benchRows*benchEmbed))
	})
}

// BenchmarkAdam updates the parameters of the bench model's size class
// (an LSTM 2×256 with its embedding and head has about 0.9 M parameters).
func BenchmarkAdam(b *testing.B) {
	const n = 1 << 20
	d, k := benchDevice(b)
	p, g, m, v := buf(b, d, n, 0.1), buf(b, d, n, 0.01), buf(b, d, n, 0), buf(b, d, n, 0)
	step := 0
	run(b, d, func() error {
		step++
		return k.Adam(device.Adam{DType: device.Float32, N: n, LR: 2e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: step, Param: p, Grad: g, M: m, V: v})
	})
	reportGBs(b, 4*int64(7*n)) // p, g, m, v read; p, m, v written
}

func BenchmarkSumSquares(b *testing.B) {
	const n = 1 << 20
	d, k := benchDevice(b)
	x, out := buf(b, d, n, 0.1), buf(b, d, 1, 0)
	run(b, d, func() error { return k.SumSquares(device.SumSquares{DType: device.Float32, N: n, X: x, Out: out}) })
	reportGBs(b, 4*n)
}

// BenchmarkLaunch is the cost of queuing one small kernel and running it on
// the stream goroutine, synchronising every 64 launches: the per-kernel
// overhead the sampling loop pays.
func BenchmarkLaunch(b *testing.B) {
	d, k := benchDevice(b)
	x := buf(b, d, 16, 0)
	a := device.Axpby{DType: device.Float32, N: 16, Alpha: 1, X: x, Beta: 0.5, Y: x}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := k.Axpby(a); err != nil {
			b.Fatal(err)
		}
		if i++; i%64 == 0 {
			if err := d.Stream().Synchronize(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := d.Stream().Synchronize(); err != nil {
		b.Fatal(err)
	}
}

func name(h int) string { return fmt.Sprintf("hidden%d", h) }
