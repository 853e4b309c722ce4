package abuse

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// The store's answers the abusers look for (agent/broker/statestore errors.go).
const (
	replyOK    = "+OK\r\n"
	replyQuota = "-ERR the quota has been exceeded\r\n"
)

// storeCounts is what the state store abusers saw.
type storeCounts struct {
	stored      atomic.Int64 // SETs of the fillers answered +OK
	fillBytes   atomic.Int64 // their key and value bytes
	quota       atomic.Int64 // requests answered "-ERR the quota has been exceeded"
	registered  atomic.Int64 // KEYNOTIFYs sent by watchers (answered or not)
	notes       atomic.Int64 // notifications the watchers read (none acknowledged)
	watcherCuts atomic.Int64 // watcher connections the broker ended
	churned     atomic.Int64 // SETs of watched keys sent
	refused     atomic.Int64 // store abusers' CONNECTs refused

	full     chan struct{} // closed at the first "quota exceeded" a filler gets
	fullOnce sync.Once
}

func (c *storeCounts) String() string {
	return fmt.Sprintf("fillers stored %d keys (%.1f MB of keys and values), %d answers of quota exceeded; watchers sent %d KEYNOTIFYs, read %d notifications (acknowledged none), were disconnected %d times; %d SETs of watched keys; %d CONNECTs refused",
		c.stored.Load(), mb(c.fillBytes.Load()), c.quota.Load(), c.registered.Load(), c.notes.Load(), c.watcherCuts.Load(), c.churned.Load(), c.refused.Load())
}

// storeClient is a raw MQTT 5 connection sending state store requests as the SDKs do:
// RESP3 payloads published QoS 1 on the invoke topic with a response topic of its own,
// correlation data and an HLC timestamp (__ts). Its reader acknowledges the store's
// responses (handing them to answers when set) and reads, but never acknowledges, the
// KEYNOTIFY notifications.
type storeClient struct {
	conn      net.Conn
	respTopic string
	clock     *hlc.Clock
	slots     chan struct{} // requests not yet acknowledged: under the broker's Receive Maximum
	answers   chan []byte   // replies, in order; nil: not kept
	notes     *atomic.Int64
	done      chan struct{} // closed when the reader stops (the connection is gone)

	wmu  sync.Mutex
	wbuf []byte
	id   uint16
	corr uint64
}

var errRefused = errors.New("CONNECT refused")

// dialStore connects client id (a kept session when keep), subscribes to its response
// topic and starts the reader. Receive Maximum 65535, as the SDKs announce.
func dialStore(addr, id string, keep, collect bool, notes *atomic.Int64) (*storeClient, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &storeClient{conn: conn, respTopic: "clients/" + id + "/ss", clock: hlc.NewClock(id),
		slots: make(chan struct{}, 256), notes: notes, done: make(chan struct{})}
	if collect {
		c.answers = make(chan []byte, cap(c.slots))
	}
	var expiry uint32
	if keep {
		expiry = 3600
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(mqttwire.AppendConnectProps(nil, &mqttwire.Connect{ClientID: id, CleanStart: !keep,
		KeepAlive: 600, SessionExpiry: expiry, ReceiveMaximum: 65535, RequestProblemInfo: true})); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	first, body, _, err := mqttwire.ReadPacket(br, nil)
	if err == nil && first>>4 != mqttwire.TypeConnack {
		err = fmt.Errorf("packet type %d instead of CONNACK", first>>4)
	}
	var ack mqttwire.Connack
	if err == nil {
		ack, err = mqttwire.ParseConnackProps(body)
	}
	if err == nil && ack.Code != 0 {
		err = errRefused
	}
	if err == nil {
		_, err = conn.Write(mqttwire.AppendSubscribe(nil, 1, c.respTopic))
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	c.id = 1
	go c.read(br)
	return c, nil
}

// read handles what the broker sends until the connection ends.
func (c *storeClient) read(br *bufio.Reader) {
	defer close(c.done)
	defer c.conn.Close()
	var buf []byte
	for {
		first, body, grown, err := mqttwire.ReadPacket(br, buf)
		if err != nil {
			return
		}
		buf = grown
		switch first >> 4 {
		case mqttwire.TypePuback:
			select {
			case <-c.slots:
			default:
			}
		case mqttwire.TypePublish:
			p, err := mqttwire.ParsePublish(first, body)
			if err != nil {
				return
			}
			if string(p.Topic) != c.respTopic {
				c.notes.Add(1) // a notification: never acknowledged
				continue
			}
			if p.QoS > 0 && c.write(mqttwire.AppendPuback(nil, p.ID)) != nil {
				return
			}
			if c.answers != nil {
				c.answers <- bytes.Clone(p.Payload)
			}
		}
	}
}

// write writes one packet; a broker that does not take it within 5 s ends the client.
func (c *storeClient) write(pkt []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := c.conn.Write(pkt)
	return err
}

// request publishes one command (its RESP3 array of args), waiting for a free slot.
func (c *storeClient) request(ctx context.Context, args ...[]byte) error {
	select {
	case c.slots <- struct{}{}:
	case <-c.done:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	payload := resp3.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		payload = resp3.AppendBlob(payload, a)
	}
	c.wmu.Lock()
	c.id = c.id%65535 + 1 // at most 256 unacknowledged: an id comes back long after its PUBACK
	c.corr++
	corr := binary.BigEndian.AppendUint64(nil, c.corr)
	c.wbuf = mqttwire.AppendPublishProps(c.wbuf[:0], sswire.InvokeTopic, 1, false, c.id, &mqttwire.PublishProps{
		MessageExpiry: 10, ResponseTopic: c.respTopic, CorrelationData: corr,
		User: []mqttwire.UserProperty{{Key: []byte("__ts"), Val: []byte(c.clock.Now().String())}},
	}, payload)
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := c.conn.Write(c.wbuf)
	c.wmu.Unlock()
	return err
}

// do sends one command and waits for its reply (the client must collect answers and
// have nothing else in flight).
func (c *storeClient) do(ctx context.Context, args ...[]byte) (string, error) {
	if err := c.request(ctx, args...); err != nil {
		return "", err
	}
	select {
	case a := <-c.answers:
		return string(a), nil
	case <-c.done:
		return "", net.ErrClosed
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(30 * time.Second):
		return "", errors.New("no answer within 30 s")
	}
}

func (c *storeClient) close() {
	c.conn.Close()
	<-c.done
}

// storeKey returns a key of exactly size bytes naming what it is for.
func storeKey(size int, format string, a ...any) []byte {
	k := []byte(fmt.Sprintf(format, a...))
	if len(k) > size {
		return k[:size]
	}
	return append(k, bytes.Repeat([]byte{'.'}, size-len(k))...)
}

// fill keeps the store full until ctx ends: SETs of new keys of store_max_key_size with
// values of store_max_value_size, halving the value on "quota exceeded" down to an empty
// one; when even that is refused the store is full, and it tries again a little later
// (watchers that went away gave their registrations' bytes back).
func fill(ctx context.Context, addr string, i int, b *config.Broker, counts *storeCounts) {
	var none atomic.Int64
	c, err := dialStore(addr, fmt.Sprintf("ss-filler-%d", i), false, true, &none)
	if err != nil {
		if errors.Is(err, errRefused) {
			counts.refused.Add(1)
		}
		return
	}
	defer c.close()
	keySize, maxValue := int(b.StoreMaxKeySize), int(b.StoreMaxValueSize)
	value := make([]byte, maxValue)
	size := maxValue
	for n := 0; ctx.Err() == nil; {
		reply, err := c.do(ctx, []byte("SET"), storeKey(keySize, "fill/%d/%d/", i, n), value[:size])
		switch {
		case err != nil:
			return
		case reply == replyOK:
			counts.stored.Add(1)
			counts.fillBytes.Add(int64(keySize + size))
			n++
		case reply == replyQuota:
			counts.quota.Add(1)
			counts.fullOnce.Do(func() { close(counts.full) })
			if size > 0 {
				size /= 2
				continue
			}
			size = maxValue
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		default:
			return // an answer a full store never gives: the run's log shows the counts stop
		}
	}
}

// Keys the churner changes and the watchers watch: one of a byte (each change notifies
// its watchers with a packet of ~1 KB that counts as one byte), and one whose value is
// as large as one connection's queue of pending writes allows.
var (
	smallHot = []byte("s")
	bigHot   = []byte("b")
)

// bigHotValue is the value size of bigHot: a notification of it fits one connection's
// notification bound (max_pending_write_bytes), two do not.
func bigHotValue(b *config.Broker) int {
	return min(int(b.StoreMaxValueSize), int(b.MaxPendingWriteBytes)-len(bigHot))
}

// watch keeps watcher i registered until ctx ends: a kept session that registers
// store_max_notify keys (the hot ones, then keys that do not exist, of
// store_max_key_size), reads everything and acknowledges none of its notifications. The
// broker disconnects it when its notifications overflow or stall; it then connects again
// and registers again, as an SDK client would.
func watch(ctx context.Context, addr string, i int, b *config.Broker, counts *storeCounts) {
	hot := smallHot
	if i%2 == 1 {
		hot = bigHot
	}
	for ctx.Err() == nil {
		c, err := dialStore(addr, fmt.Sprintf("ss-watcher-%d", i), true, false, &counts.notes)
		if err != nil {
			if errors.Is(err, errRefused) {
				counts.refused.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		key := hot
		for n := 0; n < b.StoreMaxNotify; n++ {
			if n > 0 {
				key = storeKey(int(b.StoreMaxKeySize), "absent/%d/%d/", i, n)
			}
			if c.request(ctx, []byte("KEYNOTIFY"), key) != nil {
				break
			}
			counts.registered.Add(1)
		}
		select {
		case <-c.done:
			counts.watcherCuts.Add(1)
		case <-ctx.Done():
		}
		c.close()
	}
}

// churn changes the hot keys as fast as the broker takes the requests (bigHot every 64th
// time), never waiting for the answers: each change notifies every watcher of the key.
// The keys are set first, before the fillers start, so that changing them never needs
// more of the store (a SET of the same size is never refused for bytes).
func churn(ctx context.Context, addr string, b *config.Broker, counts *storeCounts, ready chan<- struct{}) {
	var none atomic.Int64
	c, err := dialStore(addr, "ss-churner", false, true, &none)
	if err != nil {
		close(ready)
		return
	}
	defer c.close()
	big := make([]byte, bigHotValue(b))
	for _, kv := range [][2][]byte{{smallHot, nil}, {bigHot, big}} {
		if reply, err := c.do(ctx, []byte("SET"), kv[0], kv[1]); err != nil || reply != replyOK {
			close(ready)
			return
		}
	}
	close(ready)
	go func() { // the answers from here on: read and dropped
		for {
			select {
			case <-c.answers:
			case <-c.done:
				return
			}
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		key, value := smallHot, []byte(nil)
		if n%64 == 0 {
			key, value = bigHot, big
		}
		if c.request(ctx, []byte("SET"), key, value) != nil {
			return
		}
		counts.churned.Add(1)
	}
}

// storeAbuse runs the state store's abusers until ctx ends: the churner, then the
// watchers and the fillers. It returns once the hot keys exist; counts.full is closed
// once the store is full.
func storeAbuse(ctx context.Context, wg *sync.WaitGroup, addr string, watchers, fillers int, b *config.Broker, counts *storeCounts) {
	ready := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		churn(ctx, addr, b, counts, ready)
	}()
	<-ready
	for i := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watch(ctx, addr, i, b, counts)
		}()
	}
	for i := range fillers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fill(ctx, addr, i, b, counts)
		}()
	}
}
