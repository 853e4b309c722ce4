package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// BenchmarkPipelinedResults: results published to mosquitto through a proxy that delays
// each direction by 25 ms (a 50 ms WAN round trip), one at a time (window 1, what every
// report stream did before) against the default window of 64, in the same run. One op
// is one result; results/s is the stream's rate.
func BenchmarkPipelinedResults(b *testing.B) {
	m := testutil.StartMosquitto(b)
	payload, err := json.Marshal(wire.Result{TaskID: "t-1", DeviceID: "2042253", MessageID: "AddPerson-951-1494527067538440192", Status: wire.Succeeded, Tries: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, window := range []int{1, defaultPublishWindow} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			proxy := startDelayProxy(b, m.Addr, 25*time.Millisecond)
			uc := dialTestUpstream(b, proxy.addr(), window)
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
