package upstream

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/eclipse/paho.golang/packets"
)

// connack is a CONNACK as the broker sends it, with or without the session it kept.
func connack(present bool) (*packets.Connect, *packets.Connack) {
	expiry := uint32(3600)
	return &packets.Connect{CleanStart: false, Properties: &packets.Properties{SessionExpiryInterval: &expiry}},
		&packets.Connack{SessionPresent: present, Properties: &packets.Properties{}}
}

// readPublishes parses the PUBLISH packets written to w.
func readPublishes(t *testing.T, w *bytes.Buffer) []*packets.Publish {
	t.Helper()
	var out []*packets.Publish
	for w.Len() > 0 {
		cp, err := packets.ReadPacket(w)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := cp.Content.(*packets.Publish); ok {
			out = append(out, p)
		}
	}
	return out
}

// The session writes messages in the order they were published and answers each one's
// PUBACK to its own handle; after a reconnect without the session, the messages in
// flight fail and a message that follows one of them is refused, so the caller sends the
// lost ones again first; with the session kept, the messages in flight are resent by
// paho and their PUBACKs still reach the handles.
func TestPipeSessionOrderAndLoss(t *testing.T) {
	ctx := context.Background()
	s := newPipeSession(3600)
	var wire bytes.Buffer
	cp, ca := connack(false)
	if err := s.ConAckReceived(&wire, cp, ca); err != nil {
		t.Fatal(err)
	}
	a, err := s.publish(ctx, "r", []byte("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.publish(ctx, "r", []byte("b"), a)
	if err != nil {
		t.Fatal(err)
	}
	pubs := readPublishes(t, &wire)
	if len(pubs) != 2 || string(pubs[0].Payload) != "a" || string(pubs[1].Payload) != "b" {
		t.Fatalf("written %v, want a then b", pubs)
	}
	// The PUBACK of b comes first: it answers b's handle only.
	ack := func(id uint16) {
		t.Helper()
		cp := packets.NewControlPacket(packets.PUBACK)
		cp.Content.(*packets.Puback).PacketID = id
		if err := s.PacketReceived(cp, nil); err != nil {
			t.Fatal(err)
		}
	}
	ack(pubs[1].PacketID)
	if err := b.wait(ctx); err != nil {
		t.Fatalf("b: %v", err)
	}

	// The connection drops and comes back with the session: paho resends a, its PUBACK
	// reaches a's handle.
	if err := s.ConnectionLost(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.publish(ctx, "r", []byte("c"), a); err == nil {
		t.Fatal("published while the connection was down")
	}
	cp, ca = connack(true)
	if err := s.ConAckReceived(&wire, cp, ca); err != nil {
		t.Fatal(err)
	}
	resent := readPublishes(t, &wire)
	if len(resent) != 1 || string(resent[0].Payload) != "a" || !resent[0].Duplicate {
		t.Fatalf("resent %v, want a (DUP)", resent)
	}
	ack(resent[0].PacketID)
	if err := a.wait(ctx); err != nil {
		t.Fatalf("a after the reconnect: %v", err)
	}

	// c is in flight when the broker comes back without the session: c fails, and d,
	// which follows c, is refused.
	c, err := s.publish(ctx, "r", []byte("c"), nil)
	if err != nil {
		t.Fatal(err)
	}
	readPublishes(t, &wire)
	if err := s.ConnectionLost(nil); err != nil {
		t.Fatal(err)
	}
	cp, ca = connack(false)
	if err := s.ConAckReceived(&wire, cp, ca); err != nil {
		t.Fatal(err)
	}
	if err := c.wait(ctx); !errors.Is(err, errSessionLost) {
		t.Fatalf("c after a reconnect without the session: %v, want errSessionLost", err)
	}
	if _, err := s.publish(ctx, "r", []byte("d"), c); !errors.Is(err, errSessionLost) {
		t.Fatalf("d after a lost c: %v, want errSessionLost", err)
	}
	if got := readPublishes(t, &wire); len(got) != 0 {
		t.Fatalf("written after the loss: %v", got)
	}
}
