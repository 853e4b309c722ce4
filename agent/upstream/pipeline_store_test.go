package upstream

import (
	"bytes"
	"io"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/store/memory"
)

// The session's store hands publish the encoding it stored, once and only for the
// message put last; it is what paho writes for the packet, and what a resend reads back.
func TestSentStoreKeepsTheWireEncoding(t *testing.T) {
	s := &sentStore{Store: memory.New()}
	pb := (&paho.Publish{QoS: 1, Topic: "faceagent/gw/results", Payload: []byte(`{"taskId":"t-1"}`)}).Packet()
	pb.PacketID = 7
	var want bytes.Buffer
	if _, err := pb.WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(7, packets.PUBLISH, pb); err != nil {
		t.Fatal(err)
	}
	if got := s.take(7); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("take(7) = %x, want paho's encoding %x", got, want.Bytes())
	}
	if got := s.take(7); got != nil {
		t.Errorf("taken twice: %x", got)
	}
	r, err := s.Get(7)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := io.ReadAll(r)
	if !bytes.Equal(stored, want.Bytes()) {
		t.Errorf("stored %x, want %x", stored, want.Bytes())
	}
	pb.PacketID = 8
	if err := s.Put(8, packets.PUBLISH, pb); err != nil {
		t.Fatal(err)
	}
	if got := s.take(7); got != nil {
		t.Errorf("take(7) after 8 was put: %x, want nil (publish encodes itself)", got)
	}
}
