package wire

import "testing"

func TestDeviceStateRoundTrip(t *testing.T) {
	in := DeviceState{DeviceID: "2042253", Online: true, LastHeartbeat: 1700000000000, Firmware: "fw-2",
		Persons: 12, QueueDepth: 3, InFlight: "AddPerson-951-1", Sent: 9, Succeeded: 7, Failed: 1, Retries: 2,
		LastError: "refused by the device: code 17", UpdatedAt: 1700000000500}
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
