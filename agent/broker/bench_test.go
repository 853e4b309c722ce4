package broker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

const echoTopic = "bench/echo/invoke"

// echoHook is the ceiling the state store is measured against: it answers
// every request on echoTopic the way the service does (same hook point, same
// inline injection, same response properties) but without the engine.
type echoHook struct {
	mqtt.HookBase
	srv       *mqtt.Server
	responder *mqtt.Client
}

func (h *echoHook) ID() string           { return "bench-echo" }
func (h *echoHook) Provides(b byte) bool { return b == mqtt.OnPublish }
func (h *echoHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.TopicName != echoTopic {
		return pk, nil
	}
	_ = h.srv.InjectPacket(h.responder, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   pk.Properties.ResponseTopic,
		Payload:     append(make([]byte, 0, 8), "+OK\r\n"...),
		PacketID:    1,
		Properties: packets.Properties{
			ContentType:     contentType,
			CorrelationData: pk.Properties.CorrelationData,
			User: []packets.UserProperty{
				{Key: "__stat", Val: "200"}, {Key: "__protVer", Val: protocolVersion},
				{Key: "__ts", Val: "1696374425000:00001:StateStore"},
			},
		},
	})
	return pk, packets.CodeSuccessIgnore
}

// BenchmarkRoundTrip measures request/response round trips a second over
// loopback with one paho client, for the echo ceiling, SET and GET, with 1,
// 16 and 64 requests in flight, against one broker. The three kinds are
// interleaved in batches within each iteration, so load from elsewhere on
// the machine hits them alike; each reports its own req/s and the store's
// share of the echo ceiling.
func BenchmarkRoundTrip(b *testing.B) {
	echo := &echoHook{}
	br := startBroker(b, Options{}, echo)
	echo.srv = br.Server()
	echo.responder = br.Server().NewClient(nil, mqtt.LocalListener, "$bench-echo", true)
	echo.responder.Properties.ProtocolVersion = 5
	c := dial(b, br.Addr(), "bench", dialOptions{})
	value := "0123456789abcdef0123456789abcdef"
	set := cmd("SET", "device/0001/state", value)
	get := cmd("GET", "device/0001/state")
	c.do(set, req{})
	kinds := []struct {
		name    string
		payload []byte
		topic   string
	}{{"echo", set, echoTopic}, {"SET", set, ""}, {"GET", get, ""}}
	const batch = 512

	for _, inflight := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			elapsed := make([]time.Duration, len(kinds))
			for b.Loop() {
				for k, kind := range kinds {
					elapsed[k] += runBatch(b, c, kind.payload, kind.topic, inflight, batch)
				}
			}
			rate := func(k int) float64 { return float64(b.N*batch) / elapsed[k].Seconds() }
			for k, kind := range kinds {
				b.ReportMetric(rate(k), kind.name+"-req/s")
			}
			b.ReportMetric(100*rate(1)/rate(0), "SET-%echo")
			b.ReportMetric(100*rate(2)/rate(0), "GET-%echo")
		})
	}
}

// runBatch sends n requests with inflight of them outstanding at a time and
// returns how long they took.
func runBatch(b *testing.B, c *client, payload []byte, topic string, inflight, n int) time.Duration {
	var issued atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < inflight; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for issued.Add(1) <= int64(n) {
				_, wait, err := c.publish(payload, req{topic: topic})
				if err != nil {
					b.Error(err)
					return
				}
				select {
				case <-wait:
				case <-time.After(waitFor):
					b.Error("no response")
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
