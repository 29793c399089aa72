package cuda

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:generate go run ./internal/ptxgen -dir kernels

// ptxFiles are the kernels compiled to PTX by ptxgen, one file per source
// and architecture: kernels/NAME.compute_80.ptx.
//
//go:embed kernels/*.ptx
var ptxFiles embed.FS

// ptxArchs are the architectures ptxgen compiles for, newest first, with
// the compute capability each needs. One: the driver JIT-compiles
// compute_80 PTX for Ampere, Ada and Hopper alike. A compute_90 set was
// carried until it was found to differ from this one only in its .target
// line (nvcc 11.8 emits no Hopper-only instruction for these kernels); a
// second architecture returns here when a kernel uses one (wgmma, TMA:
// sm_90a), with the measurement that justifies it.
var ptxArchs = []struct {
	name string
	cc   int
}{{"compute_80", 80}}

// ptxFor returns the names and images of the PTX the GPU of compute
// capability cc runs: the newest architecture it supports.
func ptxFor(cc int) (arch string, names []string, images [][]byte, err error) {
	for _, a := range ptxArchs {
		if cc < a.cc {
			continue
		}
		names, err = fs.Glob(ptxFiles, "kernels/*."+a.name+".ptx")
		if err != nil {
			return "", nil, nil, err
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := ptxFiles.ReadFile(n)
			if err != nil {
				return "", nil, nil, err
			}
			images = append(images, append(b, 0)) // the driver reads a NUL-terminated string
		}
		return a.name, names, images, nil
	}
	return "", nil, nil, fmt.Errorf("no PTX for compute capability %d.%d", cc/10, cc%10)
}

// loadKernels JIT-compiles the PTX for the GPU and looks up every kernel
// of the ABI.
func (d *Device) loadKernels(cc int) error {
	arch, names, images, err := ptxFor(cc)
	if err != nil {
		return err
	}
	d.info.PTX = arch
	for i, img := range images {
		m, err := d.api.ModuleLoadData(d.ctx, img)
		if err != nil {
			return fmt.Errorf("loading %s: %w", path.Base(names[i]), err)
		}
		d.modules = append(d.modules, m)
	}
	lookup := func(name string) (cuFunction, error) {
		var errs []error
		for _, m := range d.modules {
			f, err := d.api.ModuleGetFunction(d.ctx, m, name)
			if err == nil {
				return f, nil
			}
			errs = append(errs, err)
		}
		return 0, fmt.Errorf("kernel %s is in none of %s: %w", name, strings.Join(names, ", "), errors.Join(errs...))
	}
	for k := range numKernels {
		for t, suffix := range []string{"_f32", "_f64"} {
			if d.fn[k][t], err = lookup("gc_" + kernelNames[k] + suffix); err != nil {
				return err
			}
		}
	}
	if d.checkID, err = lookup("gc_check_ids"); err != nil {
		return err
	}
	if d.guardedCopy, err = lookup("gc_guarded_copy"); err != nil {
		return err
	}
	if d.advance, err = lookup("gc_advance"); err != nil {
		return err
	}
	if d.fillI32, err = lookup("gc_fill_i32"); err != nil {
		return err
	}
	return d.prepareWalks()
}
