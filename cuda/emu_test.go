package cuda

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/devicetest"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
	"github.com/gocurrent/gocurrent/internal/testfull"
)

// openEmulated opens the device over the emulated driver and cuBLAS
// (internal/cudaemu: the real kernel sources compiled with g++ for the
// CPU behind a CPU implementation of the driver API and cuBLAS), through
// the real cgo bindings, and closes it when the test ends. It skips where
// the emulator cannot be built (no g++) or loaded (no cgo).
func openEmulated(t testing.TB, cfg Config) *Device {
	t.Helper()
	lib := cudaemu.ForTest(t)
	cfg.DriverLibrary, cfg.BLASLibrary = lib.Path(), lib.Path()
	d, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open over the emulated driver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestEmulatedConformance runs the conformance suite on the device opened
// with Open over the emulated driver: the real cgo bindings (dlopen, the
// _v2 entry points, the C wrappers, cuLaunchKernel's parameter packing,
// the cuBLAS calls), the real kernel sources, the launch code, the
// allocators, copies and the status word. Only what the driver and cuBLAS
// do themselves is emulated. On a GPU, TestConformance runs the same
// suite for real. The walks group runs in TestEmulatedWalkConformance,
// with the walks on, each case there against its per-step calls on the
// same device: here, with them off, it would run those calls twice.
//
// Under the race detector (CI's second run) it runs only raceGroups, where
// the device's own Go code runs on several goroutines at once: the other
// groups run the kernels in the emulator's C++, which the detector does
// not see, through the launch code those groups run too.
func TestEmulatedConformance(t *testing.T) {
	openEmulated(t, Config{}).Close() // skip the whole suite, once, where there is no emulator
	open := func(t testing.TB) device.Device { return openEmulated(t, Config{}) }
	if !raceEnabled {
		devicetest.RunGroups(t, open, devicetest.Without(t, "Walks"))
		return
	}
	offered := map[string]bool{}
	devicetest.RunGroups(t, open, func(group string) bool { offered[group] = true; return raceGroups[group] })
	for g := range raceGroups {
		if !offered[g] {
			t.Errorf("raceGroups names %s, which the suite has no group of", g)
		}
	}
}

// raceGroups are the conformance groups that use the device from several
// goroutines, or its streams, events, staging and host copies beside one
// another: what TestEmulatedConformance runs under the race detector.
var raceGroups = map[string]bool{"Streams": true, "Concurrency": true, "Copies": true, "Staging": true,
	"MemStats": true, "Misuse": true, "Scopes": true, "Counts": true, "Graphs": true, "Branches": true}

// TestEmulatedConformanceInScope runs the conformance suite on a scope of
// the emulated device: a scope, with its own compute stream, status word,
// cuBLAS handle and allocation scope, is a device.Device of its own and
// passes everything the device does (but the walks group, as
// TestEmulatedConformance).
func TestEmulatedConformanceInScope(t *testing.T) {
	testfull.Skip(t, "the conformance suite again on a scope of the emulated device")
	openEmulated(t, Config{}).Close()
	devicetest.RunGroups(t, devicetest.InScope(func(t testing.TB) device.Device { return openEmulated(t, Config{}) }),
		devicetest.Without(t, "Walks"))
}

// TestEmulatedConformanceSmallGrids runs the conformance suite again on
// the emulated device with every grid-stride launch capped at two blocks
// (gridCap): an element-wise kernel then covers a million elements in
// 2048 passes of its loop, a warp-per-row kernel 16 rows per pass, and
// SumSquares sums in two partial sums, so a stride loop that misses or
// repeats elements past the first pass, or a reduction that depends on
// the number of blocks, fails the same checks as a wrong equation. Only the
// groups whose kernels the cap changes run again: not SumRows (its grid is
// sized to the data, never capped), nor the groups of streams, copies,
// memory and misuse, which launch no kernel of their own, nor Branches,
// whose kernels are other groups' (it tests where they run).
func TestEmulatedConformanceSmallGrids(t *testing.T) {
	testfull.Skip(t, "the conformance suite again with the emulated device's launch grids capped")
	openEmulated(t, Config{}).Close()
	defer func(old int) { gridCap = old }(gridCap)
	gridCap = 2
	unchanged := []string{"SumRows", "Streams", "Concurrency", "Copies", "Staging", "MemStats", "Misuse", "Scopes", "Branches", "Walks"}
	devicetest.RunGroups(t, func(t testing.TB) device.Device { return openEmulated(t, Config{}) },
		func(group string) bool { return !slices.Contains(unchanged, group) })
}

// TestEmulatedDriver checks what the emulated driver adds to the
// conformance suite's view: that it says it is an emulator, its memory
// limit, its bounds checks, and TF32.
func TestEmulatedDriver(t *testing.T) {
	t.Run("Info", func(t *testing.T) {
		t.Setenv("GOCURRENT_EMU_MEMORY", "") // the default capacity
		info := openEmulated(t, Config{}).Info()
		want := Info{
			Name: "gocurrent CUDA emulator (CPU)", ComputeCapability: [2]int{9, 0}, Multiprocessors: 132,
			SharedPerBlock: 227 << 10, Cooperative: true, // an H100's (driver.cc.in)
			TotalMemory: 4 << 30, DriverVersion: 13000, BLASVersion: 130000, BLASLibrary: info.BLASLibrary,
			PTX: "compute_80", FuseCellsUpTo: 256, // Config.FuseCellsUpTo's default
			WalkCellsUpTo: -1, // Config.WalkCellsUpTo's default: none
		}
		if info != want {
			t.Errorf("Info() = %+v, want %+v", info, want)
		}
		// What GPU runs use to refuse the emulator tells the two apart.
		if !cudaemu.IsEmulator(info.Name) || cudaemu.IsEmulator("NVIDIA H100 80GB HBM3") {
			t.Errorf("IsEmulator(%q) = %v and IsEmulator(NVIDIA H100 80GB HBM3) = %v, want true and false",
				info.Name, cudaemu.IsEmulator(info.Name), cudaemu.IsEmulator("NVIDIA H100 80GB HBM3"))
		}
	})
	t.Run("OutOfMemory", func(t *testing.T) {
		t.Setenv("GOCURRENT_EMU_MEMORY", fmt.Sprint(256<<20))
		d := openEmulated(t, Config{})
		if got := d.Info().TotalMemory; got != 256<<20 {
			t.Errorf("TotalMemory = %d, want %d from GOCURRENT_EMU_MEMORY", got, 256<<20)
		}
		_, err := d.Alloc(240<<20, device.Workspace) // with the 32 MiB cuBLAS workspace, past the capacity
		var oom *alloc.OutOfMemoryError
		if !errors.Is(err, alloc.ErrOutOfMemory) || !errors.As(err, &oom) {
			t.Fatalf("Alloc past the capacity = %v, want an *alloc.OutOfMemoryError", err)
		}
		b, err := d.Alloc(200<<20, device.Workspace)
		if err != nil {
			t.Fatalf("Alloc within the capacity: %v", err)
		}
		if err := d.Free(b); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Bounds", func(t *testing.T) {
		d := openEmulated(t, Config{})
		a, c := d.api, d.ctx
		const n = 4096
		p, err := a.MemAlloc(c, n)
		if err != nil {
			t.Fatal(err)
		}
		defer a.MemFree(c, p)
		// cuMemAlloc does not zero memory; the emulator's is NaN bytes.
		host := make([]byte, 64)
		if err := a.MemcpyDtoHAsync(c, unsafe.Pointer(&host[0]), p, 64, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(host, bytes.Repeat([]byte{0xff}, 64)) {
			t.Errorf("new device memory = % x, want 0xff bytes", host[:8])
		}
		var e *Error
		for name, err := range map[string]error{
			"HtoD past the end":     a.MemcpyHtoDAsync(c, p+n-16, unsafe.Pointer(&host[0]), 64, 0),
			"DtoH before the start": a.MemcpyDtoHAsync(c, unsafe.Pointer(&host[0]), p-16, 64, 0),
			"DtoD past the end":     a.MemcpyDtoDAsync(c, p, p+64, n, 0),
			"memset past the end":   a.MemsetD32Async(c, p, 0, n/4+1, 0),
			"free inside":           a.MemFree(c, p+64),
		} {
			if !errors.As(err, &e) || e.Name != "CUDA_ERROR_INVALID_VALUE" {
				t.Errorf("%s = %v, want CUDA_ERROR_INVALID_VALUE", name, err)
			}
		}
		d.blasMu.Lock()
		err = a.BLASGemm(c, d.blas, blasGemm{M: 16, N: 16, K: 16, Alpha: 1, A: p, B: p, C: p + n - 512, LdA: 16, LdB: 16, LdC: 16})
		d.blasMu.Unlock()
		if !errors.As(err, &e) || e.Name != "CUBLAS_STATUS_INVALID_VALUE" {
			t.Errorf("cublasSgemm writing past the end = %v, want CUBLAS_STATUS_INVALID_VALUE", err)
		}
	})
	t.Run("SharedMemoryAndCooperative", func(t *testing.T) {
		d := openEmulated(t, Config{}) // walks off: nothing opted in at Open
		a, c, f := d.raw, d.ctx, d.fn[kLSTMWalk][0]
		want := func(what string, err error, name string) {
			t.Helper()
			var e *Error
			if name == "" && err != nil || name != "" && (!errors.As(err, &e) || e.Name != name) {
				t.Errorf("%s = %v, want %s", what, err, cmp.Or(name, "no error"))
			}
		}
		occupancy := func(shared uint32, wantN int) {
			t.Helper()
			if n, err := a.Occupancy(c, f, fuseThreads, shared); err != nil || n != wantN {
				t.Errorf("Occupancy(128 threads, %d bytes) = %d, %v; want %d", shared, n, err, wantN)
			}
		}
		// An H100's multiprocessor: 2048 threads, 228 KiB, 1 KiB a block.
		occupancy(0, 16)
		occupancy(48<<10, 4)       // 233472 / 50176
		occupancy(48<<10+1, 0)     // past the 48 KiB a function has by default
		args := make([]uint64, 15) // gc_lstm_walk's
		want("a launch with 48 KiB + 1 of dynamic shared memory, not opted in",
			a.Launch(c, f, [3]uint32{1, 1, 1}, [3]uint32{8, 16, 1}, 48<<10+1, d.compute.s, args), "CUDA_ERROR_INVALID_VALUE")
		want("opting into 227 KiB + 1", a.FuncSetAttribute(c, f, funcMaxDynamicShared, 227<<10+1), "CUDA_ERROR_INVALID_VALUE")
		want("opting into 200000 bytes", a.FuncSetAttribute(c, f, funcMaxDynamicShared, 200000), "")
		occupancy(131200, 1) // 233472 / 132224
		occupancy(200000, 1)
		occupancy(200001, 0)
		// Refused before the kernel runs (its arguments are all NULL): a
		// cooperative grid the GPU cannot hold at once.
		want("a cooperative launch of 133 blocks of 131200 bytes",
			a.LaunchCooperative(c, f, [3]uint32{133, 1, 1}, [3]uint32{8, 16, 1}, 131200, d.compute.s, args),
			"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")
		want("a cooperative launch of 17 by 132 blocks of 128 threads",
			a.LaunchCooperative(c, f, [3]uint32{17, 132, 1}, [3]uint32{8, 16, 1}, 0, d.compute.s, args),
			"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")
	})
	t.Run("Handles", func(t *testing.T) {
		d := openEmulated(t, Config{})
		a, c := d.api, d.ctx
		want := func(what string, err error, name string) {
			t.Helper()
			var e *Error
			if !errors.As(err, &e) || e.Name != name {
				t.Errorf("%s = %v, want %s", what, err, name)
			}
		}
		start, err := a.EventCreate(c, true)
		if err != nil {
			t.Fatal(err)
		}
		untimed, err := a.EventCreate(c, false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.EventElapsed(c, start, start)
		want("cuEventElapsedTime before cuEventRecord", err, "CUDA_ERROR_INVALID_HANDLE")
		for _, e := range []cuEvent{start, untimed} {
			if err := a.EventRecord(c, e, d.compute.s); err != nil {
				t.Fatal(err)
			}
		}
		if ms, err := a.EventElapsed(c, start, start); err != nil || ms != 0 {
			t.Errorf("cuEventElapsedTime from an event to itself = %v, %v; want 0", ms, err)
		}
		_, err = a.EventElapsed(c, start, untimed)
		want("cuEventElapsedTime of an event without timing", err, "CUDA_ERROR_INVALID_HANDLE")
		for _, e := range []cuEvent{start, untimed} {
			if err := a.EventDestroy(c, e); err != nil {
				t.Fatal(err)
			}
		}
		want("cuEventDestroy twice", a.EventDestroy(c, start), "CUDA_ERROR_INVALID_HANDLE")
		want("cuStreamDestroy of no stream", a.StreamDestroy(c, cuStream(start)), "CUDA_ERROR_INVALID_HANDLE")

		_, err = a.ModuleLoadData(c, []byte("not PTX\x00"))
		want("cuModuleLoadDataEx of no PTX", err, "CUDA_ERROR_INVALID_PTX")
		if err == nil || !strings.Contains(err.Error(), ".entry") {
			t.Errorf("cuModuleLoadDataEx of no PTX = %v, want the JIT log to say why", err)
		}
		m, err := a.ModuleLoadData(c, []byte(".visible .entry gc_fill_f32(\n.visible .entry gc_not_emulated(\x00"))
		if err != nil {
			t.Fatal(err)
		}
		defer a.ModuleUnload(c, m)
		if _, err := a.ModuleGetFunction(c, m, "gc_fill_f32"); err != nil {
			t.Errorf("cuModuleGetFunction of a declared, emulated kernel: %v", err)
		}
		for _, name := range []string{"gc_not_emulated", "gc_fill_f64"} {
			_, err := a.ModuleGetFunction(c, m, name)
			want("cuModuleGetFunction "+name, err, "CUDA_ERROR_NOT_FOUND")
		}
	})
	t.Run("TF32", func(t *testing.T) {
		// Products of one term each (K = 1): in FP32 each is the float32
		// rounding of a·b; in TF32 the inputs are first rounded to 10
		// mantissa bits, which changes a product by up to about 2·2⁻¹¹
		// ≈ 1e-3 relative.
		const m, n = 16, 16
		rng := rand.New(rand.NewPCG(3, 4))
		av, bv := randSlice(rng, device.Float32, m), randSlice(rng, device.Float32, n)
		for _, tf32 := range []bool{false, true} {
			d := openEmulated(t, Config{TF32: tf32})
			g := device.Gemm{DType: device.Float32, M: m, N: n, K: 1, Alpha: 1,
				A: upload(t, d, device.Float32, av), B: upload(t, d, device.Float32, bv),
				C: upload(t, d, device.Float32, make([]float64, m*n))}
			if err := d.Kernels().Gemm(g); err != nil {
				t.Fatal(err)
			}
			got := download(t, d, device.Float32, g.C, m*n)
			var maxRel float64
			for i := range m {
				for j := range n {
					a, b := float32(av[i]), float32(bv[j])
					if tf32 {
						a, b = roundTF32(a), roundTF32(b)
					}
					if want := float64(a * b); got[i*n+j] != want {
						t.Fatalf("TF32 %v: C[%d,%d] = %v, want %v", tf32, i, j, got[i*n+j], want)
					}
					exact := av[i] * bv[j]
					maxRel = max(maxRel, math.Abs(got[i*n+j]-exact)/math.Abs(exact))
				}
			}
			if limit := 0x1p-24; !tf32 && maxRel > limit {
				t.Errorf("FP32: largest relative error %.2g, want at most 2⁻²⁴ ≈ %.2g", maxRel, limit)
			}
			if tf32 && (maxRel < 1e-4 || maxRel > 0x1p-10) {
				t.Errorf("TF32: largest relative change %.2g, want between 1e-4 and 2⁻¹⁰ ≈ %.2g", maxRel, 0x1p-10)
			}
			t.Logf("TF32 %v: largest relative difference from the exact products %.2g", tf32, maxRel)
		}
	})
}

// roundTF32 rounds x to TF32's 10 mantissa bits, to nearest even.
func roundTF32(x float32) float32 {
	u := math.Float32bits(x)
	u += 0xfff + (u>>13)&1
	return math.Float32frombits(u &^ 0x1fff)
}
