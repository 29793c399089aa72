package alloc

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// systemMemory returns the memory available to new allocations (MemAvailable,
// which counts reclaimable page cache, as free(1) does) and the total.
func systemMemory() (avail, total int64, err error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, 0, err
	}
	unit := int64(si.Unit)
	total = int64(si.Totalram) * unit
	avail = int64(si.Freeram+si.Bufferram) * unit
	if f, err := os.Open("/proc/meminfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil {
					avail = kb << 10
				}
				break
			}
		}
	}
	return avail, total, nil
}
