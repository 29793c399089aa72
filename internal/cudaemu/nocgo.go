//go:build !cgo

package cudaemu

import (
	"errors"
	"fmt"
)

var errNoCgo = fmt.Errorf("cudaemu: loading the CUDA emulator needs cgo: %w", errors.ErrUnsupported)

// Lib is a compiled and loaded emulator; without cgo there is none.
type Lib struct{}

// Build fails without cgo, which loading the emulator needs.
func Build(kernelsDir, outDir string) (*Lib, error) { return nil, errNoCgo }

// Cached fails without cgo, which loading the emulator needs.
func Cached() (*Lib, error) { return nil, errNoCgo }

// Path is never reached without cgo.
func (l *Lib) Path() string { return "" }

// Launch is never reached without cgo.
func (l *Lib) Launch(name string, grid, block [3]uint32, shared uint32, args []uint64) error {
	return errNoCgo
}

// FailNCCL is never reached without cgo.
func (l *Lib) FailNCCL(id []byte, code int) (int, error) { return 0, errNoCgo }
