package broker

import "github.com/mochi-mqtt/server/v2/packets"

// mochi v2.7.9's packets package builds TPacketData, the table of sample packets its own
// tests use (packets/tpackets.go), at init in every binary that imports it: 368 KB of heap
// (GODEBUG=inittrace=1), held for the life of the process and counted by the GC as live,
// so it also raises the heap goal. Nothing outside mochi's _test.go files reads it; the
// agent drops the reference once it is built and the next GC takes the memory back.
// Every test of this package runs with it dropped.
func init() {
	packets.TPacketData = nil
}
