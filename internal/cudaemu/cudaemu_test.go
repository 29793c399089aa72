//go:build cgo

package cudaemu

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

func TestCached(t *testing.T) {
	l := ForTest(t)
	if !filepath.IsAbs(l.Path()) || filepath.Base(l.Path()) != "libgcemu.so" {
		t.Errorf("Path() = %q, want an absolute path to libgcemu.so", l.Path())
	}
	if _, err := os.Stat(l.Path()); err != nil {
		t.Error(err)
	}
	if again, err := Cached(); again != l || err != nil {
		t.Errorf("second Cached() = %p, %v; want the first, %p", again, err, l)
	}
}

// TestLaunch runs a kernel directly, without the emulated driver.
func TestLaunch(t *testing.T) {
	l := ForTest(t)
	x := make([]float32, 100)
	onHeap(x) // not on the stack, which may move before the kernel writes
	args := []uint64{uint64(uintptr(unsafe.Pointer(&x[0]))), uint64(len(x)) - 1, math.Float64bits(1.5)}
	if err := l.Launch("gc_fill_f32", [3]uint32{3, 1, 1}, [3]uint32{32, 1, 1}, 0, args); err != nil {
		t.Fatal(err)
	}
	for i, v := range x {
		if want := float32(1.5); i == len(x)-1 {
			want = 0
			if v != want {
				t.Errorf("x[%d] = %v past n, want %v untouched", i, v, want)
			}
		} else if v != want {
			t.Errorf("x[%d] = %v, want %v", i, v, want)
		}
	}
	if err := l.Launch("gc_nonexistent", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil); err == nil {
		t.Error("launching an unknown kernel succeeded")
	}
	if err := l.Launch("gc_fill_f32", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, args[:2]); err == nil {
		t.Error("launching with too few arguments succeeded")
	}
}

// TestDriverObject checks the driver's cached object: built once, found
// again, built anew when driver.cc.in or nccl.cc.in changes (and only
// then: the kernels are not its sources).
func TestDriverObject(t *testing.T) {
	gxx, err := compiler()
	if err != nil {
		t.Skip(err)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("driver.cc.in", "#include \"nccl.cc.in\"\nint driver_f() { return nccl_g(); }\n")
	write("nccl.cc.in", "static int nccl_g() { return 1; }\n")
	first, err := driverObject(gxx, dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(first)
	if err != nil {
		t.Fatalf("driverObject returned %s, which is not there: %v", first, err)
	}
	again, err := driverObject(gxx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(again); again != first || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("the second call built %s again (first %s)", again, first)
	}
	seen := map[string]bool{first: true}
	for _, f := range [][2]string{{"nccl.cc.in", "static int nccl_g() { return 2; }\n"},
		{"driver.cc.in", "#include \"nccl.cc.in\"\nint driver_f() { return nccl_g() + 1; }\n"}} {
		write(f[0], f[1])
		obj, err := driverObject(gxx, dir)
		if err != nil || seen[obj] {
			t.Errorf("after %s changed, driverObject = %s, %v; want a new object", f[0], obj, err)
		}
		seen[obj] = true
	}
}

// TestCacheKey checks that the cache key covers every source: a change to
// any file that goes into the library is a new build.
func TestCacheKey(t *testing.T) {
	gxx, err := compiler()
	if err != nil {
		t.Skip(err)
	}
	dir, kernels := t.TempDir(), t.TempDir()
	files := []string{
		filepath.Join(dir, "emu.cc.in"), filepath.Join(dir, "driver.cc.in"),
		filepath.Join(kernels, "a.cu"), filepath.Join(kernels, "common.cuh"),
	}
	for _, f := range files {
		if err := os.WriteFile(f, []byte("// "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base, err := cacheKey(gxx, dir, kernels)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := cacheKey(gxx, dir, kernels); again != base {
		t.Errorf("cacheKey changed between two calls: %s, %s", base, again)
	}
	for _, f := range files {
		old, _ := os.ReadFile(f)
		if err := os.WriteFile(f, append(old, ' '), 0o644); err != nil {
			t.Fatal(err)
		}
		if k, _ := cacheKey(gxx, dir, kernels); k == base {
			t.Errorf("cacheKey did not change with %s", filepath.Base(f))
		}
		if err := os.WriteFile(f, old, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
