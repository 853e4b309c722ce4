package resp3

import "testing"

// TestDocumentResponses walks every response form of the state store protocol document, in
// the spelling the real service uses (docs/design.md, wire facts 1 and 6), and the document's own
// deviant spellings, which must still read as something sensible.
func TestDocumentResponses(t *testing.T) {
	for _, f := range []struct {
		name string
		in   string
		kind Kind
		str  string
		n    int64
	}{
		{"SET ok / KEYNOTIFY ok", "+OK\r\n", SimpleString, "OK", 0},
		{"invalid payload", "-ERR syntax error\r\n", SimpleError, "ERR syntax error", 0},
		{"SET NX/NEX refused, VDEL mismatch (wire fact 1)", ":-1\r\n", Integer, "", -1},
		{"GET missing key", "$-1\r\n", BlobString, "", 0},
		{"GET 1234", "$4\r\n1234\r\n", BlobString, "1234", 0},
		{"DEL deleted", ":1\r\n", Integer, "", 1},
		{"DEL missing / KEYNOTIFY STOP unwatched", ":0\r\n", Integer, "", 0},
		// The document's spellings: "-1<CR><LF>" is, read literally, a simple error "1";
		// "-ERR: <DESCRIPTION>" a simple error whose text starts with "ERR:".
		{"document's -1", "-1\r\n", SimpleError, "1", 0},
		{"document's -ERR:", "-ERR: unknown command\r\n", SimpleError, "ERR: unknown command", 0},
	} {
		v, err := ParseValue([]byte(f.in))
		if err != nil {
			t.Errorf("%s: %q: %v", f.name, f.in, err)
			continue
		}
		if v.Kind != f.kind || string(v.Str) != f.str || v.Int != f.n {
			t.Errorf("%s: %q read as %+v", f.name, f.in, v)
		}
		if f.in == "$-1\r\n" && !v.IsNull() {
			t.Errorf("%s: not null", f.name)
		}
	}

	// Every error text in the document's table, written as the service writes it.
	for _, text := range []string{
		"the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized",
		"a fencing token is required for this request",
		"the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized",
		"the request fencing token is a lower version than the fencing token protecting the resource",
		"the quota has been exceeded",
		"syntax error",
		"not authorized",
		"unknown command",
		"wrong number of arguments",
		"missing timestamp",
		"malformed timestamp",
		"the key length is zero",
	} {
		enc := AppendError(nil, "ERR "+text)
		if want := "-ERR " + text + "\r\n"; string(enc) != want {
			t.Fatalf("AppendError = %q, want %q", enc, want)
		}
		v, err := ParseValue(enc)
		if err != nil || v.Kind != SimpleError || string(v.Str) != "ERR "+text {
			t.Errorf("%q read back as %+v, %v", enc, v, err)
		}
	}
}
