// Package internal holds what gocurrent's own tests share and users do not
// need: the import-direction check (internal/importgraph), the device the
// tests run on (internal/testdevice), the CUDA GPU emulated on the CPU
// (internal/cudaemu) and, later, gradient-check helpers.
package internal
