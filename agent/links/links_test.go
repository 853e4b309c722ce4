package links

import (
	"testing"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// Links.deliver takes a terminal's ack on the delivering goroutine (the terminal's
// connection reader) once the pumps have started, and leaves heartbeats to Events and the pump:
// handled on the reader, a heartbeat would grow its stack past 8 KiB after every collection
// (test/e2e's TestHeartbeatsKeepReaderStacksSmall measures the readers).
func TestDeliverTakesAcksLeavesHeartbeatsToThePump(t *testing.T) {
	l := &Links{}
	var handled []device.EventKind
	ack := device.Event{Kind: device.Ack, DeviceID: "d1", Ack: face.Ack{MessageID: "m-1"}}
	hb := device.Event{Kind: device.Heartbeat, DeviceID: "d1", Heartbeat: face.Heartbeat{DeviceID: "d1"}}
	if l.deliver(ack) || l.deliver(hb) {
		t.Fatal("deliver took an event before the pumps started")
	}
	direct := func(ev device.Event) { handled = append(handled, ev.Kind) }
	l.direct.Store(&direct)
	if !l.deliver(ack) {
		t.Error("an ack was not taken")
	}
	if l.deliver(hb) {
		t.Error("a heartbeat was taken on the delivering goroutine")
	}
	if len(handled) != 1 || handled[0] != device.Ack {
		t.Errorf("handled directly: %v, want the ack only", handled)
	}
}
