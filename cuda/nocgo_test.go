//go:build !cgo

package cuda

// cgoBuild says the test binary has the real bindings; without cgo, Open
// reports errNoCgo before it looks for any library.
const cgoBuild = false
