package broker

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// connectKeepAlive connects id with the MQTT version (4: 3.1.1, 5) asking for keep-alive
// keepAlive, and returns the client with its CONNACK decoded.
func connectKeepAlive(t *testing.T, addr, id string, version byte, keepAlive uint16) (*memClient, packets.Packet) {
	t.Helper()
	c := dialMem(t, addr)
	connect := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: version,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true,
			Keepalive: keepAlive, ClientIdentifier: id},
	}
	if version == 5 {
		c.write(t, connect)
	} else {
		write311(t, c, connect)
	}
	body := expectWithin(t, c, packets.Connack, id+"'s CONNACK")
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ProtocolVersion: version}
	if err := ack.ConnackDecode(body); err != nil {
		t.Fatalf("%s's CONNACK % x: %v", id, body, err)
	}
	if ack.ReasonCode != 0 {
		t.Fatalf("%s's CONNACK reason %#x", id, ack.ReasonCode)
	}
	return c, ack
}

// TestServerKeepAliveInConnack: an MQTT 5 client asking for keep-alive 0 (never time out)
// or for more than the broker's Server Keep Alive is told the broker's value in CONNACK
// [MQTT-3.1.2-21] (the Paho interoperability suite's test_server_keep_alive: 120 asked,
// 60 configured); one asking for less keeps its own, and CONNACK carries none.
func TestServerKeepAliveInConnack(t *testing.T) {
	b := startBroker(t, Options{ServerKeepAlive: 60 * time.Second})
	for _, tc := range []struct {
		asked uint16
		told  bool
	}{{0, true}, {120, true}, {61, true}, {60, false}, {30, false}} {
		_, ack := connectKeepAlive(t, b.Addr(), "ska", 5, tc.asked)
		switch {
		case tc.told && (!ack.Properties.ServerKeepAliveFlag || ack.Properties.ServerKeepAlive != 60):
			t.Errorf("keep-alive %d asked: CONNACK Server Keep Alive %d (present %v), want 60",
				tc.asked, ack.Properties.ServerKeepAlive, ack.Properties.ServerKeepAliveFlag)
		case !tc.told && ack.Properties.ServerKeepAliveFlag:
			t.Errorf("keep-alive %d asked: CONNACK Server Keep Alive %d, want none (the client's stands)",
				tc.asked, ack.Properties.ServerKeepAlive)
		}
	}
}

// TestServerKeepAliveBoundsSilentClients: a client that asked for keep-alive 0 (MQTT 5 or
// 3.1.1), or an MQTT 3.1.1 client that asked for more than the Server Keep Alive (it
// cannot be told), and then sends nothing is disconnected after 1.5 times the Server Keep
// Alive, so no peer can hold connections, goroutines and buffers forever with one
// CONNECT each.
func TestServerKeepAliveBoundsSilentClients(t *testing.T) {
	const ska = time.Second
	b := startBroker(t, Options{ServerKeepAlive: ska})
	for _, tc := range []struct {
		name    string
		version byte
		asked   uint16
	}{{"mqtt5-none", 5, 0}, {"mqtt311-none", 4, 0}, {"mqtt311-longer", 4, 600}} {
		c, _ := connectKeepAlive(t, b.Addr(), tc.name, tc.version, tc.asked)
		connected := time.Now()
		bound := ska*3/2 + promptly
		first, _, err := readWithin(c, bound)
		if err == nil {
			t.Fatalf("%s: packet type %d from the broker, want the connection closed", tc.name, first>>4)
		}
		if !errors.Is(err, io.EOF) {
			t.Fatalf("%s: still connected %v after CONNECT without a packet (Server Keep Alive %v): %v",
				tc.name, time.Since(connected).Round(time.Millisecond), ska, err)
		}
	}
}

// TestKeepAliveWithinServerKeepAliveStands: a client asking for less than the Server Keep
// Alive is held to its own keep-alive, not the server's: silent, it is disconnected after
// 1.5 times its own.
func TestKeepAliveWithinServerKeepAliveStands(t *testing.T) {
	b := startBroker(t, Options{ServerKeepAlive: time.Hour})
	c, _ := connectKeepAlive(t, b.Addr(), "short-keepalive", 5, 1)
	if first, _, err := readWithin(c, 1500*time.Millisecond+promptly); !errors.Is(err, io.EOF) {
		t.Fatalf("keep-alive 1 s under a Server Keep Alive of an hour: %v (packet type %d), want closed", err, first>>4)
	}
}
