//go:build cgo

package cuda

// cgoBuild says the test binary has the real bindings (api_cgo.go).
const cgoBuild = true
