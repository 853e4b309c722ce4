package broker

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// expectAck reads an acknowledgement of type typ for packet id and returns its reason code
// (0 when the short form leaves it out).
func expectAck(t *testing.T, c *wireClient, typ byte, id uint16) byte {
	t.Helper()
	got, body, err := c.read()
	if err != nil {
		t.Fatalf("waiting for packet type %d of %d: %v", typ, id, err)
	}
	if got != typ || len(body) < 2 || uint16(body[0])<<8|uint16(body[1]) != id {
		t.Fatalf("got packet type %d (% x), want type %d for packet id %d", got, body, typ, id)
	}
	if len(body) > 2 {
		return body[2]
	}
	return 0
}

// sendPubrel sends the PUBREL of the client's QoS 2 publish id.
func sendPubrel(t *testing.T, c *wireClient, id uint16) {
	t.Helper()
	c.wmu.Lock()
	_, err := c.conn.Write([]byte{packets.Pubrel<<4 | 2, 2, byte(id >> 8), byte(id)})
	c.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
}

// qos2Task is the back office's QoS 2 PUBLISH of a task under packet id.
func qos2Task(id uint16, dup bool) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2, Dup: dup},
		TopicName: "tasks", PacketID: id, Payload: []byte("task")}
}

// worker subscribes a clean session to "tasks", to count what the back office's tasks
// deliver.
func worker(t *testing.T, b *Broker) *memClient {
	t.Helper()
	w := memConnectTo(t, b.Addr(), "worker", "tasks")
	t.Cleanup(w.close)
	return w
}

// expectOnly reads the worker's next message, which must be want, then checks that nothing
// came between it and a marker published after it.
func expectOnly(t *testing.T, b *Broker, w *memClient, want string) {
	t.Helper()
	if got := string(w.expectPublishAndAck(t)); got != want {
		t.Fatalf("worker got %q, want %q", got, want)
	}
	if err := b.Server().Publish("tasks", []byte("marker"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got := string(w.expectPublishAndAck(t)); got != "marker" {
		t.Fatalf("worker got %q after %q, want only the marker", got, want)
	}
}

// A back office's QoS 1 and QoS 2 PUBLISHes under the packet id of a result in flight to it
// (each side numbers its packets on its own) leave the result in flight, in memory and in
// the sessions journal. With both directions in one set keyed by packet id (mochi v2.7.9),
// the PUBREC, held there until PUBREL, would take the result's place: the result would
// never be sent again, and the back office's PUBACK for it would end the QoS 2 flow instead
// (its PUBREL then finding nothing: PUBCOMP 0x92).
// The flow carried by a resumed session, and a duplicate QoS 2 PUBLISH on it, are the fork's
// own tests (TestInboundQoS2FlowGoesWithTheSession, TestDuplicateQoS2PublishOnResume in
// third_party/mochi); this one checks the sessions journal too.
func TestInboundQoS2KeepsMessageInFlight(t *testing.T) {
	t.Run("acknowledged", func(t *testing.T) {
		b := startBroker(t, Options{DataDir: t.TempDir()})
		w := worker(t, b)
		bo := subscribeKept(t, b.Addr(), "bo", "results", 1)
		defer bo.close()
		if err := b.Server().Publish("results", []byte("result-1"), false, 1); err != nil {
			t.Fatal(err)
		}
		payload, id := readPublishID(t, bo) // not acknowledged yet: in flight
		if payload != "result-1" {
			t.Fatalf("got %q, want result-1", payload)
		}
		cl, _ := b.Server().Clients.Get("bo")
		resultKept := func(after string) {
			t.Helper()
			if held, ok := cl.State.Inflight.Get(id); !ok || held.FixedHeader.Type != packets.Publish || string(held.Payload) != "result-1" {
				t.Fatalf("after %s, in flight under %d: %v %v; want the result", after, id, ok, held.FixedHeader)
			}
			if err := b.SyncSessions(); err != nil {
				t.Fatal(err)
			}
			if !b.sessions.commit.onDiskHas(inflightKey("bo", id)) {
				t.Fatalf("after %s, the result's record is gone", after)
			}
		}
		// A QoS 1 task under the result's id: its PUBACK is written and its flow ends.
		if err := bo.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
			TopicName: "tasks", PacketID: id, Payload: []byte("task-1")}); err != nil {
			t.Fatal(err)
		}
		if code := expectAck(t, bo, packets.Puback, id); code != 0 {
			t.Fatalf("PUBACK reason %#x", code)
		}
		expectOnly(t, b, w, "task-1")
		resultKept("a QoS 1 task under its id")
		// A QoS 2 task under the same id: its flow waits for PUBREL meanwhile.
		if err := bo.send(qos2Task(id, false)); err != nil {
			t.Fatal(err)
		}
		if code := expectAck(t, bo, packets.Pubrec, id); code != 0 {
			t.Fatalf("PUBREC reason %#x", code)
		}
		resultKept("a QoS 2 task under its id")
		// The result's PUBACK ends the result, the PUBREL the task's flow.
		if err := bo.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id}); err != nil {
			t.Fatal(err)
		}
		sendPubrel(t, bo, id)
		if code := expectAck(t, bo, packets.Pubcomp, id); code != 0 {
			t.Fatalf("PUBCOMP reason %#x, want 0 (the task's flow was still there)", code)
		}
		expectOnly(t, b, w, "task")
		if n := cl.State.Inflight.Len(); n != 0 {
			t.Fatalf("%d messages in flight to the back office after its PUBACK", n)
		}
		if err := b.SyncSessions(); err != nil {
			t.Fatal(err)
		}
		if n := storedInflightOf(t, b, "bo"); n != 0 {
			t.Fatalf("%d records in flight to the back office after its PUBACK", n)
		}
	})
}
