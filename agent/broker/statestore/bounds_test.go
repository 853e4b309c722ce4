package statestore

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const quotaReply = "-ERR " + ErrTextQuota + "\r\n"

// bigKey returns a key of n bytes that differs for each i.
func bigKey(i, n int) string { return fmt.Sprintf("%0*d", n, i) }

// TestKeySizeBound: a key longer than MaxKeySize is refused with the
// protocol's quota text by every verb (it could never be stored, so there is
// nothing to get, delete or watch), and costs the store nothing.
func TestKeySizeBound(t *testing.T) {
	s, _ := newTestStore(t, &Options{MaxKeySize: 16})
	now := ts(t0, 0, "c")
	long := strings.Repeat("k", 17)
	for _, r := range []*Request{
		setReq(now, long, "v"),
		{Payload: cmd("GET", long)},
		{Payload: cmd("DEL", long)},
		{Payload: cmd("VDEL", long, "v")},
		{Payload: cmd("KEYNOTIFY", long), Watcher: &recorder{}},
	} {
		if got := do(s, r).reply; got != quotaReply {
			t.Errorf("%.20q with a 17-byte key: %q, want %q", r.Payload, got, quotaReply)
		}
	}
	if got := do(s, setReq(now, long[:16], "v")).reply; got != "+OK\r\n" {
		t.Fatalf("16-byte key: %q", got)
	}
	if st := s.Stats(); st.Keys != 1 || st.Registrations != 0 || st.Refused[BoundKeySize] != 5 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBigKeysBoundedByBytes: 1,000 SETs of 64 KiB keys (the attack, with keys
// as long as the bound allows) stop at MaxBytes, which counts the keys and
// each entry's bookkeeping; the heap grows by about what the store counts.
func TestBigKeysBoundedByBytes(t *testing.T) {
	const keySize, maxBytes = 64 << 10, 4 << 20
	s, _ := newTestStore(t, &Options{MaxBytes: maxBytes, MaxKeySize: keySize})
	now := ts(t0, 0, "c")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	accepted := 0
	for i := range 1000 {
		switch got := do(s, setReq(now, bigKey(i, keySize), "v")).reply; got {
		case "+OK\r\n":
			accepted++
		case quotaReply:
		default:
			t.Fatalf("SET %d: %q", i, got)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if want := maxBytes / (keySize + 1 + KeyOverhead); accepted != want {
		t.Fatalf("%d keys accepted, want %d (MaxBytes %d)", accepted, want, maxBytes)
	}
	if b := s.Bytes(); b > maxBytes {
		t.Fatalf("Bytes %d over MaxBytes %d", b, maxBytes)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 2*maxBytes {
		t.Fatalf("heap grew by %d bytes, MaxBytes %d", grew, maxBytes)
	}
}

// TestRegistrationsBounded: KEYNOTIFY registrations count against MaxBytes
// (their keys and bookkeeping) whether or not the keys exist, and against
// MaxNotify per watcher; STOP and Unwatch give the bytes back, so
// registrations on 1 MB keys that do not exist cannot grow the heap without bound.
func TestRegistrationsBounded(t *testing.T) {
	const keySize = 1 << 10
	maxBytes := int64(10 * (keySize + RegistrationOverhead))
	s, _ := newTestStore(t, &Options{MaxBytes: maxBytes, MaxNotify: 4})
	w1, w2, w3 := &recorder{}, &recorder{}, &recorder{}
	notify := func(w Watcher, i int, stop ...string) string {
		return do(s, &Request{Payload: cmd(append([]string{"KEYNOTIFY", bigKey(i, keySize)}, stop...)...), Watcher: w}).reply
	}
	for i := range 4 {
		if got := notify(w1, i); got != "+OK\r\n" {
			t.Fatalf("registration %d: %q", i, got)
		}
	}
	if got := notify(w1, 0); got != "+OK\r\n" {
		t.Fatalf("registering a key again: %q", got) // one registration, not a new one
	}
	if got := notify(w1, 4); got != quotaReply {
		t.Fatalf("fifth registration of one watcher (MaxNotify 4): %q", got)
	}
	for i := range 4 {
		notify(w2, 100+i)
	}
	if got := notify(w3, 200); got != "+OK\r\n" {
		t.Fatalf("ninth registration: %q", got)
	}
	notify(w3, 201)
	if got := notify(w3, 202); got != quotaReply {
		t.Fatalf("registration past MaxBytes: %q", got)
	}
	if b := s.Bytes(); b != maxBytes {
		t.Fatalf("Bytes %d, want %d", b, maxBytes)
	}
	if got := notify(w3, 201, "STOP"); got != "+OK\r\n" {
		t.Fatalf("STOP: %q", got)
	}
	if got := notify(w3, 202); got != "+OK\r\n" {
		t.Fatalf("registration after a STOP gave room back: %q", got)
	}
	if n := s.Unwatch(w1); n != 4 {
		t.Fatalf("Unwatch: %d", n)
	}
	s.Unwatch(w2)
	s.Unwatch(w3)
	if st := s.Stats(); st.Bytes != 0 || st.Registrations != 0 || st.Refused[BoundNotify] != 1 || st.Refused[BoundBytes] != 1 {
		t.Fatalf("after Unwatch: %+v", st)
	}
}

// TestRegistrationsShareTheirKey: many watchers of one key hold one copy of
// it, so the heap stays under what the store counts for them.
func TestRegistrationsShareTheirKey(t *testing.T) {
	s, _ := newTestStore(t, nil)
	key := bigKey(0, 64<<10)
	watchers := make([]*recorder, 200)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range watchers {
		watchers[i] = &recorder{}
		do(s, &Request{Payload: cmd("KEYNOTIFY", key), Watcher: watchers[i]})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Fatalf("200 registrations of one 64 KiB key grew the heap by %d bytes", grew)
	}
	runtime.KeepAlive(watchers)
}

// TestReservedPrefixes: keys under a reserved prefix are written only by the
// owner's requests; every client reads and watches them. A client cannot put
// a fencing token on them: that would freeze the owner's later writes ("the
// request fencing token is a lower version…").
func TestReservedPrefixes(t *testing.T) {
	s, _ := newTestStore(t, &Options{ReservedPrefixes: []string{"faceagent/gw/devices/"}})
	now := ts(t0, 0, "c")
	key := "faceagent/gw/devices/d1"
	owner := func(r *Request) *Request { r.Owner = true; return r }
	deny := "-ERR " + ErrTextNotAuthorized + "\r\n"

	fenced := setReq(now, key, "forged")
	fenced.FencingToken, fenced.HasFencingToken = ts(t0+1000, 0, "attacker"), true
	for _, r := range []*Request{fenced, setReq(now, key, "x"), {Payload: cmd("DEL", key)}, {Payload: cmd("VDEL", key, "x")}} {
		if got := do(s, r).reply; got != deny {
			t.Fatalf("%q by a client: %q, want %q", r.Payload, got, deny)
		}
	}
	if got := do(s, owner(setReq(now, key, "state"))).reply; got != "+OK\r\n" {
		t.Fatalf("owner SET: %q", got)
	}
	w := &recorder{}
	if got := do(s, &Request{Payload: cmd("KEYNOTIFY", key), Watcher: w}).reply; got != "+OK\r\n" {
		t.Fatalf("client KEYNOTIFY: %q", got)
	}
	if got := do(s, &Request{Payload: cmd("GET", key)}).reply; got != "$5\r\nstate\r\n" {
		t.Fatalf("client GET: %q", got)
	}
	if got := do(s, owner(setReq(now, key, "state2"))).reply; got != "+OK\r\n" {
		t.Fatalf("owner's next SET: %q", got)
	}
	if got := do(s, setReq(now, "faceagent/gw/config", "x")).reply; got != "+OK\r\n" {
		t.Fatalf("a key outside the prefix: %q", got)
	}
	if len(w.all()) != 1 {
		t.Fatalf("notifications: %v", w.all())
	}
	if _, err := New(&Options{ReservedPrefixes: []string{""}}); err == nil {
		t.Fatal("an empty reserved prefix accepted")
	}
}

// TestOwnerWritesOutsideQuotas: other clients filling the store to its bounds
// do not stop the owner's writes under its reserved prefixes.
func TestOwnerWritesOutsideQuotas(t *testing.T) {
	s, _ := newTestStore(t, &Options{MaxKeys: 1, MaxBytes: 1000, ReservedPrefixes: []string{"own/"}})
	now := ts(t0, 0, "c")
	if got := do(s, setReq(now, "filler", strings.Repeat("x", 500))).reply; got != "+OK\r\n" {
		t.Fatalf("filler: %q", got)
	}
	r := setReq(now, "own/state", strings.Repeat("y", 600))
	r.Owner = true
	if got := do(s, r).reply; got != "+OK\r\n" {
		t.Fatalf("owner write past the bounds: %q", got)
	}
	if got := do(s, setReq(now, "other", "z")).reply; got != quotaReply {
		t.Fatalf("client write past the bounds: %q", got)
	}
}

// TestSnapshotOverLoweredBounds: a snapshot written under larger bounds loads
// within the current ones by the documented rule (file order; too long keys
// and values left out; then what does not fit MaxKeys or MaxBytes), with a
// warning, and the file keeps the rest until the next persistent change.
func TestSnapshotOverLoweredBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "statestore.snap")
	s, err := New(&Options{SnapshotPath: path})
	if err != nil {
		t.Fatal(err)
	}
	now := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String()
	set := func(key, value string) {
		r := setReq(now, key, value)
		r.Persist = true
		if got := do(s, r).reply; got != "+OK\r\n" {
			t.Fatalf("SET %s: %q", key, got)
		}
	}
	set("big-value", strings.Repeat("v", 2<<20)) // longer than the frames load reads
	set("long-key-"+strings.Repeat("k", 100), "v")
	for i := range 10 {
		set(fmt.Sprintf("key-%d", i), strings.Repeat("x", 100))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	var logs testutil.SyncBuffer
	maxBytes := int64(4 * (6 + 100 + KeyOverhead))
	s2, err := New(&Options{SnapshotPath: path, MaxKeySize: 64, MaxValueSize: 1 << 10, MaxBytes: maxBytes,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if st := s2.Stats(); st.Keys != 4 || st.Bytes > maxBytes {
		t.Fatalf("loaded %+v, want 4 keys within %d bytes", st, maxBytes)
	}
	for _, want := range []string{"left_out_too_large=2", "left_out_max_bytes=6", "loaded=4"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("warning without %s: %s", want, logs.String())
		}
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, onDisk) {
		t.Fatal("the snapshot was rewritten without a persistent change")
	}
	// Raised again before any change: everything is back.
	s3, err := New(&Options{SnapshotPath: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if n := s3.Len(); n != 12 {
		t.Fatalf("%d keys after raising the bounds again, want 12", n)
	}
}

// TestSnapshotLoadDropsFencesOnReservedKeys: a fencing token a client put on a
// key before its prefix was reserved does not freeze the owner's writes
// after a restart.
func TestSnapshotLoadDropsFencesOnReservedKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "statestore.snap")
	s, err := New(&Options{SnapshotPath: path})
	if err != nil {
		t.Fatal(err)
	}
	now := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String()
	r := setReq(now, "own/state", "forged")
	r.Persist, r.FencingToken, r.HasFencingToken = true, now, true
	do(s, r)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := New(&Options{SnapshotPath: path, ReservedPrefixes: []string{"own/"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	w := setReq(now, "own/state", "mine")
	w.Owner = true
	if got := do(s2, w).reply; got != "+OK\r\n" {
		t.Fatalf("owner write on a key fenced before the restart: %q", got)
	}
}
