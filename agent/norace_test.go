//go:build !race

package agent

// raceEnabled: the test binary is built with -race.
const raceEnabled = false
