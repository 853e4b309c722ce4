package testutil

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DelayProxy forwards TCP connections to target and delays each direction by delay (a
// WAN link's latency on loopback). It reads the MQTT packets going through and counts
// the client's PUBLISH packets and the PUBACKs it delivers back, so a test sees how many
// messages were in flight at once. While held it refuses new connections, and stops
// forwarding what the client sends on its current ones (a link gone quiet).
type DelayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	held   atomic.Bool
	gate   chan struct{} // closed while not held; the client→broker writers wait on it

	mu             sync.Mutex
	published      int // PUBLISH packets read from the client
	forwarded      int // PUBLISH packets written to the broker
	countTopic     string
	forwardedOn    int // of those, on topics starting with countTopic
	acked          int // PUBACK packets written to the client
	peak           int // most published - acked at any time
	beforeFirstAck int // published when the first PUBACK reached the client (-1: none yet)
	conns          map[net.Conn]bool
	wg             sync.WaitGroup
}

// StartDelayProxy listens on a free loopback port and forwards to target with delay each
// way; it is closed when t ends.
func StartDelayProxy(t testing.TB, target string, delay time.Duration) *DelayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &DelayProxy{ln: ln, target: target, delay: delay, gate: make(chan struct{}), beforeFirstAck: -1, conns: map[net.Conn]bool{}}
	close(p.gate)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.held.Load() {
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(up, c, true)
			go p.pipe(c, up, false)
		}
	}()
	t.Cleanup(p.close)
	return p
}

// Addr is the address clients connect to.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// Hold refuses new connections and stops forwarding the client's bytes.
func (p *DelayProxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held.Swap(true) {
		p.gate = make(chan struct{})
	}
}

// Release undoes Hold: what the clients sent meanwhile is forwarded.
func (p *DelayProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held.Swap(false) {
		close(p.gate)
	}
}

type delayedChunk struct {
	at   time.Time
	data []byte
}

// pipe copies src to dst, each chunk delay after it was read. fromClient: src is the
// client (its PUBLISH packets are counted), else the broker (its PUBACKs are).
func (p *DelayProxy) pipe(dst, src net.Conn, fromClient bool) {
	defer p.wg.Done()
	chunks := make(chan delayedChunk, 1024)
	var readScan, writeScan mqttScanner
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if fromClient {
					readScan.feed(buf[:n], func(typ byte, _ []byte) {
						if typ == mqttPublish {
							p.count(func() { p.published++ })
						}
					})
				}
				chunks <- delayedChunk{at: time.Now(), data: append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		dst.Close()
		src.Close()
		for range chunks { // let the reader end
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.at.Add(p.delay))) // the link's latency, not a wait for an event
		if fromClient {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			<-gate
		}
		// Counted before the write: the client may answer a PUBACK with its next PUBLISH
		// before this goroutine runs again.
		writeScan.feed(c.data, func(typ byte, head []byte) {
			switch {
			case fromClient && typ == mqttPublish:
				p.count(func() {
					p.forwarded++
					if t, ok := publishTopic(head); ok && p.countTopic != "" && strings.HasPrefix(t, p.countTopic) {
						p.forwardedOn++
					}
				})
			case !fromClient && typ == mqttPuback:
				p.count(func() {
					if p.acked == 0 {
						p.beforeFirstAck = p.published
					}
					p.acked++
				})
			}
		})
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

func (p *DelayProxy) count(f func()) {
	p.mu.Lock()
	f()
	p.peak = max(p.peak, p.published-p.acked)
	p.mu.Unlock()
}

// Counts returns the PUBLISH packets sent before the first PUBACK came back (-1: none came
// back yet), the most that were in flight at once, and how many were written to the
// target.
func (p *DelayProxy) Counts() (beforeFirstAck, peak, forwarded int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.beforeFirstAck, p.peak, p.forwarded
}

// SetCountTopic makes ForwardedOnTopic count the PUBLISH packets on topics starting with
// prefix.
func (p *DelayProxy) SetCountTopic(prefix string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.countTopic = prefix
}

// ForwardedOnTopic is how many PUBLISH packets on topics starting with countTopic were
// written to the broker.
func (p *DelayProxy) ForwardedOnTopic() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forwardedOn
}

// Cut closes every connection through the proxy.
func (p *DelayProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *DelayProxy) close() {
	p.ln.Close()
	p.Release()
	p.Cut()
	p.wg.Wait()
}

const (
	mqttPublish = 3
	mqttPuback  = 4
)

// publishTopic reads the topic at the start of a PUBLISH packet's body.
func publishTopic(head []byte) (string, bool) {
	if len(head) < 2 {
		return "", false
	}
	n := int(head[0])<<8 | int(head[1])
	if len(head) < 2+n {
		return "", false
	}
	return string(head[2 : 2+n]), true
}

// mqttScanner finds packet boundaries in a stream of MQTT bytes: a fixed header byte, the
// remaining length (variable byte integer), then that many bytes. packet gets the type and
// the first bytes of the body (up to 256).
type mqttScanner struct {
	state     int // 0: header byte next, 1: in the remaining length, 2: in the body
	typ       byte
	rem, mult int
	head      []byte
}

func (s *mqttScanner) feed(b []byte, packet func(typ byte, head []byte)) {
	for len(b) > 0 {
		switch s.state {
		case 0:
			s.typ, s.rem, s.mult, s.state, s.head = b[0]>>4, 0, 1, 1, s.head[:0]
			b = b[1:]
		case 1:
			c := b[0]
			b = b[1:]
			s.rem += int(c&0x7f) * s.mult
			s.mult *= 128
			if c&0x80 == 0 {
				s.state = 2
				if s.rem == 0 {
					s.state = 0
					packet(s.typ, nil)
				}
			}
		case 2:
			n := min(s.rem, len(b))
			if len(s.head) < 256 {
				s.head = append(s.head, b[:min(n, 256-len(s.head))]...)
			}
			s.rem -= n
			b = b[n:]
			if s.rem == 0 {
				s.state = 0
				packet(s.typ, s.head)
			}
		}
	}
}
