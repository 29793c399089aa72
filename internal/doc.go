// Package internal holds what gocurrent's own tests share and users do not
// need: the import-direction check (internal/importgraph), the device the
// tests run on (internal/testdevice), the CUDA GPU emulated on the CPU
// (internal/cudaemu), the char-RNN's PyTorch fixtures and rounding bounds
// (internal/charrnntest) and, later, gradient-check helpers.
package internal
