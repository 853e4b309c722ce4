package statestore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// A typed Set is a SET: a RESP3 GET sees its value and version, the version is past the
// request's timestamp, and its expiry removes the key when PX would.
func TestTypedSetAndGet(t *testing.T) {
	s, ft := newTestStore(t, nil)
	stamp := hlc.Timestamp{Wall: t0, Node: "agent"}
	v, err := s.Set("k", []byte("value"), SetOptions{Timestamp: stamp, Expiry: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if hlc.Compare(v, stamp) <= 0 {
		t.Fatalf("version %v not past the request's %v", v, stamp)
	}
	if g := do(s, &Request{Payload: cmd("GET", "k")}); g.reply != "$5\r\nvalue\r\n" || g.version != v {
		t.Fatalf("RESP3 GET after a typed Set: %q %v, want the value at %v", g.reply, g.version, v)
	}
	got, gv, err := s.Get("k")
	if err != nil || string(got) != "value" || gv != v {
		t.Fatalf("Get = %q %v %v", got, gv, err)
	}
	got[0] = 'X' // a copy: the stored value stays
	if again, _, _ := s.Get("k"); string(again) != "value" {
		t.Fatalf("Get handed out the stored value: %q", again)
	}
	ft.advance(1499 * time.Millisecond)
	if _, _, err := s.Get("k"); err != nil {
		t.Fatalf("before its expiry: %v", err)
	}
	ft.advance(time.Millisecond)
	if _, _, err := s.Get("k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after its expiry: %v, want ErrNotFound", err)
	}
	// Under a millisecond is a millisecond, as the client rounds it: never PX 0.
	if _, err := s.Set("short", []byte("v"), SetOptions{Timestamp: stamp, Expiry: time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	ft.advance(time.Millisecond)
	if _, _, err := s.Get("short"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a sub-millisecond expiry: %v", err)
	}
}

// The typed requests are refused by the same rules as RESP3 ones, with typed errors.
func TestTypedRefusals(t *testing.T) {
	s, _ := newTestStore(t, &Options{MaxKeys: 2, MaxKeySize: 16, MaxValueSize: 8, ReservedPrefixes: []string{"own/"}})
	stamp := hlc.Timestamp{Wall: t0, Node: "agent"}
	set := func(key, value string, owner bool) error {
		_, err := s.Set(key, []byte(value), SetOptions{Timestamp: stamp, Owner: owner})
		return err
	}
	// Bounds: each one counted in Stats as a RESP3 refusal is.
	if err := set("k", "too long a value", false); !errors.Is(err, ErrQuota) {
		t.Fatalf("a value over MaxValueSize: %v, want ErrQuota", err)
	}
	if err := set(strings.Repeat("k", 17), "v", false); !errors.Is(err, ErrQuota) {
		t.Fatalf("a key over MaxKeySize: %v, want ErrQuota", err)
	}
	if _, _, err := s.Get(strings.Repeat("k", 17)); !errors.Is(err, ErrQuota) {
		t.Fatalf("Get of a key over MaxKeySize: %v, want ErrQuota", err)
	}
	if err := set("a", "v", false); err != nil {
		t.Fatal(err)
	}
	if err := set("b", "v", false); err != nil {
		t.Fatal(err)
	}
	if err := set("c", "v", false); !errors.Is(err, ErrQuota) {
		t.Fatalf("a key past MaxKeys: %v, want ErrQuota", err)
	}
	st := s.Stats()
	if st.Refused[BoundValueSize] != 1 || st.Refused[BoundKeySize] != 2 || st.Refused[BoundKeys] != 1 {
		t.Fatalf("refusals counted %v", st.Refused)
	}
	var serr *Error
	if err := set("c", "v", false); !errors.As(err, &serr) || serr.Text != ErrTextQuota {
		t.Fatalf("a refusal is not an *Error with the wire's text: %v", err)
	}

	// Reserved keys: only the owner writes them, past MaxKeys; everyone reads them.
	if err := set("own/state", "v", false); !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("a reserved key without Owner: %v, want ErrNotAuthorized", err)
	}
	if err := set("own/state", "v", true); err != nil {
		t.Fatalf("the owner's write of its reserved key (the store full): %v", err)
	}
	if v, _, err := s.Get("own/state"); err != nil || string(v) != "v" {
		t.Fatalf("Get of a reserved key: %q %v", v, err)
	}

	// Timestamps: none, or too far ahead.
	if _, err := s.Set("a", []byte("v"), SetOptions{}); !errors.Is(err, ErrNoTimestamp) {
		t.Fatalf("no timestamp: %v", err)
	}
	ahead := hlc.Timestamp{Wall: t0 + 61_000, Node: "agent"}
	if _, err := s.Set("a", []byte("v"), SetOptions{Timestamp: ahead}); !errors.Is(err, ErrTimestampAhead) {
		t.Fatalf("a timestamp a minute ahead: %v", err)
	}
	if err := set("", "v", false); !errors.Is(err, ErrZeroKey) {
		t.Fatalf("empty key: %v", err)
	}

	// Fencing: a key a client fenced refuses the owner's typed Set, which carries no token.
	if r := do(s, &Request{Payload: cmd("SET", "a", "fenced"), Timestamp: ts(t0, 0, "c"), HasTimestamp: true,
		FencingToken: ts(t0, 0, "c"), HasFencingToken: true}); r.reply != "+OK\r\n" {
		t.Fatalf("fencing SET: %q", r.reply)
	}
	if err := set("a", "v", true); !errors.Is(err, ErrFencingNeeded) {
		t.Fatalf("Set of a fenced key: %v, want ErrFencingNeeded", err)
	}
	if v, _, _ := s.Get("a"); string(v) != "fenced" {
		t.Fatalf("a refused Set changed the key: %q", v)
	}
}

// Watch registers as KEYNOTIFY does: changes by typed and RESP3 requests fire it, in
// version order, and MaxNotify bounds it.
func TestTypedWatch(t *testing.T) {
	s, _ := newTestStore(t, &Options{MaxNotify: 2})
	w := &recorder{ch: make(chan note, 4)}
	if err := s.Watch("k", w); err != nil {
		t.Fatal(err)
	}
	if err := s.Watch("k", w); err != nil { // twice is one registration
		t.Fatal(err)
	}
	if err := s.Watch("j", w); err != nil {
		t.Fatal(err)
	}
	if err := s.Watch("i", w); !errors.Is(err, ErrQuota) {
		t.Fatalf("a third registration with MaxNotify 2: %v", err)
	}
	if err := s.Watch("i", nil); !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("Watch without a Watcher: %v", err)
	}
	v1, err := s.Set("k", []byte("one"), SetOptions{Timestamp: hlc.Timestamp{Wall: t0, Node: "agent"}})
	if err != nil {
		t.Fatal(err)
	}
	do(s, &Request{Payload: cmd("DEL", "k")})
	want := []string{"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\none\r\n", "*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"}
	for i, payload := range want {
		select {
		case n := <-w.ch:
			if n.key != "k" || n.payload != payload || (i == 0 && n.version != v1) {
				t.Fatalf("notification %d: %+v, want %q", i, n, payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("notification %d never came", i)
		}
	}
	if n := s.Unwatch(w); n != 2 {
		t.Fatalf("Unwatch dropped %d registrations, want 2", n)
	}
	if st := s.Stats(); st.Registrations != 0 || st.Bytes != 0 {
		t.Fatalf("after Unwatch: %+v", st)
	}
}
