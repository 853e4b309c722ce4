package statestore

import (
	"runtime"
	"testing"
)

// A snapshot's records are decoded from whole frames with the generated UnmarshalMsg, which
// checks every header against the bytes it has: a few bytes claiming a huge key, value or
// map are an error, and decoding them allocates next to nothing.
func TestRecordHugeHeadersNotBelieved(t *testing.T) {
	hugeKey := append([]byte{0x81, 0xa1, 'k'}, 0xc6, 0x7f, 0xff, 0xff, 0xff) // bin32 of 2^31-1 bytes, none present
	hugeMap := []byte{0xdf, 0xff, 0xff, 0xff, 0xff}                          // map32 of 2^32-1 entries, none present
	for name, in := range map[string][]byte{"key": hugeKey, "map": hugeMap} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var rec keyRecord
		_, kerr := rec.UnmarshalMsg(in)
		var h snapshotHeader
		_, herr := h.UnmarshalMsg(in)
		runtime.ReadMemStats(&after)
		if kerr == nil || herr == nil {
			t.Errorf("%s: a huge header over %d bytes decoded: %v, %v", name, len(in), kerr, herr)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("%s: decoding %d bytes allocated %d bytes", name, len(in), n)
		}
	}
}
