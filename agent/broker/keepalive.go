package broker

import (
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// DefaultServerKeepAlive is the keep-alive the broker holds a client to when it asks for
// none (0) or for a longer one (Options.ServerKeepAlive).
const DefaultServerKeepAlive = 300 * time.Second

// keepAliveHook bounds every client's keep-alive by the server's (MQTT 5 Server Keep
// Alive, section 3.2.2.3.14). A client asking for keep-alive 0 (no timeout) or for more
// than max is held to max: an MQTT 5 client is told so in CONNACK (Server Keep Alive,
// which it must use instead of its own [MQTT-3.2.2-21]); an MQTT 3.1.1 client cannot be
// told, and is disconnected all the same after 1.5 times max without a packet. A client
// asking for at most max keeps its own value, and CONNACK carries none.
//
// Without it, mochi sets no read deadline for keep-alive 0: a connection that sent
// CONNECT with keep-alive 0 and then nothing held its goroutines and buffers forever.
type keepAliveHook struct {
	mqtt.HookBase
	max uint16 // seconds, at least 1
}

func newKeepAliveHook(d time.Duration) *keepAliveHook {
	if d <= 0 {
		d = DefaultServerKeepAlive
	}
	secs := min(max(d/time.Second, 1), 65535)
	return &keepAliveHook{max: uint16(secs)}
}

func (h *keepAliveHook) ID() string { return "faceagent-keepalive" }

func (h *keepAliveHook) Provides(b byte) bool { return b == mqtt.OnConnect }

// OnConnect runs after mochi took the client's keep-alive from CONNECT and before it sets
// the first read deadline from cl.State.Keepalive and writes CONNACK, which carries
// cl.State.Keepalive as Server Keep Alive when cl.State.ServerKeepalive is set.
func (h *keepAliveHook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	if k := pk.Connect.Keepalive; k != 0 && k <= h.max {
		return nil
	}
	cl.State.Keepalive = h.max
	cl.State.ServerKeepalive = cl.Properties.ProtocolVersion == 5
	return nil
}
