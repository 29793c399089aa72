// Package cuda is the CUDA device: device.Device on an NVIDIA GPU. It loads
// the driver (libcuda.so.1) and cuBLAS (libcublas.so.13, .12 or .11) at run
// time with dlopen, so a binary built here needs no CUDA installed, runs on
// CUDA 11, 12 and 13 machines alike, and on a machine without a driver or
// GPU gets an error matching device.ErrUnavailable from Open instead of an
// exit. Its memory comes from alloc.Caching over cuMemAlloc and its staging
// buffers from alloc.HostCache over pinned host memory; its kernels are
// CUDA C compiled to PTX, embedded, and JIT-compiled by the driver.
//
// The device arrives with issue 7; until then this package holds only this
// description, so that the layout and the import rules (cuda imports device
// and alloc; only examples import cuda) are in place and tested.
package cuda
