package config

import "fmt"

// boardProfile is the hook where `agent.board = "<name>"` finds its profile: TOML in this
// package's schema (sections [agent], [broker], [dispatch], [intake], [store], [log],
// [metrics], [topics]; no devices, no upstream) whose keys fill in what the file leaves
// out — explicit keys in the file win, because Parse decodes the profile first and the
// file over it.
//
// HOOK: the boards package (boards/, package boards: embedded TOML profiles with a lookup
// function) is being written in parallel. When it lands, this function becomes a call to
// its lookup; until then a config naming a board is refused with ErrNoBoards rather than
// silently running without the board's limits.
func boardProfile(name string) ([]byte, error) {
	return nil, fmt.Errorf("board %q: %w", name, ErrNoBoards)
}
