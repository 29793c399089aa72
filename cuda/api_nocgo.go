//go:build !cgo

package cuda

// loadAPI fails in a build without cgo: dlopen needs it.
func loadAPI(libraries) (api, error) { return nil, errNoCgo }
