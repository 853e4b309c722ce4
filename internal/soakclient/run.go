package soakclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// RunOptions say how much load Run puts on the store.
type RunOptions struct {
	// Requests in all (SET, GET, DEL, GET in turn per slot).
	Requests int
	// InFlight is the number of slots, each with one request in flight at a time; capped
	// at the broker's Receive Maximum, as paho caps it.
	InFlight int
	// ValueSize is the bytes of each SET's value; default 32.
	ValueSize int
	// Stall: Run gives up when no request was answered for this long; default twice the
	// client's Timeout.
	Stall time.Duration
	// Progress, when set, is called every ProgressEvery (default 5 s) from Run's goroutine.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// OnAnswer, when set, is called with the number of requests answered so far after
	// each first answer, on the client's reader before it reads on: an event timed by the
	// run (a crash test's SIGKILL) happens exactly there, whatever the scheduler does. It
	// must not wait for the client.
	OnAnswer func(answered int)
	// Gate, when set, is called by a slot before it sends request n (numbered from 0),
	// without locks held; it may block to hold the run back at a point (Stall still
	// counts).
	Gate func(n int64)
}

// Progress is a snapshot of a running Run.
type Progress struct {
	Elapsed  time.Duration
	Answered int
	Requests int
	Rate     float64 // answers a second since the previous snapshot
	P50, P99 time.Duration
}

// request is one request while it is outstanding.
type request struct {
	n          int64
	slot       int
	op         string
	key        string
	value      []byte // SET's value
	pkt        []byte // as first written (the id is taken then); resent with DUP
	id         uint16
	epoch      int           // len(drops) when last written: the broker of that connection ran it
	firstEpoch int           // len(drops) when first written
	done       chan struct{} // closed at its first answer or when given up

	// guarded by Client.wmu
	written   bool
	failed    string // a barrier's refusal, set before done is closed
	barrierAt int64  // a barrier's write, unix ns
}

// runState is Run's state, guarded by Client.mu.
type runState struct {
	next, total int64
	slots       []slotModel
	stalled     bool
	onAnswer    func(int)
	gate        func(int64)
	start       time.Time
	elapsed     time.Duration
}

// slotModel is what the slot's key holds, when known.
type slotModel struct {
	step    int
	known   bool
	present bool
	value   []byte
}

var ops = [4]string{"SET", "GET", "DEL", "GET"}

// dropped forgets what the keys hold: the broker may have restarted (keys without
// aio-persistence are gone) and requests in flight may or may not have run. c.mu held.
func (rs *runState) dropped() {
	for i := range rs.slots {
		rs.slots[i].known = false
	}
}

// Run sends o.Requests requests with o.InFlight in flight and returns once each is
// answered or given up (a request unanswered after the client's Timeout is given up and
// the slot goes on, as the SDK does), when nothing was answered for o.Stall, when ctx ends,
// or when the client ends (a connection lost for good). A Client runs once.
func (c *Client) Run(ctx context.Context, o RunOptions) (*Report, error) {
	if o.Requests <= 0 || o.InFlight <= 0 {
		return nil, errors.New("soakclient: Run needs Requests and InFlight")
	}
	if o.ValueSize <= 0 {
		o.ValueSize = 32
	}
	if o.Stall <= 0 {
		o.Stall = 2 * c.opts.Timeout
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 5 * time.Second
	}
	c.wmu.Lock()
	slots := min(o.InFlight, c.serverMax)
	c.wmu.Unlock()
	c.mu.Lock()
	if c.run != nil {
		c.mu.Unlock()
		return nil, errors.New("soakclient: a Client runs once")
	}
	rs := &runState{total: int64(o.Requests), slots: make([]slotModel, slots), start: time.Now(), onAnswer: o.OnAnswer, gate: o.Gate}
	c.run = rs
	c.recs = make([]rec, o.Requests)
	c.mu.Unlock()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for s := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.slot(ctx, s, o.ValueSize, stop)
		}()
	}
	slotsDone := make(chan struct{})
	go func() { wg.Wait(); close(slotsDone) }()

	check := time.NewTicker(250 * time.Millisecond)
	defer check.Stop()
	lastAnswered, lastChange := 0, time.Now()
	prevAnswered, prevAt, nextProgress := 0, rs.start, rs.start.Add(o.ProgressEvery)
	var err error
wait:
	for {
		select {
		case <-slotsDone:
			break wait
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case <-c.down:
			c.mu.Lock()
			err = c.downErr
			c.mu.Unlock()
			break wait
		case now := <-check.C:
			c.mu.Lock()
			answered := c.answered
			c.mu.Unlock()
			if answered != lastAnswered {
				lastAnswered, lastChange = answered, now
			} else if now.Sub(lastChange) >= o.Stall {
				c.mu.Lock()
				rs.stalled = true
				c.mu.Unlock()
				err = fmt.Errorf("soakclient: stalled: no answer for %v after %d of %d requests answered", o.Stall, answered, o.Requests)
				break wait
			}
			if o.Progress != nil && !now.Before(nextProgress) {
				p50, p99, _ := c.percentiles()
				o.Progress(Progress{Elapsed: now.Sub(rs.start), Answered: answered, Requests: o.Requests,
					Rate: float64(answered-prevAnswered) / now.Sub(prevAt).Seconds(), P50: p50, P99: p99})
				prevAnswered, prevAt, nextProgress = answered, now, now.Add(o.ProgressEvery)
			}
		}
	}
	close(stop)
	<-slotsDone
	c.mu.Lock()
	rs.elapsed = time.Since(rs.start)
	c.mu.Unlock()
	return c.Report(), err
}

// slot sends its requests one after the other until the run's requests are taken.
func (c *Client) slot(ctx context.Context, s, valueSize int, stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		rs := c.run
		if rs.next >= rs.total {
			c.mu.Unlock()
			return
		}
		m := &rs.slots[s]
		r := &request{n: rs.next, slot: s, op: ops[m.step%len(ops)], key: "soak/" + c.opts.ClientID + "/" + strconv.Itoa(s), done: make(chan struct{})}
		rs.next++
		m.step++
		var payload []byte
		switch r.op {
		case "SET":
			r.value = make([]byte, valueSize)
			v := strconv.AppendInt([]byte("v"), r.n, 10)
			for i := range r.value {
				r.value[i] = v[i%len(v)]
			}
			payload = appendCommand(nil, "SET", r.key, r.value)
		default:
			payload = appendCommand(nil, r.op, r.key, nil)
		}
		c.pending[r.n] = r
		gate := rs.gate
		c.mu.Unlock()

		if gate != nil {
			gate(r.n)
		}
		c.send(r, payload)
		timer.Reset(c.opts.Timeout)
		select {
		case <-r.done:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
			c.giveUp(r, fmt.Sprintf("unanswered after %v", c.opts.Timeout))
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// appendCommand appends a RESP3 command as the SDK's resp.OpK and OpKV write it: an array
// of blob strings.
func appendCommand(dst []byte, op, key string, value []byte) []byte {
	n := 2
	if value != nil {
		n = 3
	}
	dst = resp3.AppendArrayHeader(dst, n)
	dst = resp3.AppendBlobString(dst, op)
	dst = resp3.AppendBlobString(dst, key)
	if value != nil {
		dst = resp3.AppendBlob(dst, value)
	}
	return dst
}

// send takes r's packet id, builds its PUBLISH and writes it (or leaves it for the
// reconnect when the connection is down).
func (c *Client) send(r *request, payload []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	r.id = c.takeID()
	c.unacked[r.id] = r
	var corr [16]byte
	copy(corr[:8], c.prefix[:])
	binary.BigEndian.PutUint64(corr[8:], uint64(r.n)|1<<63) // the UUID variant bits (10), n < 2^62
	ts := c.clock.Now().AppendText(nil)
	r.pkt = mqttwire.AppendPublishProps(nil, sswire.InvokeTopic, 1, false, r.id, &mqttwire.PublishProps{
		WritePayloadFormat: true,
		MessageExpiry:      uint32((c.opts.Timeout + time.Second - 1) / time.Second),
		ContentType:        contentType,
		ResponseTopic:      c.respTopic,
		CorrelationData:    corr[:],
		User: []mqttwire.UserProperty{
			{Key: []byte("__srcId"), Val: []byte(c.opts.ClientID)},
			{Key: []byte("__ts"), Val: ts},
			{Key: []byte("__protVer"), Val: []byte("1.0")},
			{Key: []byte("$partition"), Val: []byte(c.opts.ClientID)},
			{Key: []byte("$high_priority"), Val: nil},
		},
	}, payload)
	if c.conn == nil {
		return
	}
	c.noteWrite(r)
	_ = c.writeLocked(r.pkt) // a failed write: the reader sees the connection fail
}

// appendRequest appends r's PUBLISH as first written, with DUP when dup. c.wmu held.
func (c *Client) appendRequest(dst []byte, r *request, dup bool) []byte {
	dst = append(dst, r.pkt...)
	if dup {
		dst[0] |= 0x08
	}
	return dst
}

// noteWrite records that r goes out on the current connection, before it is written: its
// answer may be read before the write returns. c.wmu held.
func (c *Client) noteWrite(r *request) {
	r.written = true
	if r.n < 0 {
		return // a barrier
	}
	c.mu.Lock()
	if c.recs[r.n].sent == 0 {
		c.recs[r.n].sent = time.Now().UnixNano()
		r.firstEpoch = len(c.drops)
	}
	r.epoch = len(c.drops)
	c.mu.Unlock()
}

// giveUp ends r without an answer (a timeout, or the broker refused it).
func (c *Client) giveUp(r *request, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[r.n] != r {
		return // answered meanwhile
	}
	delete(c.pending, r.n)
	c.recs[r.n].timedOut = true
	c.run.slots[r.slot].known = false // it may or may not have run
	acked := ""
	if c.recs[r.n].pubacked {
		acked = " (the broker had acknowledged it)"
	}
	c.problemLocked("request %d (%s %s, packet id %d): %s%s", r.n, r.op, r.key, r.id, why, acked)
	close(r.done)
}

func (c *Client) fail(r *request, why string) { c.giveUp(r, why) }

// answer handles a PUBLISH from the broker: checks it, counts it against its request,
// and acknowledges it (as the SDK, whatever it was).
func (c *Client) answer(p *mqttwire.Publish, props *mqttwire.Properties) {
	var bad []string
	if string(p.Topic) != c.respTopic {
		bad = append(bad, fmt.Sprintf("topic %q", p.Topic))
	}
	if p.QoS != 1 {
		bad = append(bad, fmt.Sprintf("QoS %d", p.QoS))
	}
	if stat, _ := props.UserValue("__stat"); string(stat) != "200" {
		bad = append(bad, fmt.Sprintf("__stat %q", stat))
	}
	if v, _ := props.UserValue("__protVer"); string(v) != "1.0" {
		bad = append(bad, fmt.Sprintf("__protVer %q", v))
	}
	if string(props.ContentType) != contentType {
		bad = append(bad, fmt.Sprintf("content type %q", props.ContentType))
	}
	ts, hasTS := props.UserValue("__ts")
	var version hlc.Timestamp
	if hasTS {
		var err error
		if version, err = hlc.Parse(ts); err != nil {
			bad = append(bad, fmt.Sprintf("__ts %q: %v", ts, err))
			hasTS = false
		} else if _, err := c.clock.Update(version); err != nil {
			bad = append(bad, fmt.Sprintf("__ts %q: %v", ts, err)) // the SDK's hlc.Set refuses it too
		}
	}
	corr := props.CorrelationData
	n := int64(-1)
	if len(corr) == 16 && bytes.Equal(corr[:8], c.prefix[:]) {
		n = int64(binary.BigEndian.Uint64(corr[8:]) &^ (1 << 63))
	}

	c.mu.Lock()
	var first *request
	switch {
	case c.run == nil || n < 0 || n >= c.run.next:
		c.unknown++
		c.problemLocked("answer with correlation data %x, which no request had (DUP %v, packet id %d)", corr, p.Dup, p.ID)
	default:
		rc := &c.recs[n]
		rc.answers++
		if rc.answers == 1 {
			c.answered++
			if r := c.pending[n]; r != nil {
				first = r
				delete(c.pending, n)
				if r.firstEpoch == len(c.drops) && rc.sent != 0 {
					rc.latency = time.Now().UnixNano() - rc.sent
				} else {
					rc.latency = -1 // the connection dropped while it was in flight
				}
				bad = c.checkReply(r, p.Payload, hasTS, bad)
			}
			c.lastAnswer = time.Now()
			close(c.progress)
			c.progress = make(chan struct{})
		} else if int(rc.answers) > 1+int(rc.resends)+int(rc.graceLeft) {
			c.problemLocked("phantom: answer %d to request %d, acknowledged %s, resent %d times (DUP %v, packet id %d)",
				rc.answers, n, c.ackedWhenLocked(rc), rc.resends, p.Dup, p.ID)
		}
	}
	if len(bad) > 0 {
		c.problemLocked("bad answer to request %d: %s", n, strings.Join(bad, "; "))
	}
	c.mu.Unlock()

	c.wmu.Lock()
	c.wbuf = mqttwire.AppendPuback(c.wbuf[:0], p.ID)
	acked := c.conn != nil && c.writeLocked(c.wbuf) == nil
	c.wmu.Unlock()

	c.mu.Lock()
	if n >= 0 && c.run != nil && n < c.run.next {
		rc := &c.recs[n]
		if !acked {
			rc.graceLeft++ // not acknowledged: it is owed again
		} else if rc.ackedAt == 0 {
			rc.ackedAt = time.Now().UnixNano()
		}
	}
	var onAnswer func(int)
	answered := c.answered
	if first != nil {
		close(first.done)
		onAnswer = c.run.onAnswer
	}
	c.mu.Unlock()
	if onAnswer != nil {
		onAnswer(answered)
	}
}

// ackedWhenLocked says when the first answer was acknowledged, against the drops.
func (c *Client) ackedWhenLocked(rc *rec) string {
	if rc.ackedAt == 0 {
		return "never"
	}
	at := time.Unix(0, rc.ackedAt)
	for _, d := range c.drops {
		if d.After(at) {
			return fmt.Sprintf("%v before a connection drop", d.Sub(at).Round(time.Millisecond))
		}
	}
	return "with no drop since"
}

// checkReply checks r's answer, byte for byte where the slot's key is known, and updates
// what the key holds when r was written on the current connection. c.mu held.
func (c *Client) checkReply(r *request, reply []byte, hasTS bool, bad []string) []string {
	m := &c.run.slots[r.slot]
	current := r.epoch == len(c.drops)
	v, rest, err := resp3.ReadValue(reply)
	if err != nil || len(rest) != 0 {
		return append(bad, fmt.Sprintf("%s reply %q is not one RESP3 value", r.op, reply))
	}
	miss := string(reply) == "$-1\r\n"
	switch r.op {
	case "SET":
		if string(reply) != "+OK\r\n" {
			bad = append(bad, fmt.Sprintf("SET reply %q, want +OK", reply))
		}
		if !hasTS {
			bad = append(bad, "SET answered without __ts")
		}
		if current {
			m.known, m.present, m.value = true, true, r.value
		}
	case "GET":
		switch {
		case miss && hasTS:
			bad = append(bad, "GET of a missing key answered with __ts")
		case miss && m.known && m.present:
			bad = append(bad, fmt.Sprintf("GET $-1, want %q", m.value))
		case !miss && (v.Kind != resp3.BlobString || v.IsNull()):
			bad = append(bad, fmt.Sprintf("GET reply %q, want a blob string or $-1", reply))
		case !miss && !hasTS:
			bad = append(bad, "GET of a value answered without __ts")
		case !miss && m.known && !m.present:
			bad = append(bad, fmt.Sprintf("GET %q of a deleted key", v.Str))
		case !miss && m.known && !bytes.Equal(v.Str, m.value):
			bad = append(bad, fmt.Sprintf("GET %q, want %q", v.Str, m.value))
		}
	case "DEL":
		switch {
		case string(reply) != ":1\r\n" && string(reply) != ":0\r\n":
			bad = append(bad, fmt.Sprintf("DEL reply %q, want :1 or :0", reply))
		case m.known && m.present && string(reply) != ":1\r\n":
			bad = append(bad, fmt.Sprintf("DEL %q of a key that held a value, want :1", reply))
		case m.known && !m.present && string(reply) != ":0\r\n":
			bad = append(bad, fmt.Sprintf("DEL %q of a missing key, want :0", reply))
		case string(reply) == ":1\r\n" && !hasTS:
			bad = append(bad, "DEL of a value answered without __ts")
		}
		if current {
			m.known, m.present, m.value = true, false, nil
		}
	}
	return bad
}
