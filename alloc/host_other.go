//go:build !unix

package alloc

// Without mmap the host source falls back to the Go heap; Host keeps every
// segment referenced, so none is collected while it is live.
func mapMemory(size int64) ([]byte, error) { return make([]byte, size), nil }

func unmapMemory([]byte) error { return nil }
