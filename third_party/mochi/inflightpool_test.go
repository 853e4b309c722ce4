// SPDX-License-Identifier: MIT

package mqtt

import (
	"bytes"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// inflightPublish is a QoS 1 message as mochi keeps it in flight.
func inflightPublish(id uint16, created, expiry int64, payload string) packets.Packet {
	return packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		PacketID:    id, TopicName: "t", Payload: []byte(payload), Created: created, Expiry: expiry,
	}
}

// TestInflightEntriesStayApart: faceagent patch (inflight allocations): the in-flight set
// keeps its packets in entries it reuses once deleted; what Get, GetAll, NextImmediate and
// Clone hand out must not change when an entry is deleted and reused for another message, nor a clone's
// entries when the original's are deleted.
func TestInflightEntriesStayApart(t *testing.T) {
	in := NewInflights()
	in.Set(inflightPublish(1, 10, 0, "one"))
	in.Set(inflightPublish(2, 11, -1, "two"))
	in.Set(inflightPublish(3, 9, -1, "three"))
	clone := in.Clone()

	got, ok := in.Get(1)
	if !ok || string(got.Payload) != "one" {
		t.Fatalf("Get(1) = %q, %v", got.Payload, ok)
	}
	next, ok := in.NextImmediate() // the lowest Created among those waiting for quota
	if !ok || next.PacketID != 3 {
		t.Fatalf("NextImmediate = %d, %v; want 3", next.PacketID, ok)
	}
	if typ, ok := in.TypeOf(2); !ok || typ != packets.Publish {
		t.Fatalf("TypeOf(2) = %d, %v", typ, ok)
	}
	if _, ok := in.TypeOf(4); ok || in.Has(4) {
		t.Fatal("id 4 reported in flight")
	}

	for _, id := range []uint16{1, 2, 3} {
		if !in.Delete(id) {
			t.Fatalf("Delete(%d) found nothing", id)
		}
	}
	if in.Has(1) || in.Len() != 0 {
		t.Fatalf("after Delete: Has(1) %v, Len %d", in.Has(1), in.Len())
	}
	if pk, ok := in.NextImmediate(); ok {
		t.Fatalf("NextImmediate = %d with nothing in flight", pk.PacketID)
	}
	// A message no longer waiting for quota once set again is not the next one.
	in.Set(inflightPublish(50, 1, -1, "waits"))
	in.Set(inflightPublish(50, 1, 0, "sent"))
	if pk, ok := in.NextImmediate(); ok {
		t.Fatalf("NextImmediate = %d, none waits", pk.PacketID)
	}
	in.Set(inflightPublish(51, 2, -1, "waits"))
	if pk, ok := in.NextImmediate(); !ok || pk.PacketID != 51 {
		t.Fatalf("NextImmediate = %d, %v; want 51", pk.PacketID, ok)
	}
	in.Delete(50)
	in.Delete(51)
	if pk, ok := clone.NextImmediate(); !ok || pk.PacketID != 3 {
		t.Fatalf("clone's NextImmediate = %d, %v; want 3", pk.PacketID, ok)
	}
	// New messages take the deleted entries over.
	for id := uint16(4); id < 40; id++ {
		in.Set(inflightPublish(id, 20, 0, "later"))
	}
	if string(got.Payload) != "one" || got.PacketID != 1 || string(next.Payload) != "three" {
		t.Fatalf("copies handed out changed: %d %q, %d %q", got.PacketID, got.Payload, next.PacketID, next.Payload)
	}
	all := clone.GetAll(false)
	if len(all) != 3 {
		t.Fatalf("clone holds %d messages, want 3", len(all))
	}
	want := map[uint16]string{1: "one", 2: "two", 3: "three"}
	for _, pk := range all {
		if string(pk.Payload) != want[pk.PacketID] || pk.TopicName != "t" {
			t.Fatalf("clone's %d: %q %q, want %q", pk.PacketID, pk.TopicName, pk.Payload, want[pk.PacketID])
		}
	}

	// Set on an id in flight replaces the message in place.
	if in.Set(inflightPublish(4, 21, 0, "again")) {
		t.Fatal("Set on an id in flight reported a new entry")
	}
	if pk, _ := in.Get(4); !bytes.Equal(pk.Payload, []byte("again")) || pk.Created != 21 {
		t.Fatalf("Get(4) = %q created %d", pk.Payload, pk.Created)
	}
}

// BenchmarkInflightNextImmediate: what the server does after each packet from a client
// with messages in flight (a back office with 100 unacknowledged results and acks): look
// for a message waiting for send quota, usually none; then one message acknowledged and
// the next put in flight.
//
//	go test -run '^$' -bench InflightNextImmediate -benchmem github.com/mochi-mqtt/server/v2
func BenchmarkInflightNextImmediate(b *testing.B) {
	in := NewInflights()
	const inFlight = 100
	for id := uint16(1); id <= inFlight; id++ {
		in.Set(inflightPublish(id, int64(id), 0, `{"taskId":"b-1","status":"done"}`))
	}
	b.ReportAllocs()
	next := uint16(inFlight + 1)
	for i := 0; i < b.N; i++ { // this module is go 1.21: no b.Loop
		if _, ok := in.NextImmediate(); ok {
			b.Fatal("a message waits for quota")
		}
		in.Delete(next - inFlight)
		in.Set(inflightPublish(next, int64(next), 0, `{"taskId":"b-1","status":"done"}`))
		next++
		if next == 0 || next > 60000 {
			b.StopTimer()
			for id := next - inFlight; id != next; id++ {
				in.Delete(id)
			}
			next = inFlight + 1
			for id := uint16(1); id <= inFlight; id++ {
				in.Set(inflightPublish(id, int64(id), 0, `{"taskId":"b-1","status":"done"}`))
			}
			b.StartTimer()
		}
	}
}
