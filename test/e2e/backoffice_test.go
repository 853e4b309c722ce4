package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// backOffice is a paho client playing the back office: it publishes task messages with
// QoS 1 and collects results and deadletters.
type backOffice struct {
	t       testing.TB
	c       *paho.Client
	mu      sync.Mutex
	results map[string]wire.Result
	all     []wire.Result // every result received, copies included, in arrival order
	dead    []wire.DeadLetter
	acks    int
	ackIDs  []string                     // the messageIds of the forwarded acks, in arrival order
	syncs   map[string][]wire.SyncReport // whitelist sync reports by device, in arrival order
	changed chan struct{}
	// want is the condition waitFor waits on (nil: nobody waits); the message handler
	// checks it and wakes the waiter only once it holds, not at every message.
	want func() bool
}

// bufferedConn is the back office's connection: reads go through a bufio.Reader (paho
// reads packets straight from its Conn, a read syscall for the type byte, one per length
// byte and one for the rest), and each packet is written in one call. It is a sync.Locker,
// which paho takes around every packet it writes (packets.ControlPacket.WriteTo; paho
// asks a custom Conn for one, or concurrent packets interleave): the parts written while
// it is held are gathered and written when it is released. The back office plays a
// client that runs on another machine in a deployment; this keeps the harness's own
// share of this machine's CPU down without changing what the agent does.
type bufferedConn struct {
	net.Conn
	r      *bufio.Reader
	mu     sync.Mutex
	packet []byte // gathered between Lock and Unlock
	err    error  // the last failed write, returned by the next Write
}

func newBufferedConn(c net.Conn) *bufferedConn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, 16<<10)}
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Lock starts a packet; paho writes every packet under it.
func (c *bufferedConn) Lock() { c.mu.Lock() }

// Write gathers a part of the packet being written (called with the lock held).
func (c *bufferedConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.packet = append(c.packet, p...)
	return len(p), nil
}

// Unlock writes the gathered packet.
func (c *bufferedConn) Unlock() {
	if len(c.packet) > 0 && c.err == nil {
		_, c.err = c.Conn.Write(c.packet)
	}
	c.packet = c.packet[:0]
	c.mu.Unlock()
}

func connectBackOffice(t testing.TB, addr, gw string) *backOffice {
	t.Helper()
	return connectBackOfficeSession(t, addr, gw, 0)
}

// connectBackOfficeSession connects a back office whose session outlives the connection
// by sessionExpiry seconds (0: it ends with the connection).
func connectBackOfficeSession(t testing.TB, addr, gw string, sessionExpiry uint32) *backOffice {
	t.Helper()
	return connectBackOfficeAs(t, addr, gw, "backoffice", true, sessionExpiry)
}

// connectBackOfficeAs connects a back office as clientID; with cleanStart false it resumes
// the session the broker kept for that id.
func connectBackOfficeAs(t testing.TB, addr, gw, clientID string, cleanStart bool, sessionExpiry uint32) *backOffice {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	bo := &backOffice{t: t, results: map[string]wire.Result{}, syncs: map[string][]wire.SyncReport{}, changed: make(chan struct{}, 1)}
	prefix := "faceagent/" + gw + "/"
	bo.c = paho.NewClient(paho.ClientConfig{Conn: newBufferedConn(conn), OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			bo.mu.Lock()
			switch topic := pr.Packet.Topic; {
			case topic == prefix+"results":
				r, err := wire.ParseResult(pr.Packet.Payload)
				if err != nil {
					t.Errorf("bad result %s: %v", pr.Packet.Payload, err)
				}
				bo.results[r.TaskID] = r
				bo.all = append(bo.all, r)
			case topic == prefix+"deadletter":
				d, err := wire.ParseDeadLetter(pr.Packet.Payload)
				if err != nil {
					t.Errorf("bad deadletter %s: %v", pr.Packet.Payload, err)
				}
				bo.dead = append(bo.dead, d)
			case strings.HasPrefix(topic, prefix+"devices/") && strings.HasSuffix(topic, "/sync"):
				r, err := wire.ParseSyncReport(pr.Packet.Payload)
				if err != nil {
					t.Errorf("bad sync report %s: %v", pr.Packet.Payload, err)
				}
				bo.syncs[r.DeviceID] = append(bo.syncs[r.DeviceID], r)
			default:
				bo.acks++
				if strings.HasSuffix(topic, "/ack") {
					var a face.Ack
					if err := json.Unmarshal(pr.Packet.Payload, &a); err != nil {
						t.Errorf("bad forwarded ack %s: %v", pr.Packet.Payload, err)
					}
					bo.ackIDs = append(bo.ackIDs, a.MessageID)
				}
			}
			wake := bo.want != nil && bo.want()
			if wake {
				bo.want = nil
			}
			bo.mu.Unlock()
			if wake {
				select {
				case bo.changed <- struct{}{}:
				default:
				}
			}
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: cleanStart}
	if sessionExpiry > 0 {
		connect.Properties = &paho.ConnectProperties{SessionExpiryInterval: &sessionExpiry}
	}
	if _, err := bo.c.Connect(ctx, connect); err != nil {
		t.Fatal(err)
	}
	// A resumed session keeps its subscriptions. (Subscribing again could fail: mochi
	// refuses a SUBSCRIBE whose packet id equals one of its own QoS 1 messages in flight.)
	if cleanStart {
		if _, err := bo.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
			{Topic: prefix + "results", QoS: 1}, {Topic: prefix + "deadletter", QoS: 1}, {Topic: prefix + "devices/+/ack", QoS: 1},
			{Topic: prefix + "devices/+/sync", QoS: 1},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = bo.c.Disconnect(&paho.Disconnect{})
		<-bo.c.Done()
	})
	return bo
}

func (bo *backOffice) publish(topic string, payload []byte) {
	bo.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bo.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload}); err != nil {
		bo.t.Fatalf("publish: %v", err)
	}
}

// waitSucceeded waits until every task of ids has its result and dead deadletters came,
// then fails t for each of ids whose result is not succeeded. It returns with the lock
// held, for the caller to read the deadletters; the caller unlocks.
func (bo *backOffice) waitSucceeded(ids []string, dead int, timeout time.Duration) {
	bo.t.Helper()
	bo.waitFor("the results and the deadletters", timeout, func() bool {
		for _, id := range ids {
			if _, ok := bo.results[id]; !ok {
				return false
			}
		}
		return len(bo.dead) == dead
	})
	bo.mu.Lock()
	for _, id := range ids {
		if r := bo.results[id]; r.Status != wire.Succeeded {
			bo.t.Errorf("task %s: %+v", id, r)
		}
	}
}

// waitFor waits until cond (called under the lock) holds.
func (bo *backOffice) waitFor(what string, timeout time.Duration, cond func() bool) {
	bo.t.Helper()
	deadline := time.After(timeout)
	for {
		bo.mu.Lock()
		ok := cond()
		if !ok {
			bo.want = cond
		}
		bo.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-bo.changed:
		case <-deadline:
			bo.mu.Lock()
			defer bo.mu.Unlock()
			bo.want = nil
			bo.t.Fatalf("timed out waiting for %s: %d results, %d deadletters", what, len(bo.results), len(bo.dead))
		}
	}
}
