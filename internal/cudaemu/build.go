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
// kernels in kernelsDir.
func compile(gxx, kernelsDir, out string) error {
	dir, err := selfDir()
	if err != nil {
		return err
	}
	args := append(slices.Clone(flags), "-I", kernelsDir, "-o", out, "-x", "c++")
	for _, s := range sources {
		args = append(args, filepath.Join(dir, s))
	}
	if msg, err := exec.Command(gxx, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("cudaemu: g++: %w\n%s", err, msg)
	}
	return nil
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
	root, err := os.UserCacheDir()
	if err != nil {
		root = os.TempDir() // no home directory: a CI container, say
	}
	out := filepath.Join(root, "gocurrent", "cudaemu", key)
	lib, err := absolute(out, "libgcemu.so")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("cudaemu: %w", err)
	}
	// g++ writes a name of this process's own, renamed into place once
	// complete: a process that finds lib finds all of it.
	tmp, err := os.CreateTemp(out, "libgcemu-*.so.tmp")
	if err != nil {
		return "", fmt.Errorf("cudaemu: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := compile(gxx, kernels, tmp.Name()); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), lib); err != nil {
		return "", fmt.Errorf("cudaemu: %w", err)
	}
	return lib, nil
}

// cacheKey is the SHA-256, in hex, of everything that goes into the
// library: g++'s flags and version, the emulator's sources (every .in
// file here) and the kernels' (.cu and .cuh).
func cacheKey(gxx, dir, kernels string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "flags %q\n", flags)
	version, err := exec.Command(gxx, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("cudaemu: %s --version: %w", gxx, err)
	}
	fmt.Fprintf(h, "g++ %s\n%s\n", gxx, version)
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

func hashFile(h io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cudaemu: %w", err)
	}
	fmt.Fprintf(h, "%s %d\n", filepath.Base(path), len(b))
	_, err = h.Write(b)
	return err
}
