package wire

import (
	"runtime"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// A stream decoder (msgp's DecodeMsg) cannot check a header's count against the bytes that
// follow and allocates what the header claims: 15 bytes claiming a 2 GiB deviceId made it
// allocate 2 GiB. DeviceState is only ever decoded from a whole value (UnmarshalMsg), so it
// has no stream decoder (msgp's -io=false on the generate line).
func TestDeviceStateHasNoStreamDecoder(t *testing.T) {
	if _, ok := any(&DeviceState{}).(msgp.Decodable); ok {
		t.Fatal("DeviceState has a stream decoder (DecodeMsg) again: regenerate with -io=false")
	}
}

// UnmarshalMsg believes no header: a few bytes claiming a huge map or a huge string are an
// error, and decoding them allocates next to nothing.
func TestDeviceStateHugeHeadersNotBelieved(t *testing.T) {
	hugeString := append([]byte{0x81, 0xa8}, "deviceId"...)
	hugeString = append(hugeString, 0xdb, 0x7f, 0xff, 0xff, 0xff) // str32 of 2^31-1 bytes, none present
	hugeMap := []byte{0xdf, 0xff, 0xff, 0xff, 0xff}               // map32 of 2^32-1 entries, none present
	for name, in := range map[string][]byte{"string": hugeString, "map": hugeMap} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var s DeviceState
		_, err := s.UnmarshalMsg(in)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: a huge header over %d bytes decoded", name, len(in))
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("%s: decoding %d bytes allocated %d bytes", name, len(in), n)
		}
	}
}
