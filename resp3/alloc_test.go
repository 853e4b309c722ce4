package resp3

import "testing"

// TestZeroAllocs: the hot paths allocate nothing (with room in dst / args).
func TestZeroAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are checked in the full run")
	}
	args := make([][]byte, 0, 8)
	tree := make([]Value, 0, 16)
	buf := make([]byte, 0, 4096)
	nested := []byte(treeFixtures[4].in) // the attribute example: maps, doubles, arrays
	// Inputs live on the heap, as MQTT payloads do. (The readers store views of b through a
	// pointer, so escape analysis moves a caller's stack-allocated input to the heap.)
	intIn, okIn, doubleIn, blobIn := []byte(":-1\r\n"), []byte("+OK\r\n"), []byte(",1.5e3\r\n"), []byte("$4\r\n1234\r\n")
	for _, c := range []struct {
		name string
		fn   func()
	}{
		{"ParseCommand", func() { args, _ = ParseCommand(benchSET, args) }},
		{"ParseCommand 1K", func() { args, _ = ParseCommand(benchSET1K, args) }},
		{"ReadCommand", func() { args, _, _ = ReadCommand(benchNotifySET, args) }},
		{"ReadValue blob", func() { _, _, _ = ReadValue(benchBlob64) }},
		{"ReadValue int", func() { _, _, _ = ReadValue(intIn) }},
		{"ReadValue simple", func() { _, _, _ = ReadValue(okIn) }},
		{"ReadValue double", func() { _, _, _ = ReadValue(doubleIn) }},
		{"ReadValue incomplete", func() { _, _, _ = ReadValue(benchBlob64[:10]) }},
		{"ParseValue", func() { _, _ = ParseValue(blobIn) }},
		{"ReadTree", func() { tree, _, _ = ReadTree(nested, tree[:0]) }},
		{"Skip", func() { _, _ = Skip(nested) }},
		{"AppendArrayHeader", func() { buf = AppendArrayHeader(buf[:0], 3) }},
		{"AppendArrayHeader 1000", func() { buf = AppendArrayHeader(buf[:0], 1000) }},
		{"AppendMapHeader", func() { buf = AppendMapHeader(buf[:0], 3) }},
		{"AppendSetHeader", func() { buf = AppendSetHeader(buf[:0], 3) }},
		{"AppendPushHeader", func() { buf = AppendPushHeader(buf[:0], 3) }},
		{"AppendAttributeHeader", func() { buf = AppendAttributeHeader(buf[:0], 3) }},
		{"AppendBlob", func() { buf = AppendBlob(buf[:0], value1K) }},
		{"AppendBlobString", func() { buf = AppendBlobString(buf[:0], "SETKEY2") }},
		{"AppendSimpleString", func() { buf = AppendSimpleString(buf[:0], "OK") }},
		{"AppendError", func() { buf = AppendError(buf[:0], "ERR syntax error") }},
		{"AppendBlobError", func() { buf = AppendBlobError(buf[:0], value64) }},
		{"AppendVerbatim", func() { buf = AppendVerbatim(buf[:0], "txt", value64) }},
		{"AppendInt", func() { buf = AppendInt(buf[:0], -1234567890) }},
		{"AppendNullBlob", func() { buf = AppendNullBlob(buf[:0]) }},
		{"AppendNullArray", func() { buf = AppendNullArray(buf[:0]) }},
		{"AppendNull", func() { buf = AppendNull(buf[:0]) }},
		{"AppendBool", func() { buf = AppendBool(buf[:0], true) }},
		{"AppendDouble", func() { buf = AppendDouble(buf[:0], 3.14159) }},
		{"AppendBigNumber", func() { buf = AppendBigNumber(buf[:0], "12345678901234567890") }},
		{"AppendValue", func() { buf = AppendValue(buf[:0], Value{Kind: BlobString, Str: value64}) }},
	} {
		if n := testing.AllocsPerRun(200, c.fn); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", c.name, n)
		}
	}
}
