package broker

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestDropsAreCountedAndLogged: messages to a client that stopped reading, beyond its
// queue of pending writes, are counted and logged.
func TestDropsAreCountedAndLogged(t *testing.T) {
	var logs logBuffer
	b := startBroker(t, Options{MaxPendingWrites: 8, Logger: logs.logger()})
	if got := b.Server().Options.Capabilities.MaximumClientWritesPending; got != 8 {
		t.Fatalf("MaximumClientWritesPending = %d", got)
	}
	conn, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// MQTT 3.1.1 CONNECT (clean session, client id "slow") and SUBSCRIBE slow QoS 0.
	connect := []byte{0x10, 16, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 4, 's', 'l', 'o', 'w'}
	subscribe := []byte{0x82, 9, 0, 1, 0, 4, 's', 'l', 'o', 'w', 0}
	if _, err := conn.Write(append(connect, subscribe...)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitFor))
	acks := make([]byte, 4+5) // CONNACK, SUBACK; then this client reads nothing more
	if _, err := io.ReadFull(conn, acks); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 64<<10)
	for i := 0; i < 4096 && b.DroppedMessages() == 0; i++ {
		if err := b.Server().Publish("slow", payload, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	if b.DroppedMessages() == 0 {
		t.Fatal("256 MB to a client that reads nothing, and no drop counted")
	}
	if !strings.Contains(logs.String(), "queue of pending writes is full") {
		t.Fatalf("no drop logged:\n%s", logs.String())
	}
}

func TestDefaultMaxPendingWrites(t *testing.T) {
	b, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.Server().Options.Capabilities.MaximumClientWritesPending; got != DefaultMaxPendingWrites {
		t.Fatalf("MaximumClientWritesPending = %d, want %d", got, DefaultMaxPendingWrites)
	}
}
