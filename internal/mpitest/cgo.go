//go:build cgo

package mpitest

// cgo says the binary can load Open MPI (dist/mpi needs cgo for dlopen).
const cgo = true
