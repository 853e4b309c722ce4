package statestore

import (
	"testing"
)

// TestRefusedConditionOnFencedKey: on a fenced key, a condition that refuses
// the request answers ":-1" with the stored version, whatever the fencing
// token; a request that would write still needs a valid token (see
// checkFence for the evidence behind this order); NX and NEX do not get the
// fencing error.
func TestRefusedConditionOnFencedKey(t *testing.T) {
	s, _ := newTestStore(t, nil)
	now := ts(t0, 0, "c")
	fence := setReq(now, "LockName", "Client1", "NEX", "PX", "10000")
	fence.FencingToken, fence.HasFencingToken = ts(t0, 0, "lock"), true
	stored := do(s, fence)
	if stored.reply != "+OK\r\n" {
		t.Fatalf("fenced SET: %q", stored.reply)
	}
	older := ts(t0-1, 0, "lock")
	withToken := func(r *Request, token string) *Request {
		r.FencingToken, r.HasFencingToken = token, true
		return r
	}
	for _, c := range []struct {
		name string
		req  *Request
		want string
	}{
		{"NX without token", setReq(now, "LockName", "Client2", "NX"), ":-1\r\n"},
		{"NX with an older token", withToken(setReq(now, "LockName", "Client2", "NX"), older), ":-1\r\n"},
		{"NEX other value without token", setReq(now, "LockName", "Client2", "NEX", "PX", "10000"), ":-1\r\n"},
		{"NEX other value, older token", withToken(setReq(now, "LockName", "Client2", "NEX"), older), ":-1\r\n"},
		{"VDEL other value without token", &Request{Payload: cmd("VDEL", "LockName", "Client2")}, ":-1\r\n"},
		// Requests that would write: the fence decides.
		{"NEX same value without token", setReq(now, "LockName", "Client1", "NEX", "PX", "10000"), "-ERR " + ErrTextFencingNeeded + "\r\n"},
		{"NEX same value, older token", withToken(setReq(now, "LockName", "Client1", "NEX"), older), "-ERR " + ErrTextFencingLower + "\r\n"},
		{"SET without token", setReq(now, "LockName", "Client2"), "-ERR " + ErrTextFencingNeeded + "\r\n"},
		{"VDEL same value without token", &Request{Payload: cmd("VDEL", "LockName", "Client1")}, "-ERR " + ErrTextFencingNeeded + "\r\n"},
		{"DEL with an older token", withToken(&Request{Payload: cmd("DEL", "LockName")}, older), "-ERR " + ErrTextFencingLower + "\r\n"},
		// A malformed token is a bad request whatever the key holds.
		{"NX with a malformed token", withToken(setReq(now, "LockName", "Client2", "NX"), "1:2"), "-ERR " + ErrTextBadTimestamp + "\r\n"},
	} {
		r := do(s, c.req)
		if r.reply != c.want {
			t.Errorf("%s: %q, want %q", c.name, r.reply, c.want)
			continue
		}
		if c.want == ":-1\r\n" && r.version != stored.version {
			t.Errorf("%s: __ts %v, want the stored version %v", c.name, r.version, stored.version)
		}
	}
	// Nothing above changed the key.
	if g := do(s, &Request{Payload: cmd("GET", "LockName")}); g.reply != "$7\r\nClient1\r\n" || g.version != stored.version {
		t.Fatalf("GET after refused requests: %q %v", g.reply, g.version)
	}
	// The holder with its token renews as before.
	if r := do(s, withToken(setReq(now, "LockName", "Client1", "NEX", "PX", "10000"), ts(t0, 0, "lock"))); r.reply != "+OK\r\n" {
		t.Fatalf("renewal with the token: %q", r.reply)
	}
}
