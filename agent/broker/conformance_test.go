package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/hlc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// checkResponse asserts the properties every response carries (wire fact 5).
func checkResponse(t *testing.T, p *paho.Publish, wantTS bool) {
	t.Helper()
	if p.Properties.ContentType != "application/octet-stream" {
		t.Errorf("content type %q", p.Properties.ContentType)
	}
	if got := p.Properties.User.Get("__stat"); got != "200" {
		t.Errorf("__stat = %q", got)
	}
	if got := p.Properties.User.Get("__protVer"); got != "1.0" {
		t.Errorf("__protVer = %q", got)
	}
	ts := p.Properties.User.Get("__ts")
	if wantTS != (ts != "") {
		t.Errorf("__ts = %q, want present: %v", ts, wantTS)
	}
	if ts != "" {
		if _, err := hlc.ParseString(ts); err != nil || len(strings.Split(ts, ":")[0]) != 15 {
			t.Errorf("__ts %q not a padded HLC: %v", ts, err)
		}
	}
	if p.QoS != 1 {
		t.Errorf("response QoS %d", p.QoS)
	}
}

func TestEveryCommandOverMQTT(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.Addr(), "conformance", dialOptions{})
	steps := []struct {
		payload []byte
		r       req
		want    string
		ts      bool
	}{
		{cmd("SET", "SETKEY2", "VALUE5"), req{}, "+OK\r\n", true},
		{cmd("get", "SETKEY2"), req{}, "$6\r\nVALUE5\r\n", true},
		{cmd("GET", "SETKEY2"), req{noTS: true}, "$6\r\nVALUE5\r\n", true},
		{cmd("set", "SETKEY2", "other", "nx"), req{}, ":-1\r\n", true},
		{cmd("SET", "SETKEY2", "other", "NEX"), req{}, ":-1\r\n", true},
		{cmd("SET", "SETKEY2", "VALUE5", "PX", "60000", "NEX"), req{}, "+OK\r\n", true},
		{cmd("vdel", "SETKEY2", "ABC"), req{}, ":-1\r\n", true},
		{cmd("VDEL", "SETKEY2", "VALUE5"), req{}, ":1\r\n", true},
		{cmd("del", "SETKEY2"), req{}, ":0\r\n", false},
		{cmd("GET", "SETKEY2"), req{}, "$-1\r\n", false},
		{cmd("SET", "empty", ""), req{}, "+OK\r\n", true},
		{cmd("GET", "empty"), req{}, "$0\r\n\r\n", true},
		{cmd("DEL", "empty"), req{}, ":1\r\n", true},
		{cmd("SET", "k\x00\xff", "v\r\n"), req{}, "+OK\r\n", true},
		{cmd("GET", "k\x00\xff"), req{}, "$3\r\nv\r\n\r\n", true},
		{cmd("KEYNOTIFY", "k"), req{}, "+OK\r\n", false},
		{cmd("keynotify", "k", "stop"), req{}, "+OK\r\n", false},
		{cmd("KEYNOTIFY", "k", "STOP"), req{}, ":0\r\n", false},
		{cmd("PING"), req{}, "-ERR unknown command\r\n", false},
		{cmd("SET", "k"), req{}, "-ERR wrong number of arguments\r\n", false},
		{cmd("GET"), req{}, "-ERR wrong number of arguments\r\n", false},
		{cmd("DEL", "a", "b"), req{}, "-ERR wrong number of arguments\r\n", false},
		{cmd("VDEL", "a"), req{}, "-ERR wrong number of arguments\r\n", false},
		{cmd("KEYNOTIFY", "a", "STOP", "x"), req{}, "-ERR wrong number of arguments\r\n", false},
		{cmd("SET", "k", "v", "EX", "1"), req{}, "-ERR syntax error\r\n", false},
		{cmd("SET", "k", "v", "PX"), req{}, "-ERR syntax error\r\n", false},
		{[]byte("SET k v\r\n"), req{}, "-ERR syntax error\r\n", false},
		{[]byte("*2\r\n$3\r\nGET\r\n$5\r\nab\r\n"), req{}, "-ERR syntax error\r\n", false},
		{cmd("SET", "", "v"), req{}, "-ERR the key length is zero\r\n", false},
		{cmd("SET", "k", "v"), req{noTS: true}, "-ERR missing timestamp\r\n", false},
		{cmd("SET", "k", "v"), req{ts: "1696374425000:0"}, "-ERR malformed timestamp\r\n", false},
		{cmd("SET", "k", "v"), req{ts: "9996374425000:0:c"}, "-ERR " + statestore.ErrTextTimestampAhead + "\r\n", false},
		{cmd("SET", "k", "v"), req{ft: "9996374425000:0:c"}, "-ERR " + statestore.ErrTextFencingAhead + "\r\n", false},
		{cmd("SET", "k", "v"), req{ft: "x"}, "-ERR malformed timestamp\r\n", false},
		{cmd("GET", "k"), req{qos: 2}, "-ERR " + ErrTextQoS + "\r\n", false},
		{cmd("GET", "k"), req{noCorrelation: true}, "-ERR " + ErrTextNoCorrelation + "\r\n", false},
	}
	for _, s := range steps {
		p := c.do(s.payload, s.r)
		if string(p.Payload) != s.want {
			t.Errorf("%q: got %q, want %q", s.payload, p.Payload, s.want)
			continue
		}
		checkResponse(t, p, s.ts)
	}
	c.none()
}

func TestQoS0RequestIsAnsweredWithAnError(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.Addr(), "qos0", dialOptions{})
	_, wait, err := c.publish(cmd("GET", "k"), req{qos0: true})
	if err != nil {
		t.Fatal(err)
	}
	p := <-wait
	if string(p.Payload) != "-ERR "+ErrTextQoS+"\r\n" {
		t.Fatalf("QoS 0: %q", p.Payload)
	}
}

// TestHLCExample: the response's version is greater than the request's
// timestamp, and GET returns the same version (protocol, "Example of setting
// and retrieving a value's version").
func TestHLCExample(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.Addr(), "CLIENT", dialOptions{})
	reqTS := c.clock.Now()
	set := c.do(cmd("SET", "keyName", "value"), req{ts: reqTS.String()})
	v, err := hlc.ParseString(set.Properties.User.Get("__ts"))
	if err != nil {
		t.Fatal(err)
	}
	if hlc.Compare(v, reqTS) <= 0 || v.Node != statestore.DefaultNode {
		t.Fatalf("version %v not after request %v from %s", v, reqTS, statestore.DefaultNode)
	}
	get := c.do(cmd("GET", "keyName"), req{})
	if got := get.Properties.User.Get("__ts"); got != v.String() {
		t.Fatalf("GET version %q, SET version %q", got, v)
	}
}

// TestLockAndFencing plays the document's Client1/Client2 scenario over MQTT.
func TestLockAndFencing(t *testing.T) {
	b := startBroker(t, Options{})
	c1 := dial(t, b.Addr(), "Client1", dialOptions{})
	c2 := dial(t, b.Addr(), "Client2", dialOptions{})
	lock := c1.do(cmd("SET", "LockName", "Client1", "NEX", "PX", "10000"), req{})
	if string(lock.Payload) != "+OK\r\n" {
		t.Fatalf("Client1 lock: %q", lock.Payload)
	}
	if p := c2.do(cmd("SET", "LockName", "Client2", "NEX", "PX", "10000"), req{}); string(p.Payload) != ":-1\r\n" {
		t.Fatalf("Client2 lock: %q", p.Payload)
	}
	token := lock.Properties.User.Get("__ts")
	if p := c1.do(cmd("SET", "ProtectedKey", "v1"), req{ft: token}); string(p.Payload) != "+OK\r\n" {
		t.Fatalf("fenced SET: %q", p.Payload)
	}
	if p := c2.do(cmd("SET", "ProtectedKey", "v2"), req{}); string(p.Payload) != "-ERR a fencing token is required for this request\r\n" {
		t.Fatalf("SET without token: %q", p.Payload)
	}
	old, _ := hlc.ParseString(token)
	old.Wall--
	if p := c2.do(cmd("DEL", "ProtectedKey"), req{ft: old.String()}); string(p.Payload) != "-ERR the request fencing token is a lower version than the fencing token protecting the resource\r\n" {
		t.Fatalf("DEL with older token: %q", p.Payload)
	}
	if p := c1.do(cmd("VDEL", "LockName", "Client1"), req{}); string(p.Payload) != ":1\r\n" {
		t.Fatalf("unlock: %q", p.Payload)
	}
	if p := c2.do(cmd("SET", "LockName", "Client2", "NEX", "PX", "10000"), req{}); string(p.Payload) != "+OK\r\n" {
		t.Fatalf("Client2 lock after release: %q", p.Payload)
	}
}

// TestKeyNotifyExample: the document's client-id1/SOMEKEY example, its topic
// byte for byte, the payloads of wire fact 3, once to a client that
// subscribed and also to one that never did (wire fact 4).
func TestKeyNotifyExample(t *testing.T) {
	b := startBroker(t, Options{})
	const topic = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"
	if got := NotifyTopic("client-id1", []byte("SOMEKEY")); got != topic {
		t.Fatalf("NotifyTopic = %q", got)
	}
	subscribed := dial(t, b.Addr(), "client-id1", dialOptions{subscribe: []string{topic}})
	silent := dial(t, b.Addr(), "never-subscribes", dialOptions{})
	writer := dial(t, b.Addr(), "writer", dialOptions{})
	for _, c := range []*client{subscribed, silent} {
		if p := c.do(cmd("KEYNOTIFY", "SOMEKEY"), req{}); string(p.Payload) != "+OK\r\n" {
			t.Fatalf("KEYNOTIFY: %q", p.Payload)
		}
	}
	set := writer.do(cmd("SET", "SOMEKEY", "abc"), req{})
	del := writer.do(cmd("DEL", "SOMEKEY"), req{})
	setV, _ := hlc.ParseString(set.Properties.User.Get("__ts"))
	delV, _ := hlc.ParseString(del.Properties.User.Get("__ts"))
	for _, c := range []*client{subscribed, silent} {
		n := c.next()
		wantTopic := NotifyTopic(c.id, []byte("SOMEKEY"))
		if n.Topic != wantTopic || string(n.Payload) != "*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nabc\r\n" {
			t.Fatalf("%s: SET notification %q on %q", c.id, n.Payload, n.Topic)
		}
		if got := n.Properties.User.Get("__ts"); got != setV.String() {
			t.Errorf("%s: SET notification __ts %q, want %v", c.id, got, setV)
		}
		n = c.next()
		if n.Topic != wantTopic || string(n.Payload) != "*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n" {
			t.Fatalf("%s: DELETE notification %q on %q", c.id, n.Payload, n.Topic)
		}
		v, err := hlc.ParseString(n.Properties.User.Get("__ts"))
		if err != nil || hlc.Compare(v, delV) <= 0 {
			t.Errorf("%s: DELETE notification __ts %v (%v), want after %v", c.id, v, err, delV)
		}
		if len(strings.Split(n.Topic, "/")) != 8 {
			t.Errorf("topic %q does not have 8 levels", n.Topic)
		}
		c.none() // exactly once, even for the subscriber
	}
	writer.none()
}

func TestExpiryNotification(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.Addr(), "waiter", dialOptions{})
	c.do(cmd("KEYNOTIFY", "lease"), req{})
	c.do(cmd("SET", "lease", "holder", "PX", "50"), req{})
	if n := c.next(); !strings.Contains(string(n.Payload), "SET") {
		t.Fatalf("first notification %q", n.Payload)
	}
	if n := c.next(); string(n.Payload) != "*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n" {
		t.Fatalf("expiry notification %q", n.Payload)
	}
	if p := c.do(cmd("GET", "lease"), req{}); string(p.Payload) != "$-1\r\n" {
		t.Fatalf("expired key: %q", p.Payload)
	}
}

func TestForbiddenResponseTopicDisconnects(t *testing.T) {
	b := startBroker(t, Options{})
	for _, rt := range []string{InvokeTopic, NotifyTopicPrefix + "/x/response"} {
		c := dial(t, b.Addr(), "bad-topic", dialOptions{})
		rt := rt
		// No PUBACK comes (the request is rejected): do not wait long for it.
		_, _, _ = c.publish(cmd("GET", "k"), req{responseTopic: &rt, timeout: 100 * time.Millisecond})
		select {
		case d := <-c.disconnected:
			if d.ReasonCode != CodeForbiddenResponseTopic.Code || d.Properties == nil ||
				d.Properties.ReasonString != CodeForbiddenResponseTopic.Reason {
				t.Fatalf("disconnect %d %+v", d.ReasonCode, d.Properties)
			}
		case <-time.After(waitFor):
			t.Fatal("no DISCONNECT")
		}
		<-c.c.Done()
	}
}

func TestMissingResponseTopicIsDroppedAndLogged(t *testing.T) {
	var logs logBuffer
	b := startBroker(t, Options{Logger: logs.logger()})
	c := dial(t, b.Addr(), "no-topic", dialOptions{})
	empty := ""
	if _, _, err := c.publish(cmd("SET", "k", "v"), req{responseTopic: &empty}); err != nil {
		t.Fatalf("publish (PUBACK expected): %v", err)
	}
	// The client stays connected and is served; the dropped SET did nothing.
	if p := c.do(cmd("GET", "k"), req{}); string(p.Payload) != "$-1\r\n" {
		t.Fatalf("dropped request was applied: %q", p.Payload)
	}
	if !strings.Contains(logs.String(), "without a response topic") {
		t.Fatalf("not logged:\n%s", logs.String())
	}
}

// TestRegistrationsEndWithTheConnection: on disconnect and on session
// takeover the old connection's registrations go; the new connection's stay.
func TestRegistrationsEndWithTheConnection(t *testing.T) {
	hook := &disconnectHook{ch: make(chan *mqtt.Client, 4)}
	b := startBroker(t, Options{}, hook)
	writer := dial(t, b.Addr(), "writer", dialOptions{})

	gone := dial(t, b.Addr(), "leaves", dialOptions{})
	gone.do(cmd("KEYNOTIFY", "a"), req{})
	gone.close()
	<-hook.ch
	b.service.mu.Lock()
	left := len(b.service.notifiers)
	b.service.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d notifiers left after disconnect", left)
	}

	old := dial(t, b.Addr(), "same-id", dialOptions{})
	old.do(cmd("KEYNOTIFY", "old-key"), req{})
	// The response's PUBACK must be in before the takeover: a response still in flight
	// would be resent to the new connection, and mochi refuses a SUBSCRIBE whose packet id
	// equals an in-flight message's (SUBACK 0x91).
	eventually(t, "the KEYNOTIFY response acknowledged", func() bool {
		cl, ok := b.Server().Clients.Get("same-id")
		return ok && cl.State.Inflight.Len() == 0
	})
	f := false
	taker := dial(t, b.Addr(), "same-id", dialOptions{cleanStart: &f, sessionExpiry: 60})
	taker.do(cmd("KEYNOTIFY", "new-key"), req{})
	if cl := <-hook.ch; cl.ID != "same-id" {
		t.Fatalf("disconnect of %q", cl.ID)
	}
	b.service.mu.Lock()
	left = len(b.service.notifiers)
	b.service.mu.Unlock()
	if left != 1 {
		t.Fatalf("%d notifiers after takeover, want the new connection's only", left)
	}
	writer.do(cmd("SET", "old-key", "1"), req{})
	writer.do(cmd("SET", "new-key", "2"), req{})
	n := taker.next()
	if n.Topic != NotifyTopic("same-id", []byte("new-key")) {
		t.Fatalf("taker got %q on %q", n.Payload, n.Topic)
	}
	taker.none()
	if got := b.store.Len(); got != 2 {
		t.Fatalf("store holds %d keys", got)
	}
}

func TestQuotaOverMQTT(t *testing.T) {
	b := startBroker(t, Options{MaxKeys: 1, MaxValueSize: 4})
	c := dial(t, b.Addr(), "quota", dialOptions{})
	if p := c.do(cmd("SET", "a", "1"), req{}); string(p.Payload) != "+OK\r\n" {
		t.Fatalf("first: %q", p.Payload)
	}
	for _, payload := range [][]byte{cmd("SET", "b", "1"), cmd("SET", "a", "12345")} {
		if p := c.do(payload, req{}); string(p.Payload) != "-ERR the quota has been exceeded\r\n" {
			t.Fatalf("%q: %q", payload, p.Payload)
		}
	}
}
