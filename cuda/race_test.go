//go:build race

package cuda

// raceEnabled says the tests run under the race detector.
const raceEnabled = true
