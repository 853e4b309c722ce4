package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
)

// benchBackOffice is the benchmarks' back office: it publishes task batches at QoS 1 and
// counts results. It subscribes as connectBackOffice's does (results, deadletter and
// devices/+/ack, QoS 1, client id "backoffice") and acks every message, so the broker and
// the agent do the same work for it; but it speaks MQTT through internal/mqttwire, not
// paho, whose per-message cost (a growing buffer per packet read, a goroutine hand-off,
// a session store) made it a large share of the 2-core machine beside the agent it
// stands for, on another machine in a deployment. It keeps no keepalive (0): a
// benchmark's pauses must not cost it its connection.
type benchBackOffice struct {
	tb                    testing.TB
	nc                    net.Conn
	prefix                string
	resultsTopic, dlTopic string
	acks                  chan boAck // the acknowledgement of the one request out
	readDone              chan struct{}

	wmu    sync.Mutex // one packet written at a time
	wbuf   []byte     // the batch being published
	abuf   []byte     // PUBACKs gathered by the reader, not yet written (flush)
	lastID uint16

	mu      sync.Mutex
	results map[string]struct{} // task ids with a result
	dead    int
	forward int           // forwarded acks
	want    int           // results waitResults waits for; 0: nobody waits
	reached chan struct{} // closed when want is reached
}

// connectBenchBackOffice connects a back office to the broker at addr for gateway gw,
// with a session that outlives the connection by sessionExpiry seconds (0: it does
// not), subscribed; b's cleanup disconnects it.
func connectBenchBackOffice(tb testing.TB, addr, gw string, sessionExpiry uint32) *benchBackOffice {
	tb.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	prefix := "faceagent/" + gw + "/"
	bo := &benchBackOffice{tb: tb, nc: nc, prefix: prefix, resultsTopic: prefix + "results", dlTopic: prefix + "deadletter",
		acks: make(chan boAck, 1), readDone: make(chan struct{}), results: map[string]struct{}{}}
	r := bufio.NewReaderSize(nc, 16<<10)
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := bo.write(mqttwire.AppendConnect(nil, "backoffice", true, 0, sessionExpiry)); err != nil {
		tb.Fatal(err)
	}
	first, body, _, err := mqttwire.ReadPacket(r, nil)
	if err == nil && first>>4 != mqttwire.TypeConnack {
		err = fmt.Errorf("packet type %d instead of CONNACK", first>>4)
	}
	if err == nil {
		var code byte
		if code, err = mqttwire.ParseConnack(body); err == nil && code >= 0x80 {
			err = fmt.Errorf("CONNACK reason 0x%02x", code)
		}
	}
	if err != nil {
		nc.Close()
		tb.Fatalf("back office connect: %v", err)
	}
	_ = nc.SetDeadline(time.Time{})
	go bo.read(r)
	tb.Cleanup(func() {
		_ = bo.write(mqttwire.AppendDisconnect(nil))
		nc.Close()
		<-bo.readDone
	})
	id := bo.nextID()
	if err := bo.write(mqttwire.AppendSubscribe(nil, id, bo.resultsTopic, bo.dlTopic, prefix+"devices/+/ack")); err != nil {
		tb.Fatal(err)
	}
	if err := bo.await(mqttwire.TypeSuback, id); err != nil {
		tb.Fatal(err)
	}
	return bo
}

func (bo *benchBackOffice) nextID() uint16 {
	bo.wmu.Lock()
	defer bo.wmu.Unlock()
	if bo.lastID++; bo.lastID == 0 {
		bo.lastID = 1
	}
	return bo.lastID
}

// write writes one packet.
func (bo *benchBackOffice) write(p []byte) error {
	bo.wmu.Lock()
	defer bo.wmu.Unlock()
	_, err := bo.nc.Write(p)
	return err
}

// boAck is a PUBACK or SUBACK read.
type boAck struct {
	typ  byte
	id   uint16
	code byte // the (first) reason code
}

// await waits for the acknowledgement (of type typ) of the request with packet id id.
func (bo *benchBackOffice) await(typ byte, id uint16) error {
	select {
	case a := <-bo.acks:
		if a.typ != typ || a.id != id {
			return fmt.Errorf("back office: packet type %d id %d, want type %d id %d", a.typ, a.id, typ, id)
		}
		if a.code >= 0x80 {
			return fmt.Errorf("back office: request refused, reason 0x%02x", a.code)
		}
		return nil
	case <-bo.readDone:
		return errors.New("back office: connection lost")
	case <-time.After(10 * time.Second):
		return fmt.Errorf("back office: no acknowledgement of %d within 10s", id)
	}
}

// puback acknowledges a message: its PUBACK joins those not yet written, which go out in
// one write once the reader has nothing more buffered (flush). A back office taking the
// agent's results in bursts then costs one syscall a burst, not one a message, as a
// well-written consumer would; it is not what the benchmark measures.
func (bo *benchBackOffice) puback(id uint16) {
	bo.abuf = mqttwire.AppendPuback(bo.abuf, id)
}

// flush writes the PUBACKs puback gathered.
func (bo *benchBackOffice) flush() error {
	if len(bo.abuf) == 0 {
		return nil
	}
	bo.wmu.Lock()
	defer bo.wmu.Unlock()
	_, err := bo.nc.Write(bo.abuf)
	bo.abuf = bo.abuf[:0]
	return err
}

// publish publishes one task message at QoS 1 and waits for its PUBACK.
func (bo *benchBackOffice) publish(topic string, payload []byte) {
	bo.tb.Helper()
	id := bo.nextID()
	bo.wmu.Lock()
	bo.wbuf = mqttwire.AppendPublish(bo.wbuf[:0], topic, 1, id, payload)
	_, err := bo.nc.Write(bo.wbuf)
	bo.wmu.Unlock()
	if err == nil {
		err = bo.await(mqttwire.TypePuback, id)
	}
	if err != nil {
		bo.tb.Fatalf("publish: %v", err)
	}
}

// waitResults waits until results for n distinct tasks arrived.
func (bo *benchBackOffice) waitResults(n int, timeout time.Duration) {
	bo.tb.Helper()
	bo.mu.Lock()
	if len(bo.results) >= n {
		bo.mu.Unlock()
		return
	}
	reached := make(chan struct{})
	bo.want, bo.reached = n, reached
	bo.mu.Unlock()
	select {
	case <-reached:
	case <-time.After(timeout):
		bo.mu.Lock()
		defer bo.mu.Unlock()
		bo.want = 0
		bo.tb.Fatalf("timed out waiting for %d results: %d results, %d deadletters", n, len(bo.results), bo.dead)
	}
}

// read handles incoming packets until the connection ends: messages are counted and
// acked, acknowledgements handed to await.
func (bo *benchBackOffice) read(r *bufio.Reader) {
	defer close(bo.readDone)
	var buf []byte
	for {
		if r.Buffered() == 0 && bo.flush() != nil {
			return
		}
		first, body, grown, err := mqttwire.ReadPacket(r, buf)
		buf = grown
		if err != nil {
			return
		}
		switch typ := first >> 4; typ {
		case mqttwire.TypePublish:
			p, err := mqttwire.ParsePublish(first, body)
			if err != nil {
				bo.tb.Errorf("back office: %v", err)
				return
			}
			bo.handle(p)
			if p.QoS > 0 {
				bo.puback(p.ID)
			}
		case mqttwire.TypePuback, mqttwire.TypeSuback:
			id, code, err := mqttwire.ParseAck(typ, body)
			if err != nil {
				bo.tb.Errorf("back office: %v", err)
				return
			}
			select {
			case bo.acks <- boAck{typ, id, code}:
			default:
				bo.tb.Errorf("back office: acknowledgement %d nobody waits for", id)
			}
		}
	}
}

// handle counts one message (its topic and payload alias the read buffer).
func (bo *benchBackOffice) handle(p mqttwire.Publish) {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	switch string(p.Topic) { // compared without a copy
	case bo.resultsTopic:
		r, err := wire.ParseResult(p.Payload)
		if err != nil {
			bo.tb.Errorf("bad result %s: %v", p.Payload, err)
			return
		}
		bo.results[r.TaskID] = struct{}{}
	case bo.dlTopic:
		bo.dead++
	default:
		bo.forward++
	}
	if bo.want > 0 && len(bo.results) >= bo.want {
		close(bo.reached)
		bo.want = 0
	}
}
