package broker

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// isCommandTopic is the agent's terminal matcher in these tests: dev/face/{id}, no wildcard.
func isCommandTopic(topic string) bool {
	id, ok := strings.CutPrefix(topic, "dev/face/")
	return ok && id != "" && !strings.ContainsAny(id, "/+#")
}

// TestClientLayout: the broker installs its terminal queues hook, which costs nothing
// without a terminal matcher. (What the hook needs from mochi is exported by the vendored
// mochi and tested there: TestResizeOutbound in third_party/mochi.)
func TestClientLayout(t *testing.T) {
	b := startBroker(t, Options{})
	if b.terminals == nil {
		t.Fatal("the broker runs without its terminal queues hook")
	}
	if b.terminals.Provides(mqtt.OnSubscribe) {
		t.Fatal("without a terminal matcher the hook must provide nothing (it would cost every write)")
	}
}

// TestTerminalQueues: a client whose first SUBSCRIBE is for terminal command topics only
// gets the short queue; a back office, a terminal that also subscribes to something else,
// and a terminal's second SUBSCRIBE keep or change nothing.
func TestTerminalQueues(t *testing.T) {
	reads := &readBuffers{sizes: make(map[string]int)}
	b := startBroker(t, Options{TerminalTopic: isCommandTopic}, reads)
	reads.tq = b.terminals
	srv := b.Server()
	queue := func(id string) int {
		t.Helper()
		cl, ok := srv.Clients.Get(id)
		if !ok {
			t.Fatalf("no client %s", id)
		}
		return b.terminals.pendingWrites(cl)
	}
	term := memConnect(t, b.Addr(), "t01")
	defer term.close()
	office := memConnectTo(t, b.Addr(), "office", "faceagent/gw/results", "faceagent/gw/devices/+/ack")
	defer office.close()
	mixed := memConnectTo(t, b.Addr(), "t02", "dev/face/t02", "dev/face/#")
	defer mixed.close()
	if got := queue("t01"); got != DefaultTerminalPendingWrites {
		t.Errorf("terminal's queue: %d slots, want %d", got, DefaultTerminalPendingWrites)
	}
	if got := queue("office"); got != DefaultMaxPendingWrites {
		t.Errorf("back office's queue: %d slots, want %d", got, DefaultMaxPendingWrites)
	}
	if got := queue("t02"); got != DefaultMaxPendingWrites {
		t.Errorf("queue of a terminal also subscribed to dev/face/#: %d slots, want %d", got, DefaultMaxPendingWrites)
	}
	if got := b.terminals.swapped.Load(); got != 1 {
		t.Errorf("%d queues replaced, want 1", got)
	}
	if got := reads.size("t01"); got != terminalReadBuffer {
		t.Errorf("terminal's read buffer: %d bytes, want %d", got, terminalReadBuffer)
	}
	if got := reads.size("office"); got != srv.Options.ClientNetReadBufferSize {
		t.Errorf("back office's read buffer: %d bytes, want %d", got, srv.Options.ClientNetReadBufferSize)
	}

	// A second SUBSCRIBE (now the client has a subscription) changes nothing.
	term.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID: 2, Filters: packets.Subscriptions{{Filter: "dev/face/t01", Qos: 1}}})
	term.expect(t, packets.Suback)
	if got := b.terminals.swapped.Load(); got != 1 {
		t.Errorf("%d queues replaced after a second SUBSCRIBE, want 1", got)
	}

	// Commands, many more than the short queue holds, one after another as the agent
	// sends them: every one arrives, in order, and nothing is dropped.
	for i := range 3 * DefaultTerminalPendingWrites {
		want := []byte{byte(i)}
		if err := srv.Publish("dev/face/t01", want, false, 1); err != nil {
			t.Fatal(err)
		}
		if got := term.expectPublishAndAck(t); string(got) != string(want) {
			t.Fatalf("command %d: payload %v, want %v", i, got, want)
		}
	}
	if n := b.DroppedMessages(); n != 0 {
		t.Fatalf("%d messages dropped", n)
	}
}

// readBuffers records each client's read buffer size on its reader goroutine, after its
// SUBSCRIBE was handled.
type readBuffers struct {
	mqtt.HookBase
	tq    *terminalQueues
	mu    sync.Mutex
	sizes map[string]int
}

func (h *readBuffers) ID() string           { return "test-read-buffers" }
func (h *readBuffers) Provides(b byte) bool { return b == mqtt.OnSubscribed }
func (h *readBuffers) OnSubscribed(cl *mqtt.Client, _ packets.Packet, _ []byte) {
	n := h.tq.readBuffer(cl)
	h.mu.Lock()
	h.sizes[cl.ID] = n
	h.mu.Unlock()
}

func (h *readBuffers) size(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sizes[id]
}

// dropRecorder records the QoS 0 messages mochi drops for a full queue (OnPublishDropped).
type dropRecorder struct {
	mqtt.HookBase
	mu      sync.Mutex
	dropped []uint64
}

func (h *dropRecorder) ID() string           { return "test-drop-recorder" }
func (h *dropRecorder) Provides(b byte) bool { return b == mqtt.OnPublishDropped }
func (h *dropRecorder) OnPublishDropped(_ *mqtt.Client, pk packets.Packet) {
	h.mu.Lock()
	h.dropped = append(h.dropped, binary.BigEndian.Uint64(pk.Payload))
	h.mu.Unlock()
}

// TestTerminalQueueLosesNothingSilently: a terminal that stops reading fills its socket and
// then its short queue. Every QoS 0 message mochi drops beyond it is reported
// (OnPublishDropped, DroppedMessages), so a publisher could send it again; everything not
// reported dropped arrives, and the messages sent again arrive too. (QoS 1/2 messages are
// held in the session instead: TestHeldMessagesGoOutInOrder.) The queue's bytes are not
// bounded here: the test is about its slots.
func TestTerminalQueueLosesNothingSilently(t *testing.T) {
	rec := &dropRecorder{}
	b := startBroker(t, Options{TerminalTopic: isCommandTopic, MaxPendingWriteBytes: -1}, rec)
	srv := b.Server()
	term := memConnect(t, b.Addr(), "t01")
	defer term.close()

	payload := make([]byte, 64<<10)
	publish := func(i uint64) {
		t.Helper()
		binary.BigEndian.PutUint64(payload, i)
		if err := srv.Publish("dev/face/t01", payload, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The terminal reads nothing meanwhile: its writer blocks on a full socket, then the
	// queue fills, then mochi drops.
	var sent uint64
	for ; sent < 4096 && b.DroppedMessages() < 3; sent++ {
		publish(sent)
	}
	if b.DroppedMessages() < 3 {
		t.Fatalf("%d messages of 64 KB to a terminal that reads nothing, %d drops", sent, b.DroppedMessages())
	}
	rec.mu.Lock()
	dropped := append([]uint64(nil), rec.dropped...)
	rec.mu.Unlock()
	t.Logf("%d messages of 64 KB sent, %d dropped", sent, len(dropped))
	if int64(len(dropped)) != b.DroppedMessages() {
		t.Fatalf("hook saw %d drops, DroppedMessages %d", len(dropped), b.DroppedMessages())
	}
	seen := make(map[uint64]int)
	read := func(n int) {
		t.Helper()
		for range n {
			seen[binary.BigEndian.Uint64(term.expectPublish(t))]++
		}
	}
	read(int(sent) - len(dropped))
	// The resend, as a publisher that watched OnPublishDropped would send it.
	for _, i := range dropped {
		publish(i)
	}
	read(len(dropped))
	for i := range sent {
		if seen[i] != 1 {
			t.Errorf("message %d arrived %d times", i, seen[i])
		}
	}
	if b.DroppedMessages() != int64(len(dropped)) {
		t.Errorf("more drops during the resend: %d, then %d", len(dropped), b.DroppedMessages())
	}
	_ = term.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := term.r.ReadByte(); err == nil {
		t.Error("a message more than was sent")
	}
}

// BenchmarkCommandRoundTrip: a command published to a terminal and its PUBACK, without
// and with the terminal queues hook, in the same run:
//
//	go test -run '^$' -bench CommandRoundTrip -count 4 ./agent/broker/
func BenchmarkCommandRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name string
		o    Options
	}{{"no-hook", Options{}}, {"terminal-queues", Options{TerminalTopic: isCommandTopic}}} {
		b.Run(tc.name, func(b *testing.B) {
			br := startBroker(b, tc.o)
			srv := br.Server()
			c := memConnect(b, br.Addr(), "t01")
			defer c.close()
			payload := []byte(`["setUser","1","Ann"]`)
			for b.Loop() {
				if err := srv.Publish("dev/face/t01", payload, false, 1); err != nil {
					b.Fatal(err)
				}
				c.expectPublishAndAck(b)
			}
		})
	}
}

// TestTerminalQueueSwapWithLeavingClients: terminals that send CONNECT and SUBSCRIBE and
// hang up at once, and pairs taking each other's client id over, while their queues are
// being replaced: the broker neither hangs nor leaks a goroutine (goleak in TestMain), and
// a terminal connecting afterwards gets its short queue and its commands.
func TestTerminalQueueSwapWithLeavingClients(t *testing.T) {
	b := startBroker(t, Options{TerminalTopic: isCommandTopic})
	idle := b.Server().Clients.Len()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.DialTimeout("tcp", b.Addr(), waitFor)
			if err != nil {
				t.Error(err)
				return
			}
			c := &memClient{conn: conn, r: bufio.NewReader(conn)}
			id := fmt.Sprintf("t%02d", i/2) // two connections per id: one takes the other over
			c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
				Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: id}})
			c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
				PacketID: 1, Filters: packets.Subscriptions{{Filter: "dev/face/" + id, Qos: 1}}})
			c.close()
		}()
	}
	wg.Wait()
	waitClients(t, b, idle)
	t.Logf("%d queues replaced for the 32 leaving connections", b.terminals.swapped.Load())
	term := memConnect(t, b.Addr(), "t99")
	defer term.close()
	if err := b.Server().Publish("dev/face/t99", []byte("x"), false, 1); err != nil {
		t.Fatal(err)
	}
	term.expectPublishAndAck(t)
	cl, ok := b.Server().Clients.Get("t99")
	if !ok {
		t.Fatal("no client t99")
	}
	if got := b.terminals.pendingWrites(cl); got != DefaultTerminalPendingWrites {
		t.Fatalf("queue of %d slots, want %d", got, DefaultTerminalPendingWrites)
	}
}
