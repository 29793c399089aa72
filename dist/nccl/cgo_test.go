//go:build cgo

package nccl

// cgoBuild says the test binary has the real bindings (lib_cgo.go).
const cgoBuild = true
