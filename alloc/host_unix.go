//go:build unix

package alloc

import "syscall"

func mapMemory(size int64) ([]byte, error) {
	return syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

func unmapMemory(mem []byte) error { return syscall.Munmap(mem) }
