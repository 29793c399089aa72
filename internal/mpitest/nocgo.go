//go:build !cgo

package mpitest

const cgo = false
