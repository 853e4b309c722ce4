package statestore

import (
	"bytes"
	"errors"
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
	f.Add(cmd("KEYNOTIFY", "own/k"), "", "", false, false)
	// Bounded, so that the refusals are driven too; the bounds must hold
	// after every request.
	const maxBytes, maxNotify = 1 << 16, 8
	s, err := New(&Options{MaxKeys: 64, MaxBytes: maxBytes, MaxKeySize: 64, MaxValueSize: 1 << 10,
		MaxNotify: maxNotify, ReservedPrefixes: []string{"own/"}})
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
		if st := s.Stats(); st.Bytes > maxBytes || st.Registrations > maxNotify || st.Keys > 64 {
			t.Fatalf("bounds exceeded after %q: %+v", payload, st)
		}
	})
}

// FuzzScanSnapshot reads arbitrary bytes as a snapshot: it must never panic,
// must fail with ErrCorruptSnapshot or succeed, and never keep a frame over
// its limit.
func FuzzScanSnapshot(f *testing.F) {
	var good bytes.Buffer
	recs := []keyRecord{{Key: []byte("k"), Value: []byte("v"), Wall: 1, Node: "n"},
		{Key: []byte("fenced"), Value: bytes.Repeat([]byte("x"), 300), Fenced: true, FenceNode: "f"}}
	if err := writeSnapshot(&good, snapshotHeader{Format: snapshotFormat, Node: "n", Count: 2}, recs); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:len(good.Bytes())-3])
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := scanSnapshot(bytes.NewReader(b), 256, func(r *keyRecord) {
			if r != nil && len(r.Key)+len(r.Value) > 64<<10 {
				t.Fatalf("a record of %d bytes read past the limit", len(r.Key)+len(r.Value))
			}
		})
		if err != nil && !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("error %v is not ErrCorruptSnapshot", err)
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
