package links

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// fileCheckingLink is a device link that, when a command is handed to it, looks into the
// journal's segment files for a marker record: whether it was written before the send.
type fileCheckingLink struct {
	dir, marker string
	sends       int
	markerFound bool
	events      chan device.Event
}

func (l *fileCheckingLink) Send(_ context.Context, _ string, _ face.Command) error {
	l.sends++
	files, _ := filepath.Glob(filepath.Join(l.dir, "*.wal"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(l.marker)) {
			l.markerFound = true
		}
	}
	return nil
}

func (l *fileCheckingLink) Events() <-chan device.Event { return l.events }
func (l *fileCheckingLink) Close() error                { return nil }

func storedCommand(t *testing.T) outbox.Command {
	t.Helper()
	fc := face.Command{MessageID: "m-1", Op: face.AddPerson, Person: face.Person{ID: "p1", Name: "P"}}
	payload, err := fc.AppendMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return outbox.Command{MessageID: "m-1", DeviceID: "d1", Payload: payload, Try: 1}
}

// Links.deliver takes a terminal's ack on the delivering goroutine (the terminal's
// connection reader) once the pumps have started, and leaves heartbeats to Events and the pump:
// handled on the reader, a heartbeat grew its stack past 8 KiB after every collection
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
