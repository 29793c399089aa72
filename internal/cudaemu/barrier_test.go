//go:build cgo

package cudaemu

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

// TestMissingBarrier shows that the emulator catches a missing
// __syncthreads in the real kernels: for every barrier in cuda/kernels, it
// builds an emulator from the kernel sources with that one barrier deleted
// and runs a kernel that depends on it. The kernel's result must be right
// over the real sources and wrong over the mutated ones. What makes it
// wrong is how the emulator runs a block: its threads are fibers that each
// run until the next barrier, in an order drawn afresh each round, and
// shared memory starts as 0xff bytes (NaN as a double, -1 as an int), so a
// thread that reads a neighbour's slot before a barrier guarantees it was
// written reads the poison or a stale value.
func TestMissingBarrier(t *testing.T) {
	testfull.Skip(t, "an emulator built without each barrier of the kernels in turn, 16 builds")
	orig := ForTest(t)
	kernels, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		file string
		nth  int // which __syncthreads in file, from 0
		run  func(l *Lib) (got, want []float64, err error)
	}{
		{"common.cuh", 0, sumSquares},   // gc_block_sum256: slots written before the tree reads them
		{"common.cuh", 1, sumSquares},   // gc_block_sum256: a tree level finished before the next
		{"reduce.cu", 0, sumRows},       // sum_rows: partial column sums written before row 0 adds them
		{"nn.cu", 0, embeddingGradScan}, // embedding_grad_scan: the id tile loaded before it is read
		{"nn.cu", 1, embeddingGradScan}, // embedding_grad_scan: the tile read before the next load
		{"nn.cu", 2, sampleArgmax},      // sample: every chunk's maximum written before all read them
		{"nn.cu", 3, sampleTop1},        // sample: a radix pass's counts complete before they are scanned
		{"nn.cu", 4, sampleUniform},     // sample: the chunk sums written before thread 0 adds them
		{"cells.cu", 0, gruFused},       // rec_product: a chunk of h and W staged before it is read
		{"cells.cu", 1, gruFused},       // rec_product: the chunk read before the next overwrites it
		{"cells.cu", 2, gruWalk},        // walk_product: a chunk of h (and, first, W's rows) staged before it is read
		{"cells.cu", 3, lstmWalk},       // walk_product: the chunk read before the next overwrites it
		{"cells.cu", 4, gruGradFused},   // rec_grad_product: a chunk of dnext and W staged before it is read
		{"cells.cu", 5, gruGradFused},   // rec_grad_product: the chunk read before the next overwrites it
		{"cells.cu", 6, lstmGradWalk},   // walk_grad_product: a chunk of dnext (and, first, W's columns) staged before it is read
		{"cells.cu", 7, gruGradWalk},    // walk_grad_product: the chunk read before the next overwrites it
	}
	// Every barrier of the kernels is in the table: a new one needs a case.
	// Those of the GPU's grid barrier (common.cuh's gc_grid_sync, last in
	// the file) are not: the emulator compiles its own barrier instead
	// (emu.h.in), which TestMissingGridBarrier checks.
	count := 0
	for _, f := range kernels {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if i := strings.Index(src, "#ifndef GC_GRID_SYNC"); i >= 0 {
			gpu := src[i:]
			gpu = gpu[:strings.Index(gpu, "#endif")]
			count -= strings.Count(gpu, "__syncthreads();")
		}
		count += strings.Count(src, "__syncthreads();")
	}
	if count != len(cases) {
		t.Errorf("cuda/kernels has %d barriers, the table %d: add a case for each", count, len(cases))
	}
	for _, c := range cases {
		t.Run(c.file+"#"+string(rune('0'+c.nth)), func(t *testing.T) {
			t.Parallel()
			got, want, err := c.run(orig)
			if err != nil {
				t.Fatal(err)
			}
			if !equal(got, want) {
				t.Fatalf("over the real kernels: got %v, want %v", got[:min(4, len(got))], want[:min(4, len(want))])
			}
			dir := t.TempDir()
			if err := copyWithout(kernels, dir, c.file, c.nth); err != nil {
				t.Fatal(err)
			}
			mutated, err := Build(dir, dir)
			if err != nil {
				t.Fatal(err)
			}
			got, want, err = c.run(mutated)
			if err != nil {
				t.Fatal(err)
			}
			if equal(got, want) {
				t.Errorf("with barrier %d of %s deleted the kernel still gave the right result: the emulator missed it", c.nth, c.file)
			}
		})
	}
}

// TestMissingGridBarrier is TestMissingBarrier for the persistent walks'
// grid barrier: with any of cells.cu's gc_grid_sync calls deleted (the
// LSTM walk's, the GRU walk's, and their walks back's), the walk over
// several blocks must compute another result than the per-step fused
// launches it stands for, which it gives to the bit over the real sources. What makes it wrong is how the
// emulator runs such a kernel: every thread of the grid a fiber, in rounds
// drawn afresh, so a block that does not wait for the others reads a step's
// h before they wrote it (the poison of new memory, or an older step's).
func TestMissingGridBarrier(t *testing.T) {
	testfull.Skip(t, "an emulator built without its grid barrier")
	orig := ForTest(t)
	kernels, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"LSTM", "GRU", "LSTMGrad", "GRUGrad"}
	runs := []func(l *Lib) (got, want []float64, err error){lstmWalk, gruWalk, lstmGradWalk, gruGradWalk}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(kernels[0]), "cells.cu"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "gc_grid_sync(bar);"); n != len(runs) {
		t.Errorf("cells.cu has %d grid barriers, the test %d: add a case for each", n, len(runs))
	}
	for i, run := range runs {
		t.Run(names[i], func(t *testing.T) {
			t.Parallel()
			got, want, err := run(orig)
			if err != nil {
				t.Fatal(err)
			}
			if !equal(got, want) {
				t.Fatalf("over the real kernels: got %v, want %v", got[:4], want[:4])
			}
			dir := t.TempDir()
			if err := copyWithoutCall(kernels, dir, "cells.cu", "gc_grid_sync(bar);", i); err != nil {
				t.Fatal(err)
			}
			mutated, err := Build(dir, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got, want, err = run(mutated); err != nil {
				t.Fatal(err)
			}
			if equal(got, want) {
				t.Errorf("with the %s walk's grid barrier deleted the walk still gave the per-step launches' result: the emulator missed it", names[i])
			}
		})
	}
}

// walkShape is the walks' test shape: 3 steps of 16 rows of 64 units, a
// grid of 4 by 2 blocks of 16 units by 8 rows, for the walks and the
// per-step launches alike.
const walkSteps, walkBatch, walkHidden = 3, 16, 64

var walkGrid, walkBlock = [3]uint32{4, 2, 1}, [3]uint32{16, 8, 1}

// walkShared is the dynamic shared memory a launch of kernel name over
// the walks' shape takes, as cuda/walk.go's walkShape sizes it: a
// block's slice of W in float64, the G·J rows of its units 66 doubles
// apart (64 rounded up to an odd number of 2-double vectors) for a walk,
// the J columns of every row for a walk back; none for other kernels.
func walkShared(name string) uint32 {
	gates := 4
	if strings.HasPrefix(name, "gc_gru") {
		gates = 3
	}
	j := int(walkBlock[0])
	switch {
	case strings.Contains(name, "_grad_walk_"):
		return uint32(gates * walkHidden * j * 8)
	case strings.Contains(name, "_walk_"):
		return uint32(gates * j * (walkHidden + 2) * 8)
	}
	return 0
}

// walkInputs are a walk's inputs: G gates' input products for every step,
// h0 and c0, W_hh scaled as PyTorch initialises it.
func walkInputs(gates int) (pre, h0, c0, w []float64) {
	const T, B, H = walkSteps, walkBatch, walkHidden
	pre, h0, c0, w = make([]float64, T*B*gates*H), make([]float64, B*H), make([]float64, B*H), make([]float64, gates*H*H)
	for i := range pre {
		pre[i] = float64(i%13)/6 - 1
	}
	for i := range h0 {
		h0[i], c0[i] = float64(i%7)/7-0.5, float64(i%5)/5-0.5
	}
	for i := range w {
		w[i] = (float64(i%11)/11 - 0.5) / 8
	}
	return pre, h0, c0, w
}

// lstmWalk runs gc_lstm_walk_f64 forward over the walk's shape, and the
// per-step gc_lstm_cell_fused_f64 launches it stands for; it returns the
// walk's h of every step and the launches'.
func lstmWalk(l *Lib) (got, want []float64, err error) {
	const T, B, H = walkSteps, walkBatch, walkHidden
	pre, h0, c0, w := walkInputs(4)
	pre2 := append([]float64(nil), pre...)
	got, want = make([]float64, T*B*H), make([]float64, T*B*H)
	cs, cs2 := make([]float64, T*B*H), make([]float64, T*B*H)
	for i := range got {
		got[i], want[i] = math.NaN(), math.NaN()
	}
	bar := make([]uint32, 2)
	if err = launch(l, "gc_lstm_walk_f64", walkGrid, walkBlock,
		[]uint64{ptr(h0), ptr(c0), ptr(w), ptr(pre), 0, 0, ptr(got), ptr(cs), 0, ptr(pre), 0, T, B, H, 0, ptr(bar)},
		h0, c0, w, pre, got, cs, bar); err != nil {
		return nil, nil, err
	}
	for t := range T {
		hp, cp := ptr(h0), ptr(c0)
		if t > 0 {
			hp, cp = ptr(want[(t-1)*B*H:]), ptr(cs2[(t-1)*B*H:])
		}
		if err = launch(l, "gc_lstm_cell_fused_f64", walkGrid, walkBlock,
			[]uint64{hp, ptr(w), ptr(pre2[t*4*B*H:]), 0, 0, cp, ptr(cs2[t*B*H:]), ptr(want[t*B*H:]), ptr(pre2[t*4*B*H:]), B, H, 1},
			h0, c0, w, pre2, want, cs2); err != nil {
			return nil, nil, err
		}
	}
	return got, want, nil
}

// gruWalk is lstmWalk for gc_gru_walk_f64, reverse, against the per-step
// gc_gru_cell_fused_f64 launches.
func gruWalk(l *Lib) (got, want []float64, err error) {
	const T, B, H = walkSteps, walkBatch, walkHidden
	xpre, h0, _, w := walkInputs(3)
	got, want = make([]float64, T*B*H), make([]float64, T*B*H)
	hpre, hpre2 := make([]float64, B*3*H), make([]float64, B*3*H)
	for i := range got {
		got[i], want[i] = math.NaN(), math.NaN()
	}
	bar := make([]uint32, 2)
	if err = launch(l, "gc_gru_walk_f64", walkGrid, walkBlock,
		[]uint64{ptr(h0), ptr(w), ptr(xpre), ptr(hpre), 0, 0, ptr(got), 0, 0, T, B, H, 1, ptr(bar)},
		h0, w, xpre, hpre, got, bar); err != nil {
		return nil, nil, err
	}
	for t := T - 1; t >= 0; t-- {
		hp := ptr(h0)
		if t < T-1 {
			hp = ptr(want[(t+1)*B*H:])
		}
		if err = launch(l, "gc_gru_cell_fused_f64", walkGrid, walkBlock,
			[]uint64{hp, ptr(w), ptr(xpre[t*3*B*H:]), ptr(hpre2), 0, 0, ptr(want[t*B*H:]), 0, B, H, 1},
			h0, w, xpre, hpre2, want); err != nil {
			return nil, nil, err
		}
	}
	return got, want, nil
}

// lstmGradWalk runs gc_lstm_grad_walk_f64 back over a forward walk of
// the walks' shape, given the product of a step beyond it, and the
// per-step gc_lstm_cell_grad_fused_f64 launches it stands for; it returns
// the pre-activation gradients of every step, the walk's and the
// launches'.
func lstmGradWalk(l *Lib) (got, want []float64, err error) {
	const T, B, H = walkSteps, walkBatch, walkHidden
	pre, h0, c0, w := walkInputs(4)
	act := make([]float64, len(pre))
	for i, v := range pre {
		act[i] = 1 / (1 + math.Exp(-v))
	}
	cs := make([]float64, T*B*H)
	for i := range cs {
		cs[i] = float64(i%9)/9 - 0.5
	}
	dh, dc, in := make([]float64, T*B*H), make([]float64, B*H), make([]float64, B*4*H)
	for i := range dh {
		dh[i] = float64(i%5)/5 - 0.4
	}
	for i := range in {
		in[i] = float64(i%3)/3 - 0.3
	}
	copy(dc, h0)
	dh2, dc2 := append([]float64(nil), dh...), append([]float64(nil), dc...)
	got, want = make([]float64, len(act)), make([]float64, len(act))
	bar := make([]uint32, 2)
	if err = launch(l, "gc_lstm_grad_walk_f64", walkGrid, walkBlock,
		[]uint64{ptr(act), ptr(cs), ptr(c0), ptr(dh), ptr(dc), ptr(got), ptr(w), ptr(in), 0, 0, T, B, H, 0, ptr(bar)},
		act, cs, c0, dh, dc, got, w, in, bar); err != nil {
		return nil, nil, err
	}
	for t := T - 1; t >= 0; t-- {
		next, cp := ptr(in), ptr(c0)
		if t < T-1 {
			next = ptr(want[(t+1)*4*B*H:])
		}
		if t > 0 {
			cp = ptr(cs[(t-1)*B*H:])
		}
		if err = launch(l, "gc_lstm_cell_grad_fused_f64", walkGrid, walkBlock,
			[]uint64{next, ptr(w), ptr(act[t*4*B*H:]), cp, ptr(cs[t*B*H:]), ptr(dh2[t*B*H:]), ptr(dc2), ptr(want[t*4*B*H:]), ptr(dc2), B, B, H, 1},
			in, w, act, c0, cs, dh2, dc2, want); err != nil {
			return nil, nil, err
		}
	}
	return got, want, nil
}

// gruGradWalk is lstmGradWalk for gc_gru_grad_walk_f64 back over a
// reverse walk, against the per-step gc_gru_cell_grad_fused_f64 launches;
// it returns the recurrent pre-activation gradients of every step.
func gruGradWalk(l *Lib) (got, want []float64, err error) {
	const T, B, H = walkSteps, walkBatch, walkHidden
	pre, h0, _, w := walkInputs(3)
	act := make([]float64, T*B*4*H)
	for i := range act {
		act[i] = 1 / (1 + math.Exp(-pre[i%len(pre)]))
	}
	hs := make([]float64, T*B*H)
	for i := range hs {
		hs[i] = float64(i%9)/9 - 0.5
	}
	dh, in := make([]float64, T*B*H), make([]float64, B*3*H)
	for i := range dh {
		dh[i] = float64(i%5)/5 - 0.4
	}
	for i := range in {
		in[i] = float64(i%3)/3 - 0.3
	}
	dh2 := append([]float64(nil), dh...)
	dh0, dh02 := make([]float64, B*H), make([]float64, B*H)
	dx, dx2 := make([]float64, T*B*3*H), make([]float64, T*B*3*H)
	got, want = make([]float64, T*B*3*H), make([]float64, T*B*3*H)
	bar := make([]uint32, 2)
	if err = launch(l, "gc_gru_grad_walk_f64", walkGrid, walkBlock,
		[]uint64{ptr(act), ptr(hs), ptr(h0), ptr(dh), ptr(dh0), ptr(dx), ptr(got), ptr(w), ptr(in), 0, 0, T, B, H, 1, ptr(bar)},
		act, hs, h0, dh, dh0, dx, got, w, in, bar); err != nil {
		return nil, nil, err
	}
	for t := range T {
		next, hp, dhp, acc := ptr(in), ptr(h0), ptr(dh02), uint64(0)
		if t > 0 {
			next = ptr(want[(t-1)*3*B*H:])
		}
		if t < T-1 {
			hp, dhp, acc = ptr(hs[(t+1)*B*H:]), ptr(dh2[(t+1)*B*H:]), 1
		}
		if err = launch(l, "gc_gru_cell_grad_fused_f64", walkGrid, walkBlock,
			[]uint64{next, ptr(w), ptr(act[t*4*B*H:]), hp, ptr(dh2[t*B*H:]), ptr(dx2[t*3*B*H:]), ptr(want[t*3*B*H:]), dhp, acc, B, B, H, 1},
			in, w, act, h0, hs, dh2, dx2, want, dh02); err != nil {
			return nil, nil, err
		}
	}
	return got, want, nil
}

// copyWithoutCall copies the sources into dir, deleting the nth occurrence
// of call in the file named name.
func copyWithoutCall(sources []string, dir, name, call string, nth int) error {
	found := false
	for _, src := range sources {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		s := string(b)
		if filepath.Base(src) == name {
			parts := strings.Split(s, call)
			if nth+1 >= len(parts) {
				return errors.New(name + " has fewer calls of " + call + " than the case says")
			}
			s = strings.Join(parts[:nth+1], call) + ";/* call deleted */" + strings.Join(parts[nth+1:], call)
			found = true
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), []byte(s), 0o644); err != nil {
			return err
		}
	}
	if !found {
		return errors.New("no kernel source " + name)
	}
	return nil
}

// kernelSources are the .cu and .cuh files of cuda/kernels.
func kernelSources() ([]string, error) {
	dir, err := selfDir()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, pat := range []string{"*.cu", "*.cuh"} {
		m, err := filepath.Glob(filepath.Join(dir, "..", "..", "cuda", "kernels", pat))
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	if len(out) == 0 {
		return nil, errors.New("no kernel sources in cuda/kernels")
	}
	return out, nil
}

// copyWithout copies the sources into dir, deleting the nth barrier of
// the file named name (a comment keeps the line numbers).
func copyWithout(sources []string, dir, name string, nth int) error {
	found := false
	for _, src := range sources {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		s := string(b)
		if filepath.Base(src) == name {
			parts := strings.Split(s, "__syncthreads();")
			if nth+1 >= len(parts) {
				return errors.New(name + " has fewer barriers than the case says")
			}
			s = strings.Join(parts[:nth+1], "__syncthreads();") + "/* barrier deleted */" + strings.Join(parts[nth+1:], "__syncthreads();")
			found = true
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), []byte(s), 0o644); err != nil {
			return err
		}
	}
	if !found {
		return errors.New("no kernel source " + name)
	}
	return nil
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] { // NaN included: never equal
			return false
		}
	}
	return true
}

func ptr[T any](s []T) uint64 { return uint64(uintptr(unsafe.Pointer(&s[0]))) }

// launch is l.Launch with the Go slices its arguments point into (ptr)
// kept alive until the kernel returned: an address as a uint64 does not
// keep its memory from the collector, which, with the parallel cases
// allocating beside, handed a kernel's input to another case mid-launch.
// They are kept on the heap too (escaped): a slice that escape analysis
// leaves on the goroutine's stack moves when the stack grows, as it may
// between ptr and the kernel, which then reads where the slice was (a
// block sum of NaN over the real kernels, one run in three or six, in
// cases started in parallel on fresh stacks).
func launch(l *Lib, name string, grid, block [3]uint32, args []uint64, inputs ...any) error {
	onHeap(inputs...)
	err := l.Launch(name, grid, block, walkShared(name), args)
	runtime.KeepAlive(inputs)
	return err
}

// onHeap keeps the memory its arguments point to on the heap, where an
// address a kernel is given stays valid: storing them where escape
// analysis cannot follow makes it allocate them there.
func onHeap(inputs ...any) {
	escaped.Lock()
	escaped.last = inputs
	escaped.Unlock()
}

// escaped holds onHeap's last arguments.
var escaped struct {
	sync.Mutex
	last []any
}

// sumSquares runs gc_sum_squares_partial_f64 as one block of 256 threads
// over 256 values; its block sum is exact (integers).
func sumSquares(l *Lib) (got, want []float64, err error) {
	x := make([]float64, 256)
	var total float64
	for i := range x {
		x[i] = float64(i%7 + 1)
		total += x[i] * x[i]
	}
	partials := []float64{math.NaN()}
	err = launch(l, "gc_sum_squares_partial_f64", [3]uint32{1, 1, 1}, [3]uint32{256, 1, 1},
		[]uint64{ptr(x), uint64(len(x)), ptr(partials)}, x, partials)
	return partials, []float64{total}, err
}

// sumRows runs gc_sum_rows_f64 (block 32x8) over 16 rows of 32 columns.
func sumRows(l *Lib) (got, want []float64, err error) {
	const rows, cols = 16, 32
	x := make([]float64, rows*cols)
	want = make([]float64, cols)
	for i := range x {
		x[i] = float64(i%5 + 1)
		want[i%cols] += x[i]
	}
	got = make([]float64, cols)
	err = launch(l, "gc_sum_rows_f64", [3]uint32{1, 1, 1}, [3]uint32{32, 8, 1},
		[]uint64{ptr(x), ptr(got), rows, cols, 0}, x, got)
	return got, want, err
}

// embeddingGradScan runs gc_embedding_grad_scan_f64 as cuda/launch.go
// does (blocks of 128 columns, one block row per vocabulary entry) over
// 2,500 ids, more than two tiles of 1,024, so a tile is reloaded.
func embeddingGradScan(l *Lib) (got, want []float64, err error) {
	const n, dim, vocab = 2500, 128, 3
	ids := make([]int32, n)
	dout := make([]float64, n*dim)
	want = make([]float64, vocab*dim)
	for i := range ids {
		ids[i] = int32((i*7 + i/1000) % vocab)
		for d := range dim {
			dout[i*dim+d] = float64((i + d) % 3)
			want[int(ids[i])*dim+d] += dout[i*dim+d]
		}
	}
	got = make([]float64, vocab*dim)
	err = launch(l, "gc_embedding_grad_scan_f64", [3]uint32{1, vocab, 1}, [3]uint32{128, 1, 1},
		[]uint64{ptr(ids), ptr(dout), ptr(got), n, dim, vocab}, ids, dout, got)
	return got, want, err
}

// sampleRows runs gc_sample_f64 as cuda/launch.go does (blocks of 256
// threads, a row per block) but on 4 blocks, over 64 rows of 512 classes
// (two per chunk) whose largest logit is somewhere in the row, drawing at
// temperature temp among the top topK. Every row draws its argmax, at
// temperature 0 or among the top 1, so want is the argmax. The rows run on
// 4 blocks so that most follow another row in their block (shared memory
// holds that row's values, not the poison).
func sampleRows(l *Lib, temp float64, topK uint64) (got, want []float64, err error) {
	const rows, classes = 64, 512
	x := make([]float64, rows*classes)
	want = make([]float64, rows)
	for r := range rows {
		for c := range classes {
			x[r*classes+c] = float64((r*31+c*17)%97) / 97
		}
		best := (r*149 + 7) % classes
		x[r*classes+best] = 2
		want[r] = float64(best)
	}
	ids := make([]int32, rows)
	err = launch(l, "gc_sample_f64", [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1},
		[]uint64{ptr(x), ptr(ids), 0, rows, classes, math.Float64bits(temp), topK, 1, 0, 0}, x, ids) // no counter_at
	got = make([]float64, rows)
	for i, id := range ids {
		got[i] = float64(id)
	}
	return got, want, err
}

// sampleUniform runs gc_sample_f64 as sampleRows does over rows whose
// first n classes, n different in every row, are 0 and the others -Inf:
// the first n weigh exactly 1 and the others 0, so every sum is an exact
// integer, row r's chunk sums differ from the row's before it, and its
// class is min(floor(u·n), n-1) with u = device.SampleUniform(seed, r).
func sampleUniform(l *Lib) (got, want []float64, err error) {
	const rows, classes, seed = 64, 512, 99
	x := make([]float64, rows*classes)
	want = make([]float64, rows)
	for r := range rows {
		n := 1 + (r*181)%classes
		for c := range classes {
			if c >= n {
				x[r*classes+c] = math.Inf(-1)
			}
		}
		want[r] = math.Min(math.Floor(device.SampleUniform(seed, uint64(r))*float64(n)), float64(n-1))
	}
	ids := make([]int32, rows)
	err = launch(l, "gc_sample_f64", [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1},
		[]uint64{ptr(x), ptr(ids), 0, rows, classes, math.Float64bits(1), 0, seed, 0, 0}, x, ids)
	got = make([]float64, rows)
	for i, id := range ids {
		got[i] = float64(id)
	}
	return got, want, err
}

func sampleArgmax(l *Lib) (got, want []float64, err error) { return sampleRows(l, 0, 0) }
func sampleTop1(l *Lib) (got, want []float64, err error)   { return sampleRows(l, 1, 1) }

// gruFused runs gc_gru_cell_fused_f64 as cuda/launch.go does (blocks of
// 32 units by 4 rows) over 4 rows of 64 units, two chunks of 32 terms, and
// returns the recurrent product it writes to hpre: small integers, so
// exact in any order.
func gruFused(l *Lib) (got, want []float64, err error) {
	const batch, hidden = 4, 64
	hprev := make([]float64, batch*hidden)
	for i := range hprev {
		hprev[i] = float64(i%5 + 1)
	}
	w := make([]float64, 3*hidden*hidden)
	for i := range w {
		w[i] = float64(i%7 - 3)
	}
	want = make([]float64, batch*3*hidden)
	for b := range batch {
		for c := range 3 * hidden {
			for k := range hidden {
				want[b*3*hidden+c] += hprev[b*hidden+k] * w[c*hidden+k]
			}
		}
	}
	got = make([]float64, batch*3*hidden)
	xpre, h := make([]float64, batch*3*hidden), make([]float64, batch*hidden)
	err = launch(l, "gc_gru_cell_fused_f64", [3]uint32{hidden / 32, batch / 4, 1}, [3]uint32{32, 4, 1},
		[]uint64{ptr(hprev), ptr(w), ptr(xpre), ptr(got), 0, 0, ptr(h), 0, batch, hidden, 1}, hprev, w, xpre, got, h)
	return got, want, err
}

// gruGradFused runs gc_gru_cell_grad_fused_f64 as cuda/launch.go does
// (blocks of 32 units by 4 rows) over 4 rows of 64 units with the product
// alone (cell 0), three chunks of 64 terms, and returns what it leaves in
// dh, zeros plus dnext·W: small integers, so exact in any order.
func gruGradFused(l *Lib) (got, want []float64, err error) {
	const batch, hidden = 4, 64
	dnext := make([]float64, batch*3*hidden)
	for i := range dnext {
		dnext[i] = float64(i%5 - 2)
	}
	w := make([]float64, 3*hidden*hidden)
	for i := range w {
		w[i] = float64(i%7 - 3)
	}
	want = make([]float64, batch*hidden)
	for b := range batch {
		for j := range hidden {
			for k := range 3 * hidden {
				want[b*hidden+j] += dnext[b*3*hidden+k] * w[k*hidden+j]
			}
		}
	}
	got = make([]float64, batch*hidden)
	err = launch(l, "gc_gru_cell_grad_fused_f64", [3]uint32{hidden / 32, batch / 4, 1}, [3]uint32{32, 4, 1},
		[]uint64{ptr(dnext), ptr(w), 0, 0, ptr(got), 0, 0, 0, 0, batch, batch, hidden, 0}, dnext, w, got)
	return got, want, err
}
