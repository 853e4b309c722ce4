package wire

import (
	"bytes"
	"os"
	"testing"
)

func TestDeviceStateRoundTrip(t *testing.T) {
	in := DeviceState{DeviceID: "2042253", Online: true, LastHeartbeat: 1700000000000, Firmware: "fw-2",
		Persons: 12, QueueDepth: 3, InFlight: "AddPerson-951-1", Sent: 9, Succeeded: 7, Failed: 1, Retries: 2,
		LastError: "refused by the device: code 17", UpdatedAt: 1700000000500,
		DesiredPersons: 14, InSync: true, LastSync: 1700000000400, SyncStatus: string(SyncDone)}
	b, err := in.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out DeviceState
	rest, err := out.UnmarshalMsg(b)
	if err != nil || len(rest) != 0 || out != in {
		t.Fatalf("round trip: %+v, %v, %d bytes left", out, err, len(rest))
	}
	for i := range b {
		var cut DeviceState
		if _, err := cut.UnmarshalMsg(b[:i]); err == nil {
			t.Fatalf("a value cut to %d bytes decoded", i)
		}
	}
}

// v1State is testdata/devicestate-v1.msgp, a record written by the agent before the sync
// fields.
var v1State = deviceStateV1{DeviceID: "2042253", Online: true, LastHeartbeat: 1700000000000, LastAck: 1700000000100, Firmware: "fw-2",
	Persons: 12, Paused: true, QueueDepth: 3, InFlight: "AddPerson-951-1", Sent: 9, Succeeded: 7, Failed: 1, Retries: 2,
	LastError: "refused by the device: code 17", UpdatedAt: 1700000000500}

// An agent with the sync fields reads what older agents wrote (the fields they lack are
// zero), and the readers already deployed read what it writes now (skipping the keys
// they do not know).
func TestDeviceStateOldAndNewReaders(t *testing.T) {
	old, err := os.ReadFile("testdata/devicestate-v1.msgp")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := v1State.MarshalMsg(nil); !bytes.Equal(again, old) {
		t.Fatal("testdata/devicestate-v1.msgp is not what the old encoder writes for v1State")
	}
	want := DeviceState{DeviceID: v1State.DeviceID, Online: v1State.Online, LastHeartbeat: v1State.LastHeartbeat,
		LastAck: v1State.LastAck, Firmware: v1State.Firmware, Persons: v1State.Persons, Paused: v1State.Paused,
		QueueDepth: v1State.QueueDepth, InFlight: v1State.InFlight, Sent: v1State.Sent, Succeeded: v1State.Succeeded,
		Failed: v1State.Failed, Retries: v1State.Retries, LastError: v1State.LastError, UpdatedAt: v1State.UpdatedAt}
	var got DeviceState
	if rest, err := got.UnmarshalMsg(old); err != nil || len(rest) != 0 || got != want {
		t.Fatalf("old record read as %+v, %v, %d bytes left", got, err, len(rest))
	}

	now := want
	now.DesiredPersons, now.InSync, now.LastSync, now.SyncStatus = 14, true, 1700000000400, string(SyncFailed)
	b, err := now.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	var oldReader deviceStateV1
	if rest, err := oldReader.UnmarshalMsg(b); err != nil || len(rest) != 0 || oldReader != v1State {
		t.Fatalf("the old reader read a new record as %+v, %v, %d bytes left", oldReader, err, len(rest))
	}
}

func FuzzDeviceState(f *testing.F) {
	good, _ := (&DeviceState{DeviceID: "d", Online: true, Persons: 3}).MarshalMsg(nil)
	f.Add(good)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s DeviceState
		if _, err := s.UnmarshalMsg(b); err != nil {
			return
		}
		again, err := s.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		var s2 DeviceState
		if _, err := s2.UnmarshalMsg(again); err != nil || s2 != s {
			t.Fatalf("re-encoded state differs: %+v %+v", s, s2)
		}
	})
}
