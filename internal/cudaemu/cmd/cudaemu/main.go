// Command cudaemu builds the CUDA emulator (package cudaemu) unless it is
// cached already, and prints the library's absolute path, for a shell to
// run a program on the emulated GPU:
//
//	GOCURRENT_CUDA_DRIVER=$(go run ./internal/cudaemu/cmd/cudaemu)
//	GOCURRENT_CUBLAS=$GOCURRENT_CUDA_DRIVER go run ./examples/charrnn bench -device cuda -steps 2
//
// It must run from the source tree (go run), where the emulator finds its
// sources.
package main

import (
	"fmt"
	"os"

	"github.com/gocurrent/gocurrent/internal/cudaemu"
)

func main() {
	lib, err := cudaemu.Cached()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(lib.Path())
}
