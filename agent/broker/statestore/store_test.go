package statestore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cmd encodes a command as the SDKs do: an array of blob strings.
func cmd(args ...string) []byte {
	b := resp3.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = resp3.AppendBlobString(b, a)
	}
	return b
}

// fakeTime is a settable wall clock shared by the store and its HLC.
type fakeTime struct{ ms atomic.Int64 }

func (f *fakeTime) now() int64              { return f.ms.Load() }
func (f *fakeTime) advance(d time.Duration) { f.ms.Add(d.Milliseconds()) }

const t0 = 1696374425000 // the document's example wall clock

func newTestStore(t *testing.T, opts *Options) (*Store, *fakeTime) {
	t.Helper()
	ft := &fakeTime{}
	ft.ms.Store(t0)
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = ft.now
		o.Clock = hlc.NewClock(DefaultNode, hlc.WithWallClock(ft.now))
	}
	s, err := New(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, ft
}

type result struct {
	reply   string
	version hlc.Timestamp
}

func do(s *Store, req *Request) result {
	out, v := s.Do(req, nil)
	return result{string(out), v}
}

func ts(wall int64, counter uint32, node string) string {
	return hlc.Timestamp{Wall: wall, Counter: counter, Node: node}.String()
}

func setReq(ts string, args ...string) *Request {
	return &Request{Payload: cmd(append([]string{"SET"}, args...)...), Timestamp: ts, HasTimestamp: true}
}

func TestHLCExampleFromTheDocument(t *testing.T) {
	s, _ := newTestStore(t, nil)
	// protocol: the client's __ts is 1696374425000:0:CLIENT; the store's clock
	// is identical, so the version is the same wall clock, counter one higher.
	r := do(s, setReq("1696374425000:0:CLIENT", "keyName", "value"))
	if r.reply != "+OK\r\n" {
		t.Fatalf("SET = %q", r.reply)
	}
	want := hlc.Timestamp{Wall: t0, Counter: 1, Node: "StateStore"}
	if r.version != want {
		t.Fatalf("version = %v, want %v", r.version, want)
	}
	g := do(s, &Request{Payload: cmd("GET", "keyName")})
	if g.reply != "$5\r\nvalue\r\n" || g.version != want {
		t.Fatalf("GET = %q %v", g.reply, g.version)
	}
}

func TestRepliesAndErrorTexts(t *testing.T) {
	s, _ := newTestStore(t, nil)
	now := ts(t0, 0, "c")
	cases := []struct {
		name string
		req  *Request
		want string
	}{
		{"set", setReq(now, "k", "v"), "+OK\r\n"},
		{"set lower case", &Request{Payload: cmd("set", "k2", "v"), Timestamp: now, HasTimestamp: true}, "+OK\r\n"},
		{"empty value", setReq(now, "empty", ""), "+OK\r\n"},
		{"get empty", &Request{Payload: cmd("GET", "empty")}, "$0\r\n\r\n"},
		{"get missing", &Request{Payload: cmd("get", "nope")}, "$-1\r\n"},
		{"del missing", &Request{Payload: cmd("DEL", "nope")}, ":0\r\n"},
		{"vdel missing", &Request{Payload: cmd("VDEL", "nope", "x")}, ":0\r\n"},
		{"vdel mismatch", &Request{Payload: cmd("vdel", "k", "other")}, ":-1\r\n"},
		{"nx refused", setReq(now, "k", "v", "NX"), ":-1\r\n"},
		{"nex refused", setReq(now, "k", "w", "nex"), ":-1\r\n"},
		{"nex same value", setReq(now, "k", "v", "NEX", "PX", "1000"), "+OK\r\n"},
		{"px then nex", setReq(now, "k", "v", "px", "1000", "nex"), "+OK\r\n"},
		{"vdel match", &Request{Payload: cmd("VDEL", "k", "v")}, ":1\r\n"},
		{"del", &Request{Payload: cmd("DEL", "k2")}, ":1\r\n"},
		{"unknown", &Request{Payload: cmd("INCR", "k")}, "-ERR unknown command\r\n"},
		{"set arity", setReq(now, "k"), "-ERR wrong number of arguments\r\n"},
		{"get arity", &Request{Payload: cmd("GET", "k", "x")}, "-ERR wrong number of arguments\r\n"},
		{"get no key", &Request{Payload: cmd("GET")}, "-ERR wrong number of arguments\r\n"},
		{"del arity", &Request{Payload: cmd("DEL")}, "-ERR wrong number of arguments\r\n"},
		{"vdel arity", &Request{Payload: cmd("VDEL", "k")}, "-ERR wrong number of arguments\r\n"},
		{"keynotify arity", &Request{Payload: cmd("KEYNOTIFY")}, "-ERR wrong number of arguments\r\n"},
		{"keynotify bad option", &Request{Payload: cmd("KEYNOTIFY", "k", "GO"), Watcher: &recorder{}}, "-ERR syntax error\r\n"},
		{"bad option", setReq(now, "k", "v", "XX"), "-ERR syntax error\r\n"},
		{"px without value", setReq(now, "k", "v", "PX"), "-ERR syntax error\r\n"},
		{"px not a number", setReq(now, "k", "v", "PX", "ten"), "-ERR syntax error\r\n"},
		{"px zero", setReq(now, "k", "v", "PX", "0"), "-ERR syntax error\r\n"},
		{"px negative", setReq(now, "k", "v", "PX", "-5"), "-ERR syntax error\r\n"},
		{"nx and nex", setReq(now, "k", "v", "NX", "NEX"), "-ERR syntax error\r\n"},
		{"px twice", setReq(now, "k", "v", "PX", "1", "PX", "2"), "-ERR syntax error\r\n"},
		{"not resp3", &Request{Payload: []byte("GET k\r\n")}, "-ERR syntax error\r\n"},
		{"empty payload", &Request{}, "-ERR syntax error\r\n"},
		{"trailing bytes", &Request{Payload: append(cmd("GET", "k"), 'x')}, "-ERR syntax error\r\n"},
		{"integer element", &Request{Payload: []byte("*2\r\n$3\r\nGET\r\n:1\r\n")}, "-ERR syntax error\r\n"},
		{"zero key set", setReq(now, "", "v"), "-ERR the key length is zero\r\n"},
		{"zero key get", &Request{Payload: cmd("GET", "")}, "-ERR the key length is zero\r\n"},
		{"zero key del", &Request{Payload: cmd("DEL", "")}, "-ERR the key length is zero\r\n"},
		{"missing ts", &Request{Payload: cmd("SET", "k", "v")}, "-ERR missing timestamp\r\n"},
		{"malformed ts", setReq("yesterday", "k", "v"), "-ERR malformed timestamp\r\n"},
		{"empty ts", setReq("", "k", "v"), "-ERR malformed timestamp\r\n"},
		{"ts too far ahead", setReq(ts(t0+61_000, 0, "c"), "k", "v"), "-ERR " + ErrTextTimestampAhead + "\r\n"},
		{"ts a bit ahead", setReq(ts(t0+59_000, 0, "c"), "ahead", "v"), "+OK\r\n"},
		{"get ignores ts", &Request{Payload: cmd("GET", "ahead"), Timestamp: "junk", HasTimestamp: true}, "$1\r\nv\r\n"},
		{"keynotify stop unwatched", &Request{Payload: cmd("KEYNOTIFY", "k", "STOP"), Watcher: &recorder{}}, ":0\r\n"},
		{"keynotify", &Request{Payload: cmd("keynotify", "k"), Watcher: &recorder{}}, "+OK\r\n"},
		{"binary key", setReq(now, "a\x00\r\nb", "\x00\xff"), "+OK\r\n"},
		{"binary get", &Request{Payload: cmd("GET", "a\x00\r\nb")}, "$2\r\n\x00\xff\r\n"},
	}
	for _, c := range cases {
		if got := do(s, c.req).reply; got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestVersionsOnReplies(t *testing.T) {
	s, ft := newTestStore(t, nil)
	set := do(s, setReq(ts(t0, 0, "c"), "k", "v"))
	ft.advance(time.Second)
	refused := do(s, setReq(ts(t0+1000, 0, "c"), "k", "other", "NX"))
	if refused.reply != ":-1\r\n" || refused.version != set.version {
		t.Fatalf("refused SET = %q %v, want :-1 with %v", refused.reply, refused.version, set.version)
	}
	// A request behind the store's clock: the store's time wins, still greater.
	again := do(s, setReq(ts(t0-5000, 7, "c"), "k", "v2"))
	if hlc.Compare(again.version, set.version) <= 0 || again.version.Wall != t0+1000 {
		t.Fatalf("second version %v not after %v at the store's wall clock", again.version, set.version)
	}
	// A request ahead (within a minute): the version is greater than it.
	ahead := hlc.Timestamp{Wall: t0 + 30_000, Counter: 4, Node: "c"}
	r := do(s, setReq(ahead.String(), "k", "v3"))
	if hlc.Compare(r.version, ahead) <= 0 {
		t.Fatalf("version %v not greater than request %v", r.version, ahead)
	}
	del := do(s, &Request{Payload: cmd("DEL", "k")})
	if del.version != r.version {
		t.Fatalf("DEL version %v, want the value's %v", del.version, r.version)
	}
	if v := do(s, &Request{Payload: cmd("DEL", "k")}).version; !v.IsZero() {
		t.Fatalf("DEL of a missing key carries version %v", v)
	}
}

// TestLockAndFencingExample plays the document's Client1/Client2 scenario.
func TestLockAndFencingExample(t *testing.T) {
	s, ft := newTestStore(t, nil)
	now := func() string { return ts(ft.now(), 0, "client") }
	lock := do(s, setReq(now(), "LockName", "Client1", "NEX", "PX", "10000"))
	if lock.reply != "+OK\r\n" {
		t.Fatalf("Client1 lock: %q", lock.reply)
	}
	if r := do(s, setReq(now(), "LockName", "Client2", "NEX", "PX", "10000")); r.reply != ":-1\r\n" {
		t.Fatalf("Client2 lock while held: %q", r.reply)
	}
	token := lock.version.String()
	fenced := setReq(now(), "ProtectedKey", "one")
	fenced.FencingToken, fenced.HasFencingToken = token, true
	if r := do(s, fenced); r.reply != "+OK\r\n" {
		t.Fatalf("fenced SET: %q", r.reply)
	}
	errs := map[string]*Request{
		"-ERR " + ErrTextFencingNeeded + "\r\n": setReq(now(), "ProtectedKey", "two"),
	}
	older := setReq(now(), "ProtectedKey", "two")
	older.FencingToken, older.HasFencingToken = ts(lock.version.Wall-1, 0, "StateStore"), true
	errs["-ERR "+ErrTextFencingLower+"\r\n"] = older
	ahead := setReq(now(), "ProtectedKey", "two")
	ahead.FencingToken, ahead.HasFencingToken = ts(ft.now()+120_000, 0, "x"), true
	errs["-ERR "+ErrTextFencingAhead+"\r\n"] = ahead
	bad := setReq(now(), "ProtectedKey", "two")
	bad.FencingToken, bad.HasFencingToken = "1:2", true
	errs["-ERR malformed timestamp\r\n"] = bad
	delNoToken := &Request{Payload: cmd("DEL", "ProtectedKey")}
	for want, req := range errs {
		if got := do(s, req).reply; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if got := do(s, delNoToken).reply; got != "-ERR "+ErrTextFencingNeeded+"\r\n" {
		t.Errorf("DEL without token: %q", got)
	}
	if !strings.Contains(ErrTextFencingLower, "lower version than the") {
		t.Errorf("wire fact 6 spelling lost: %q", ErrTextFencingLower)
	}
	// Client1 renews, the lock's new version fences newer writes.
	ft.advance(time.Second)
	renew := do(s, setReq(now(), "LockName", "Client1", "NEX", "PX", "10000"))
	newer := setReq(now(), "ProtectedKey", "three")
	newer.FencingToken, newer.HasFencingToken = renew.version.String(), true
	if r := do(s, newer); r.reply != "+OK\r\n" {
		t.Fatalf("newer token: %q", r.reply)
	}
	// The stored token moved up: the first token is now too old.
	stale := setReq(now(), "ProtectedKey", "four")
	stale.FencingToken, stale.HasFencingToken = token, true
	if r := do(s, stale); r.reply != "-ERR "+ErrTextFencingLower+"\r\n" {
		t.Fatalf("stale token after renewal: %q", r.reply)
	}
	vdel := &Request{Payload: cmd("VDEL", "ProtectedKey", "three"), FencingToken: renew.version.String(), HasFencingToken: true}
	if r := do(s, vdel); r.reply != ":1\r\n" {
		t.Fatalf("fenced VDEL: %q", r.reply)
	}
	// The lock expires: Client2 gets it.
	ft.advance(10 * time.Second)
	if r := do(s, setReq(now(), "LockName", "Client2", "NEX", "PX", "10000")); r.reply != "+OK\r\n" {
		t.Fatalf("Client2 after expiry: %q", r.reply)
	}
}

// recorder is a Watcher that keeps what it is told.
type recorder struct {
	mu    sync.Mutex
	notes []note
	ch    chan note
}

type note struct {
	key     string
	payload string
	version hlc.Timestamp
}

func (r *recorder) Notify(key string, op Op, value []byte, v hlc.Timestamp) {
	n := note{key, string(AppendNotification(nil, op, value)), v}
	r.mu.Lock()
	r.notes = append(r.notes, n)
	r.mu.Unlock()
	if r.ch != nil {
		r.ch <- n
	}
}

func (r *recorder) all() []note {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]note(nil), r.notes...)
}

func TestNotifications(t *testing.T) {
	s, ft := newTestStore(t, nil)
	w, other := &recorder{}, &recorder{}
	now := ts(t0, 0, "c")
	for _, r := range []*Request{
		{Payload: cmd("KEYNOTIFY", "SOMEKEY"), Watcher: w},
		{Payload: cmd("KEYNOTIFY", "SOMEKEY"), Watcher: w}, // twice is once
		{Payload: cmd("KEYNOTIFY", "other"), Watcher: other},
	} {
		if got := do(s, r).reply; got != "+OK\r\n" {
			t.Fatalf("KEYNOTIFY: %q", got)
		}
	}
	set := do(s, setReq(now, "SOMEKEY", "abc"))
	do(s, setReq(now, "SOMEKEY", "abc", "NX")) // refused: no notification
	del := do(s, &Request{Payload: cmd("DEL", "SOMEKEY")})
	do(s, setReq(now, "SOMEKEY", "x", "PX", "100"))
	ft.advance(200 * time.Millisecond)
	if got := do(s, &Request{Payload: cmd("GET", "SOMEKEY")}).reply; got != "$-1\r\n" {
		t.Fatalf("expired key visible: %q", got)
	}
	got := w.all()
	want := []string{
		"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nabc\r\n",
		"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n",
		"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$1\r\nx\r\n",
		"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d notifications %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].payload != want[i] || got[i].key != "SOMEKEY" {
			t.Errorf("notification %d = %q on %q", i, got[i].payload, got[i].key)
		}
		if i > 0 && hlc.Compare(got[i].version, got[i-1].version) <= 0 {
			t.Errorf("notification %d version %v not after %v", i, got[i].version, got[i-1].version)
		}
	}
	if got[0].version != set.version || hlc.Compare(got[1].version, del.version) <= 0 {
		t.Errorf("versions: set %v/%v, delete %v after %v", got[0].version, set.version, got[1].version, del.version)
	}
	if n := len(other.all()); n != 0 {
		t.Errorf("watcher of another key got %d notifications", n)
	}
	if r := do(s, &Request{Payload: cmd("KEYNOTIFY", "SOMEKEY", "stop"), Watcher: w}); r.reply != "+OK\r\n" {
		t.Fatalf("STOP: %q", r.reply)
	}
	do(s, setReq(now, "SOMEKEY", "y"))
	if n := len(w.all()); n != 4 {
		t.Fatalf("notified after STOP: %d", n)
	}
	if n := s.Unwatch(other); n != 1 || s.Watching(other) != 0 {
		t.Fatalf("Unwatch = %d, watching %d", n, s.Watching(other))
	}
	if r := do(s, &Request{Payload: cmd("KEYNOTIFY", "k")}); r.reply != "-ERR not authorized\r\n" {
		t.Fatalf("KEYNOTIFY without a watcher: %q", r.reply)
	}
}

// TestSweeperSendsDelete uses the real clock: the sweeper alone must remove
// the key and notify, with no request touching it.
func TestSweeperSendsDelete(t *testing.T) {
	s, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := &recorder{ch: make(chan note, 4)}
	do(s, &Request{Payload: cmd("KEYNOTIFY", "lease"), Watcher: w})
	now := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String()
	do(s, setReq(now, "long", "v", "PX", "60000"))
	do(s, setReq(now, "lease", "holder", "PX", "30"))
	for _, want := range []string{"SET", "DELETE"} {
		select {
		case n := <-w.ch:
			if !strings.Contains(n.payload, want) {
				t.Fatalf("got %q, want %s", n.payload, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s notification", want)
		}
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d after expiry, want 1", s.Len())
	}
}

func TestExpiryRenewAndClear(t *testing.T) {
	s, ft := newTestStore(t, nil)
	now := ts(t0, 0, "c")
	do(s, setReq(now, "k", "v", "PX", "100"))
	ft.advance(80 * time.Millisecond)
	do(s, setReq(now, "k", "v", "NEX", "PX", "100")) // renew
	ft.advance(80 * time.Millisecond)
	if got := do(s, &Request{Payload: cmd("GET", "k")}).reply; got != "$1\r\nv\r\n" {
		t.Fatalf("renewed key gone: %q", got)
	}
	do(s, setReq(now, "k", "v")) // no PX: permanent
	ft.advance(time.Hour)
	s.sweep()
	if got := do(s, &Request{Payload: cmd("GET", "k")}).reply; got != "$1\r\nv\r\n" {
		t.Fatalf("permanent key gone: %q", got)
	}
	if len(s.expiry) != 0 {
		t.Fatalf("heap holds %d items", len(s.expiry))
	}
}

func TestQuotas(t *testing.T) {
	const k = KeyOverhead
	s, _ := newTestStore(t, &Options{MaxKeys: 2, MaxBytes: 2*k + 20, MaxValueSize: 8})
	now := ts(t0, 0, "c")
	quota := "-ERR the quota has been exceeded\r\n"
	steps := []struct {
		req  *Request
		want string
	}{
		{setReq(now, "a", "12345678"), "+OK\r\n"},
		{setReq(now, "b", "123456789"), quota},    // value too large
		{setReq(now, "b", "1234"), "+OK\r\n"},     // 9+5 = 14 bytes
		{setReq(now, "c", "1"), quota},            // third key
		{setReq(now, "b", "12345678"), "+OK\r\n"}, // 9+9 = 18 bytes
	}
	for i, st := range steps {
		if got := do(s, st.req).reply; got != st.want {
			t.Fatalf("step %d: %q, want %q", i, got, st.want)
		}
	}
	if s.Bytes() != 2*k+18 {
		t.Fatalf("Bytes = %d, want %d", s.Bytes(), 2*k+18)
	}
	// A fencing token is counted too (its node id is the request's choice).
	fenced := setReq(now, "b", "12345678")
	fenced.FencingToken, fenced.HasFencingToken = ts(t0, 0, "node"), true
	if got := do(s, fenced).reply; got != quota {
		t.Fatalf("bytes quota: %q", got)
	}
	do(s, &Request{Payload: cmd("DEL", "a")})
	if got := do(s, setReq(now, "c", "1")).reply; got != "+OK\r\n" {
		t.Fatalf("after DEL: %q", got)
	}
	st := s.Stats()
	if st.Refused[BoundValueSize] != 1 || st.Refused[BoundKeys] != 1 || st.Refused[BoundBytes] != 1 {
		t.Fatalf("refusals counted: %v", st.Refused)
	}
}

type prefixAccess struct{ read, write string }

func (p prefixAccess) AllowKey(key []byte, write bool) bool {
	if write {
		return strings.HasPrefix(string(key), p.write)
	}
	return strings.HasPrefix(string(key), p.read)
}

func TestKeyAccess(t *testing.T) {
	s, _ := newTestStore(t, nil)
	acc := prefixAccess{read: "dev/", write: "dev/mine/"}
	now := ts(t0, 0, "c")
	deny := "-ERR not authorized\r\n"
	for _, c := range []struct {
		req  *Request
		want string
	}{
		{&Request{Payload: cmd("SET", "dev/mine/a", "1"), Timestamp: now, HasTimestamp: true, Access: acc}, "+OK\r\n"},
		{&Request{Payload: cmd("SET", "dev/other", "1"), Timestamp: now, HasTimestamp: true, Access: acc}, deny},
		{&Request{Payload: cmd("GET", "dev/other"), Access: acc}, "$-1\r\n"},
		{&Request{Payload: cmd("GET", "etc/x"), Access: acc}, deny},
		{&Request{Payload: cmd("DEL", "dev/other"), Access: acc}, deny},
		{&Request{Payload: cmd("KEYNOTIFY", "etc/x"), Access: acc, Watcher: &recorder{}}, deny},
		{&Request{Payload: cmd("KEYNOTIFY", "dev/x"), Access: acc, Watcher: &recorder{}}, "+OK\r\n"},
	} {
		if got := do(s, c.req).reply; got != c.want {
			t.Errorf("%q: %q, want %q", c.req.Payload, got, c.want)
		}
	}
}

func TestPersistenceAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "statestore.snap")
	s, err := New(&Options{SnapshotPath: path})
	if err != nil {
		t.Fatal(err)
	}
	now := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String()
	keep := setReq(now, "config", "a=1")
	keep.Persist = true
	kept := do(s, keep)
	fenced := setReq(now, "fenced", "x", "PX", "600000")
	fenced.Persist, fenced.FencingToken, fenced.HasFencingToken = true, kept.version.String(), true
	do(s, fenced)
	do(s, setReq(now, "volatile", "gone"))
	unkeep := setReq(now, "was-kept", "1")
	unkeep.Persist = true
	do(s, unkeep)
	do(s, setReq(now, "was-kept", "2")) // rewritten without the property: no longer kept
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := New(&Options{SnapshotPath: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	g := do(s2, &Request{Payload: cmd("GET", "config")})
	if g.reply != "$3\r\na=1\r\n" || g.version != kept.version {
		t.Fatalf("config after restart: %q %v (want version %v)", g.reply, g.version, kept.version)
	}
	for _, k := range []string{"volatile", "was-kept"} {
		if got := do(s2, &Request{Payload: cmd("GET", k)}).reply; got != "$-1\r\n" {
			t.Errorf("%s survived: %q", k, got)
		}
	}
	if got := do(s2, &Request{Payload: cmd("DEL", "fenced")}).reply; got != "-ERR "+ErrTextFencingNeeded+"\r\n" {
		t.Errorf("fence lost across restart: %q", got)
	}
	// New versions are issued after the restored ones.
	r := do(s2, setReq(now, "config", "a=2"))
	if hlc.Compare(r.version, kept.version) <= 0 {
		t.Errorf("version went back: %v after %v", r.version, kept.version)
	}
}

func TestCorruptSnapshotIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "statestore.snap")
	s, err := New(&Options{SnapshotPath: path})
	if err != nil {
		t.Fatal(err)
	}
	req := setReq(hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String(), "k", "value")
	req.Persist = true
	do(s, req)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range good {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0x40
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := New(&Options{SnapshotPath: path}); !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("flipped byte %d: err = %v", i, err)
		}
	}
	if err := os.WriteFile(path, good[:len(good)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(&Options{SnapshotPath: path}); !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("truncated: err = %v", err)
	}
}

func TestConcurrentRequests(t *testing.T) {
	s, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := &recorder{}
	do(s, &Request{Payload: cmd("KEYNOTIFY", "shared"), Watcher: w})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				now := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String()
				do(s, setReq(now, "shared", "v", "PX", "50"))
				do(s, &Request{Payload: cmd("GET", "shared")})
				do(s, &Request{Payload: cmd("DEL", "shared")})
			}
		}()
	}
	wg.Wait()
	notes := w.all()
	for i := 1; i < len(notes); i++ {
		if hlc.Compare(notes[i].version, notes[i-1].version) <= 0 {
			t.Fatalf("notification %d out of version order", i)
		}
	}
}

// TestDoDurableWaitsForTheSnapshot: a change of the persistent keys is
// reported only once a snapshot holding it is on disk.
func TestDoDurableWaitsForTheSnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "statestore.snap")
	s, err := New(&Options{SnapshotPath: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String()
	durable := make(chan error, 1)
	onDisk := func(reply []byte, _ hlc.Timestamp, err error) {
		recs, derr := readSnapshotFile(path)
		if err == nil && (derr != nil || len(recs) != 1 || string(recs[0].Value) != "v1" || string(reply) != "+OK\r\n") {
			err = errors.New("done called before the snapshot held the change")
		}
		durable <- err
	}
	req := setReq(now, "config", "v1")
	req.Persist = true
	out, _, wait := s.DoDurable(req, nil, onDisk)
	if string(out) != "+OK\r\n" || !wait {
		t.Fatalf("persistent SET: %q wait=%v", out, wait)
	}
	select {
	case err := <-durable:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("done never called")
	}
	if _, _, wait := s.DoDurable(setReq(now, "volatile", "x"), nil, onDisk); wait {
		t.Fatal("volatile SET waits")
	}
	if _, _, wait := s.DoDurable(&Request{Payload: cmd("GET", "config")}, nil, onDisk); wait {
		t.Fatal("GET waits")
	}
	if _, _, wait := s.DoDurable(&Request{Payload: cmd("DEL", "config")}, nil, func([]byte, hlc.Timestamp, error) {}); !wait {
		t.Fatal("DEL of a persistent key does not wait")
	}
}

// readSnapshotFile returns every record of the snapshot at path.
func readSnapshotFile(path string) ([]keyRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []keyRecord
	err = scanSnapshot(f, maxFrame, func(r *keyRecord) { recs = append(recs, *r) })
	return recs, err
}

func TestNodeWithColonIsRefused(t *testing.T) {
	if _, err := New(&Options{Node: "gw:01"}); err == nil {
		t.Fatal("node id with ':' accepted")
	}
}
