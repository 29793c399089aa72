//go:build !cgo

package nccl

// cgoBuild says the test binary has the real bindings; without cgo, every
// load reports the build before it looks for a library.
const cgoBuild = false
