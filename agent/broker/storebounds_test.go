package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	mp "github.com/mochi-mqtt/server/v2/packets"
)

// keyNotifyRaw registers a raw client for key and reads the PUBACK.
func (c *rawClient) keyNotify(id uint16, key string) {
	c.t.Helper()
	c.send(mp.Packet{
		FixedHeader: mp.FixedHeader{Type: mp.Publish, Qos: 1},
		TopicName:   InvokeTopic,
		PacketID:    id,
		Payload:     cmd("KEYNOTIFY", key),
		Properties: mp.Properties{ResponseTopic: "raw/response", CorrelationData: []byte("c1"),
			User: []mp.UserProperty{{Key: "__ts", Val: "1:0:raw"}}},
	})
	if pk := c.read(); pk.FixedHeader.Type != mp.Puback || pk.PacketID != id || pk.ReasonCode >= 0x80 {
		c.t.Fatalf("KEYNOTIFY PUBACK: %+v", pk)
	}
}

// TestWatcherThatNeverAcksIsDisconnected: a watcher that fills its Receive
// Maximum with a notification and acknowledges nothing is disconnected with
// 0x97 once the next notification waited NotifyAckTimeout, though its queue
// is far from full. Before, the notification waited for room forever.
func TestWatcherThatNeverAcksIsDisconnected(t *testing.T) {
	const timeout = 300 * time.Millisecond
	b := startBroker(t, Options{NotifyAckTimeout: timeout})
	watcher := dialRaw(t, b.Addr(), "stall-watcher", 1)
	watcher.keyNotify(1, "hot")
	writer := dial(t, b.Addr(), "stall-writer", dialOptions{})
	for i := range 2 {
		if p := writer.do(cmd("SET", "hot", fmt.Sprint(i)), req{}); string(p.Payload) != "+OK\r\n" {
			t.Fatalf("SET %d: %q", i, p.Payload)
		}
	}
	if pk := watcher.read(); pk.FixedHeader.Type != mp.Publish || !strings.HasPrefix(pk.TopicName, NotifyTopicPrefix) {
		t.Fatalf("first notification: %+v", pk)
	}
	start := time.Now() // the second notification waits for room from about now
	pk := watcher.read()
	if pk.FixedHeader.Type != mp.Disconnect || pk.ReasonCode != CodeNotifyStalled.Code {
		t.Fatalf("got %+v, want DISCONNECT 0x%02x", pk, CodeNotifyStalled.Code)
	}
	if waited := time.Since(start); waited < timeout/2 {
		t.Fatalf("disconnected after %v, NotifyAckTimeout %v", waited, timeout)
	}
	eventually(t, "the budget given back", func() bool { return b.service.notifyBudget.Used() == 0 })
}

// TestUnacknowledgedNotificationsAreBounded: a watcher with a large Receive
// Maximum that acknowledges nothing gets notifications only up to the byte
// budget (Options.MaxBytes, shared by all watchers), then is disconnected
// with 0x97; the notifications' bytes are counted until acknowledged, not
// only while queued. Before, every notification went out and stayed in
// flight: 64 KiB values piled up without bound.
func TestUnacknowledgedNotificationsAreBounded(t *testing.T) {
	const budget, valueSize = 1 << 20, 64 << 10
	b := startBroker(t, Options{MaxBytes: budget, MaxInflight: 1000, ReceiveMaximum: 1000})
	watcher := dialRaw(t, b.Addr(), "greedy-watcher", 1000)
	watcher.keyNotify(1, "big")
	writer := dial(t, b.Addr(), "big-writer", dialOptions{})
	value := strings.Repeat("v", valueSize)
	const sets = 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range sets {
			writer.do(cmd("SET", "big", value), req{})
		}
	}()
	published := 0
	for range sets + 1 {
		pk := watcher.read()
		if pk.FixedHeader.Type == mp.Publish {
			published++
			continue
		}
		if pk.FixedHeader.Type != mp.Disconnect || pk.ReasonCode != CodeNotifyOverflow.Code {
			t.Fatalf("got %+v, want DISCONNECT 0x%02x", pk, CodeNotifyOverflow.Code)
		}
		break
	}
	if limit := budget / valueSize; published > limit {
		t.Fatalf("%d notifications of %d bytes unacknowledged, budget %d", published, valueSize, budget)
	}
	<-done
	eventually(t, "the budget given back", func() bool { return b.service.notifyBudget.Used() == 0 })
}
