package outbox

import (
	"runtime"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// A stream decoder (msgp's DecodeMsg) cannot check a header's count against the bytes that
// follow and allocates what an ids array, a string or a bin header claims. Records are only
// ever decoded from a whole journal frame, so record has no stream decoder (msgp's -io=false
// on the generate line).
func TestRecordHasNoStreamDecoder(t *testing.T) {
	if _, ok := any(&record{}).(msgp.Decodable); ok {
		t.Fatal("record has a stream decoder (DecodeMsg) again: regenerate with -io=false")
	}
}

// The replay decoder believes no ids header: an array claiming 2^31-1 ids with none present
// is an error, and decoding it allocates next to nothing.
func TestDecodeRecordHugeIDsHeaderNotBelieved(t *testing.T) {
	in := append([]byte{0x81, 0xa3}, "ids"...)
	in = append(in, 0xdd, 0x7f, 0xff, 0xff, 0xff) // array32 of 2^31-1 elements, none present
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var r record
	err := decodeRecord(in, &r)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatalf("a huge ids header over %d bytes decoded: %d ids", len(in), len(r.IDs))
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("decoding %d bytes allocated %d bytes", len(in), n)
	}
}
