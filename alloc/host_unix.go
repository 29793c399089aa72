//go:build unix

package alloc

import (
	"errors"
	"fmt"
	"syscall"
)

func mapMemory(size int64) ([]byte, error) {
	mem, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if errors.Is(err, syscall.ENOMEM) {
		return nil, fmt.Errorf("%w: %w", err, ErrOutOfMemory)
	}
	return mem, err
}

func unmapMemory(mem []byte) error { return syscall.Munmap(mem) }
