//go:build !linux

package alloc

import "errors"

func systemMemory() (avail, total int64, err error) {
	return 0, 0, errors.New("the machine's memory is not known on this system; give NewHost a capacity")
}
