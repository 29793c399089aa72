//go:build !race

package gemm

const raceEnabled = false
