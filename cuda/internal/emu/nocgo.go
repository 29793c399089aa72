//go:build !cgo

package emu

import "errors"

// Lib is a compiled emulator; without cgo there is none.
type Lib struct{}

// Build fails without cgo, which loading the emulator needs.
func Build(kernelsDir, outDir string) (*Lib, error) {
	return nil, errors.New("emu: needs cgo")
}

// Launch is never reached without cgo.
func (l *Lib) Launch(name string, grid, block [3]uint32, args []uint64) error {
	return errors.New("emu: needs cgo")
}
