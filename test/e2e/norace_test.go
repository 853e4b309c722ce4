//go:build !race

package e2e

// raceEnabled: the test binary is built with -race.
const raceEnabled = false
