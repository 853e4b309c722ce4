package broker

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// BenchmarkSessionsJournalDisk: the sessions journal's bytes on disk (allocated blocks, as
// du counts them) through a sustained run of the state store SDK's load: a kept session
// (CleanStart false, session expiry 0xFFFFFFFF) with 8 or 64 requests in flight, GETs of a
// 1 KB value and SETs, each answered with a QoS 1 message it acknowledges; and, as the
// records a client leaves behind (a packet id clash left about one in three), a kept session
// that never acknowledges, sent a message for every second request. It holds at most the
// agent's max_queued_messages (10,000), or in "ids" every packet id (65,535), as records
// left behind by clashes can. One op is one request. max-disk-MB is the most the directory
// held, end-disk-MB what it held at the end, live-MB the live records at the end and
// max-over-bound-MB how far a sample went past the stated bound 2L + max(S, L) + S (L the
// live records then, S the segment size; where the broker reports them); the log has a
// sample every 10 % of the run.
func BenchmarkSessionsJournalDisk(b *testing.B) {
	for _, c := range []struct {
		name              string
		inflight, maxHeld int
	}{{"8", 8, 10000}, {"64", 64, 10000}, {"64-ids", 64, 65535}} {
		b.Run(c.name, func(b *testing.B) {
			inflight := c.inflight
			dataDir := b.TempDir()
			br := startBroker(b, Options{DataDir: dataDir, MaxInflight: uint16(c.maxHeld)})
			dir := filepath.Join(dataDir, SessionsDir)
			stuck := dialBenchKept(b, br.Addr(), "never-acks", "stuck/#")
			go func() { _, _ = io.Copy(io.Discard, stuck) }()
			f := false
			sdk := dial(b, br.Addr(), "sdk-statestore", dialOptions{cleanStart: &f, sessionExpiry: 0xFFFFFFFF})
			value := strings.Repeat("v", 1024)
			var mu sync.Mutex
			var most, over int64
			overSeen := false
			start := time.Now()
			sample := func(n int64) {
				disk := testutil.DirDiskBytes(b, dir)
				live, ok := liveSessionBytes(br)
				mu.Lock()
				most = max(most, disk)
				if ok {
					const segment = 4 << 20 // DefaultSessionsSegmentSize
					if d := disk - (2*live + max(segment, live) + segment); !overSeen || d > over {
						over, overSeen = d, true
					}
				}
				mu.Unlock()
				if step := int64(max(b.N/10, 1)); n%step == 0 {
					b.Logf("%6.1f s: %8d requests, %6.1f MB on disk", time.Since(start).Seconds(), n, float64(disk)/1e6)
				}
			}
			b.ResetTimer()
			err := stateStoreLoad(sdk, inflight, int64(b.N), value, nil, func(n int64) error {
				if n%2 == 0 {
					if err := br.PublishDeferred("stuck/x", fmt.Appendf(nil, "left-behind-%d", n), 1); err != nil {
						return err
					}
				}
				if n%1000 == 0 || n == int64(b.N) {
					sample(n)
				}
				return nil
			})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(most)/1e6, "max-disk-MB")
			b.ReportMetric(float64(testutil.DirDiskBytes(b, dir))/1e6, "end-disk-MB")
			if live, ok := liveSessionBytes(br); ok {
				b.ReportMetric(float64(live)/1e6, "live-MB")
				b.ReportMetric(float64(over)/1e6, "max-over-bound-MB")
			}
		})
	}
}

// dialBenchKept connects a raw MQTT 5 client with a session kept for an hour, subscribed
// with QoS 1 to filter, and returns its connection: whoever reads it never acknowledges.
func dialBenchKept(tb testing.TB, addr, id, filter string) io.Reader {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	c := &memClient{conn: conn, r: bufio.NewReader(conn)}
	c.write(tb, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:     packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: id},
		Properties:  packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true},
	})
	c.expect(tb, packets.Connack)
	c.write(tb, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: filter, Qos: 1}},
	})
	c.expect(tb, packets.Suback)
	return c.r
}

// liveSessionBytes returns the live records' bytes (SessionsStats().LiveBytes), looked up by
// name so that this benchmark also builds against a broker without it, for a comparison.
func liveSessionBytes(br *Broker) (int64, bool) {
	m := reflect.ValueOf(br).MethodByName("SessionsStats")
	if !m.IsValid() {
		return 0, false
	}
	f := m.Call(nil)[0].FieldByName("LiveBytes")
	if !f.IsValid() {
		return 0, false
	}
	return f.Int(), true
}
