package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// echoHook answers every request on the invoke topic the way agent/broker's service does
// (inline client, InjectPacket, CodeSuccessIgnore) but without a store behind it: the
// ceiling the store's round trips are measured against.
type echoHook struct {
	mqtt.HookBase
	srv       *mqtt.Server
	responder *mqtt.Client
	version   string
}

func (h *echoHook) ID() string           { return "echo" }
func (h *echoHook) Provides(b byte) bool { return b == mqtt.OnPublish }

var echoReply = []byte("$1\r\nx\r\n") // a GET of a one-byte value

func (h *echoHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.TopicName != invokeTopic {
		return pk, nil
	}
	_ = h.srv.InjectPacket(h.responder, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   pk.Properties.ResponseTopic,
		Payload:     echoReply,
		Properties: packets.Properties{
			ContentType:     "application/octet-stream",
			CorrelationData: pk.Properties.CorrelationData,
			User:            []packets.UserProperty{{Key: "__stat", Val: "200"}, {Key: "__protVer", Val: "1.0"}, {Key: "__ts", Val: h.version}},
		},
		PacketID: 1,
	})
	return pk, packets.CodeSuccessIgnore
}

// startEcho starts a bare mochi broker with the echo hook and returns its URL.
func startEcho(b *testing.B) string {
	u, stop, err := serveEcho()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return u
}

func serveEcho() (string, func(), error) {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	responder := srv.NewClient(nil, mqtt.LocalListener, "$echo-responder", true)
	responder.Properties.ProtocolVersion = 5
	h := &echoHook{srv: srv, responder: responder, version: hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "StateStore"}.String()}
	_ = srv.AddHook(new(allowAll), nil)
	if err := srv.AddHook(h, nil); err != nil {
		return "", nil, err
	}
	l := listeners.NewTCP(listeners.Config{Type: listeners.TypeTCP, ID: "tcp", Address: "127.0.0.1:0"})
	if err := srv.AddListener(l); err != nil {
		return "", nil, err
	}
	if err := srv.Serve(); err != nil {
		return "", nil, err
	}
	return "mqtt://" + l.Address(), func() { srv.Close() }, nil
}

type allowAll struct{ mqtt.HookBase }

func (*allowAll) ID() string { return "allow-all" }
func (*allowAll) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}
func (*allowAll) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }
func (*allowAll) OnACLCheck(*mqtt.Client, string, bool) bool              { return true }

// rawPaho is the least a paho client can do for request/response: correlation by a counter,
// one channel per request, no timeouts, no clock, no parsing. It is the ceiling's client.
type rawPaho struct {
	cm      *autopaho.ConnectionManager
	resp    string
	mu      sync.Mutex
	pending map[uint64]chan struct{}
	next    atomic.Uint64
	cancel  context.CancelFunc
	// props makes it send the properties this client sends (content type, expiry, __ts,
	// __protVer, __srcId, $partition, $high_priority), with a fixed __ts, to price them apart
	// from the client's code.
	props bool
}

func newRawPaho(b *testing.B, brokerURL string) *rawPaho {
	u, _ := url.Parse(brokerURL)
	r := &rawPaho{resp: "clients/raw/services/statestore/_any_/command/invoke/response", pending: map[uint64]chan struct{}{}}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	up := make(chan struct{})
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 30, CleanStartOnInitialConnection: true,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			go func() {
				_, _ = cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: r.resp, QoS: 1}}})
				close(up)
			}()
		},
		ClientConfig: paho.ClientConfig{ClientID: "raw", OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				cd := pr.Packet.Properties.CorrelationData
				var id uint64
				for _, c := range cd {
					id = id<<8 | uint64(c)
				}
				r.mu.Lock()
				ch := r.pending[id]
				delete(r.pending, id)
				r.mu.Unlock()
				if ch != nil {
					ch <- struct{}{}
				}
				return true, nil
			}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	r.cm = cm
	<-up
	b.Cleanup(func() { cancel(); <-cm.Done() })
	return r
}

var rawTS = hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "raw"}.String()

var getPayload = []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")

func (r *rawPaho) roundTrip(ctx context.Context) error {
	id := r.next.Add(1)
	cd := make([]byte, 8)
	for i := range 8 {
		cd[i] = byte(id >> (56 - 8*i))
	}
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	r.pending[id] = ch
	r.mu.Unlock()
	p := &paho.Publish{QoS: 1, Topic: invokeTopic, Payload: getPayload,
		Properties: &paho.PublishProperties{CorrelationData: cd, ResponseTopic: r.resp}}
	if r.props {
		expiry := uint32(10)
		p.Properties.ContentType = "application/octet-stream"
		p.Properties.MessageExpiry = &expiry
		p.Properties.User = paho.UserProperties{{Key: "__ts", Value: rawTS}, {Key: "__protVer", Value: "1.0"},
			{Key: "__srcId", Value: "raw"}, {Key: "$partition", Value: "raw"}, {Key: "$high_priority", Value: ""}}
	}
	if _, err := r.cm.Publish(ctx, p); err != nil {
		return err
	}
	<-ch
	return nil
}

// runInFlight runs b.N round trips with inflight goroutines and reports round trips a second.
func runInFlight(b *testing.B, inflight int, rt func(ctx context.Context) error) {
	ctx := context.Background()
	var n atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n.Add(1) <= int64(b.N) {
				if err := rt(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rt/s")
}

// BenchmarkRoundTrip compares, in one run: the echo ceiling (a bare paho client and an echo
// responder in the broker), this client against the same echo, and this client against
// agent/broker's state store (GET and SET), with 1, 16 and 64 requests in flight.
func BenchmarkRoundTrip(b *testing.B) {
	for _, inflight := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("echo-paho/inflight=%d", inflight), func(b *testing.B) {
			r := newRawPaho(b, startEcho(b))
			runInFlight(b, inflight, r.roundTrip)
		})
		b.Run(fmt.Sprintf("echo-paho-props/inflight=%d", inflight), func(b *testing.B) {
			r := newRawPaho(b, startEcho(b))
			r.props = true
			runInFlight(b, inflight, r.roundTrip)
		})
		b.Run(fmt.Sprintf("echo-client/inflight=%d", inflight), func(b *testing.B) {
			c := connect(b, startEcho(b), nil)
			runInFlight(b, inflight, func(ctx context.Context) error { _, err := c.Get(ctx, "k"); return err })
		})
		b.Run(fmt.Sprintf("store-get/inflight=%d", inflight), func(b *testing.B) {
			_, u := startEmbedded(b, "", "", nil)
			c := connect(b, u, nil)
			if _, err := c.Set(context.Background(), "k", []byte("0123456789abcdef0123456789abcdef"), nil); err != nil {
				b.Fatal(err)
			}
			runInFlight(b, inflight, func(ctx context.Context) error { _, err := c.Get(ctx, "k"); return err })
		})
		b.Run(fmt.Sprintf("store-set/inflight=%d", inflight), func(b *testing.B) {
			_, u := startEmbedded(b, "", "", nil)
			c := connect(b, u, nil)
			v := []byte("0123456789abcdef0123456789abcdef")
			runInFlight(b, inflight, func(ctx context.Context) error { _, err := c.Set(ctx, "k", v, nil); return err })
		})
	}
}
