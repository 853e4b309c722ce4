package broker

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// TestFailedCommitStaysFailed: a write whose commit failed is reported failed by wait even
// after a later commit succeeded (it is not on disk), and sync reports the latest commit.
func TestFailedCommitStaysFailed(t *testing.T) {
	j, err := journal.Open(t.TempDir(), &journal.Options{MaxRecordSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	c := newCommitter(j, slog.New(slog.DiscardHandler))
	if err := c.replay(nil); err != nil {
		t.Fatal(err)
	}
	c.start()
	defer func() { _ = c.close() }()

	big, ok := c.enqueue(write{key: "big", value: []byte(strings.Repeat("x", 4<<10))})
	if !ok {
		t.Fatal("queue closed")
	}
	if err := c.wait(big); err == nil {
		t.Fatal("a record over the journal's limit was committed")
	}
	if err := c.enqueueWait(write{key: "small", value: []byte("ok")}); err != nil {
		t.Fatalf("a small record after the failed one: %v", err)
	}
	if err := c.wait(big); err == nil {
		t.Fatal("the failed write reads as committed once a later commit succeeded")
	}
	if err := c.sync(); err != nil {
		t.Fatalf("sync after a successful commit: %v", err)
	}
}

// failingAckWaiter is a storage hook whose messages never reach the disk.
type failingAckWaiter struct{ mqtt.HookBase }

func (failingAckWaiter) ID() string                       { return "test-failing-ack-waiter" }
func (failingAckWaiter) Provides(byte) bool               { return false }
func (failingAckWaiter) WaitBeforeAck(*mqtt.Client) error { return errors.New("disk gone") }

// TestUnstoredPublishIsNotAcknowledged: when the storage behind the acknowledgements fails,
// the publisher gets no PUBACK but a DISCONNECT (0x80), and the acknowledgement does not
// stay in its in-flight set for a resumed session to send.
func TestUnstoredPublishIsNotAcknowledged(t *testing.T) {
	b := startBroker(t, Options{}, &failingAckWaiter{})
	c := memConnectTo(t, b.Addr(), "pub", "pub/in")
	defer c.close()
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName: "faceagent/gw/results", PacketID: 7, Payload: []byte("r")})
	typ, body := c.read(t)
	if typ != packets.Disconnect {
		t.Fatalf("got packet type %d, want DISCONNECT", typ)
	}
	if len(body) == 0 || body[0] != packets.ErrUnspecifiedError.Code {
		t.Fatalf("DISCONNECT reason %x, want %x", body, packets.ErrUnspecifiedError.Code)
	}
	if cl, ok := b.Server().Clients.Get("pub"); ok {
		if _, held := cl.State.Inflight.Get(7); held {
			t.Fatal("the unwritten PUBACK stayed in flight")
		}
	}
}
