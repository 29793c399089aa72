//go:build cgo

package cudaemu

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
)

// sources are the emulator's own sources, in this directory; emu.cc.in
// includes emu.h.in and the kernels.
var sources = []string{"emu.cc.in", "driver.cc.in"}

// flags are g++'s flags before the output and the sources. Hidden
// visibility leaves the driver's, cuBLAS's and emu_launch's entry points
// the only symbols the library exports. -ffp-contract=off keeps products
// and sums apart where the target has fused multiply-adds (arm64): the
// sample kernel's explicitly rounded intrinsics must round as on a GPU.
var flags = []string{"-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-fvisibility=hidden"}

// compiler is the g++ to build with; errors.Is(err, exec.ErrNotFound)
// when there is none.
func compiler() (string, error) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		return "", fmt.Errorf("cudaemu: building the CUDA emulator needs g++: %w", err)
	}
	return gxx, nil
}

// selfDir is the directory of this package's sources.
func selfDir() (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cudaemu: cannot locate the emulator's sources")
	}
	dir := filepath.Dir(self)
	if _, err := os.Stat(filepath.Join(dir, sources[0])); err != nil {
		return "", fmt.Errorf("cudaemu: the emulator's sources are not where this binary was built from (built with -trimpath?): %w", err)
	}
	return dir, nil
}

// absolute is dir/name as an absolute path, which dlopen needs (a bare
// name would be looked up on the loader's path).
func absolute(dir, name string) (string, error) {
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("cudaemu: %w", err)
	}
	return p, nil
}

// compile builds the library at out from the emulator's sources and the
// kernels in kernelsDir: emu.cc.in, which includes the kernels, compiled
// here, linked with the driver's object (driverObject), which does not
// depend on them and is built once per version of its sources, at the
// same time.
func compile(gxx, kernelsDir, out string) error {
	dir, err := selfDir()
	if err != nil {
		return err
	}
	type result struct {
		obj string
		err error
	}
	driver := make(chan result, 1)
	go func() {
		obj, err := driverObject(gxx, dir)
		driver <- result{obj, err}
	}()
	emu := out + ".emu.o"
	defer os.Remove(emu)
	err = gxxRun(gxx, append(slices.Clone(flags), "-c", "-I", kernelsDir, "-o", emu, "-x", "c++", filepath.Join(dir, "emu.cc.in"))...)
	d := <-driver
	if err != nil {
		return err
	}
	if d.err != nil {
		return d.err
	}
	return gxxRun(gxx, append(slices.Clone(flags), "-o", out, emu, d.obj)...)
}

// driverSources are the files of the driver's object: driver.cc.in, which
// includes nccl.cc.in and none of the kernels.
var driverSources = []string{"driver.cc.in", "nccl.cc.in"}

// driverObject returns the path of the driver's object compiled from the
// sources in dir, compiling it into the cache directory when it is not
// there: the kernels' changes (and TestMissingBarrier's builds of mutated
// kernels) compile only emu.cc.in again.
func driverObject(gxx, dir string) (string, error) {
	h := sha256.New()
	if err := hashCompiler(h, gxx); err != nil {
		return "", err
	}
	for _, f := range driverSources {
		if err := hashFile(h, filepath.Join(dir, f)); err != nil {
			return "", err
		}
	}
	return cachedFile(filepath.Join(cacheRoot(), "gocurrent", "cudaemu"), "driver-"+hex.EncodeToString(h.Sum(nil))+".o",
		func(tmp string) error {
			return gxxRun(gxx, append(slices.Clone(flags), "-c", "-o", tmp, "-x", "c++", filepath.Join(dir, "driver.cc.in"))...)
		})
}

// cachedFile returns the absolute path of name in dir, first building it
// with build when it is not there: build writes a file of this process's
// own, renamed into place once complete, so that a process that finds the
// file (go test runs packages in parallel) finds all of it.
func cachedFile(dir, name string, build func(tmp string) error) (string, error) {
	path, err := absolute(dir, name)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cudaemu: %w", err)
	}
	tmp, err := os.CreateTemp(dir, name+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("cudaemu: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := build(tmp.Name()); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("cudaemu: %w", err)
	}
	return path, nil
}

// gxxRun runs g++ with args.
func gxxRun(gxx string, args ...string) error {
	if msg, err := exec.Command(gxx, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("cudaemu: g++: %w\n%s", err, msg)
	}
	return nil
}

// cacheRoot is where the built emulators go: the user's cache directory,
// or the temporary one where there is none (a CI container, say).
func cacheRoot() string {
	root, err := os.UserCacheDir()
	if err != nil {
		return os.TempDir()
	}
	return root
}

// buildCached returns the path of the library built from the current
// sources, building it into the cache directory when it is not there.
func buildCached() (string, error) {
	gxx, err := compiler()
	if err != nil {
		return "", err
	}
	dir, err := selfDir()
	if err != nil {
		return "", err
	}
	kernels := filepath.Join(dir, "..", "..", "cuda", "kernels")
	key, err := cacheKey(gxx, dir, kernels)
	if err != nil {
		return "", err
	}
	return cachedFile(filepath.Join(cacheRoot(), "gocurrent", "cudaemu", key), "libgcemu.so",
		func(tmp string) error { return compile(gxx, kernels, tmp) })
}

// cacheKey is the SHA-256, in hex, of everything that goes into the
// library: g++'s flags and version, the emulator's sources (every .in
// file here) and the kernels' (.cu and .cuh).
func cacheKey(gxx, dir, kernels string) (string, error) {
	h := sha256.New()
	if err := hashCompiler(h, gxx); err != nil {
		return "", err
	}
	var files []string
	for _, pattern := range []string{filepath.Join(dir, "*.in"), filepath.Join(kernels, "*.cu"), filepath.Join(kernels, "*.cuh")} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return "", fmt.Errorf("cudaemu: %w", err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("cudaemu: no sources in %s and %s", dir, kernels)
	}
	for _, f := range files {
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashCompiler writes g++'s flags and version into h.
func hashCompiler(h io.Writer, gxx string) error {
	fmt.Fprintf(h, "flags %q\n", flags)
	version, err := exec.Command(gxx, "--version").Output()
	if err != nil {
		return fmt.Errorf("cudaemu: %s --version: %w", gxx, err)
	}
	fmt.Fprintf(h, "g++ %s\n%s\n", gxx, version)
	return nil
}

func hashFile(h io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cudaemu: %w", err)
	}
	fmt.Fprintf(h, "%s %d\n", filepath.Base(path), len(b))
	_, err = h.Write(b)
	return err
}
