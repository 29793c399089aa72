//go:build !race

package cpu_test

// raceEnabled says the tests run under the race detector.
const raceEnabled = false
