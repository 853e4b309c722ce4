package attack

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// The byte bounds: each attack pushes attackVolume bytes at one resource, many times its
// configured bound and twice rssBound, so that an unbounded resource fails the RSS (and
// data_dir) checks however the rest of the agent behaves. The allowed growth is stated
// per test from the configured bound.
var attackVolume = scale(128<<20, 256<<20)

// gcRoom is what RSS may grow beside twice a bound's bytes (the Go heap reaches twice its
// live data before a collection): buffers of the requests in flight, the scheduler,
// goroutine stacks of the attack's connections.
const gcRoom = 16 << 20

// TestAttackStoreBytes SETs keys of 2 KiB (over store_max_key_size) and then 60 KiB values
// under new keys until attackVolume: the store keeps at most store_max_bytes and refuses
// the rest with "-ERR the quota has been exceeded".
func TestAttackStoreBytes(t *testing.T) {
	const maxBytes, maxKey = 4 << 20, 1 << 10
	s := start(t, setup{name: "store-bytes",
		broker: fmt.Sprintf("store_max_bytes = %d\nstore_max_key_size = %d\n", maxBytes, maxKey)})
	runAttack(t, s, attack{name: "store-bytes", sockets: 1, logBudget: 64 << 10, rssGrowth: 2*maxBytes + gcRoom,
		run: func(t *testing.T, s *system) {
			mc := s.storeClient(t, clientOpts{id: "store-filler"})
			if got := mc.mustDo("SET", strings.Repeat("k", 2*maxKey), "v"); !strings.HasPrefix(got, "-ERR ") {
				t.Errorf("SET of a %d-byte key: %q, want an error", 2*maxKey, got)
			}
			value := strings.Repeat("v", 60<<10)
			var stored int
			for i := range attackVolume / len(value) {
				got := mc.mustDo("SET", fmt.Sprintf("fill/%06d", i), value)
				switch {
				case got == "+OK\r\n":
					stored += len(value)
				case got != "-ERR the quota has been exceeded\r\n":
					t.Fatalf("SET %d: %q", i, got)
				}
			}
			if stored > maxBytes || stored == 0 {
				t.Errorf("the store took %d bytes of values, bound %d", stored, maxBytes)
			}
		}})
}

// TestAttackNotifyRegistrations registers KEYNOTIFY on distinct 15 KiB keys from one
// connection: past store_max_notify registrations each is refused, so the registrations
// held stay within store_max_notify keys.
func TestAttackNotifyRegistrations(t *testing.T) {
	const maxNotify, maxKey = 64, 16 << 10
	s := start(t, setup{name: "notify",
		broker: fmt.Sprintf("store_max_notify = %d\nstore_max_key_size = %d\n", maxNotify, maxKey)})
	runAttack(t, s, attack{name: "notify-registrations", sockets: 1, logBudget: 64 << 10, rssGrowth: 2*maxNotify*maxKey + gcRoom,
		run: func(t *testing.T, s *system) {
			mc := s.storeClient(t, clientOpts{id: "notify-filler"})
			pad := strings.Repeat("n", 15<<10)
			registered := 0
			for i := range attackVolume / len(pad) {
				got := mc.mustDo("KEYNOTIFY", fmt.Sprintf("%06d/%s", i, pad))
				switch {
				case got == "+OK\r\n":
					registered++
				case !strings.HasPrefix(got, "-ERR "):
					t.Fatalf("KEYNOTIFY %d: %q", i, got)
				}
			}
			if registered == 0 || registered > maxNotify {
				t.Errorf("%d registrations taken, store_max_notify %d", registered, maxNotify)
			}
		}})
}

// TestAttackSubscriptions subscribes a kept session to distinct 60 KiB filters: past
// max_subscriptions each is refused with SUBACK 0x97 (Quota exceeded), so the session's
// subscriptions, in memory and in the sessions journal, stay within the bound.
func TestAttackSubscriptions(t *testing.T) {
	const maxSubs, filterSize = 64, 60 << 10
	s := start(t, setup{name: "subscriptions",
		broker: fmt.Sprintf("max_subscriptions = %d\n", maxSubs)})
	runAttack(t, s, attack{name: "subscriptions", sockets: 1, logBudget: 64 << 10,
		rssGrowth: 2*maxSubs*filterSize + gcRoom, dataBudget: 2 * maxSubs * filterSize,
		run: func(t *testing.T, s *system) {
			mc := s.mustConnect(t, clientOpts{id: "subscriber", sessionExpiry: 3600})
			pad := strings.Repeat("f", filterSize)
			taken := 0
			for i := range attackVolume / filterSize {
				code, err := mc.subscribe(fmt.Sprintf("s/%06d/%s", i, pad))
				if err != nil {
					t.Fatalf("SUBSCRIBE %d: %v", i, err)
				}
				switch {
				case code < 0x80:
					taken++
				case code != packets.ErrQuotaExceeded.Code:
					t.Fatalf("SUBSCRIBE %d: SUBACK 0x%02x, want 0x97 past the bound", i, code)
				}
			}
			if taken > maxSubs {
				t.Errorf("%d subscriptions taken, max_subscriptions %d", taken, maxSubs)
			}
		}})
}

// TestAttackPendingWrites subscribes a client that reads nothing and publishes 512 KiB
// messages to it: what waits to be written to it stays within max_pending_write_bytes
// (the rest is dropped and counted), not mochi's 1,024 packets of any size.
func TestAttackPendingWrites(t *testing.T) {
	const maxPending = 1 << 20
	s := start(t, setup{name: "pending-writes",
		broker: fmt.Sprintf("max_pending_write_bytes = %d\n", maxPending)})
	runAttack(t, s, attack{name: "pending-writes", sockets: 2, logBudget: 64 << 10, rssGrowth: 2*maxPending + gcRoom,
		run: func(t *testing.T, s *system) {
			slow := s.rawDial(t)
			defer slow.conn.Close()
			subscribeRaw(t, slow, "slow-reader", "pw/#")
			publishVolume(t, s, "pw/x", 512<<10, false)
		}})
}

// TestAttackRetained publishes retained 512 KiB messages on distinct topics: the retained
// messages kept, in memory and in the sessions journal, stay within max_retained_bytes.
func TestAttackRetained(t *testing.T) {
	const maxRetained = 1 << 20
	s := start(t, setup{name: "retained",
		broker: fmt.Sprintf("max_retained_bytes = %d\n", maxRetained)})
	runAttack(t, s, attack{name: "retained", sockets: 1, logBudget: 64 << 10,
		rssGrowth: 2*maxRetained + gcRoom, dataBudget: 2 * maxRetained,
		run: func(t *testing.T, s *system) { publishVolume(t, s, "", 512<<10, true) }})
}

// TestAttackOfflineQueues leaves two kept sessions subscribed and away, and publishes
// 512 KiB QoS 1 messages to them: each session queues at most max_session_bytes, all
// sessions together max_queued_bytes, in memory and in the sessions journal.
func TestAttackOfflineQueues(t *testing.T) {
	const perSession, total = 1 << 20, 4 << 20
	s := start(t, setup{name: "offline-queues",
		broker: fmt.Sprintf("max_session_bytes = %d\nmax_queued_bytes = %d\n", perSession, total)})
	runAttack(t, s, attack{name: "offline-queues", sockets: 1, logBudget: 64 << 10,
		rssGrowth: 2*total + gcRoom, dataBudget: 2 * total,
		run: func(t *testing.T, s *system) {
			for _, id := range []string{"away-1", "away-2"} {
				mc := s.mustConnect(t, clientOpts{id: id, sessionExpiry: 3600})
				if code, err := mc.subscribe("q/#"); err != nil || code >= 0x80 {
					t.Fatalf("%s: SUBACK 0x%02x %v", id, code, err)
				}
				mc.close()
			}
			publishVolume(t, s, "q/x", 512<<10, false)
		}})
}

// TestAttackConnecting opens connections that never send CONNECT, far more than
// max_connecting: the agent holds at most max_connecting of them (the rest wait in the
// kernel's backlog or are refused), so its descriptors stay within the bound.
func TestAttackConnecting(t *testing.T) {
	const maxConnecting = 32
	s := start(t, setup{name: "connecting",
		broker: fmt.Sprintf("max_connecting = %d\n", maxConnecting)})
	runAttack(t, s, attack{name: "connecting", sockets: maxConnecting, logBudget: 64 << 10,
		run: func(t *testing.T, s *system) {
			var conns []*rawConn
			defer func() {
				for _, c := range conns {
					_ = c.conn.Close()
				}
			}()
			for range 8 * maxConnecting {
				c, err := s.tryRawDial()
				if err != nil {
					break
				}
				conns = append(conns, c)
			}
			s.mon.waitSamples(5) // held while the monitor looks
		}})
}

// TestAttackKeepalive connects with keepalive 0 (none) and with 65535 s, then goes
// silent: the broker's Server Keep Alive (2 s here) applies to both, sent in the CONNACK,
// and the connection is closed 1.5 times that after the last packet.
func TestAttackKeepalive(t *testing.T) {
	const serverKeepAlive = 2
	s := start(t, setup{name: "keepalive",
		broker: fmt.Sprintf("server_keep_alive = \"%ds\"\n", serverKeepAlive)})
	runAttack(t, s, attack{name: "keepalive", sockets: 2, logBudget: 16 << 10, run: func(t *testing.T, s *system) {
		for _, keepalive := range []uint16{0, 65535} {
			c := s.rawDial(t)
			pk := connectPacket(fmt.Sprintf("keepalive-%d", keepalive))
			pk.Connect.Keepalive = keepalive
			if err := c.send(pk); err != nil {
				t.Fatal(err)
			}
			typ, body, err := c.read(waitFor)
			if err != nil || typ != packets.Connack {
				t.Fatalf("keepalive %d: packet type %d, %v", keepalive, typ, err)
			}
			// Property 0x13, Server Keep Alive, two bytes [MQTT-3.2.2-21].
			if !bytes.Contains(body, []byte{0x13, 0, serverKeepAlive}) {
				t.Errorf("keepalive %d: CONNACK % x without Server Keep Alive %d", keepalive, body, serverKeepAlive)
			}
			if _, err := c.closedWithin(3*serverKeepAlive*time.Second/2 + 2*time.Second); err != nil {
				t.Errorf("keepalive %d, silent: %v", keepalive, err)
			}
		}
	}})
}

// subscribeRaw connects c as id and subscribes it to filter with QoS 0; from then on the
// caller decides whether c reads.
func subscribeRaw(t *testing.T, c *rawConn, id, filter string) {
	t.Helper()
	if code, err := c.connack(connectPacket(id)); err != nil || code != 0 {
		t.Fatalf("%s: CONNACK 0x%02x %v", id, code, err)
	}
	if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: filter}}}); err != nil {
		t.Fatal(err)
	}
	if typ, _, err := c.read(waitFor); err != nil || typ != packets.Suback {
		t.Fatalf("%s: SUBACK: type %d, %v", id, typ, err)
	}
}

// publishVolume publishes attackVolume bytes in messages of size bytes with QoS 1, to
// topic, or with retain to a topic of their own each when retain is set. A refusal
// (PUBACK 0x80 or more) is an answer too: the attack goes on.
func publishVolume(t *testing.T, s *system, topic string, size int, retain bool) {
	t.Helper()
	mc := s.mustConnect(t, clientOpts{id: "volume-publisher"})
	payload := bytes.Repeat([]byte("p"), size)
	for i := range attackVolume / size {
		to := topic
		if retain {
			to = fmt.Sprintf("retained/%06d", i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		pr, err := mc.c.Publish(ctx, &paho.Publish{Topic: to, QoS: 1, Retain: retain, Payload: payload})
		cancel()
		if err != nil && pr == nil { // with a PUBACK it is a refusal: the attack goes on
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}
