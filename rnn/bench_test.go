package rnn_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// Benchmark shapes: batch 32, sequence 64 as the issue asks, input 64 (the
// char-RNN's embedding), one layer, so FLOP counts are exact: per token a
// forward does 2·G·H·(I+H) multiply-adds' worth of GEMM work (input
// projection and recurrent product, G = 4 for LSTM, 3 for GRU), and a
// backward twice that (recurrent gradient, weight gradients of both
// matrices, input gradient).
//
// The benchmarks run on the test device (GOCURRENT_TEST_DEVICE). Every
// iteration waits for the device (a Synchronize, or the Download the step
// itself needs: the gradient norm, the sampled token), so at most one
// step's work is in flight and tokens/s and GFLOP/s measure the device,
// not the rate at which work is queued.
const (
	benchBatch = 32
	benchSeq   = 64
	benchInput = 64
)

func BenchmarkRecurrent(b *testing.B) {
	for _, cell := range []string{"lstm", "gru"} {
		for _, h := range []int{128, 256, 512} {
			for _, backward := range []bool{false, true} {
				name := fmt.Sprintf("%s/hidden%d/forward", cell, h)
				if backward {
					name += "+backward"
				}
				b.Run(name, func(b *testing.B) { benchRecurrent(b, cell, h, backward) })
			}
		}
	}
}

func benchRecurrent(b *testing.B, cell string, hidden int, backward bool) {
	d := testdevice.Open(b)
	m := newRecurrent(b, d, cell, rnn.Config{Input: benchInput, Hidden: hidden})
	T, B := benchSeq, benchBatch
	x := fill32(b, d, T*B*benchInput, 0.1)
	dy := fill32(b, d, T*B*hidden, 0.01)
	st, err := m.NewState(B)
	ok(b, err)
	mode := rnn.NoGrad
	if backward {
		mode = rnn.Train
	}
	b.ReportAllocs()
	for b.Loop() {
		st.Detach()
		_, err := m.Forward(mode, x, T, B, st)
		ok(b, err)
		if backward {
			_, err = m.Backward(dy)
			ok(b, err)
		}
		ok(b, d.Synchronize())
	}
	G := 4
	if cell == "gru" {
		G = 3
	}
	flops := 2 * float64(G*hidden*(benchInput+hidden))
	if backward {
		flops *= 3
	}
	tokens := float64(b.N * T * B)
	secs := b.Elapsed().Seconds()
	b.ReportMetric(tokens/secs, "tokens/s")
	b.ReportMetric(tokens*flops/secs/1e9, "GFLOP/s")
}

func fill32(b testing.TB, d device.Device, n int, v float64) device.Buffer {
	x, err := d.Alloc(int64(n)*4, device.Workspace)
	ok(b, err)
	ok(b, d.Kernels().Fill(device.Fill{DType: device.Float32, N: n, X: x, Value: v}))
	return x
}

// charRNN is the workload of bench/torch_charrnn.py: vocabulary
// 65, embedding 64, a 2-layer LSTM or GRU, a linear head, Adam (lr 2e-3)
// and clipping to global norm 5, trained on random tokens with the hidden
// state detached between windows; sampling is batch 1, one token at a
// time, without grad, temperature 0.8.
type charRNN struct {
	d       device.Device
	emb     *rnn.Embedding
	rnn     recurrent
	out     *rnn.Linear
	ce      *rnn.CrossEntropy
	params  []*rnn.Params
	m, v    []device.Buffer
	norm    device.Buffer
	step    int
	T, B, V int
}

func newCharRNN(b testing.TB, cell string, hidden, layers, batch, seq int) *charRNN {
	const V, E = 65, 64
	d := testdevice.Open(b)
	c := &charRNN{d: d, T: seq, B: batch, V: V}
	var err error
	c.emb, err = rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: V, Dim: E, Seed: 1})
	ok(b, err)
	c.rnn = newRecurrent(b, d, cell, rnn.Config{Input: E, Hidden: hidden, Layers: layers, Seed: 2})
	c.out, err = rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: hidden, Out: V, Seed: 3})
	ok(b, err)
	c.ce, err = rnn.NewCrossEntropy(d, V, device.Float32)
	ok(b, err)
	c.params = []*rnn.Params{c.emb.Params(), c.rnn.Params(), c.out.Params()}
	for _, p := range c.params {
		c.m = append(c.m, fill32(b, d, p.Len(), 0))
		c.v = append(c.v, fill32(b, d, p.Len(), 0))
	}
	c.norm = fill32(b, d, 1, 0)
	return c
}

// trainStep is one optimizer step on the window ids[0:T] → ids[1:T+1].
func (c *charRNN) trainStep(b testing.TB, inputs, targets device.Buffer, st *rnn.State) {
	k, n := c.d.Kernels(), c.T*c.B
	for _, p := range c.params {
		ok(b, p.ZeroGrad())
	}
	x, err := c.emb.Forward(rnn.Train, inputs, n)
	ok(b, err)
	y, err := c.rnn.Forward(rnn.Train, x, c.T, c.B, st)
	ok(b, err)
	logits, err := c.out.Forward(rnn.Train, y, n)
	ok(b, err)
	ok(b, c.ce.Forward(rnn.Train, logits, targets, n, 1))
	dl, err := c.ce.Backward()
	ok(b, err)
	dy, err := c.out.Backward(dl)
	ok(b, err)
	dx, err := c.rnn.Backward(dy)
	ok(b, err)
	ok(b, c.emb.Backward(dx))
	for i, p := range c.params {
		_, g := p.Flat()
		ok(b, k.SumSquares(device.SumSquares{DType: device.Float32, N: p.Len(), X: g, Out: c.norm, Accumulate: i > 0}))
	}
	sq := []float32{0}
	ok(b, device.DownloadSlice(c.d, sq, c.norm))
	scale := 1.0
	if norm := math.Sqrt(float64(sq[0])); norm > 5 {
		scale = 5 / (norm + 1e-6)
	}
	c.step++
	for i, p := range c.params {
		v, g := p.Flat()
		if scale != 1 {
			ok(b, k.Axpby(device.Axpby{DType: device.Float32, N: p.Len(), Alpha: scale, X: g, Y: g}))
		}
		ok(b, k.Adam(device.Adam{DType: device.Float32, N: p.Len(), LR: 2e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
			Step: c.step, Param: v, Grad: g, M: c.m[i], V: c.v[i]}))
	}
	st.Detach()
}

// BenchmarkCharRNN measures the whole training step and sampling of the
// torch_charrnn.py workload, to be compared, as a ratio in one run, with
// `/usr/bin/python3 bench/torch_charrnn.py lstm 256 2 32 64`.
func BenchmarkCharRNN(b *testing.B) {
	for _, cell := range []string{"lstm", "gru"} {
		b.Run(cell+"/train", func(b *testing.B) {
			c := newCharRNN(b, cell, 256, 2, 32, 64)
			r := rand.New(rand.NewPCG(0, 0))
			ids := make([]int32, (c.T+1)*c.B)
			for i := range ids {
				ids[i] = int32(r.IntN(c.V))
			}
			all := uploadInt32(b, c.d, ids)
			inputs, targets := all.Slice(0, int64(c.T*c.B)*4), all.Slice(int64(c.B)*4, int64(c.T*c.B)*4)
			st, err := c.rnn.NewState(c.B)
			ok(b, err)
			for range 2 {
				c.trainStep(b, inputs, targets, st)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				c.trainStep(b, inputs, targets, st)
			}
			ok(b, c.d.Synchronize())
			b.ReportMetric(float64(b.N*c.T*c.B)/b.Elapsed().Seconds(), "tokens/s")
		})
		b.Run(cell+"/sample", func(b *testing.B) {
			c := newCharRNN(b, cell, 256, 2, 1, 1)
			st, err := c.rnn.NewState(1)
			ok(b, err)
			id := uploadInt32(b, c.d, []int32{0})
			r := rand.New(rand.NewPCG(0, 0))
			probs := make([]float32, c.V)
			k := c.d.Kernels()
			b.ReportAllocs()
			for b.Loop() {
				x, err := c.emb.Forward(rnn.NoGrad, id, 1)
				ok(b, err)
				y, err := c.rnn.Forward(rnn.NoGrad, x, 1, 1, st)
				ok(b, err)
				logits, err := c.out.Forward(rnn.NoGrad, y, 1)
				ok(b, err)
				ok(b, k.Softmax(device.Softmax{DType: device.Float32, N: 1, Classes: c.V, Logits: logits, Probs: logits, Temperature: 0.8}))
				ok(b, device.DownloadSlice(c.d, probs, logits))
				u, next := float32(r.Float64()), int32(c.V-1)
				for i, p := range probs {
					if u -= p; u < 0 {
						next = int32(i)
						break
					}
				}
				ok(b, device.UploadSlice(c.d, id, []int32{next}))
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// The variable-length workload of bench/torch_seq.py: a bidirectional
// 2-layer LSTM of hidden 256 over input 128, batch 32, lengths 5 to 60
// (seqLength; the batch padded to 60), against a fixed-length batch of the
// same token count (32 sequences of the mean length). tokens/s counts real
// tokens only, the sum of the lengths.
const (
	seqBatch, seqInput, seqHidden, seqMax = 32, 128, 256, 60
)

// seqLength is sequence i's length in the workload, spread over [5, 60]
// by a fixed formula bench/torch_seq.py repeats.
func seqLength(i int) int32 { return int32(5 + (i*37+11)%56) }

func BenchmarkSequences(b *testing.B) {
	lengths := make([]int32, seqBatch)
	total := 0
	for i := range lengths {
		lengths[i] = seqLength(i)
		total += int(lengths[i])
	}
	mean := (total + seqBatch/2) / seqBatch
	for _, c := range []struct {
		name    string
		T       int
		lengths []int32
	}{
		{"lengths5-60", seqMax, lengths},
		{fmt.Sprintf("fixed%d", mean), mean, nil},
	} {
		for _, backward := range []bool{false, true} {
			name := c.name + "/forward"
			if backward {
				name += "+backward"
			}
			b.Run(name, func(b *testing.B) { benchSequences(b, c.T, c.lengths, backward) })
		}
	}
}

func benchSequences(b *testing.B, T int, lengths []int32, backward bool) {
	d := testdevice.Open(b)
	m := newRecurrent(b, d, "lstm", rnn.Config{Input: seqInput, Hidden: seqHidden, Layers: 2, Bidirectional: true})
	B := seqBatch
	x := fill32(b, d, T*B*seqInput, 0.1)
	dy := fill32(b, d, T*B*2*seqHidden, 0.01)
	tokens := T * B
	if lengths != nil {
		tokens = 0
		for _, n := range lengths {
			tokens += int(n)
		}
	}
	mode := rnn.NoGrad
	if backward {
		mode = rnn.Train
	}
	counter, _ := d.(device.Counter)
	var before device.Counts
	if counter != nil {
		before = counter.Counts()
	}
	b.ReportAllocs()
	for b.Loop() {
		_, err := m.ForwardLengths(mode, x, T, B, lengths, nil)
		ok(b, err)
		if backward {
			_, err = m.Backward(dy)
			ok(b, err)
		}
		ok(b, d.Synchronize())
	}
	b.ReportMetric(float64(b.N*tokens)/b.Elapsed().Seconds(), "tokens/s")
	if counter != nil {
		// What the device was asked for per batch: on a GPU each is a call
		// to the driver or cuBLAS.
		got := counter.Counts()
		b.ReportMetric(float64(got.Launches-before.Launches)/float64(b.N), "launches/op")
		b.ReportMetric(float64(got.GEMMs-before.GEMMs)/float64(b.N), "gemms/op")
		b.ReportMetric(float64(got.Copies-before.Copies)/float64(b.N), "copies/op")
	}
}

// BenchmarkRecompute times a training step (forward and backward) of a
// 2-layer LSTM (batch 32, input 64, hidden 256) over T = 64, 256 and 1024
// steps without Recompute and with RecomputeAuto, and of the
// bidirectional stack over 1024 steps, reporting tokens/s and the
// allocator's peaks during the steps of the stack's activations (its
// reserve, kept from forward to Backward) and of its workspace (the
// temporaries of a pass, with Recompute one segment of every layer, plus
// the output, the gradients flowing between layers and the input's
// gradient), in bytes; the batch's input and gradient are outside both.
// The ratio of the two times at one T is the cost of recomputing:
//
//	go test ./rnn/ -run '^$' -bench Recompute -benchtime 5x
func BenchmarkRecompute(b *testing.B) {
	for _, c := range []struct {
		name  string
		T     int
		bidir bool
	}{{"lstm/T64", 64, false}, {"lstm/T256", 256, false}, {"lstm/T1024", 1024, false}, {"bilstm/T1024", 1024, true}} {
		for _, recompute := range []int{0, rnn.RecomputeAuto} {
			name := c.name + "/recompute=off"
			if recompute != 0 {
				name = c.name + "/recompute=auto"
			}
			b.Run(name, func(b *testing.B) { benchRecompute(b, c.T, c.bidir, recompute) })
		}
	}
}

func benchRecompute(b *testing.B, T int, bidir bool, recompute int) {
	const B, I, H, L = 32, 64, 256, 2
	d := testdevice.Open(b)
	m := newRecurrent(b, d, "lstm", rnn.Config{Input: I, Hidden: H, Layers: L, Bidirectional: bidir, Recompute: recompute})
	D := 1
	if bidir {
		D = 2
	}
	batch := func(n int, v float64) device.Buffer {
		buf, err := d.Alloc(int64(n)*4, device.Batches)
		ok(b, err)
		ok(b, d.Kernels().Fill(device.Fill{DType: device.Float32, N: n, X: buf, Value: v}))
		return buf
	}
	x, dy := batch(T*B*I, 0.1), batch(T*B*D*H, 0.01)
	step := func() {
		_, err := m.Forward(rnn.Train, x, T, B, nil)
		ok(b, err)
		_, err = m.Backward(dy)
		ok(b, err)
		ok(b, d.Synchronize())
	}
	step() // the stack's buffers
	if mem, isCaching := d.(device.Allocator); isCaching {
		mem.Memory().ResetPeak()
	}
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
	s := d.MemStats()
	b.ReportMetric(float64(b.N*T*B)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(s.CategoryBytes[device.Activations].Peak), "activation-bytes")
	b.ReportMetric(float64(s.CategoryBytes[device.Workspace].Peak), "workspace-bytes")
}
