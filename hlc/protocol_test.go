package hlc

import (
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// TestPropertyConcurrent starts goroutines; none may outlive their test.
	goleak.VerifyTestMain(m)
}

// modelStore is the state store's versioning reduced to a map: what a SET and a GET do with
// __ts, on the wire (text in, text out), with the store's clock.
type modelStore struct {
	clock *Clock
	data  map[string]modelEntry
}

type modelEntry struct {
	value   string
	version Timestamp
}

func newModelStore(wall func() int64) *modelStore {
	return &modelStore{clock: NewClock("StateStore", WithWallClock(wall)), data: map[string]modelEntry{}}
}

// set is a SET carrying __ts = ts; it returns the response's __ts.
func (s *modelStore) set(key, value string, ts []byte) ([]byte, error) {
	reqTS, err := Parse(ts)
	if err != nil {
		return nil, err // "malformed timestamp"
	}
	version, err := s.clock.Update(reqTS) // "too far in the future" when ErrTooFarAhead
	if err != nil {
		return nil, err
	}
	s.data[key] = modelEntry{value: value, version: version}
	return version.AppendText(nil), nil
}

// get is a GET; the response carries the stored version as __ts.
func (s *modelStore) get(key string) (string, []byte, bool) {
	e, ok := s.data[key]
	if !ok {
		return "", nil, false
	}
	return e.value, e.version.AppendText(nil), true
}

// TestProtocolWorkedExample follows the protocol document's "Example of setting and retrieving
// a value's version": a client at 1696374425000 ms, node CLIENT, sets keyName=value against a
// store whose clock is identical; the store answers with the wall clock, the counter
// incremented by one and node StateStore; a later GET returns the same version.
func TestProtocolWorkedExample(t *testing.T) {
	w := &fakeWall{ms: docWall}
	client := NewClock("CLIENT", WithWallClock(w.now))
	store := newModelStore(w.now)

	reqTS := client.Now()
	if want, _ := ParseString("1696374425000:0:CLIENT"); reqTS != want {
		t.Fatalf("client __ts = %v; want the document's 1696374425000:0:CLIENT", reqTS)
	}
	wire := reqTS.AppendText(nil)
	if string(wire) != "001696374425000:00000:CLIENT" {
		t.Fatalf("client writes %q; want the SDKs' padded form", wire)
	}

	resp, err := store.set("keyName", "value", wire)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp) != "001696374425000:00001:StateStore" {
		t.Fatalf("SET response __ts = %q; want wall unchanged, counter+1, node StateStore", resp)
	}
	version, err := Parse(resp)
	if err != nil {
		t.Fatal(err)
	}
	if !version.After(reqTS) {
		t.Fatalf("version %v not greater than the request's %v", version, reqTS)
	}
	client.Observe(version)

	// Time passes; GET (the client sends no meaningful __ts) returns the same version.
	w.set(docWall + 1234)
	value, getTS, ok := store.get("keyName")
	if !ok || value != "value" || string(getTS) != string(resp) {
		t.Fatalf("GET = %q, %q, %v; want value and the SET's version %q", value, getTS, ok, resp)
	}

	// A later SET: the client's __ts follows its clock, the new version exceeds the old.
	w.set(docWall) // the client's clock has not moved on: the observed version still orders it
	next := client.Now()
	if !next.After(version) {
		t.Fatalf("client's next __ts %v not after the observed version %v", next, version)
	}
	resp2, err := store.set("keyName", "value2", next.AppendText(nil))
	if err != nil {
		t.Fatal(err)
	}
	version2, _ := Parse(resp2)
	if !version2.After(version) || !version2.After(next) {
		t.Fatalf("second version %v; want > %v and > %v", version2, version, next)
	}
}

// TestProtocolClockSkew: "The state store could return a higher wallClock value if its clock
// were ahead"; "rejects a __ts … more than a minute ahead of the state store's local clock";
// "accepts a __ts that is behind … sets the version of the key to its local clock".
func TestProtocolClockSkew(t *testing.T) {
	storeWall := &fakeWall{ms: docWall + 2000}
	store := newModelStore(storeWall.now)

	resp, err := store.set("ahead", "v", []byte("1696374425000:0:CLIENT"))
	if err != nil || string(resp) != "001696374427000:00000:StateStore" {
		t.Fatalf("store 2 s ahead: %q, %v; want its own wall, counter 0", resp, err)
	}

	resp, err = store.set("behind", "v", []byte("1696374415000:7:CLIENT"))
	if err != nil || string(resp) != "001696374427000:00001:StateStore" {
		t.Fatalf("client 12 s behind: %q, %v; want the store's clock", resp, err)
	}

	future := Timestamp{Wall: docWall + 2000 + 60_001, Node: "CLIENT"}
	_, err = store.set("future", "v", future.AppendText(nil))
	if !errors.Is(err, ErrTooFarAhead) {
		t.Fatalf("client 60.001 s ahead: %v; want ErrTooFarAhead", err)
	}
	if _, _, ok := store.get("future"); ok {
		t.Fatal("a refused SET stored its value")
	}
	// The refusal left the store's clock alone: the next version is counter 2 at its wall.
	resp, _ = store.set("after", "v", []byte("1696374425000:0:CLIENT"))
	if string(resp) != "001696374427000:00002:StateStore" {
		t.Fatalf("after a refused SET: %q", resp)
	}

	if _, err := store.set("bad", "v", []byte("1696374425000:0")); !errors.Is(err, ErrSegmentCount) {
		t.Fatalf("malformed __ts: %v", err)
	}
}
