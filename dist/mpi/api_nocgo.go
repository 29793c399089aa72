//go:build !cgo

package mpi

import (
	"fmt"

	"github.com/gocurrent/gocurrent/dist"
)

// cgoBuild says whether this build can load Open MPI.
const cgoBuild = false

// loadAPI fails in a build without cgo: dlopen needs it.
func loadAPI(path string) (api, error) {
	return nil, fmt.Errorf("%w: mpi: this binary was built with CGO_ENABLED=0, and Open MPI (%s) is loaded with dlopen, which needs cgo", dist.ErrUnavailable, path)
}
