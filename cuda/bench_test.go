package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
)

// BenchmarkAlloc compares an allocation served by the caching allocator
// with a raw cuMemAlloc + cuMemFree of the same size (issue 7's latency
// figure): go test -run '^$' -bench Alloc ./cuda.
func BenchmarkAlloc(b *testing.B) {
	for _, size := range []int64{4 << 10, 1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("cached/%dKiB", size>>10), func(b *testing.B) {
			d := openGPU(b, gpuConfig())
			b.ReportAllocs()
			for b.Loop() {
				buf, err := d.Alloc(size, device.Workspace)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Free(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("cuMemAlloc/%dKiB", size>>10), func(b *testing.B) {
			d := openGPU(b, gpuConfig())
			for b.Loop() {
				p, err := d.api.MemAlloc(d.ctx, size)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.api.MemFree(d.ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCopyOverlap measures whether host-to-device copies on a copy
// stream overlap kernels on the compute stream: it times, with CUDA
// events, a run of GEMMs alone, a run of 64 MiB copies from pinned memory
// alone, and both queued together, and reports
// overlap = (compute + copy − both) / min(compute, copy): 1 when the
// shorter one hides entirely under the longer, 0 when they serialise.
func BenchmarkCopyOverlap(b *testing.B) {
	d := openGPU(b, gpuConfig())
	const n, copies, copyBytes = 2048, 8, 64 << 20
	mats := make([]device.Buffer, 3)
	for i := range mats {
		var err error
		if mats[i], err = d.Alloc(n*n*4, device.Workspace); err != nil {
			b.Fatal(err)
		}
	}
	dst, err := d.Alloc(copyBytes, device.Workspace)
	if err != nil {
		b.Fatal(err)
	}
	src, err := d.Staging(copyBytes)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := d.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	copyStream := cs.(*stream)
	k := d.Kernels()
	gemms := func() {
		for range 20 {
			if err := k.Gemm(device.Gemm{DType: device.Float32, M: n, N: n, K: n, Alpha: 1, A: mats[0], B: mats[1], C: mats[2]}); err != nil {
				b.Fatal(err)
			}
		}
	}
	copyAll := func() {
		for range copies {
			if _, err := d.CopyToDevice(dst, src, copyStream); err != nil {
				b.Fatal(err)
			}
		}
	}
	timed := func(queue func()) float64 {
		return gpuTime(b, d, func() {
			startEv, err := d.compute.Record()
			if err != nil {
				b.Fatal(err)
			}
			if err := copyStream.Wait(startEv); err != nil {
				b.Fatal(err)
			}
			queue()
			copied, err := copyStream.Record()
			if err != nil {
				b.Fatal(err)
			}
			if err := d.compute.Wait(copied); err != nil {
				b.Fatal(err)
			}
		})
	}
	var compute, cp, both float64
	for b.Loop() {
		compute = timed(gemms)
		cp = timed(copyAll)
		both = timed(func() { copyAll(); gemms() })
	}
	b.ReportMetric(compute, "compute-ms")
	b.ReportMetric(cp, "copy-ms")
	b.ReportMetric(both, "both-ms")
	b.ReportMetric((compute+cp-both)/min(compute, cp), "overlap")
	b.ReportMetric(float64(copies*copyBytes)/(cp/1e3)/1e9, "copy-GB/s")
}

// BenchmarkBranchOverlap measures whether a branch's work runs beside the
// compute stream's (issue 21 item 3): two chains of 64 recurrent products
// of one layer step at hidden 1024 and batch 32 (h·Wᵀ: 32×4096×1024, the
// shape at which one product leaves most of a GPU's SMs idle), timed with
// CUDA events, first both on the compute stream, then one on a branch
// between a Fork and a Join. It reports both times and
// overlap = one-stream / branch: 2 when the chains run wholly side by
// side, 1 when they serialise.
//
//	go test -run '^$' -bench BranchOverlap ./cuda
func BenchmarkBranchOverlap(b *testing.B) {
	d := openGPU(b, gpuConfig())
	const batch, hidden, steps = 32, 1024, 64
	alloc := func(n int) device.Buffer {
		buf, err := d.Alloc(int64(n)*4, device.Workspace)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Kernels().Fill(device.Fill{DType: device.Float32, N: n, X: buf, Value: 0.01}); err != nil {
			b.Fatal(err)
		}
		return buf
	}
	h, w := [2]device.Buffer{alloc(batch * hidden), alloc(batch * hidden)}, alloc(4*hidden*hidden)
	pre := [2]device.Buffer{alloc(batch * 4 * hidden), alloc(batch * 4 * hidden)}
	br, err := d.Branch()
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	chain := func(k device.Kernels, i int) {
		for range steps {
			if err := k.Gemm(device.Gemm{DType: device.Float32, M: batch, N: 4 * hidden, K: hidden, Alpha: 1,
				A: h[i], B: w, C: pre[i], TransB: true}); err != nil {
				b.Fatal(err)
			}
		}
	}
	timed := func(queue func()) float64 { return gpuTime(b, d, queue) }
	var one, two float64
	for b.Loop() {
		one = timed(func() { chain(d.Kernels(), 0); chain(d.Kernels(), 1) })
		two = timed(func() {
			if err := br.Fork(); err != nil {
				b.Fatal(err)
			}
			chain(br.Kernels(), 1)
			chain(d.Kernels(), 0)
			if err := br.Join(); err != nil {
				b.Fatal(err)
			}
		})
	}
	b.ReportMetric(one, "one-stream-ms")
	b.ReportMetric(two, "branch-ms")
	b.ReportMetric(one/two, "overlap")
}

// BenchmarkLaunch measures what one call costs, on the host and on the
// GPU, for the calls a training step is made of: a trivial kernel (Fill
// of one element), cuBLAS GEMMs at the shapes of a recurrent step
// (32×1024×256: batch 32, hidden 256, four gates) and of a large one
// (128×4096×1024), each in FP32 and TF32, and a 1 KiB device-to-device
// copy. The cuda-review's performance model assumed these figures; this
// measures them:
//
//	go test -run '^$' -bench Launch ./cuda      (.ci/gpu-run micro)
//
// Each iteration queues a chunk of calls behind blocker GEMMs long enough
// that the GPU is still busy with them when the host has queued the last
// call, so the calls run back to back: ns/op is the host's cost to queue
// one call (Go, cgo, the driver or cuBLAS), gpu-ns/op the GPU's time per
// call between two CUDA events around the chunk, with no gaps from the
// host. Inputs are random, not zeros.
func BenchmarkLaunch(b *testing.B) {
	type op struct {
		name   string
		tf32   bool
		flops  float64 // per call, 0 for none
		call   func(k device.Kernels, bufs []device.Buffer) error
		setups []int64 // the bytes of each buffer call uses
	}
	gemm := func(m, n, k int) (func(device.Kernels, []device.Buffer) error, []int64) {
		return func(kk device.Kernels, bufs []device.Buffer) error {
			return kk.Gemm(device.Gemm{DType: device.Float32, M: m, N: n, K: k, Alpha: 1, A: bufs[0], B: bufs[1], C: bufs[2]})
		}, []int64{int64(m * k * 4), int64(k * n * 4), int64(m * n * 4)}
	}
	g1, s1 := gemm(32, 1024, 256)
	g2, s2 := gemm(128, 4096, 1024)
	ops := []op{
		{name: "kernel-fill-1", call: func(k device.Kernels, bufs []device.Buffer) error {
			return k.Fill(device.Fill{DType: device.Float32, N: 1, X: bufs[0], Value: 1})
		}, setups: []int64{4}},
		{name: "gemm-32x1024x256-fp32", flops: 2 * 32 * 1024 * 256, call: g1, setups: s1},
		{name: "gemm-32x1024x256-tf32", tf32: true, flops: 2 * 32 * 1024 * 256, call: g1, setups: s1},
		{name: "gemm-128x4096x1024-fp32", flops: 2 * 128 * 4096 * 1024, call: g2, setups: s2},
		{name: "gemm-128x4096x1024-tf32", tf32: true, flops: 2 * 128 * 4096 * 1024, call: g2, setups: s2},
		{name: "copy-dtod-1KiB", call: func(k device.Kernels, bufs []device.Buffer) error {
			return k.Copy(device.Copy{Dst: bufs[0], Src: bufs[1]})
		}, setups: []int64{1 << 10, 1 << 10}},
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			cfg := gpuConfig()
			cfg.TF32 = o.tf32
			d := openGPU(b, cfg)
			r := rand.New(rand.NewPCG(1, 2))
			bufs := make([]device.Buffer, len(o.setups))
			for i, n := range o.setups {
				bufs[i] = randomBuffer(b, d, r, n)
			}
			k := d.Kernels()
			call := func() {
				if err := o.call(k, bufs); err != nil {
					b.Fatal(err)
				}
			}
			hostNS, gpuNS, calls := launchChunks(b, d, call)
			b.ReportMetric(hostNS/float64(calls), "ns/op")
			b.ReportMetric(gpuNS/float64(calls), "gpu-ns/op")
			if o.flops > 0 {
				b.ReportMetric(o.flops*float64(calls)/gpuNS/1e3, "gpu-TFLOP/s")
			}
		})
	}
}

// randomBuffer is n bytes of device memory holding uniform float32s in
// [-1, 1) (n rounded down to whole floats).
func randomBuffer(b *testing.B, d *Device, r *rand.Rand, n int64) device.Buffer {
	b.Helper()
	buf, err := d.Alloc(n, device.Workspace)
	if err != nil {
		b.Fatal(err)
	}
	v := make([]float32, n/4)
	for i := range v {
		v[i] = 2*r.Float32() - 1
	}
	if err := device.UploadSlice(d, buf, v); err != nil {
		b.Fatal(err)
	}
	return buf
}

// launchChunks runs call in chunks of launchChunk, one chunk per b.Loop
// iteration, each queued behind enough blocker GEMMs to keep the GPU busy
// until the host has queued the whole chunk. It returns the host time
// spent queueing, the GPU time between events around the chunks, in
// nanoseconds, and the number of calls.
func launchChunks(b *testing.B, d *Device, call func()) (hostNS, gpuNS float64, calls int) {
	const launchChunk = 256
	a, c, s := d.api, d.ctx, d.compute.s
	start, err := a.EventCreate(c, true)
	if err != nil {
		b.Fatal(err)
	}
	defer a.EventDestroy(c, start)
	end, err := a.EventCreate(c, true)
	if err != nil {
		b.Fatal(err)
	}
	defer a.EventDestroy(c, end)
	// The blocker: 1024³ GEMMs on buffers of their own, as many as the
	// chunk's queueing time needs (measured on a warm-up chunk, ×3).
	r := rand.New(rand.NewPCG(3, 4))
	const bn = 1024
	x, y, z := randomBuffer(b, d, r, bn*bn*4), randomBuffer(b, d, r, bn*bn*4), randomBuffer(b, d, r, bn*bn*4)
	block := func() {
		err := d.Kernels().Gemm(device.Gemm{DType: device.Float32, M: bn, N: bn, K: bn, Alpha: 1, A: x, B: y, C: z})
		if err != nil {
			b.Fatal(err)
		}
	}
	timeGPU := func(queue func()) (host, gpu float64) {
		if err := a.EventRecord(c, start, s); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		queue()
		host = float64(time.Since(t0).Nanoseconds())
		if err := a.EventRecord(c, end, s); err != nil {
			b.Fatal(err)
		}
		if err := a.EventSynchronize(c, end); err != nil {
			b.Fatal(err)
		}
		ms, err := a.EventElapsed(c, start, end)
		if err != nil {
			b.Fatal(err)
		}
		return host, float64(ms) * 1e6
	}
	chunk := func() {
		for range launchChunk {
			call()
		}
	}
	timeGPU(chunk) // warm up: cuBLAS heuristics, the JIT cache, the allocator
	_, perBlock := timeGPU(block)
	host, _ := timeGPU(chunk)
	blockers := max(1, int(math.Ceil(3*host/max(perBlock, 1))))
	for b.Loop() {
		for range blockers {
			block()
		}
		h, g := timeGPU(chunk)
		hostNS += h
		gpuNS += g
		calls += launchChunk
	}
	if err := d.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(blockers), "blockers")
	return hostNS, gpuNS, calls
}

// gpuTime returns the milliseconds the GPU took for the work queue queues
// on d (and the streams it makes the compute stream wait for), timed with
// CUDA events on the compute stream, after the device's earlier work.
func gpuTime(b *testing.B, d *Device, queue func()) float64 {
	b.Helper()
	start, err := d.api.EventCreate(d.ctx, true)
	if err != nil {
		b.Fatal(err)
	}
	end, err := d.api.EventCreate(d.ctx, true)
	if err != nil {
		b.Fatal(err)
	}
	defer d.api.EventDestroy(d.ctx, start)
	defer d.api.EventDestroy(d.ctx, end)
	if err := d.Synchronize(); err != nil {
		b.Fatal(err)
	}
	if err := d.api.EventRecord(d.ctx, start, d.compute.s); err != nil {
		b.Fatal(err)
	}
	queue()
	if err := d.api.EventRecord(d.ctx, end, d.compute.s); err != nil {
		b.Fatal(err)
	}
	if err := d.api.EventSynchronize(d.ctx, end); err != nil {
		b.Fatal(err)
	}
	ms, err := d.api.EventElapsed(d.ctx, start, end)
	if err != nil {
		b.Fatal(err)
	}
	return float64(ms)
}

// BenchmarkWalk sets a layer's persistent walk over a window of steps
// (Config.WalkCellsUpTo: one cooperative launch, its blocks meeting at a
// grid barrier between steps, each keeping its slice of W_hh on chip)
// against the same steps as launches one after the other: the fused
// kernel per step (the walk's own Queue, walks off) and cuBLAS's GEMM
// then the plain cell per step (FuseCellsUpTo -1). It is what a barrier
// costs against a launch, the figure ARCHITECTURE §4's persistent walks
// wait on: the LSTM's and GRU's walks and walks back, at
// issue 21's hidden 256 and 1024, batch 32, 64 steps (16 units, batch 4,
// 8 steps on the emulator). Each call is one layer's window, timed as
// BenchmarkLaunch times its calls (back to back behind blocker GEMMs);
// ns/op is the host's time to queue a window, gpu-ns/step and ns/step
// the GPU's and the host's per step, launches/op the device's count per
// window (1 for a walk: a walk that ran step by step fails the
// benchmark rather than be reported as one). Inputs are random and the
// arithmetic FP32; values drift from call to call, which changes no
// timing.
func BenchmarkWalk(b *testing.B) {
	// The shapes depend on whether the device is the emulator: a device
	// opened and closed to say.
	probe, err := Open(gpuConfig())
	if errors.Is(err, device.ErrUnavailable) {
		noGPU(b, err.Error())
	}
	if err != nil {
		b.Fatalf("cuda.Open: %v", err)
	}
	emulated := cudaemu.IsEmulator(probe.Info().Name)
	steps, batch, hiddens := 64, 32, []int{256, 1024}
	if emulated {
		steps, batch, hiddens = 8, 4, []int{16}
	}
	if err := probe.Close(); err != nil {
		b.Fatal(err)
	}
	type way struct {
		name       string
		fuse, walk int // Config.FuseCellsUpTo and WalkCellsUpTo; 0 for the hidden size
	}
	ways := []way{{"walk", 0, 0}, {"fused-steps", 0, -1}, {"cublas-steps", -1, -1}}
	for _, cell := range []string{"lstm", "gru", "lstm-back", "gru-back"} {
		for _, h := range hiddens {
			for _, w := range ways {
				b.Run(fmt.Sprintf("%s-%dx%d/%s", cell, h, batch, w.name), func(b *testing.B) {
					cfg := gpuConfig()
					cfg.FuseCellsUpTo, cfg.WalkCellsUpTo = h, h
					if w.fuse != 0 {
						cfg.FuseCellsUpTo = w.fuse
					}
					if w.walk != 0 {
						cfg.WalkCellsUpTo = w.walk
					}
					d := openGPU(b, cfg)
					call := walkCall(b, d, cell, steps, batch, h)
					c0 := d.Counts()
					call()
					launches := d.Counts().Sub(c0).Launches
					if w.name == "walk" && launches != 1 {
						b.Fatalf("the walk made %d launches, not 1: it ran step by step on %s", launches, d.Info().Name)
					}
					hostNS, gpuNS, calls := launchChunks(b, d, call)
					b.ReportMetric(hostNS/float64(calls), "ns/op")
					b.ReportMetric(hostNS/float64(calls*steps), "ns/step")
					b.ReportMetric(gpuNS/float64(calls*steps), "gpu-ns/step")
					b.ReportMetric(float64(launches), "launches/op")
				})
			}
		}
	}
}

// walkCall is one call of a layer's walk over steps steps of batch rows
// of hidden units on d (cell "lstm", "gru", "lstm-back" or "gru-back"),
// on random FP32 buffers of its own.
func walkCall(b *testing.B, d *Device, cell string, steps, batch, hidden int) func() {
	r := rand.New(rand.NewPCG(5, 6))
	buf := func(elems int) device.Buffer { return randomBuffer(b, d, r, int64(elems)*4) }
	bh, tbh := batch*hidden, steps*batch*hidden
	w, ok := d.Kernels().(device.Walker)
	if !ok {
		b.Fatalf("%s's kernels have no walks (device.Walker)", d.Name())
	}
	var run func() error
	switch cell {
	case "lstm":
		// Act is Pre: the gates replace the pre-activations, so that
		// calls do not add products into them without bound.
		pre := buf(4 * tbh)
		a := device.LSTMWalk{DType: device.Float32, Steps: steps, Batch: batch, Hidden: hidden, Pre: pre, W: buf(4 * hidden * hidden),
			BiasIH: buf(4 * hidden), BiasHH: buf(4 * hidden), H0: buf(bh), C0: buf(bh), H: buf(tbh), C: buf(tbh), Act: pre}
		run = func() error { return w.LSTMWalk(a) }
	case "gru":
		a := device.GRUWalk{DType: device.Float32, Steps: steps, Batch: batch, Hidden: hidden, XPre: buf(3 * tbh), HPre: buf(3 * bh),
			W: buf(3 * hidden * hidden), BiasIH: buf(3 * hidden), BiasHH: buf(3 * hidden), H0: buf(bh), H: buf(tbh), Act: buf(4 * tbh)}
		run = func() error { return w.GRUWalk(a) }
	case "lstm-back":
		a := device.LSTMGradWalk{DType: device.Float32, Steps: steps, Batch: batch, Hidden: hidden, Act: buf(4 * tbh), C: buf(tbh),
			C0: buf(bh), DH: buf(tbh), DC: buf(bh), DPre: buf(4 * tbh), W: buf(4 * hidden * hidden), DPreIn: buf(4 * bh)}
		run = func() error { return w.LSTMGradWalk(a) }
	case "gru-back":
		a := device.GRUGradWalk{DType: device.Float32, Steps: steps, Batch: batch, Hidden: hidden, Act: buf(4 * tbh), H: buf(tbh),
			H0: buf(bh), DH: buf(tbh), DH0: buf(bh), DXPre: buf(3 * tbh), DHPre: buf(3 * tbh), W: buf(3 * hidden * hidden), DHPreIn: buf(3 * bh)}
		run = func() error { return w.GRUGradWalk(a) }
	default:
		b.Fatalf("no walk %q", cell)
	}
	return func() {
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
}
