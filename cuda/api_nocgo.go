//go:build !cgo

package cuda

import (
	"fmt"

	"github.com/gocurrent/gocurrent/device"
)

// errNoCgo is Open's error in a build without cgo.
var errNoCgo = fmt.Errorf("%w: cuda: this binary was built with CGO_ENABLED=0, and the CUDA device needs cgo (for dlopen)", device.ErrUnavailable)

// loadAPI fails in a build without cgo: dlopen needs it.
func loadAPI(libraries) (api, error) { return nil, errNoCgo }
