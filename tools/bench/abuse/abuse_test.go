package abuse

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const repoRoot = "../../.."

// Terms of the worst case (docs/benchmarks.md, "Worst-case memory of the broker's
// bounds"), besides the configured bounds.
const (
	// connFixed: what one connection costs whatever it does: goroutine stacks (reader
	// grown to 32 KiB by a PUBLISH, writer 8 KiB), its heap (client, maps, 1,024 queue
	// slots, 2 KiB read buffer: ~20 KiB), a write buffer gathering queued packets (up to
	// 64 KiB), and, once it sent a KEYNOTIFY, its notifier (goroutine and maps: 6.5 KB at
	// rest, BenchmarkMemoryPerConnection/watcher; counted as 8 KiB) and the array of its
	// queue (1,024 notifications of 80 B).
	connFixed = (40 + 20 + 64 + 8 + 80) << 10
	// readUnbudgeted: a packet of up to 64 KiB is read and handled outside the inbound
	// budget; a state store request's reply is built beside it (a GET's: the value,
	// allocated in whole pages).
	readUnbudgeted = 64 << 10
	// heldAcks: the acknowledgements of a publisher's QoS 1 messages held while more of
	// its packets are buffered: at most a 2 KiB read buffer of 8-byte PUBLISHes, ~850 B
	// each in the in-flight set.
	heldAcks = 256 * 850
	// writeBuffer: the most a pooled buffer that WritePacket encodes into holds before it
	// grows (mochi's writeBuffers keep those of up to 64 KiB).
	writeBuffer = 64 << 10
	// notifyPacket: what a notification's packet holds besides its key (twice: in hex, in
	// its topic) and value: its topic's prefix, the client id in hex (~50 bytes for the ids
	// the SDKs make), the payload's framing and the version.
	notifyPacket = 2 << 10
	// committer: the sessions journal's writes waiting for their group commit and the
	// batch being committed (agent/broker groupcommit.go: 4 MiB each).
	committer = 8 << 20
	// fixedProcess: the agent, the Go runtime and the binary's resident pages with an idle
	// broker (tools/bench/rss.sh: 13-17 MB with 64 terminals and 10,000 queued tasks).
	fixedProcess = 20 << 20
)

// encoded is what a packet of n bytes holds while it is written: the pooled buffer it is
// encoded into, which, smaller than the packet, grows to twice its size (bytes.Buffer).
func encoded(n int64) int64 {
	if n <= writeBuffer {
		return max(writeBuffer, min(2*n, 2*writeBuffer))
	}
	return max(n, 2*writeBuffer)
}

// WorstCase is the most memory the broker's bounds b allow with conns connections. Per
// connection: its fixed cost, held acknowledgements, its queue of pending writes
// (max_pending_write_bytes) and the copy a write encodes, the larger of a packet read
// outside the inbound budget and a state store reply being built (store_max_value_size
// and a page), and the KEYNOTIFY notification its notifier encodes while its socket is
// full (its key and value within max_pending_write_bytes and store_max_value_size).
// Then the sessions (twice max_queued_bytes: sessions under their fair share are
// admitted beyond it; notifications not yet acknowledged are among their messages) and
// as much again for the copies written from them, the sessions journal's mirror of them
// and of the retained messages (its records are at most 1.4 times what they count: JSON,
// base64 payloads) and its writes waiting to be committed, the retained messages, the
// large packets being read, the process's fixed part, and the state store: its keys,
// values and registrations (store_max_bytes, their bookkeeping included: statestore
// counts 160 bytes a key or registration, 131 and 134 measured), and the keys and values
// of the notifications waiting for, or not yet acknowledged by, the watchers (a second
// budget of store_max_bytes, and at most max_pending_write_bytes a connection).
func WorstCase(b *config.Broker, conns int) int64 {
	c, pending := int64(conns), int64(b.MaxPendingWriteBytes)
	keyMax, valueMax := int64(b.StoreMaxKeySize), int64(b.StoreMaxValueSize)
	readOrReply := max(readUnbudgeted, valueMax+8<<10)
	notification := min(keyMax+valueMax, pending) + keyMax + notifyPacket
	perConn := connFixed + heldAcks + pending + encoded(pending) + readOrReply + encoded(notification)
	sessions, r := 2*int64(b.MaxQueuedBytes), int64(b.MaxRetainedBytes)
	store := int64(b.StoreMaxBytes) + min(int64(b.StoreMaxBytes), c*pending)
	return c*perConn + 2*sessions + (sessions+r)*14/10 + committer + r + int64(b.MaxInboundBytes) + fixedProcess + store
}

func TestAbusiveClients(t *testing.T) {
	p := struct {
		abusers  int
		run      time.Duration
		size     int
		bigEvery int
		watchers int
		fillers  int
	}{8, 6 * time.Second, 64 << 10, 0, 4, 1}
	if os.Getenv("FACEAGENT_ABUSE_LONG") != "" {
		p.abusers, p.run, p.size, p.bigEvery, p.watchers, p.fillers = 64, 60*time.Second, 256<<10, 8, 16, 2
	}
	if w, err := strconv.Atoi(os.Getenv("FACEAGENT_ABUSE_WATCHERS")); err == nil && w >= 0 {
		p.watchers = w
	} else if testing.Short() {
		t.Skip("builds and runs the daemon")
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "faceagent")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./agent/cmd/faceagent")
	build.Dir = repoRoot
	if other := os.Getenv("FACEAGENT_ABUSE_TREE"); other != "" {
		build.Dir = other // another checkout's daemon, to compare (the bound stays this tree's)
	}
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	def := config.DefaultBroker()
	bound := WorstCase(def, int(def.MaxClients))
	addr, metrics := testutil.FreeAddr(t), testutil.FreeAddr(t)
	cfgPath := filepath.Join(dir, "agent.toml")
	cfg := fmt.Sprintf(`[agent]
gateway_id = "abuse"
data_dir = %q
gomemlimit = %d
[broker]
listen = %q
[metrics]
listen = %q
[log]
level = "error"
[[devices]]
id = "t1"
`, filepath.Join(dir, "data"), bound-8<<20, addr, metrics)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(bin, "-config", cfgPath)
	agent.Env = append(os.Environ(), "GODEBUG=gctrace=1") // the live heap after each GC, on stderr
	var stderr bytes.Buffer
	agent.Stderr = &stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = agent.Process.Kill()
		_ = agent.Wait()
		if t.Failed() {
			var log []string
			for _, line := range strings.Split(stderr.String(), "\n") {
				if !strings.HasPrefix(line, "gc ") && line != "" {
					log = append(log, line)
				}
			}
			t.Logf("agent's log, gctrace left out:\n%s", strings.Join(log, "\n"))
		}
	}()
	waitHealthy(t, metrics)
	idle := vm(t, agent.Process.Pid, "VmRSS")

	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"t1"}, sim.Options{Seed: 3, HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), p.run+2*time.Minute)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bo := newBackOffice(t, ctx, addr)

	// The state store's abusers first, until the store is full (they keep it full), then
	// the MQTT abusers; meanwhile a task every 25 ms and the resident set every 200 ms.
	var wg sync.WaitGroup
	storeCtx, stopStore := context.WithCancel(ctx)
	defer stopStore()
	store := storeCounts{full: make(chan struct{})}
	storeAbuse(storeCtx, &wg, addr, p.watchers, p.fillers, def, &store)
	select {
	case <-store.full:
	case <-time.After(time.Minute):
		t.Fatalf("the state store is not full after a minute: %s", &store)
	}
	abuseCtx, stopAbuse := context.WithTimeout(ctx, p.run)
	defer stopAbuse()
	var refused, connected atomic.Int64
	for i := range p.abusers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			abuser(abuseCtx, addr, i, def, p.size, p.bigEvery, &connected, &refused)
		}()
	}
	var peakRSS, peakStore, peakRegistrations int64
	submitted := 0
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for abuseCtx.Err() == nil {
		<-tick.C
		bo.submit(t, submitted)
		submitted++
		if submitted%8 == 0 {
			peakRSS = max(peakRSS, vm(t, agent.Process.Pid, "VmRSS"))
			storeBytes, registrations := gauge(metrics, "faceagent_store_bytes"), gauge(metrics, "faceagent_store_registrations")
			peakStore, peakRegistrations = max(peakStore, storeBytes), max(peakRegistrations, registrations)
		}
	}
	stopStore()
	wg.Wait()
	bo.waitResults(t, submitted, 60*time.Second)
	hwm := vm(t, agent.Process.Pid, "VmHWM")
	peakRSS = max(peakRSS, hwm)
	brokerMetrics := scrape(t, metrics, "faceagent_broker_")
	var storeMetrics []string // the embedded store's own figures, not the agent's writes to it
	for _, f := range strings.Split(scrape(t, metrics, "faceagent_store_"), ", ") {
		if !strings.HasPrefix(f, "write_") {
			storeMetrics = append(storeMetrics, f)
		}
	}

	gap := bo.maxGap()
	_ = agent.Process.Signal(os.Interrupt)
	_ = agent.Wait()
	live, gcs := peakLive(stderr.String())
	t.Logf("%d abusers (%d connections made, %d refused) for %v, messages of %d KiB: idle RSS %.1f MB, peak RSS %.1f MB (VmHWM), peak live heap %.1f MB (%d GCs); stated worst case %.1f MB (gomemlimit %.1f MB)",
		p.abusers, connected.Load(), refused.Load(), p.run, p.size>>10, mb(idle), mb(peakRSS), mb(live), gcs, mb(bound), mb(bound-8<<20))
	t.Logf("terminal: %d tasks submitted, %d results at the back office, longest gap between results %v",
		submitted, bo.count(), gap.Round(time.Millisecond))
	t.Logf("state store abusers (%d watchers, %d fillers, a churner): %s; the store held at most %.1f MB (store_max_bytes %.1f MB), %d registrations",
		p.watchers, p.fillers, &store, mb(peakStore), mb(int64(def.StoreMaxBytes)), peakRegistrations)
	t.Logf("broker at the end: %s", brokerMetrics)
	t.Logf("state store at the end: %s", strings.Join(storeMetrics, ", "))
	if peakRSS > bound || live > bound {
		t.Errorf("peak RSS %.1f MB, live heap %.1f MB: over the stated worst case %.1f MB", mb(peakRSS), mb(live), mb(bound))
	}
	if gap > 5*time.Second {
		t.Errorf("the terminal's results stopped for %v during the abuse", gap)
	}
	// The run pushed the store to its bounds, or it measured less than it claims.
	if p.watchers > 0 && store.notes.Load() == 0 {
		t.Error("the watchers got no notification")
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// gcLine matches a gctrace line's heap sizes: "A->B->C MB": C is the heap marked live.
var gcLine = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB`)

// peakLive returns the largest live heap a gctrace reported, and the number of GCs.
func peakLive(trace string) (int64, int) {
	var peak int64
	n := 0
	for _, m := range gcLine.FindAllStringSubmatch(trace, -1) {
		live, _ := strconv.ParseInt(m[3], 10, 64)
		peak = max(peak, live<<20)
		n++
	}
	return peak, n
}

// vm returns a /proc/PID/status field in bytes.
func vm(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// waitHealthy polls /healthz until the agent answers 200 (nothing announces it).
func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the agent never became healthy")
}

// scrape returns the /metrics lines starting with prefix, on one line.
func scrape(t *testing.T, addr, prefix string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, strings.TrimPrefix(sc.Text(), prefix))
		}
	}
	return strings.Join(out, ", ")
}

// gauge returns the value of a /metrics line without labels (0 when missing).
func gauge(addr, name string) int64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int64(f)
		}
	}
	return 0
}

// abuser connects as abuser-i (then, a third of the way through, leaves its session behind
// and connects again as a new id), subscribes to '#' and to max_subscriptions deep filters,
// and publishes until ctx ends, never reading after its CONNACK.
func abuser(ctx context.Context, addr string, i int, b *config.Broker, size, bigEvery int, connected, refused *atomic.Int64) {
	deadline, _ := ctx.Deadline()
	third := time.Until(deadline) / 3
	for gen := 0; ctx.Err() == nil; gen++ {
		phase, cancel := context.WithTimeout(ctx, third)
		abuse(phase, addr, fmt.Sprintf("abuser-%d-%d", i, gen), b, size, bigEvery, connected, refused)
		cancel()
	}
}

func abuse(ctx context.Context, addr, id string, b *config.Broker, size, bigEvery int, connected, refused *atomic.Int64) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer conn.Close()
	expiry := uint32(3600)
	// write sends pk; a write the broker does not take within a second (it stopped reading
	// this connection) is no error, anything else ends the connection.
	write := func(pk packets.Packet) bool {
		var buf bytes.Buffer
		pk.ProtocolVersion = 5
		if brokertest.EncodeClientPacket(&buf, pk) != nil {
			return false
		}
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := conn.Write(buf.Bytes())
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return true
		}
		return err == nil
	}
	if !write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 600, ClientIdentifier: id},
		Properties: packets.Properties{SessionExpiryInterval: expiry, SessionExpiryIntervalFlag: true}}) {
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	ack := make([]byte, 4)
	if _, err := conn.Read(ack); err != nil || ack[0]>>4 != packets.Connack || ack[3] != 0 {
		refused.Add(1)
		<-ctx.Done()
		return
	}
	connected.Add(1)
	subs := packets.Subscriptions{{Filter: "#", Qos: 1}}
	for j := 1; j < b.MaxSubscriptions; j++ {
		subs = append(subs, packets.Subscription{Filter: fmt.Sprintf("abuse/%s/%d/l3/l4/l5/l6/l7", id, j), Qos: 1})
	}
	if !write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1, Filters: subs}) {
		return
	}
	small, big := make([]byte, size), make([]byte, 1<<20-1<<10)
	for n := 0; ctx.Err() == nil; n++ {
		payload := small
		if bigEvery > 0 && n%bigEvery == 0 {
			payload = big
		}
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: n%10 == 0},
			TopicName: fmt.Sprintf("abuse/%s/%d", id, n%100), PacketID: uint16(n%65535 + 1), Payload: payload}
		if !write(pk) {
			return // the broker closed the connection
		}
	}
}

// backOffice submits tasks and collects results, recording when each arrived.
type backOffice struct {
	c   *paho.Client
	ctx context.Context

	mu      sync.Mutex
	results map[string]bool
	last    time.Time
	gap     time.Duration
	changed chan struct{}
}

func newBackOffice(t *testing.T, ctx context.Context, addr string) *backOffice {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	bo := &backOffice{ctx: ctx, results: map[string]bool{}, changed: make(chan struct{}, 1)}
	bo.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			bo.mu.Lock()
			now := time.Now()
			if !bo.last.IsZero() {
				bo.gap = max(bo.gap, now.Sub(bo.last))
			}
			bo.last = now
			bo.results[string(pr.Packet.Payload)] = true
			bo.mu.Unlock()
			select {
			case bo.changed <- struct{}{}:
			default:
			}
			return true, nil
		}}})
	if _, err := bo.c.Connect(ctx, &paho.Connect{ClientID: "backoffice", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := bo.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "faceagent/abuse/results", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bo.c.Disconnect(&paho.Disconnect{}) })
	return bo
}

func (bo *backOffice) submit(t *testing.T, i int) {
	t.Helper()
	task := fmt.Sprintf(`{"taskId":"a-%d","deviceId":"t1","op":"AddPerson","person":{"id":"%d"}}`, i, i)
	if _, err := bo.c.Publish(bo.ctx, &paho.Publish{Topic: "faceagent/abuse/tasks", QoS: 1, Payload: []byte(task)}); err != nil {
		t.Fatalf("submitting task %d: %v", i, err)
	}
}

func (bo *backOffice) count() int {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	return len(bo.results)
}

func (bo *backOffice) maxGap() time.Duration {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	return bo.gap
}

func (bo *backOffice) waitResults(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for bo.count() < n {
		select {
		case <-bo.changed:
		case <-deadline:
			t.Fatalf("%d results of %d tasks", bo.count(), n)
		}
	}
}
