package cudaemu

import "strings"

// IsEmulator reports whether a device name (cuda.Info.Name) is the
// emulator's, "gocurrent CUDA emulator (CPU)": what a GPU run must refuse
// to count as a GPU.
func IsEmulator(gpuName string) bool {
	return strings.Contains(strings.ToLower(gpuName), "emulator")
}
