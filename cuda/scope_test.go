package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// TestEmulatedScopes checks that scopes are isolated with the real
// kernels, through the real cgo bindings, over the emulated driver: an
// index error raised by a kernel of one scope reaches that scope's
// Synchronize only, while another scope and the device, working at the
// same time on goroutines of their own, see no error and get their
// results; a scope's limit fails it alone; closing a scope leaves the
// others' memory and work intact. TestGPUScopes runs the same on a GPU.
func TestEmulatedScopes(t *testing.T) {
	testScopeIsolation(t, openEmulated(t, Config{}))
}

// TestGPUScopes is TestEmulatedScopes on the GPU, where the scopes'
// streams really run at the same time.
func TestGPUScopes(t *testing.T) {
	testScopeIsolation(t, openGPU(t, gpuConfig()))
}

func testScopeIsolation(t *testing.T, d *Device) {
	const limit = 64 << 20
	a, err := d.Scope(device.ScopeConfig{Name: "job-a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Scope(device.ScopeConfig{Name: "job-b", Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	const vocab, dim = 5, 4
	table := make([]float32, vocab*dim)
	for i := range table {
		table[i] = float32(i + 1)
	}
	// job runs rounds of an Embedding and a GEMM in s, checking each
	// round's results and its Synchronize: an index error exactly in the
	// rounds where bad says it raised one. It returns the first failure.
	job := func(s device.Device, bad func(round int) bool, rounds int) error {
		var bufs [5]device.Buffer
		for i, n := range []int{len(table), 3, 3 * dim, 6, 4} {
			var err error
			if bufs[i], err = s.Alloc(int64(4*n), device.Activations); err != nil {
				return err
			}
		}
		tb, ids, out, m, c := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4]
		if err := errors.Join(device.UploadSlice(s, tb, table), device.UploadSlice(s, m, []float32{1, 2, 3, 4, 5, 6})); err != nil {
			return err
		}
		for round := range rounds {
			id := []int32{int32(round % vocab), 2, int32((round + 3) % vocab)}
			if bad(round) {
				id[1] = vocab + int32(round)
			}
			if err := device.UploadSlice(s, ids, id); err != nil {
				return fmt.Errorf("round %d: Upload: %w", round, err)
			}
			if err := s.Kernels().Embedding(device.Embedding{DType: device.Float32, N: 3, Dim: dim, Vocab: vocab,
				Table: tb, IDs: ids, Out: out}); err != nil {
				return fmt.Errorf("round %d: Embedding: %w", round, err)
			}
			// C = M·Mᵀ = [[14, 32], [32, 77]] for M = [[1, 2, 3], [4, 5, 6]]
			if err := s.Kernels().Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 3, TransB: true, Alpha: 1,
				A: m, B: m, C: c}); err != nil {
				return fmt.Errorf("round %d: Gemm: %w", round, err)
			}
			err := s.Synchronize()
			if bad(round) {
				if !errors.Is(err, device.ErrIndex) || !strings.Contains(err.Error(), s.Name()+":") {
					return fmt.Errorf("round %d: Synchronize after its bad id = %v, want ErrIndex naming %s", round, err, s.Name())
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("round %d: Synchronize = %w, want nil", round, err)
			}
			got, gc := make([]float32, 3*dim), make([]float32, 4)
			if err := errors.Join(device.DownloadSlice(s, got, out), device.DownloadSlice(s, gc, c)); err != nil {
				return fmt.Errorf("round %d: Download: %w", round, err)
			}
			for i, row := range id {
				for j := range dim {
					if w := table[int(row)*dim+j]; got[i*dim+j] != w {
						return fmt.Errorf("round %d: Embedding's Out[%d,%d] = %v, want %v", round, i, j, got[i*dim+j], w)
					}
				}
			}
			if want := []float32{14, 32, 32, 77}; fmt.Sprint(gc) != fmt.Sprint(want) {
				return fmt.Errorf("round %d: Gemm = %v, want %v", round, gc, want)
			}
		}
		return nil
	}
	const rounds = 20
	devs := []device.Device{a, b, d}
	bads := []func(int) bool{func(int) bool { return false }, func(round int) bool { return round%2 == 1 }, func(int) bool { return false }}
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for i := range devs {
		wg.Go(func() { errs[i] = job(devs[i], bads[i], rounds) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s, at the same time as the others: %v", devs[i].Name(), err)
		}
	}
	if t.Failed() {
		return
	}

	// B's limit fails B only; A keeps its memory.
	keep := uploadF32(t, a, table)
	aBefore := a.MemStats()
	_, err = b.Alloc(limit, device.Activations)
	var oom *alloc.OutOfMemoryError
	if !errors.Is(err, alloc.ErrOutOfMemory) || !errors.As(err, &oom) || !strings.Contains(err.Error(), "job-b") {
		t.Errorf("B.Alloc of its whole limit = %v, want an *alloc.OutOfMemoryError naming job-b", err)
	}
	if aAfter := a.MemStats(); aAfter.ReservedBytes != aBefore.ReservedBytes || aAfter.AllocatedBytes != aBefore.AllocatedBytes {
		t.Errorf("A's memory changed when B ran out: reserved %d -> %d bytes",
			aBefore.ReservedBytes[alloc.AllPools].Current, aAfter.ReservedBytes[alloc.AllPools].Current)
	}
	if _, err := a.Alloc(limit, device.Activations); err != nil {
		t.Errorf("A.Alloc of B's limit: %v", err)
	}

	// Closing B, which still holds its buffers and an unreported error,
	// reports the error and leaves A and the device working.
	ids := uploadI32(t, b, []int32{-1})
	out, err := b.Alloc(4*dim, device.Activations)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Kernels().Embedding(device.Embedding{DType: device.Float32, N: 1, Dim: dim, Vocab: vocab,
		Table: uploadF32(t, b, table), IDs: ids, Out: out}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); !errors.Is(err, device.ErrIndex) {
		t.Errorf("B.Close with an unreported index error = %v, want ErrIndex", err)
	}
	if st := d.mem.ScopeStats(b.ID()); st.ReservedBytes[alloc.AllPools].Current != 0 {
		t.Errorf("B's scope reserves %d bytes after its Close, want 0", st.ReservedBytes[alloc.AllPools].Current)
	}
	got := make([]float32, len(table))
	if err := device.DownloadSlice(a, got, keep); err != nil {
		t.Fatalf("A.Download after B.Close: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(table) {
		t.Errorf("A's buffer after B.Close = %v, want %v", got, table)
	}
	for _, s := range []device.Device{a, d} {
		if err := job(s, bads[0], 2); err != nil {
			t.Errorf("%s after B.Close: %v", s.Name(), err)
		}
	}
	if err := a.Close(); err != nil {
		t.Errorf("A.Close: %v", err)
	}
	if err := d.Synchronize(); err != nil {
		t.Errorf("device Synchronize after the scopes closed: %v", err)
	}
}
