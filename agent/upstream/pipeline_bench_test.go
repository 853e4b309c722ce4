package upstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// BenchmarkPipelinedResults: results published to mosquitto through a proxy that delays
// each direction by 25 ms (a 50 ms WAN round trip), one at a time (window 1) against the
// default window of 64, in the same run. One op is one result; results/s is the stream's
// rate.
func BenchmarkPipelinedResults(b *testing.B) {
	m := testutil.StartMosquitto(b)
	// A result as the agent reports it.
	payload := []byte(`{"taskId":"t-1","deviceId":"2042253","messageId":"AddPerson-951-1494527067538440192","status":"succeeded","tries":1,"error":"","durationMs":0}`)
	for _, window := range []int{1, defaultPublishWindow} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			proxy := testutil.StartDelayProxy(b, m.Addr, 25*time.Millisecond)
			uc := dialTestUpstream(b, proxy.Addr(), window)
			const topic = "faceagent/gw-p/results"
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			n, err := publish.InOrder(context.Background(), uc, b.N, func(int) (string, []byte, bool) {
				return topic, payload, false
			})
			if err != nil || n != b.N {
				b.Fatalf("published %d of %d: %v", n, b.N, err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "results/s")
		})
	}
}
