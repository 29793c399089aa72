//go:build !cgo

package nccl

import (
	"fmt"

	"github.com/gocurrent/gocurrent/dist"
)

// open fails in a build without cgo: dlopen needs it.
func open([]string) (library, error) {
	return nil, fmt.Errorf("%w: dist/nccl: this binary was built with CGO_ENABLED=0, and NCCL needs cgo (for dlopen)", dist.ErrUnavailable)
}
