package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
	"github.com/seed0e69bba5/faceagent/agent/config"
)

// A terminal's heartbeat fits its mochi reader's 8 KiB stack (third_party/mochi reads and
// runs the hooks by pointer; links.deliver leaves heartbeats to the pump): 64 raw MQTT
// terminals heartbeat once (everything warmed up), the collector shrinks the parked
// readers' stacks to 4 KiB, and a second round of heartbeats may grow each to 8 KiB (64
// new 8 KiB stacks, 512 KiB: the old ones stay in the stack pool until the next
// collection), not to 16 KiB (1 MiB), as a read and a PUBLISH's hooks by value did. The
// heartbeats' effects are checked too: every terminal is online in the outbox.
func TestHeartbeatsKeepReaderStacksSmall(t *testing.T) {
	if raceEnabled {
		t.Skip("frame sizes and the stack guard are larger under -race")
	}
	const n = 64
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-s\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[journal]\nsync = \"none\"\n", t.TempDir())
	for i := range n {
		src += fmt.Sprintf("[[devices]]\nid = \"t%02d\"\n", i)
	}
	cfg, err := config.Parse("s.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, _ := startAgentFull(t, cfg)
	terms := make([]*rawTerminal, n)
	for i := range terms {
		terms[i] = dialRawTerminal(t, addr, fmt.Sprintf("t%02d", i))
		defer terms[i].conn.Close()
	}
	round := func() {
		for _, c := range terms {
			c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish},
				TopicName: "dev/face/" + c.id + "/heartbeat",
				Payload:   fmt.Appendf(nil, `{"deviceId":%q,"time":"2026-01-01T00:00:00Z","firmware":"f","persons":1}`, c.id)})
		}
		// The reader handles a client's packets in order: the PINGRESP means the heartbeat
		// before it was handled (or handed on).
		for _, c := range terms {
			c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
			c.expect(t, packets.Pingresp)
		}
	}
	round()
	pollUntil(t, "every terminal online after its heartbeat", func() bool {
		text := scrape(t, a)
		for _, c := range terms {
			if v, ok := seriesValue(text, `faceagent_device_online{device="`+c.id+`"}`); !ok || v != 1 {
				return false
			}
		}
		return true
	})

	// Three collections: each halves a stack at most once (32 KiB → 8 KiB takes two).
	for range 3 {
		runtime.GC()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	round()
	runtime.ReadMemStats(&after)
	grown := int64(after.StackInuse) - int64(before.StackInuse)
	t.Logf("stacks in use: %d KiB before the second round, %d KiB after (%+d B per terminal)",
		before.StackInuse>>10, after.StackInuse>>10, grown/n)
	// Measured: 4.5–7 KiB per terminal (readers to 8 KiB, plus the pump and the forwarder
	// growing once); 12.5 KiB with a read and a PUBLISH's hooks by value.
	if grown > n*10<<10 {
		t.Errorf("stacks grew by %d KiB for a round of %d heartbeats: the readers grew", grown>>10, n)
	}
}

// rawTerminal is a terminal as an MQTT v5 client with no goroutine and no library: its
// reader goroutine in the broker is the only one it adds.
type rawTerminal struct {
	id   string
	conn net.Conn
	r    *bufio.Reader
}

// dialRawTerminal connects as id and subscribes to its command topic, as a terminal does.
func dialRawTerminal(t *testing.T, addr, id string) *rawTerminal {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawTerminal{id: id, conn: conn, r: bufio.NewReader(conn)}
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: id}})
	c.expect(t, packets.Connack)
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "dev/face/" + id, Qos: 1}}})
	c.expect(t, packets.Suback)
	return c
}

func (c *rawTerminal) write(t *testing.T, pk packets.Packet) {
	t.Helper()
	pk.ProtocolVersion = 5
	var buf bytes.Buffer
	if err := brokertest.EncodeClientPacket(&buf, pk); err != nil {
		t.Fatal(err)
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// expect reads packets until one of type typ, which it returns the type of.
func (c *rawTerminal) expect(t *testing.T, typ byte) {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			t.Fatalf("%s: waiting for packet type %d: %v", c.id, typ, err)
		}
		size, mul := 0, 1
		for {
			d, err := c.r.ReadByte()
			if err != nil {
				t.Fatalf("%s: %v", c.id, err)
			}
			size += int(d&127) * mul
			mul *= 128
			if d&128 == 0 {
				break
			}
		}
		if _, err := io.CopyN(io.Discard, c.r, int64(size)); err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		if b>>4 == typ {
			return
		}
	}
}
