package statestore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDo drives the engine with arbitrary payloads and properties: it must
// never panic and must always answer with one well-formed RESP3 reply of the
// kinds the service sends.
func FuzzDo(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.resp"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "1696374425000:0:client", "", true, false)
	}
	f.Add(cmd("SET", "k", "v", "NX", "PX", "10"), "1696374425000:0:c", "1:0:x", true, true)
	f.Add(cmd("VDEL", "k", "v"), "", "junk", false, true)
	s, err := New(nil)
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	w := &recorder{}
	f.Fuzz(func(t *testing.T, payload []byte, ts, ft string, hasTS, hasFT bool) {
		req := &Request{Payload: payload, Timestamp: ts, HasTimestamp: hasTS,
			FencingToken: ft, HasFencingToken: hasFT, Watcher: w}
		out, _ := s.Do(req, nil)
		if !validReply(out) {
			t.Fatalf("reply %q to %q", out, payload)
		}
	})
}

func validReply(b []byte) bool {
	switch {
	case bytes.HasPrefix(b, []byte("-ERR ")), bytes.HasPrefix(b, []byte("+OK")),
		bytes.HasPrefix(b, []byte(":")), bytes.HasPrefix(b, []byte("$")):
		return bytes.HasSuffix(b, []byte("\r\n"))
	}
	return false
}
