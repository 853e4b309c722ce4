package broker

import (
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// connackGate holds the first CONNACK of client id until released, so that another
// connection can take the client over between mochi's registering it and its CONNACK.
type connackGate struct {
	mqtt.HookBase
	id      string
	armed   atomic.Bool
	held    chan struct{} // closed once a CONNACK is held
	release chan struct{}
}

func (g *connackGate) ID() string           { return "test-connack-gate" }
func (g *connackGate) Provides(b byte) bool { return b == mqtt.OnPacketEncode }
func (g *connackGate) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Connack && cl.ID == g.id && g.armed.CompareAndSwap(true, false) {
		close(g.held)
		<-g.release
	}
	return pk
}

// TestConnectionTakenOverBeforeItsConnackIsClosed: a connection taken over between mochi's
// registering its client and its CONNACK (two clients with one id reconnecting at once, as
// two devices configured alike do all day) is sent a DISCONNECT, which leaves the closing
// of the connection to its reader (mochi's DisconnectLinger); its CONNACK then fails and
// its reader ends without reading. The socket must be closed then: left open, counted
// among the connections before CONNACK, each such race would take one of max_connecting's
// slots (and a descriptor) away until none was left and every new connection was closed
// at accept.
func TestConnectionTakenOverBeforeItsConnackIsClosed(t *testing.T) {
	gate := &connackGate{id: "twin", held: make(chan struct{}), release: make(chan struct{})}
	gate.armed.Store(true)
	b := startBroker(t, Options{}, gate)

	first := dialMem(t, b.Addr())
	first.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:     packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: "twin"},
	})
	select {
	case <-gate.held:
	case <-time.After(waitFor):
		t.Fatal("the first connection's CONNACK was never written")
	}
	second, code, _ := connectAs(t, b.Addr(), "twin", "", "", 5, true)
	if code != 0 {
		t.Fatalf("the second connection: CONNACK 0x%02x", code)
	}
	close(gate.release)
	// The first connection reads the DISCONNECT of the takeover, then the end of the stream,
	// and closes as a client does.
	expectWithin(t, first, packets.Disconnect, "DISCONNECT of the connection taken over")
	if _, _, err := readWithin(first, promptly); err == nil {
		t.Fatal("the connection taken over goes on after its DISCONNECT")
	}
	first.close()

	deadline := time.Now().Add(waitFor)
	for {
		open, connecting := b.listener.counts()
		if open == 1 && connecting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, %d of them before CONNACK; want only the second, past it", open, connecting)
		}
		time.Sleep(10 * time.Millisecond)
	}
	second.close()
}
