package store

import (
	"encoding/hex"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// TestResyncDoesNotGoBackInTime: after a reconnect the client sends KEYNOTIFY, then GETs the
// key. When the key changes between the store's GET and the client reading the GET's
// response, the change's notification can arrive first; the GET's older state must not be
// delivered after it as a Resync notification, or the watcher would end on a stale value.
func TestResyncDoesNotGoBackInTime(t *testing.T) {
	m, r := mosquittoStore(t)
	const id = "resync-race"
	c := connect(t, m.URL, func(o *Options) { o.ClientID = id })
	ctx := ctxT(t)
	if _, err := c.Set(ctx, "k", []byte("v0"), nil); err != nil {
		t.Fatal(err)
	}
	w, err := c.KeyNotify(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}

	// The test answers the resumed watch's requests itself, in the order it wants.
	u, _ := url.Parse(m.URL)
	mqttClient := func(clientID string) *paho.Client {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		pc := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {}})
		if _, err := pc.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: true}); err != nil {
			t.Fatal(err)
		}
		return pc
	}
	answerer := mqttClient("answerer")
	t.Cleanup(func() { _ = answerer.Disconnect(&paho.Disconnect{}); <-answerer.Done() })
	publish := func(topic, payload string, correlation []byte, ts hlc.Timestamp) {
		t.Helper()
		props := &paho.PublishProperties{CorrelationData: correlation,
			User: paho.UserProperties{{Key: "__stat", Value: "200"}, {Key: "__protVer", Value: "1.0"}}}
		if !ts.IsZero() {
			props.User = append(props.User, paho.UserProperty{Key: "__ts", Value: ts.String()})
		}
		if _, err := answerer.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: []byte(payload), Properties: props}); err != nil {
			t.Fatal(err)
		}
	}
	held := func() *paho.Publish {
		t.Helper()
		select {
		case <-r.Held():
			return r.Last()
		case <-time.After(10 * time.Second):
			t.Fatal("no request reached the responder")
			return nil
		}
	}

	// Take the session over: mosquitto drops the client, which reconnects and resumes.
	r.SetHold(true)
	intruder := mqttClient(id)
	_ = intruder.Disconnect(&paho.Disconnect{})
	<-intruder.Done()

	keynotify := held()
	if !strings.Contains(string(keynotify.Payload), "KEYNOTIFY") {
		t.Fatalf("first request after reconnect: %q", keynotify.Payload)
	}
	publish(keynotify.Properties.ResponseTopic, "+OK\r\n", keynotify.Properties.CorrelationData, hlc.Timestamp{})
	get := held()
	if !strings.Contains(string(get.Payload), "GET") {
		t.Fatalf("second request after reconnect: %q", get.Payload)
	}
	clock := hlc.NewClock("StateStore")
	v1, v2, v3 := clock.Now(), clock.Now(), clock.Now()
	notifyTopic := notifyTopicPrefix + strings.ToUpper(hex.EncodeToString([]byte(id))) + "/command/notify/" + strings.ToUpper(hex.EncodeToString([]byte("k")))
	publish(notifyTopic, "*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$2\r\nv2\r\n", nil, v2)
	publish(get.Properties.ResponseTopic, "$2\r\nv1\r\n", get.Properties.CorrelationData, v1)
	publish(notifyTopic, "*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$2\r\nv3\r\n", nil, v3)

	for _, want := range []string{"v2", "v3"} {
		n := next(t, w)
		if n.Op != OpSet || string(n.Value) != want || n.Resync {
			t.Fatalf("notification %+v, want SET %s (not a Resync)", n, want)
		}
	}
	c.mu.Lock()
	kw := *c.watches["k"]
	c.mu.Unlock()
	if hlc.Compare(kw.version, v3) != 0 {
		t.Fatalf("client's last known version %v, want %v", kw.version, v3)
	}
}
