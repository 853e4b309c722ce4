package broker

import (
	"log/slog"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestResendDoesNotWaitForItsCommit: mochi resends a resumed session's messages in flight
// (ResendInflightMessages, DUP set) one by one on the new connection's goroutine, before it
// reads from it, and reports each through OnQosPublish. Waiting there for the commit of a
// message the inline publisher (the agent) had sent would cost one group commit per
// message resent (a back office resuming with many results in flight would wait an fsync
// for each before its first PUBACK is read, and each takeover meanwhile would start over).
// The record was committed when the message was routed; the resend must not wait for it
// again, while a message routed now still does.
func TestResendDoesNotWaitForItsCommit(t *testing.T) {
	c := openTestCommitter(t, t.TempDir()) // not started: nothing commits until the end
	srv := mqtt.New(&mqtt.Options{InlineClient: true})
	h := &sessionStore{commit: c, srv: srv, log: slog.New(slog.DiscardHandler)}
	office := &mqtt.Client{ID: "office"} // a kept session (not a clean start)
	office.Properties.ProtocolVersion = 5
	msg := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Dup: true},
		PacketID:    7, TopicName: "faceagent/gw/results", Payload: []byte("result"),
		Origin: mqtt.InlineClientId, Created: time.Now().Unix(),
	}

	resent := make(chan struct{})
	go func() { h.OnQosPublish(office, msg, msg.Created, 0); close(resent) }()
	routed := make(chan struct{})
	select {
	case <-resent:
		msg.FixedHeader.Dup = false
		go func() { h.OnQosPublish(office, msg, msg.Created, 0); close(routed) }()
		eventually(t, "the routed message waiting for its commit", func() bool { return committerWaiters() == 1 })
	case <-time.After(promptly):
		t.Error("the resent message's OnQosPublish waits for a commit")
		close(routed)
	}
	c.start()
	<-resent
	<-routed
	if !c.onDiskHas(inflightKey("office", 7)) {
		t.Error("the message's record is not committed")
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
}
